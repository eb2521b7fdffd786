#!/usr/bin/env bash
# bench/float64_check.py: ours (the elastic path, 2 worker processes) and the
# PyTorch DDP peer (torchrun, 2 processes) in float64 on the same samples, crops
# and flips agree to 1e-7 relative, step for step, across 3 epochs with their
# evaluations, commits and epoch boundaries: the loss on each rank, and rank 0's
# learning rate, parameters, batch-norm buffers and momentum buffers. Then the
# check itself: a trace changed at one step is reported as parting there.
set -euo pipefail

RUNFILES=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-elastic}
CHECK=$RUNFILES/bench/float64_check.py
OURS=$RUNFILES/examples/cifar/cifar
PY=/usr/bin/python3
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/float64_check_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1

fail() { echo "FAIL: $*" >&2; exit 1; }

# Generated data: 256 training and 128 test records of 1 label byte + 3072 pixels.
mkdir -p "$TMP/data"
"$PY" - "$TMP/data" <<'PYEOF'
import os, sys
import numpy as np
rng = np.random.default_rng(0)
for name, n in (("data_batch_1.bin", 256), ("test_batch.bin", 128)):
    records = rng.integers(0, 256, size=(n, 3073), dtype=np.uint8)
    records[:, 0] = rng.integers(0, 10, size=n)
    records.tofile(os.path.join(sys.argv[1], name))
PYEOF

# 2 workers x 32 images: 4 steps an epoch, 12 steps and 3 evaluations in all.
FLAGS=(--data-dir "$TMP/data" --workers 2 --batch-size 32 --epochs 3 --warmup-epochs 1
       --work "$TMP/work")
"$PY" "$CHECK" --ours "$OURS" "${FLAGS[@]}" >"$TMP/out" 2>&1 ||
  fail "the sides parted: $(cat "$TMP/out"; tail -n 40 "$TMP"/work/*.log)"
grep -q "^AGREE to 1e-07 relative on every compared quantity for 12 steps" "$TMP/out" ||
  fail "no agreement over 12 steps: $(cat "$TMP/out")"
cat "$TMP/out"

# The check can fail: one momentum element of the peer's step 6 moved by 1e-6
# of the tensor's largest value, and one evaluation's loss sum by 1e-6.
"$PY" - "$TMP/work/peer/rank0" <<'PYEOF'
import sys, torch
path = f"{sys.argv[1]}/step6.pt"
state = torch.load(path)
key = sorted(k for k in state if k.startswith("momentum/"))[0]
state[key].view(-1)[0] += 1e-6 * state[key].abs().max()
torch.save(state, path)
PYEOF
rc=0
"$PY" "$CHECK" --compare-only "${FLAGS[@]}" >"$TMP/out" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "a changed momentum buffer exited $rc, want 1: $(cat "$TMP/out")"
grep -q "^PARTED at step 6: momentum/" "$TMP/out" || fail "not reported at step 6: $(cat "$TMP/out")"

"$PY" - "$TMP/work" <<'PYEOF'
import shutil, sys, torch
work = sys.argv[1]
shutil.copy(f"{work}/ours/rank0/step6.pt", f"{work}/peer/rank0/step6.pt")  # undo the above
state = torch.load(f"{work}/peer/rank0/eval2.pt")
state["loss_sum"] *= 1 + 1e-6
torch.save(state, f"{work}/peer/rank0/eval2.pt")
PYEOF
rc=0
"$PY" "$CHECK" --compare-only "${FLAGS[@]}" >"$TMP/out" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "a changed evaluation exited $rc, want 1: $(cat "$TMP/out")"
grep -q "^PARTED at eval 2: eval/loss_sum" "$TMP/out" || fail "not reported at eval 2: $(cat "$TMP/out")"
echo PASS
