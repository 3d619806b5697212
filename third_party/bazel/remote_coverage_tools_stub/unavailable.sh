#!/bin/sh
echo "coverage tools are not available offline (third_party/bazel/remote_coverage_tools_stub)" >&2
exit 1
