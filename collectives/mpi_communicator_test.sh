#!/usr/bin/env bash
# Three real MPI ranks started by mpirun run every op, dtype and size through the
# MPI backend and check that a rebuild is refused.
set -euo pipefail
binary="$1"
export HOME="${TEST_TMPDIR:-/tmp}"
export OMPI_MCA_btl="self,tcp"
export OMPI_MCA_btl_tcp_if_include="lo"
export OMPI_MCA_oob_tcp_if_include="lo"
out=$(mpirun --oversubscribe --allow-run-as-root -np 3 "$binary" 2>&1) || {
  echo "$out"
  echo "FAIL: mpirun exited with an error"
  exit 1
}
echo "$out"
[ "$(grep -c ': PASS' <<<"$out")" -eq 3 ] || { echo "FAIL: not every rank passed"; exit 1; }
grep -q 'MPI backend cannot rebuild' <<<"$out" || { echo "FAIL: no refusal message"; exit 1; }
echo "PASS"
