#!/usr/bin/env bash
# CI step (docs/bazel.md, "In CI"): on a clean clone, offline,
#   1. scripts/check_build_parity.py (every CMake target has its Bazel twin and the reverse),
#   2. bazel build //...,
#   3. bazel test //...   (every Bazel test: the twins of all of CMake's ctests but build_parity,
#                          which is step 1),
#   4. bazel shutdown, whatever happened before,
# with --config=ci (.bazelrc: the same -O2 code, no debug info) and a fresh, empty Bazel output
# root in $TMPDIR, removed afterwards, so nothing is reused from an earlier run. Prints each
# step's wall time. Exit code: that of the first failing step. Budget: about 8 minutes on 2 cores
# (measured numbers in docs/bazel.md). A disk cache outside the output root and the tests left
# out of the test step: below.
#
# Installs nothing: CI calls `scripts/setup.sh --bazel` first (Debian's bazel-bootstrap).
# Environment: BAZEL_JOBS (default 2); BAZEL_OUTPUT_USER_ROOT to use (and keep) a given output
# root instead of a fresh one. Arguments (targets, default //...) go to scripts/bazel.sh.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1

if [[ -n "${BAZEL_OUTPUT_USER_ROOT:-}" ]]; then
  fresh=""
else
  fresh="$(mktemp -d "${TMPDIR:-/tmp}/ckptscan-bazel-ci.XXXXXX")" || exit 1
  export BAZEL_OUTPUT_USER_ROOT="$fresh"
fi
echo "ci_bazel.sh: output root $BAZEL_OUTPUT_USER_ROOT" >&2

# On any exit, also a cancelled job's SIGINT/SIGTERM: the server down (bazel.sh does that itself
# when it runs to the end; a second shutdown is then a no-op) and a fresh output root removed.
child=""
cleanup() {
  if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
    pkill -INT -P "$child" 2>/dev/null   # the bazel client of the running step: cancel it
    kill -TERM "$child" 2>/dev/null
    wait "$child" 2>/dev/null
  fi
  bazel --output_user_root="$BAZEL_OUTPUT_USER_ROOT" shutdown 2>/dev/null
  if [[ -n "$fresh" ]]; then
    chmod -R u+w "$fresh" 2>/dev/null  # Bazel leaves parts of its output root read-only
    rm -rf "$fresh"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# In the background and waited for, so that a signal runs the traps at once (bash defers them
# until a foreground command ends).
# Action outputs are kept in a disk cache outside the output root (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/bazel-disk; BAZEL_DISK_CACHE=none: none), so that a
# run on a machine that ran CI before recompiles only what changed; Bazel keys each entry by the
# digests of all of its declared inputs and its command line. Bazel 4 never trims it: over
# 6 GiB it is emptied first.
disk_flags=()
disk=${BAZEL_DISK_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/ckptscan/bazel-disk}
if [[ $disk != none ]] && mkdir -p "$disk" 2>/dev/null && [[ -w $disk ]]; then
  if (($(du -sm "$disk" 2>/dev/null | cut -f1) > 6144)); then
    echo "ci_bazel.sh: the disk cache $disk is over 6 GiB: emptied" >&2
    rm -rf "$disk" && mkdir -p "$disk"
  fi
  # Compiles and links come from the cache; tests always run (a cached pass would not say that
  # this machine's kernel, jail and tools still pass them).
  disk_flags=(--disk_cache="$disk" --nocache_test_results)
  echo "ci_bazel.sh: disk cache $disk" >&2
fi
# The twins of the longest tests (over 15 s each under CMake; the loader matrix and the conversion
# differential several minutes each) are built but not run here: CI's CMake step has just run
# them on the same sources. Most of their time goes to the real loaders in Python or to floods
# and waits, not to the code Bazel built. Outside CI, scripts/bazel.sh runs them (docs/bazel.md,
# "In CI").
export BAZEL_TEST_EXCLUDE="${BAZEL_TEST_EXCLUDE-//tests/attacks:shared_mapping_rewrite_test
  //clients:surfaces_test //daemon:daemon_test //tests/differential:joblib_compressed_differential
  //tests/attacks:daemon_resources_test //tests/differential:joblib_differential
  //tests/faults:daemon_faults_test //tests/convert:convert_readback
  //tests/loaders:loader_matrix //tests/convert:convert_differential
  //tests/attacks:job_isolation_test //tests/attacks:protocol_flood_test
  //tests/loaders:loader_harness_test //tests/resources:resource_attacks
  //clients:python_load_test //tests/differential:json_differential
  //tests/differential:zipfile_differential //tests:fixture_verdicts_no_sandbox
  //tests/faults:faults_test //tests/convert:convert_no_output_for_bad_input}"
BAZEL_TEST_EXCLUDE=$(echo $BAZEL_TEST_EXCLUDE)  # one line: bazel.sh splits it on spaces
BAZEL_FLAGS="--config=ci ${disk_flags[*]} ${BAZEL_FLAGS:-}" "$root/scripts/bazel.sh" "$@" &
child=$!
wait "$child"
rc=$?
child=""
exit $rc
