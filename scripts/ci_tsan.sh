#!/usr/bin/env bash
# CI step (docs/security.md, "CI"): the trusted side's threaded code under
# ThreadSanitizer. Configures (once) a clang-14 tree with CKPT_TSAN=ON (-fsanitize=thread on every
# library and test; clang's -Wthread-safety checks the absl::Mutex annotations as errors), builds
# only the test binaries below and runs their tests with ctest. Any report fails the step
# (halt_on_error). Debian's abseil is not built with TSan: every executable of the tree links
# tests/tsan/absl_mutex_tsan.cc, which tells TSan what absl::Mutex does (tsan_shim_test checks
# that, and that a real race is still reported). Suppressions, each with its reason, are in
# tests/tsan/suppressions.txt.
#
#   scripts/ci_tsan.sh [CTEST_ARGS...]
#
# Covered: the job slots, upload places and stall watchdog (daemon/job_slots), the daemon's
# metrics and log lines, the confined roots, the facts memory budget, output files, SHA-256 and
# the signing manifest's parallel hashing (signing/), the CLI's progress meter, and the shim
# itself. Not covered: code that only the jailed worker's tests reach (sandbox/run.cc,
# app/publish's ShardWork,
# ckptscand's services, unix listener and reflection guard, exercised by daemon_test.sh and the
# tests/attacks scripts): under any sanitizer the worker's runtime needs system calls its seccomp
# policy forbids, so those tests skip there (tests/skip_jailed.sh) and are not built here.
#
# Environment: CKPT_TSAN_BUILD (default build-tsan), CKPT_JOBS (default nproc), CXX (default
# clang++-14).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKPT_TSAN_BUILD:-$root/build-tsan}
jobs=${CKPT_JOBS:-$(nproc)}
cxx=${CXX:-$(command -v clang++-14 || true)}
if [[ -z $cxx ]] ||
   ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.tsan-x86_64.a" >/dev/null; then
  echo "ci_tsan.sh: needs clang-14 and libclang-rt-14-dev (apt-get install clang-14" \
       "libclang-rt-14-dev)" >&2
  exit 1
fi
targets=(tsan_shim_test job_slots_test metrics_test log_test confine_test facts_budget_test
         output_file_test sha256_test signing_manifest_test progress_test)
# The gtest suites of those binaries (ctest names are Suite.Test).
suites='TsanShim|JobSlots|StallWatchdog|Metrics|LogLine|TraceIdOf|Confine|FactsBudget|OutputFile'
suites+='|CurrentUmask|Sha256|Oms|ProgressMeter|ProgressText'
# shellcheck source=scripts/ccache_env.sh
source "$root/scripts/ccache_env.sh"
ckpt_ccache_setup "$root"
if [[ ! -f $build/build.ninja ]] || ! grep -q '^CKPT_TSAN:BOOL=ON' "$build/CMakeCache.txt"; then
  # -O1 -gline-tables-only: reports with file:line at about half the build time of -O2 -g.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" -DCKPT_TSAN=ON \
        "${ckpt_ccache_flags[@]}" >&2
fi
# clang-14's TSan runtime cannot map its shadow memory when the kernel randomises more than 28
# bits of mmap addresses (vm.mmap_rnd_bits 32 on some hosts: "FATAL: ThreadSanitizer: unexpected
# memory mapping"); there the test binaries (also run by the build, to list their tests) run
# without address randomisation.
norandom=()
if (($(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0) > 28)); then
  norandom=(setarch "$(uname -m)" -R)
fi
start=$SECONDS
"${norandom[@]}" cmake --build "$build" -j"$jobs" --target "${targets[@]}" >&2
built=$SECONDS
# A report stops the test (exit 66) with both stacks; second_deadlock_stack names the other
# thread's lock order on a lock-order inversion.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan/suppressions.txt}
cd "$build"
rc=0
"${norandom[@]}" ctest --output-on-failure -j"$jobs" -R "^($suites)" "$@" || rc=$?
echo "ci_tsan.sh: build $((built - start)) s, tests $((SECONDS - built)) s (exit $rc)" >&2
exit "$rc"
