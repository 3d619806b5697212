#!/usr/bin/env bash
# The loader matrix in CI (tests/loaders/README.md): every real loader of this machine (Debian 12,
# live) on every fixture and on the generated polyglots and mutations, and the committed records
# of Debian 13's loaders, each compared with ckptscan's reports. Any unexplained disagreement
# fails the test (compare.py's invariants a: every global a loader imports is one ckptscan
# reports; b: SAFE is safe for every loader).
#
#   tests/loaders/ci_matrix.sh CKPTSCAN PICKLE_FACTS SOURCE_DIR [COUNT] [SEED]
#
# COUNT polyglots (default 10000) from SEED (default 1: each run continues from the same corpus;
# a longer run: COUNT 100000, or other seeds, docs in tests/loaders/README.md). Work files go to
# a temporary folder, removed at the end. Steps and their times are printed.
set -uo pipefail
ckptscan=$1
facts=$2
src=$3
count=${4:-10000}
seed=${5:-1}
py=/usr/bin/python3
loaders=$src/tests/loaders
work=$(mktemp -d "${TMPDIR:-/tmp}/ckptscan-matrix.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT

rc=0
step() {
  local name=$1 start=$SECONDS status=0
  shift
  echo "== loader matrix: $name"
  "$@" || status=$?
  echo "== loader matrix: $name: exit $status in $((SECONDS - start)) s"
  ((status == 0)) || { ((rc == 0)) && rc=$status; }
}
compare() {  # MATRIX ROOT [more compare.py arguments]
  local matrix=$1 root=$2
  shift 2
  "$py" "$loaders/compare.py" --matrix "$matrix" --root "$root" --ckptscan "$ckptscan" \
    --facts-tool "$facts" --explained "$loaders/explained.json" --top 20 "$@"
}

step "polyglots ($count, seed $seed)" \
  "$py" "$loaders/polyglots.py" --out "$work/pg" --count "$count" --seed "$seed"
step "Debian 12's loaders on the polyglots (live)" \
  "$py" "$loaders/loader_matrix.py" --jobs 2 --root "$work/pg" "$work/pg" --out "$work/pg.jsonl"
step "ckptscan against them" compare "$work/pg.jsonl" "$work/pg"
step "Debian 12's loaders on the fixtures (live)" \
  "$py" "$loaders/loader_matrix.py" --jobs 2 --root "$src/tests/fixtures" "$src/tests/fixtures" \
  --out "$work/fixtures.jsonl"
step "ckptscan against them" compare "$work/fixtures.jsonl" "$src/tests/fixtures"
step "ckptscan against Debian 13's recorded loaders on the fixtures" \
  compare "$loaders/expectations/trixie/fixtures.jsonl" "$src/tests/fixtures"
# A loader of this machine that now answers otherwise than when the records were made (a
# security update, as zipfile's ZIP64 check was) is worth knowing; the comparison above judges
# ckptscan by the live answer either way.
if ! cmp -s <(grep -v '"meta"' "$work/fixtures.jsonl") \
            <(grep -v '"meta"' "$loaders/expectations/debian12/fixtures.jsonl"); then
  echo "note: this machine's loaders answer otherwise than the committed Debian 12 records" \
       "(tests/loaders/expectations/debian12/fixtures.jsonl; scripts/loader_expectations.sh" \
       "rewrites them); the files that differ:"
  diff <(grep -v '"meta"' "$loaders/expectations/debian12/fixtures.jsonl" | cut -c1-160) \
       <(grep -v '"meta"' "$work/fixtures.jsonl" | cut -c1-160) | head -20
fi
exit "$rc"
