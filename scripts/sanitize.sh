#!/usr/bin/env bash
# The whole project and test suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang;
# UB is fatal), then ctest. Tests that run the jailed worker skip there with the reason printed
# (sanitizer runtimes need system calls the seccomp policy forbids); they run in the normal
# build. Shares its tree with scripts/fuzz.sh (scripts/clang_build.sh).
#
#   scripts/sanitize.sh [CTEST_ARGS...]      e.g. scripts/sanitize.sh -R zip
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKPT_FUZZ_BUILD:-$root/build-fuzz}
"$root/scripts/clang_build.sh"
# Reports name file:line (llvm-symbolizer), UB stops the test, leaks fail it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
exec ctest --output-on-failure -j"${CKPT_JOBS:-$(nproc)}" "$@"
