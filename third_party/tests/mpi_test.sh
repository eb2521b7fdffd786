#!/usr/bin/env bash
# Starts a real two-rank MPI job with mpirun and checks both ranks agree on the sum.
set -euo pipefail
binary="$1"
export HOME="${TEST_TMPDIR:-/tmp}"
export OMPI_MCA_btl="self,tcp"
export OMPI_MCA_btl_tcp_if_include="lo"
export OMPI_MCA_oob_tcp_if_include="lo"
out=$(mpirun --oversubscribe --allow-run-as-root -np 2 "$binary")
echo "$out"
[ "$(grep -c 'sum 3 (expected 3)' <<<"$out")" -eq 2 ] || { echo "FAIL: ranks disagree"; exit 1; }
echo "PASS"
