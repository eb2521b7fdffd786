#!/usr/bin/env bash
# Makes the Debian bookworm base image from Debian's archive alone (no
# container registry needed): debootstrap a minimal root file system and
# `podman import` it. Usage: make_base_image.sh [IMAGE] (default
# localhost/debian:bookworm). Needs root, debootstrap and podman (or docker).
set -euo pipefail

image=${1:-localhost/debian:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
engine=${CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}
[ -n "$engine" ] || { echo "make_base_image: neither podman nor docker is installed" >&2; exit 1; }
command -v debootstrap >/dev/null ||
  { echo "make_base_image: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }

if "$engine" image inspect "$image" >/dev/null 2>&1; then
  echo "make_base_image: $image exists"
  exit 0
fi

root=$(mktemp -d /var/tmp/elastic-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "make_base_image: debootstrap bookworm from $mirror (a few minutes)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
  { tail -n 20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# The same suites as Debian's official image: updates and security fixes too.
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "make_base_image: $image ($(du -sh "$root" | cut -f1) unpacked)"
