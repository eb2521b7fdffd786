#!/usr/bin/env bash
# bench/gpt_peer.py: refuses impossible flags with a message naming them,
# trains steps (world of one, DDP over Gloo) on generated token files from a
# scripted GPT, printing the STEP, EVAL and RESULT lines that
# bench/nanogpt_bench.py and bench/spot_trace_bench.py read, resumes from its
# checkpoint and trains nanoGPT's bias-free GPT; bench/nanogpt_loop.py runs
# nanoGPT's own loop.
set -euo pipefail

HERE=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-elastic}
PEER=$HERE/bench/gpt_peer.py
LOOP=$HERE/bench/nanogpt_loop.py
MODEL=$HERE/tests/gpt_model.py
[[ -f "$PEER" ]] || {
  PEER=$(dirname "$0")/gpt_peer.py
  LOOP=$(dirname "$0")/nanogpt_loop.py
  MODEL=$(dirname "$0")/../tests/gpt_model.py
}
PY=/usr/bin/python3
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/gpt_peer_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1

fail() { echo "FAIL: $*" >&2; exit 1; }

expect_usage_error() {
  local want=$1; shift
  local rc=0
  "$PY" "$PEER" "$@" >"$TMP/out" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || fail "$* exited $rc, want 2: $(cat "$TMP/out")"
  grep -q -- "$want" "$TMP/out" || fail "$* did not say '$want': $(cat "$TMP/out")"
}
expect_usage_error "no such directory" --data-dir "$TMP/missing" --init x.pt
mkdir -p "$TMP/data"
expect_usage_error "--beta2 must be in \[0, 1)" --data-dir "$TMP/data" --init x.pt --beta2 1
expect_usage_error "--context must be >= 1" --data-dir "$TMP/data" --init x.pt --context 0

# Generated tokens: 2,000 training and 400 validation ids below 17, uint16.
"$PY" - "$TMP/data" <<'PYEOF'
import json, os, sys
import numpy as np
rng = np.random.default_rng(0)
for name, n in (("train.bin", 2000), ("val.bin", 400)):
    rng.integers(0, 17, size=n).astype(np.uint16).tofile(os.path.join(sys.argv[1], name))
json.dump({"vocab_size": 17, "dtype": "uint16"}, open(os.path.join(sys.argv[1], "meta.json"), "w"))
PYEOF
"$PY" "$MODEL" script "$TMP/gpt.pt" --vocab 17 --block 16 --layers 1 --heads 2 --embd 16 \
  >/dev/null || fail "scripting the GPT"
run() {
  "$PY" "$PEER" --data-dir "$TMP/data" --init "$TMP/gpt.pt" --context 16 --batch-size 4 \
    --warmup-steps 2 --decay-steps 10 --eval-every 2 --step-lines "$@"
}
run --max-steps 4 --checkpoint-every 1 --checkpoint "$TMP/ck.pt" >"$TMP/out" 2>&1 ||
  fail "training: $(cat "$TMP/out")"
[[ $(grep -c '^STEP ' "$TMP/out") -eq 4 ]] || fail "want 4 STEP lines: $(cat "$TMP/out")"
# Evaluations at step 2 (--eval-every) and at the end; JSON keys sorted.
[[ $(grep -c '^EVAL .*"val_loss": ' "$TMP/out") -eq 2 ]] || fail "want 2 EVAL lines: $(cat "$TMP/out")"
grep -q '^EVAL .*"step": 2,' "$TMP/out" || fail "no evaluation at step 2: $(cat "$TMP/out")"
grep -q '^RESULT .*"kind": "done".*"steps": 4,.*"tokens_per_second": ' "$TMP/out" ||
  fail "no done RESULT: $(cat "$TMP/out")"
# An untrained model scores about ln 17 = 2.83 on uniform ids; 4 steps stay near it.
"$PY" - "$TMP/out" <<'PYEOF' || fail "the validation loss is not near ln 17: $(cat "$TMP/out")"
import json, math, re, sys
loss = [json.loads(m.group(1))["val_loss"] for m in re.finditer(r"^EVAL (\{.*\})", open(sys.argv[1]).read(), re.M)]
assert all(abs(x - math.log(17)) < 0.3 for x in loss), loss
PYEOF
[[ -f "$TMP/ck.pt" ]] || fail "no checkpoint written"
ls "$TMP" | grep -q '\.tmp\.' && fail "a temporary checkpoint was left behind"

# A restart resumes from the checkpoint: the step count goes on from 4.
run --max-steps 6 --checkpoint "$TMP/ck.pt" >"$TMP/out" 2>&1 || fail "resume: $(cat "$TMP/out")"
[[ $(grep -c '^STEP ' "$TMP/out") -eq 2 ]] || fail "resumed run should do 2 steps: $(cat "$TMP/out")"
grep -q '^STEP .*"step": 5,' "$TMP/out" || fail "resumed run did not continue at step 5: $(cat "$TMP/out")"
# nanoGPT's bias=False: the peer reads the architecture off the file, biases
# or none, and trains it.
"$PY" "$MODEL" script "$TMP/gpt0.pt" --vocab 17 --block 16 --layers 1 --heads 2 --embd 16 \
  --bias 0 >/dev/null || fail "scripting the bias-free GPT"
"$PY" - "$TMP/gpt0.pt" <<'PYEOF' || fail "the bias-free GPT has biases"
import sys, torch
names = list(torch.jit.load(sys.argv[1]).state_dict())
assert names and not [n for n in names if n.endswith(".bias")], names
PYEOF
"$PY" "$PEER" --data-dir "$TMP/data" --init "$TMP/gpt0.pt" --context 16 --batch-size 4 \
  --max-steps 2 --eval-every 0 >"$TMP/out" 2>&1 || fail "training the bias-free GPT: $(cat "$TMP/out")"
grep -q '^RESULT .*"steps": 2,' "$TMP/out" || fail "no RESULT for the bias-free GPT: $(cat "$TMP/out")"

# bench/nanogpt_loop.py, nanoGPT's own loop: an estimate every --eval-interval
# iterations and at the end, then the RESULT with the whole-val.bin loss.
"$PY" "$LOOP" --data-dir "$TMP/data" --max-iters 4 --eval-interval 2 --estimates 3 --threads 1 \
  >"$TMP/out" 2>&1 || fail "nanogpt_loop: $(cat "$TMP/out")"
[[ $(grep -c '^EVAL ' "$TMP/out") -eq 3 ]] || fail "want EVAL at 0, 2, 4: $(cat "$TMP/out")"
"$PY" - "$TMP/out" <<'PYEOF' || fail "nanogpt_loop's RESULT: $(cat "$TMP/out")"
import json, math, re, sys
r = json.loads(re.search(r"^RESULT (\{.*\})", open(sys.argv[1]).read(), re.M).group(1))
assert r["iters"] == 4 and r["bias"] == 0 and len(r["estimate_spread"]) == 3, r
assert r["estimate_spread"][0] <= r["estimate_spread"][1] <= r["estimate_spread"][2], r
assert all(abs(r[k] - math.log(17)) < 0.3 for k in ("val_loss", "val_loss_estimate")), r
assert r["tokens_per_second"] > 0, r
PYEOF
echo PASS
