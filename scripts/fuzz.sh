#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (docs/security.md, "Fuzzing and sanitizers").
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [TARGET...]
#
# Builds build-fuzz if needed (scripts/clang_build.sh: clang, CKPT_FUZZ=ON), assembles each
# target's seeds from the fixtures (tests/fuzz/seeds.py), then runs every TARGET (default: all)
# for N seconds (default 60), up to J at once (default nproc). The corpus a target grows is
# kept in build-fuzz/fuzz/corpus/<target> for the next run. Any crash, leak, timeout or
# out-of-memory input is copied to tests/fuzz/regressions/<target>/ (commit it: every build's
# ctest replays it) with a note. Prints the executions per target (libFuzzer's final
# stat::number_of_executed_units) and exits 1 if any target failed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKPT_FUZZ_BUILD:-$root/build-fuzz}
all_targets=(pickle zip legacy extract safetensors signing facts_codec rules compress content gguf onnx
             repo_config)
seconds=60
jobs=$(nproc)
targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#*=}; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1 (see --help)" >&2; exit 64 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] ||
    { echo "fuzz.sh: unknown target $t (targets: ${all_targets[*]})" >&2; exit 64; }
done

"$root/scripts/clang_build.sh" fuzz_seed_tool "${targets[@]/%/_fuzz}"
work=$build/fuzz
/usr/bin/python3 "$root/tests/fuzz/seeds.py" --out "$work/seeds" \
  --seed-tool "$build/tests/fuzz/fuzz_seed_tool" "${targets[@]}"

# One target: N seconds, its grown corpus first (libFuzzer adds new inputs there), then its
# seeds and saved regressions (read only). -timeout: one input taking 10 s is a finding.
run_one() {
  local t=$1 corpus=$work/corpus/$1 artifacts=$work/artifacts/$1
  mkdir -p "$corpus" "$artifacts"
  rm -f "$artifacts"/*
  local rc=0
  "$build/tests/fuzz/${t}_fuzz" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$artifacts/" \
    "$corpus" "$work/seeds/$t" "$root/tests/fuzz/regressions/$t" >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}

echo "fuzz.sh: ${#targets[@]} targets, ${seconds}s each, $jobs at a time; logs in $work/" >&2
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  run_one "$t" &
done
wait

failed=0
total=0
printf '%-12s %14s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  log=$work/$t.log
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$work/corpus/$t" -type f | wc -l)
  result=ok
  saved=()
  for a in "$work/artifacts/$t"/{crash,leak,timeout,oom}-*; do
    [[ -e $a ]] || continue
    cp "$a" "$root/tests/fuzz/regressions/$t/"
    saved+=("tests/fuzz/regressions/$t/$(basename "$a")")
  done
  if ((rc != 0)) || ((${#saved[@]})); then
    result="FAILED (exit $rc)"
    failed=1
  fi
  total=$((total + ${execs:-0}))
  printf '%-12s %14s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
  if [[ $result != ok ]]; then
    # The first report line says what happened (sanitizer, invariant, timeout, OOM).
    grep -m1 -E 'ERROR: |fuzz invariant failed|==[0-9]+==.*(Sanitizer|timeout)|out-of-memory' \
      "$log" | sed 's/^/    /' || tail -5 "$log" | sed 's/^/    /'
    for s in "${saved[@]}"; do
      echo "    saved $s: reproduce with $build/tests/fuzz/${t}_fuzz $s; commit it"
    done
    echo "    log: $log"
  fi
done
printf '%-12s %14s\n' total "$total"
exit "$failed"
