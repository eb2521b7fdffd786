#!/usr/bin/env bash
# Validates a Prometheus configuration with the promtool of the installed
# Prometheus (Debian's `prometheus` package, installed by tools/setup.sh).
set -euo pipefail
config="$1"
if ! command -v promtool >/dev/null; then
  echo "promtool not found: run tools/setup.sh (Debian package 'prometheus')" >&2
  exit 1
fi
promtool check config "$config"
