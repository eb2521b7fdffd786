# shellcheck shell=bash
# Sourced by the offline schema checks (monitoring/grafana/validate.sh,
# deploy/kubernetes/validate.sh): installs pinned npm packages into a cache
# directory once, the only step of those checks that needs the network.
#
#   install_pinned CACHE PACKAGE_NAME PACKAGE@VERSION...
#
# The caller defines die(). A stamp file holds the installed list, so a
# changed pin installs again and an unchanged one touches nothing.
install_pinned() {
  local cache=$1 name=$2
  shift 2
  local stamp="$cache/installed"
  [ "$(cat "$stamp" 2>/dev/null)" = "$*" ] && return 0
  echo "validate.sh: installing $* into $cache"
  mkdir -p "$cache"
  [ -f "$cache/package.json" ] || echo "{\"name\": \"$name\", \"private\": true}" > "$cache/package.json"
  # Fail in minutes, not after npm's default retries, and say why.
  npm install --prefix "$cache" --no-audit --no-fund --loglevel=error \
    --fetch-retries=1 --fetch-timeout=60000 "$@" >&2 \
    || die "npm install failed (is the npm registry reachable? where TLS is" \
      "intercepted, NODE_EXTRA_CA_CERTS must name the CA bundle)"
  echo "$*" > "$stamp"
}
