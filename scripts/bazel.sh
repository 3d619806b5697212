#!/usr/bin/env bash
# Builds and tests everything with Bazel, offline, against the system libraries (docs/bazel.md).
# Installs nothing: Bazel comes from `scripts/setup.sh --bazel` (Debian's bazel-bootstrap).
#
#   scripts/bazel.sh                  parity check, bazel build //..., bazel test //...
#   scripts/bazel.sh //clients/...    the same for some targets only
# Environment: BAZEL_JOBS (default 2; the machines are shared), BAZEL_OUTPUT_USER_ROOT (Bazel's
# cache; default ~/.cache/bazel).
# The Bazel server is shut down at the end whatever happened (it is a Java daemon that otherwise
# stays alive). Exit code: that of the first failing step.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1

if ! command -v bazel >/dev/null 2>&1; then
  cat >&2 <<'MSG'
bazel.sh: `bazel` is not installed. Install Debian's bazel-bootstrap (Bazel 4.2.3 and a JDK) with
    scripts/setup.sh --bazel
or build with CMake instead (scripts/run.sh build; scripts/run.sh test). See docs/bazel.md.
MSG
  exit 127
fi

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(//...)
startup=()
[[ -n "${BAZEL_OUTPUT_USER_ROOT:-}" ]] && startup+=("--output_user_root=$BAZEL_OUTPUT_USER_ROOT")
jobs="--jobs=${BAZEL_JOBS:-2}"

rc=0
/usr/bin/python3 "$root/scripts/check_build_parity.py" "$root" || rc=$?
if [[ $rc -eq 0 ]]; then
  bazel "${startup[@]}" build "$jobs" -- "${targets[@]}" && \
    bazel "${startup[@]}" test "$jobs" -- "${targets[@]}"
  rc=$?
fi
bazel "${startup[@]}" shutdown
exit $rc
