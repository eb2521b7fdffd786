#!/usr/bin/env bash
# Validates the manifests in this directory against the Kubernetes API's
# schema, offline: no cluster, no kubeconfig.
#
#   deploy/kubernetes/validate.sh
#
# Installs (once) pinned npm packages into a cache directory -- the only step
# that needs the network: kubernetes-models (JSON-schema validators generated
# from the API's OpenAPI), kubernetes-types and typescript (the API's types, for
# unknown-field checks); validate.js has the details. The YAML is read with
# PyYAML (YAML 1.1, as kubectl reads it: `defaultMode: 0400` is octal).
#
# What is validated: every object of controller.yaml and worker.yaml as
# written, and, where kubectl is installed, the output of `kubectl kustomize`
# for this directory alone and with each of components/* (kubectl's built-in
# kustomize renders offline). Without kubectl the rendered variants are
# skipped, and it says so.
#
# Environment: ELASTIC_K8S_VALIDATE_CACHE (default ~/.cache/elastic-k8s-validate).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${ELASTIC_K8S_VALIDATE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/elastic-k8s-validate}
# Node 20 is what Debian-bookworm-era machines have: kubernetes-models 5 needs 22.
packages=(kubernetes-models@4.5.1 kubernetes-types@1.30.0 typescript@5.9.3)

die() { echo "validate.sh: error: $*" >&2; exit 1; }

command -v node >/dev/null || die "node is missing (apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is missing (apt-get install nodejs npm)"
python3 -c "import yaml" 2>/dev/null || die "PyYAML is missing (apt-get install python3-yaml)"

# shellcheck source=tools/npm_pinned.sh
source "$here/../../tools/npm_pinned.sh"
install_pinned "$cache" elastic-k8s-validate "${packages[@]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# YAML files -> one JSON list of {source, object}; arguments: SOURCE=FILE ...
to_json() {
  python3 - "$@" <<'EOF'
import json, sys, yaml
items = []
for arg in sys.argv[1:]:
    source, path = arg.split("=", 1)
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc is not None:
                items.append({"source": source, "object": doc})
print(json.dumps(items))
EOF
}

inputs=("controller.yaml=$here/controller.yaml" "worker.yaml=$here/worker.yaml")

if command -v kubectl >/dev/null; then
  # Bazel's runfiles are symlinks out of the tree: let kustomize follow them.
  kustomize=(kubectl kustomize --load-restrictor=LoadRestrictionsNone)
  "${kustomize[@]}" "$here" > "$work/base.yaml" || die "kubectl kustomize $here failed"
  inputs+=("kustomize=$work/base.yaml")
  for component in "$here"/components/*/; do
    name=$(basename "$component")
    overlay="$work/overlay-$name"
    mkdir -p "$overlay"
    printf 'resources: [%s]\ncomponents: [%s]\n' \
      "$(realpath -s --relative-to="$overlay" "$here")" \
      "$(realpath -s --relative-to="$overlay" "$component")" > "$overlay/kustomization.yaml"
    "${kustomize[@]}" "$overlay" > "$work/$name.yaml" \
      || die "kubectl kustomize with components/$name failed"
    inputs+=("kustomize+$name=$work/$name.yaml")
  done
else
  echo "validate.sh: kubectl not installed: kustomization.yaml and components/*" \
    "not rendered, not validated"
fi

to_json "${inputs[@]}" > "$work/objects.json"
NODE_PATH="$cache/node_modules" node "$here/validate.js" "$work/objects.json"
