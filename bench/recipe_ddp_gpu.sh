#!/usr/bin/env bash
# The PyTorch DDP side of bench/recipe_bench.py on one GPU, several runs at
# once: every rank of every run shares the GPU (Gloo moves the gradients, TF32
# off). What it measures is a recipe's test loss and accuracy, not a speed: the
# candidates that ours then runs on the CPU are screened here in minutes
# instead of hours.
#
#   bench/recipe_ddp_gpu.sh DATA_DIR WORK_DIR PLAN     # PEER_PYTHON: a python with torch
#
# PLAN has one run a line: a name, then bench/recipe_bench.py's flags, e.g.
#   w8-cap0.4  --workers 8 --epochs 15 --lr 0.05 --variant x=ddp:--device=cuda,--warmup-epochs=5
# The script renames the line's variant NAME, so that two lines never share a
# log, and adds --systems NAME, --data-dir and --results WORK_DIR/NAME.jsonl.
# PARALLEL runs go at once (6: each rank holds about 2 GiB of GPU memory, and
# 11 runs of 8 ranks ran an H200's 140 GiB out); DEADLINE seconds stops what
# still runs.
set -u
DATA=${1:?usage: recipe_ddp_gpu.sh DATA_DIR WORK_DIR PLAN}
WORK=${2:?usage: recipe_ddp_gpu.sh DATA_DIR WORK_DIR PLAN}
PLAN=${3:?usage: recipe_ddp_gpu.sh DATA_DIR WORK_DIR PLAN}
PARALLEL=${PARALLEL:-6}
DEADLINE=${DEADLINE:-0}
export PEER_PYTHON=${PEER_PYTHON:-python3} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
started=$(date +%s)
runs=()

one_run() {  # NAME FLAGS...: the line's variant is renamed NAME, which names its logs
  local name=$1
  shift
  local flags=()
  for flag in "$@"; do flags+=("$(printf '%s' "$flag" | sed 's/^[A-Za-z0-9_.-]*=ddp:/'"$name"'=ddp:/')"); done
  "$PEER_PYTHON" "$HERE/recipe_bench.py" --data-dir "$DATA" --results "$WORK/$name.jsonl" \
    --systems "$name" "${flags[@]}" >"$WORK/$name.out" 2>&1
  echo "$name: exit $? after $(($(date +%s) - started)) s"
}

while read -r name flags; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n; done
  if [ "$DEADLINE" -gt 0 ] && [ $(($(date +%s) - started)) -ge "$DEADLINE" ]; then
    echo "$name: not started (deadline)"
    continue
  fi
  # shellcheck disable=SC2086  # the plan's flags are words
  one_run "$name" $flags &
  runs+=($!)
done <"$PLAN"
if [ "$DEADLINE" -gt 0 ]; then
  (sleep $((DEADLINE - ($(date +%s) - started))) 2>/dev/null && pkill -f ddp_peer.py) &
  watchdog=$!
fi
for pid in "${runs[@]}"; do wait "$pid"; done
[ -n "${watchdog:-}" ] && kill "$watchdog" 2>/dev/null
echo "done after $(($(date +%s) - started)) s"
