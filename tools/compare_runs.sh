#!/usr/bin/env bash
# Runs two builds of the trainer on the same small job, one process and then
# two elastic workers, and says whether they trained the same model bit for
# bit: the SHA-256 of each run's state_dict.pt, the workers' parameter
# checksums and the epoch summaries must all match. For refactors that must
# not change behaviour ("the same runs give the same checksums").
#
#   git worktree add /tmp/before <commit> && (cd /tmp/before && bazel build //trainer:cifar)
#   tools/compare_runs.sh /tmp/before/bazel-bin/examples/cifar/cifar bazel-bin/examples/cifar/cifar
#
# (A checkout from before cifar moved to examples/ has its binary at
# bazel-bin/trainer/cifar.)
# Exit status 0 when every figure matches, 1 otherwise.
set -euo pipefail

if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
  echo "usage: $0 BEFORE_BINARY AFTER_BINARY (two builds of //trainer:cifar)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(--model=resnet8 --dataset=fashion-mnist --train-samples=1024 --test-samples=512
       --epochs=2 --seed=1 --threads=1 --loader-threads=1 --batch-size=64 --lr=0.1
       --warmup-epochs=0 --metrics-port=0 --log-every=1000)

run() {  # NAME BINARY
  local out="$work/$1"
  mkdir -p "$out"
  "$2" --workers=0 "${flags[@]}" --checkpoint-dir="$out/single" >"$out/single.log" 2>&1
  "$2" --workers=2 "${flags[@]}" --checkpoint-dir="$out/elastic" --run-dir="$out/run" \
    --commit-every=4 >"$out/elastic.log" 2>&1
  {
    sha256sum "$out/single/state_dict.pt" | cut -d' ' -f1 | sed 's/^/one process: state_dict.pt /'
    sha256sum "$out/elastic/state_dict.pt" | cut -d' ' -f1 | sed 's/^/two workers: state_dict.pt /'
    grep -oE "params generation=[0-9]+ rank=[0-9]+ world=[0-9]+ checksum=[0-9a-f]+" \
      "$out/elastic.log" | sort
    # The summaries without their timings.
    grep -hE "^epoch [0-9]+/[0-9]+ (world [0-9]+ )?\|?.*train loss" "$out/single.log" \
      "$out/elastic.log" | sed -E 's/\| [0-9.]+ img\/s \| [0-9.]+s //; s/\| [0-9.]+ img\/s [0-9.]+s //'
  } >"$out/figures"
}

run before "$1"
run after "$2"
if diff -u "$work/before/figures" "$work/after/figures"; then
  cat "$work/after/figures"
  echo "same: both builds trained the same models, bit for bit"
else
  echo "different: the figures above differ" >&2
  exit 1
fi
