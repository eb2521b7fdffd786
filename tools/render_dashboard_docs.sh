#!/usr/bin/env bash
# Redraws docs/dashboard/*.svg, the Grafana dashboard's panels as a real job
# fills them: //tests:prometheus_job_test runs a real Prometheus scraping a
# real //trainer:cifar job that grows from 2 to 4 workers, asks it every
# panel's queries as Grafana would (monitoring/dashboard_render.h) and writes
# one SVG per panel into its undeclared outputs; this copies them here.
#
#   tools/render_dashboard_docs.sh          # from the repository root
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
die() { echo "render_dashboard_docs.sh: error: $*" >&2; exit 1; }

# Not a cached result: the charts are what this run drew.
bazel test //tests:prometheus_job_test --cache_test_results=no
outputs="$(bazel info bazel-testlogs)/tests/prometheus_job_test/test.outputs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -f "$outputs/outputs.zip" ]; then
  python3 -m zipfile -e "$outputs/outputs.zip" "$work"
else
  cp -r "$outputs/." "$work"
fi
shopt -s nullglob
charts=("$work"/dashboard/*.svg)
[ ${#charts[@]} -gt 0 ] || die "the test wrote no charts under $outputs"
mkdir -p docs/dashboard
rm -f docs/dashboard/*.svg
cp "${charts[@]}" docs/dashboard/
echo "render_dashboard_docs.sh: ${#charts[@]} charts in docs/dashboard/"
