#!/usr/bin/env bash
# A missing test input skips the test on a developer's machine and fails it
# under CI=true (testing/required_input.h).
set -u
probe="$1"

out=$(env -u CI "$probe" 2>&1); rc=$?
if [ "$rc" -ne 0 ] || ! grep -q '\[  SKIPPED \] 1 test' <<<"$out"; then
  echo "without CI the probe should be skipped and exit 0 (rc $rc):"; echo "$out"; exit 1
fi
out=$(CI=true "$probe" 2>&1); rc=$?
if [ "$rc" -eq 0 ] || ! grep -q 'CI=true makes that a failure: /nonexistent/elastic-required-input is missing' <<<"$out"; then
  echo "under CI=true the probe should fail naming the input (rc $rc):"; echo "$out"; exit 1
fi
echo "skipped without CI, failed under CI=true"
