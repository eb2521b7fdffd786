#!/usr/bin/env bash
# Validates the Grafana dashboards in dashboards/ against Grafana's published
# dashboard schema, offline: no Grafana server.
#
#   monitoring/grafana/validate.sh [DASHBOARD.json ...]   # default: dashboards/*.json
#
# Installs (once) pinned npm packages into a cache directory -- the only step
# that needs the network: @grafana/schema (the TypeScript Grafana generates
# from its CUE schema: the dashboard kind, the stat and timeseries panel
# options, the Prometheus query), pinned to the Grafana version that
# monitoring/docker-compose.yml runs, and typescript, which type-checks each
# dashboard against it in strict mode; validate.js has the details.
#
# Environment: ELASTIC_GRAFANA_VALIDATE_CACHE (default ~/.cache/elastic-grafana-validate).
set -euo pipefail

# This directory; under `bazel test` the script runs as monitoring/<test
# name>, so take the sources from the runfiles tree.
if [ -n "${TEST_SRCDIR:-}" ] && [ -n "${TEST_WORKSPACE:-}" ]; then
  here="$TEST_SRCDIR/$TEST_WORKSPACE/monitoring/grafana"
else
  here=$(cd "$(dirname "$0")" && pwd)
fi
cache=${ELASTIC_GRAFANA_VALIDATE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/elastic-grafana-validate}
# @grafana/schema's version is Grafana's: keep it equal to the grafana/grafana
# image tag of docker-compose.yml (checked below).
packages=(@grafana/schema@10.4.2 typescript@5.9.3)

die() { echo "validate.sh: error: $*" >&2; exit 1; }

command -v node >/dev/null || die "node is missing (apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is missing (apt-get install nodejs npm)"

compose="$here/../docker-compose.yml"
if [ -f "$compose" ]; then
  image=$(sed -n 's/^ *image: *grafana\/grafana:\([^ ]*\).*/\1/p' "$compose")
  [ "$image" = "${packages[0]#@grafana/schema@}" ] \
    || die "docker-compose.yml runs grafana/grafana:$image but the schema is ${packages[0]}"
fi

# shellcheck source=tools/npm_pinned.sh
source "$here/../../tools/npm_pinned.sh"
install_pinned "$cache" elastic-grafana-validate "${packages[@]}"

if [ $# -eq 0 ]; then
  set -- "$here"/dashboards/*.json
fi
NODE_PATH="$cache/node_modules" node "$here/validate.js" "$@"
