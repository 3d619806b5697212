#!/usr/bin/env bash
# Stands in for a test that runs the jailed worker, in sanitizer builds (CKPT_JAILED_TEST in the
# top-level CMakeLists.txt): prints why it does not run and exits 77, the tests'
# SKIP_RETURN_CODE. The arguments are the command that would have run.
echo "SKIPPED under sanitizers: this test runs the jailed worker, and sanitizer runtimes need" \
     "system calls the seccomp policy forbids, so its results would be meaningless" \
     ". It runs in every normal build. Command: $*"
exit 77
