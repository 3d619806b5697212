#!/usr/bin/env bash
# ctest/Bazel test: replays one fuzz target's seed corpus (assembled from the fixtures by
# tests/fuzz/seeds.py) and its saved regression inputs (tests/fuzz/regressions/<target>/)
# through the target, once each. The binary is the replay driver (tests/fuzz/replay_main.cc)
# in normal builds and libFuzzer itself in CKPT_FUZZ builds (-runs=0: run the corpus, no
# fuzzing); either aborts on a failed invariant or a sanitizer report.
#
#   replay_test.sh FUZZ_BINARY TARGET SOURCE_ROOT SEED_TOOL
set -euo pipefail
bin=$1 target=$2 root=$3 seed_tool=$4
tmp=$(mktemp -d "${TEST_TMPDIR:-${TMPDIR:-/tmp}}/fuzz_replay.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$root/tests/fuzz/seeds.py" --out "$tmp" --seed-tool "$seed_tool" "$target"
# libFuzzer writes nothing into corpus dirs with -runs=0; its crash artifacts go to $tmp.
exec "$bin" -runs=0 -artifact_prefix="$tmp/" "$tmp/$target" "$root/tests/fuzz/regressions/$target"
