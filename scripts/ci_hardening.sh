#!/usr/bin/env bash
# CI step (docs/security.md, "Fuzzing and sanitizers"): on a clean clone,
#   1. the whole project and test suite built with clang under ASan + UBSan and run by ctest
#      (scripts/sanitize.sh; jailed tests skip there, with the reason, and run in the normal
#      build),
#   2. the differential test against CPython's unpickler on a fresh seed (CKPT_DIFF_SEED, default
#      the clock; printed: rerun with --seed to reproduce), CKPT_DIFF_COUNT (default 10000)
#      random and as many mutated pickles through the sanitized VM;
#   3. every libFuzzer target for CKPT_FUZZ_SECONDS (default 30) from its seeds, in parallel on
#      all cores (scripts/fuzz.sh); a crash fails the step and its input is saved under
#      tests/fuzz/regressions/ (keep it as a CI artifact, commit it).
# Both share one clang tree (build-fuzz, or CKPT_FUZZ_BUILD). CKPT_SANITIZE_CTEST_ARGS, split on
# spaces, is passed to ctest: the default runs the whole suite. Measured times, and which tests
# dominate them, are in docs/security.md ("CI").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${CKPT_FUZZ_SECONDS:-30}
read -ra ctest_args <<<"${CKPT_SANITIZE_CTEST_ARGS:-}"
if ! command -v clang++-14 >/dev/null ||
   ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" \
     >/dev/null; then
  echo "ci_hardening.sh: needs clang-14 and libclang-rt-14-dev (apt-get install clang-14" \
       "libclang-rt-14-dev)" >&2
  exit 1
fi
phase() { echo "== ci_hardening: $* ($(date +%T))" >&2; }
start=$SECONDS
phase "sanitizer build and ctest ${ctest_args[*]}"
sanitize_rc=0
scripts/sanitize.sh "${ctest_args[@]}" || sanitize_rc=$?
sanitize_done=$SECONDS
diff_seed=${CKPT_DIFF_SEED:-$(date +%s)}
phase "differential test, seed $diff_seed"
diff_rc=0
/usr/bin/python3 tests/differential/diff_test.py \
  --facts-tool "${CKPT_FUZZ_BUILD:-build-fuzz}/tests/tools/pickle_facts" \
  --fixtures tests/fixtures/pickles --random "${CKPT_DIFF_COUNT:-10000}" --seed "$diff_seed" |
  tail -n 60 || diff_rc=$?
diff_done=$SECONDS
phase "fuzzing: every target for ${seconds}s"
fuzz_rc=0
scripts/fuzz.sh --seconds "$seconds" --jobs "$(nproc)" || fuzz_rc=$?
phase "done: sanitizer build + tests $((sanitize_done - start))s (exit $sanitize_rc)," \
      "differential $((diff_done - sanitize_done))s (exit $diff_rc, seed $diff_seed)," \
      "fuzzing $((SECONDS - diff_done))s (exit $fuzz_rc), total $((SECONDS - start))s"
((sanitize_rc == 0 && diff_rc == 0 && fuzz_rc == 0))
