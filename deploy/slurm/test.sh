#!/usr/bin/env bash
# Runs //tests:slurm_test: a one-machine Slurm cluster, elastic.sbatch with two
# node-agent steps, one cancelled mid-job. Needs root, slurm-wlm and munge
# (README.md); the test starts and stops its own cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec bazel test //tests:slurm_test --test_output=errors "$@"
