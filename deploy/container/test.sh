#!/usr/bin/env bash
# Builds the image and runs the container test: a head container and two
# worker containers on a podman network, one worker container stopped mid-job.
# Needs root, podman and runc (README.md). Takes a few minutes once the image
# is built (the first build installs the build dependencies into it).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/container/containers.conf}
deploy/container/make_base_image.sh
exec bazel test //tests:container_test --test_output=streamed --test_env=HOME "$@"
