#!/usr/bin/env bash
# Copies a binary and the shared libraries it loads (ldd's list, links
# resolved, so libblas.so.3 is OpenBLAS itself) into OUT/bin and OUT/lib,
# leaving out glibc's own libraries: the runtime image's glibc must be the
# one its dynamic loader belongs to. Usage: collect_libs.sh BINARY OUT
set -euo pipefail
binary=$1
out=$2
mkdir -p "$out/bin" "$out/lib"
cp -L "$binary" "$out/bin/"
ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
  case "$name" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;;
  esac
  cp -L "$path" "$out/lib/$name"
done
# Every library found: a missing one would only show when the image runs.
if LD_LIBRARY_PATH="$out/lib" ldd "$out/bin/$(basename "$binary")" | grep -q "not found"; then
  LD_LIBRARY_PATH="$out/lib" ldd "$out/bin/$(basename "$binary")" | grep "not found" >&2
  exit 1
fi
echo "collect_libs: $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1)"
