#!/usr/bin/env bash
# Builds the trainer's image with podman (or docker):
#   deploy/container/build.sh [TAG]      # default elastic-trainer:latest
# BASE=... picks the base image (default: Debian's official bookworm image,
# or localhost/debian:bookworm when that exists: make it with
# make_base_image.sh where no registry is reachable).
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-elastic-trainer:latest}
engine=${CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}
[ -n "$engine" ] || { echo "build.sh: neither podman nor docker is installed" >&2; exit 1; }

base=${BASE:-}
if [ -z "$base" ]; then
  base=docker.io/library/debian:bookworm
  "$engine" image inspect localhost/debian:bookworm >/dev/null 2>&1 && base=localhost/debian:bookworm
fi
args=(build -f deploy/container/Dockerfile --build-arg "BASE=$base" -t "$tag")
if [ "$(basename "$engine")" = podman ]; then
  # podman can mount the host's Bazel disk cache into the build: compiled
  # actions are reused (docker build cannot mount; it builds from scratch).
  # Bazel's test environment has no HOME: fall back to the user's home.
  home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
  cache="$home/.cache/elastic-bazel-disk"
  mkdir -p "$cache"
  args+=(--volume "$cache:/root/.cache/elastic-bazel-disk")
fi
echo "build.sh: $engine ${args[*]} ."
"$engine" "${args[@]}" .
"$engine" image inspect "$tag" --format "build.sh: $tag {{.Size}} bytes" 2>/dev/null || true
