#!/bin/bash
# When new workers start training (docs/elastic.md, "Joins and leaves"), on
# this machine, with real processes:
#
#   join      two workers train resnet8 on 30,000 Fashion-MNIST images (469
#             steps of 2 x 32 per epoch, --commit-every=5); at global step 40 a
#             node of one worker joins. Printed for --admit-at=commit and
#             =epoch: the step at which it registered, the seconds from its
#             registration to the view with it (the head's clock), and where
#             the joiner's first generation starts.
#   massloss  an 8-worker job (--state-copy-every=1) loses every worker
#             (kill -9); two nodes of four join 0.5 s apart. Printed for
#             --join-window=2 (the default) and 0: the generations it took to
#             reach world 8, how widely the joiners' registrations spread, the
#             seconds from the last registration to the view of 8, and the
#             driver's "first step" after that view.
#
#   bench/admission_bench.sh bazel-bin/examples/cifar/cifar [join|massloss|all]
set -euo pipefail

BIN=$(realpath "${1:?usage: $0 TRAINER_BINARY [join|massloss|all]}")
WHAT=${2:-all}
COMMON=(--model=resnet8 --dataset=fashion-mnist --test-samples=500 --batch-size=32 --lr=0.05
  --seed=1 --loader-threads=1 --log-every=1 --metrics-port=0)

# Seconds between two head timestamps ("I <unix.ms> <tid> head] ...").
seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
head_time() { grep -o "I [0-9.]* [0-9]* head\] $2" "$1" | head -1 | awk '{print $2}'; }
head_port() {
  for _ in $(seq 600); do
    grep -q "head listening on" "$1" && break
    sleep 0.1
  done
  grep -o "head listening on 127.0.0.1:[0-9]*" "$1" | cut -d: -f2
}
wait_for() {
  for _ in $(seq 3000); do
    grep -q "$2" "$1" && return 0
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2
  return 1
}

join_case() {
  local dir
  dir=$(mktemp -d)
  "$BIN" --workers=2 --train-samples=30000 --epochs=2 --commit-every=5 --token-file="$dir/token" \
    "${COMMON[@]}" "$@" >"$dir/driver.log" 2>&1 &
  local driver=$!
  wait_for "$dir/driver.log" "(global 40)"
  "$BIN" --join="127.0.0.1:$(head_port "$dir/driver.log")" --workers=1 \
    --token-file="$dir/token" >"$dir/join.log" 2>&1 &
  wait "$driver"
  local registered published step start
  registered=$(head_time "$dir/driver.log" "member 3 ")
  published=$(head_time "$dir/driver.log" "published view of 3 ")
  step=$(grep -B1 "head\] member 3 " "$dir/driver.log" | grep -o "global [0-9]*" | tail -1)
  start=$(grep -o "params generation=[0-9]* rank=2 world=3 .*" "$dir/join.log" | head -1 |
    grep -o "epoch=.*")
  echo "| ${1:-(default)} | ${step#global } | $(seconds_between "$registered" "$published") s | $start |"
  rm -rf "$dir"
}

massloss_case() {
  local dir
  dir=$(mktemp -d)
  "$BIN" --workers=8 --train-samples=6000 --epochs=2 --commit-every=8 --state-copy-every=1 \
    --token-file="$dir/token" "${COMMON[@]}" "$@" >"$dir/driver.log" 2>&1 &
  local driver=$!
  wait_for "$dir/driver.log" "(global 12)"
  local port pids
  port=$(head_port "$dir/driver.log")
  pids=$(grep -o "pid [0-9]*\] params generation=1 " "$dir/driver.log" | awk '{print $2}' |
    tr -d ']')
  # shellcheck disable=SC2086
  kill -9 $pids
  wait_for "$dir/driver.log" "generation [0-9]*: 0 workers"
  "$BIN" --join="127.0.0.1:$port" --workers=4 --token-file="$dir/token" >"$dir/j0.log" 2>&1 &
  sleep 0.5
  "$BIN" --join="127.0.0.1:$port" --workers=4 --token-file="$dir/token" >"$dir/j1.log" 2>&1 &
  wait "$driver"
  # Only what happened after every worker was gone: the joiners' registrations,
  # the views published until the one of 8, and that view's first step.
  local after first last view generations first_step
  after=$(sed -n '/generation [0-9]*: 0 workers/,$p' "$dir/driver.log")
  first=$(grep -o "I [0-9.]* [0-9]* head\] member [0-9]* ([^)]*) joined" <<<"$after" | head -1 |
    awk '{print $2}')
  last=$(grep -o "I [0-9.]* [0-9]* head\] member [0-9]* ([^)]*) joined" <<<"$after" | tail -1 |
    awk '{print $2}')
  view=$(grep -o "I [0-9.]* [0-9]* head\] published view of 8 " <<<"$after" | head -1 |
    awk '{print $2}')
  generations=$(sed -n '1,/published view of 8 /p' <<<"$after" | grep -c "published view of")
  first_step=$(grep -o "rescale: generation [0-9]* (8 workers, [^)]*): first step [0-9.]* s" \
    <<<"$after" | head -1 | grep -o "[0-9.]* s$")
  echo "| ${1:-(default)} | $generations | $(seconds_between "$first" "$last") s |" \
    "$(seconds_between "$last" "$view") s | $first_step |"
  rm -rf "$dir"
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ $WHAT == join || $WHAT == all ]]; then
  echo "| flags | joiner registered at step | registration -> its view | joiner starts at |"
  echo "| --- | --- | --- | --- |"
  join_case --admit-at=commit
  join_case --admit-at=epoch
fi
if [[ $WHAT == massloss || $WHAT == all ]]; then
  echo "| flags | generations to world 8 | registrations spread over | last registration -> view of 8 | view -> first step |"
  echo "| --- | --- | --- | --- | --- |"
  massloss_case --join-window=2
  massloss_case --join-window=0
fi
