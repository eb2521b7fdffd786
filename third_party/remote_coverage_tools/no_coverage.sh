#!/bin/sh
echo "coverage is not available in this offline build (third_party/remote_coverage_tools)" >&2
exit 1
