#!/usr/bin/env bash
# bench/ddp_peer.py: refuses impossible flags with a message naming them, and
# trains 2 steps (world of one, DDP over Gloo) on generated CIFAR-10 binary files,
# printing the RESULT lines that bench/compare.sh parses.
set -euo pipefail

PEER=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-elastic}/bench/ddp_peer.py
[[ -f "$PEER" ]] || PEER=$(dirname "$0")/ddp_peer.py
PY=/usr/bin/python3
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ddp_peer_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1

fail() { echo "FAIL: $*" >&2; exit 1; }

# Flags: each bad one exits 2 and names the problem.
expect_usage_error() {
  local want=$1; shift
  local rc=0
  "$PY" "$PEER" "$@" >"$TMP/out" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || fail "$* exited $rc, want 2: $(cat "$TMP/out")"
  grep -q -- "$want" "$TMP/out" || fail "$* did not say '$want': $(cat "$TMP/out")"
}
expect_usage_error "no such directory" --data-dir "$TMP/missing"
mkdir -p "$TMP/data"
expect_usage_error "--epochs must be >= 1" --data-dir "$TMP/data" --epochs 0
expect_usage_error "invalid choice" --data-dir "$TMP/data" --model vgg99

# Generated data: 40 training and 16 test records of 1 label byte (0-9) + 3072 pixels.
"$PY" - "$TMP/data" <<'EOF'
import os, sys
import numpy as np
rng = np.random.default_rng(0)
for name, n in (("data_batch_1.bin", 40), ("test_batch.bin", 16)):
    records = rng.integers(0, 256, size=(n, 3073), dtype=np.uint8)
    records[:, 0] = rng.integers(0, 10, size=n)
    records.tofile(os.path.join(sys.argv[1], name))
EOF
"$PY" "$PEER" --data-dir "$TMP/data" --model resnet8 --batch-size 8 --max-steps 2 --step-lines \
  --checkpoint-every 1 --checkpoint "$TMP/ck.pt" >"$TMP/out" 2>&1 || fail "training: $(cat "$TMP/out")"
[[ $(grep -c '^STEP ' "$TMP/out") -eq 2 ]] || fail "want 2 STEP lines: $(cat "$TMP/out")"
# JSON with sorted keys: "images_per_second" < "kind" < "steps" < "test_accuracy".
grep -q '^RESULT .*"images_per_second": .*"kind": "epoch".*"test_accuracy": ' "$TMP/out" ||
  fail "no epoch RESULT: $(cat "$TMP/out")"
grep -q '^RESULT .*"kind": "done".*"steps": 2' "$TMP/out" || fail "no done RESULT: $(cat "$TMP/out")"
[[ -f "$TMP/ck.pt" ]] || fail "no checkpoint written"
ls "$TMP" | grep -q '\.tmp\.' && fail "a temporary checkpoint was left behind"

# A restart resumes from the checkpoint: the step count goes on from 2.
"$PY" "$PEER" --data-dir "$TMP/data" --model resnet8 --batch-size 8 --max-steps 3 --step-lines \
  --checkpoint "$TMP/ck.pt" >"$TMP/out" 2>&1 || fail "resume: $(cat "$TMP/out")"
[[ $(grep -c '^STEP ' "$TMP/out") -eq 1 ]] || fail "resumed run should do 1 step: $(cat "$TMP/out")"
grep -q '^STEP .*"step": 3' "$TMP/out" || fail "resumed run did not continue at step 3: $(cat "$TMP/out")"
# The ports of our sampler and augmentation (--order/--augmentation=elastic)
# give the values trainer/sampler_test.cc and
# trainer/data/loader_test.cc pin for the C++ originals.
"$PY" - "$(dirname "$PEER")" <<'EOF' || fail "the elastic ports differ from the C++ originals"
import sys
sys.path.insert(0, sys.argv[1])
import ddp_peer as d
assert d.elastic_permutation(4068, 0, 0)[:8] == [2275, 1933, 2321, 2210, 1391, 3203, 2792, 218]
assert d.elastic_rank_order(4068, 0, 0, 1, 2, 128)[:2] == d.elastic_permutation(4068, 0, 0)[64:66]
for sample, dy, dx, flip in [(2275, 3, 3, 1), (1933, 7, 4, 1), (2210, 6, 5, 0), (0, 6, 0, 1)]:
    h = d.mix(d.mix(d.mix(3) ^ 7) ^ sample)
    assert (h % 9, (h >> 16) % 9, (h >> 32) & 1) == (dy, dx, flip), sample
EOF
echo PASS
