#!/usr/bin/env bash
# Builds and tests everything with Bazel, offline, against the system libraries (docs/bazel.md).
# Installs nothing: Bazel comes from `scripts/setup.sh --bazel` (Debian's bazel-bootstrap).
#
#   scripts/bazel.sh                  parity check, bazel build //..., bazel test //...
#   scripts/bazel.sh //clients/...    the same for some targets only
# Environment: BAZEL_JOBS (default 2; the machines are shared), BAZEL_OUTPUT_USER_ROOT (Bazel's
# cache; default ~/.cache/bazel), BAZEL_FLAGS (more build/test flags, e.g. --config=ci; split on
# spaces), BAZEL_TEST_EXCLUDE (test targets built but not run, split on spaces: CI's list is
# in scripts/ci_bazel.sh). CI runs this through scripts/ci_bazel.sh.
# The Bazel server is shut down at the end whatever happened (it is a Java daemon that otherwise
# stays alive). Each step's wall time is printed at the end. Exit code: that of the first failing
# step.
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
read -r -a flags <<<"${BAZEL_FLAGS:-}"
flags+=("--jobs=${BAZEL_JOBS:-2}")

rc=0
timings=()
# step NAME COMMAND...: runs it unless an earlier step failed; records its wall time and the
# first failure's exit code.
step() {
  local name=$1 start=$SECONDS status=0
  shift
  if [[ $rc -ne 0 ]]; then
    timings+=("$(printf '%-9s skipped' "$name")")
    return
  fi
  echo "bazel.sh: == $name ($(date +%T))" >&2
  "$@" || status=$?
  timings+=("$(printf '%-9s %4ds  exit %d' "$name" $((SECONDS - start)) "$status")")
  [[ $status -eq 0 ]] || rc=$status
}
begin=$SECONDS
step parity /usr/bin/python3 "$root/scripts/check_build_parity.py" "$root"
step standalone_refs /usr/bin/python3 "$root/tests/docs/standalone_refs.py" "$root"
# The first command starts the server; timed alone so that the build's time is the build's.
step server bazel "${startup[@]}" info release
step build bazel "${startup[@]}" build "${flags[@]}" -- "${targets[@]}"
read -r -a excluded <<<"${BAZEL_TEST_EXCLUDE:-}"
step test bazel "${startup[@]}" test "${flags[@]}" -- "${targets[@]}" "${excluded[@]/#/-}"
# Always, even after a failure (rc is saved and restored around it).
saved=$rc rc=0
step shutdown bazel "${startup[@]}" shutdown
[[ $saved -ne 0 ]] && rc=$saved
{
  echo "bazel.sh: wall times"
  printf '  %s\n' "${timings[@]}"
  printf '  %-9s %4ds  exit %d\n' total $((SECONDS - begin)) "$rc"
} >&2
exit $rc
