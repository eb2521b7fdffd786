#!/usr/bin/env bash
# Installs every system dependency of the project from Debian's archive.
# Idempotent: a second run installs nothing and takes a few seconds.
set -euo pipefail

PACKAGES=(
  # Build
  bazel-bootstrap bazel-platforms g++ clang-format
  # Libraries (wrapped as cc_library targets in third_party/BUILD.bazel)
  libtorch-dev libopenblas0-pthread libasio-dev capnproto libcapnp-dev
  prometheus-cpp-dev libgloo-dev libopenmpi-dev openmpi-bin libssl-dev
  libcurl4-openssl-dev zlib1g-dev
  # Image decoding for --dataset image-folder
  libjpeg62-turbo-dev libpng-dev
  libgtest-dev libbenchmark-dev
  # Data, tests and the PyTorch peer of the benchmarks
  dataset-fashion-mnist prometheus python3-torch python3-numpy
  # The peer of the image-folder benchmark (torchvision's ImageFolder + DataLoader)
  python3-torchvision python3-pil
  # JSON parser for tests (Prometheus API replies, the Grafana dashboard)
  nlohmann-json3-dev
  # YAML for //deploy/kubernetes:manifests_test
  python3-yaml
  # Process trees of the benchmarks' jobs (//tests:spot_trace_test runs bench/spot_trace_bench.py)
  python3-psutil
  # `ss -K`, with which elastic_test and stall_test reset a process's connections
  iproute2
)

say() { echo "[setup] $*"; }
die() { echo "[setup] error: $*" >&2; exit 1; }

if [ "$(uname -s)" != Linux ] || [ ! -f /etc/debian_version ]; then
  die "this script needs Debian (bookworm); found $(uname -s) $(cat /etc/os-release 2>/dev/null | grep ^PRETTY_NAME= || true)"
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "run as root or install sudo"
  SUDO=sudo
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  say "all ${#PACKAGES[@]} packages already installed"
else
  say "installing ${#missing[@]} package(s): ${missing[*]}"
  $SUDO apt-get update -q || die "apt-get update failed (is Debian's archive reachable?)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || die "apt-get install failed for: ${missing[*]}"
fi

# LibTorch must use OpenBLAS, not the reference BLAS (docs/build.md has the figures).
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
case "$blas" in
  *openblas*) say "libblas.so.3 -> $blas" ;;
  *)
    say "pointing libblas.so.3 at OpenBLAS (was $blas)"
    target=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu | grep openblas | head -n 1) \
      || die "OpenBLAS is not registered as a libblas.so.3 alternative"
    $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$target"
    ;;
esac

# NCCL and CUDA are not Debian packages; the NCCL backend builds only when they are there.
if [ -f /usr/local/cuda/include/nccl.h ] || [ -f /usr/include/nccl.h ]; then
  say "NCCL headers found"
else
  say "note: NCCL not found under /usr/local/cuda; the NCCL backend is left out of the build"
fi

command -v bazel >/dev/null || die "bazel is not on PATH after installing bazel-bootstrap"
say "done: $(bazel --version 2>/dev/null | head -n 1)"
