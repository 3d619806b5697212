#!/usr/bin/env bash
# Writes the loader matrix's committed expectation files (tests/loaders/README.md):
#
#   tests/loaders/expectations/debian12/fixtures.jsonl   every file under tests/fixtures,
#                                                        Debian 12's loaders (/usr/bin/python3)
#   tests/loaders/expectations/trixie/fixtures.jsonl     the same files in the Debian 13 root
#   tests/loaders/realworld/debian12.jsonl               the real-world corpus (its manifest:
#   tests/loaders/realworld/trixie.jsonl                 tests/loaders/realworld/manifest.json)
#   tests/loaders/expectations/debian12/scan_then_load.jsonl   scan_then_load over every SAFE
#   tests/loaders/expectations/trixie/scan_then_load.jsonl     torch fixture, torch 1.13 / 2.6
#                                                        (clients/python/scan_then_load_matrix.py)
#
#   scripts/loader_expectations.sh [--jobs N] [--skip-trixie] [--skip-realworld]
#                                  [--build DIR] [--skip-scan-then-load | --scan-then-load-only]
#
# The scan_then_load records need a build's ckptscan and ckptscand (DIR/clients/, default
# build/): the CLI for Debian 12, the daemon on this host for the trixie root
# (scripts/scan_then_load_trixie.sh); --scan-then-load-only writes just those two files
# (about 40 s). --skip-trixie skips the trixie scan_then_load run too.
#
# The real-world corpus is (re)made first by scripts/realworld_corpus.py (cached downloads; Debian
# 13's packages too, fetched inside the Debian 13 root, unless --skip-trixie);
# the trixie runs go through scripts/loader_matrix_trixie.sh (root, debootstrap, network for
# the first run). On 2 cores with --jobs 2: about 7 minutes in all (Debian 12 fixtures 1 min,
# its real-world run 1.5 min, the trixie runs the rest).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
jobs=1
trixie=1
realworld=1
loaders=1
scan_then_load=1
build="$repo/build"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs) jobs="$2"; shift 2 ;;
    --skip-trixie) trixie=0; shift ;;
    --skip-realworld) realworld=0; shift ;;
    --build) build="$2"; shift 2 ;;
    --skip-scan-then-load) scan_then_load=0; shift ;;
    --scan-then-load-only) loaders=0; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "loader_expectations: unknown argument $1" >&2; exit 64 ;;
  esac
done
py=/usr/bin/python3
matrix="$repo/tests/loaders/loader_matrix.py"
exp="$repo/tests/loaders/expectations"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/realworld"
mkdir -p "$exp/debian12" "$exp/trixie" "$repo/tests/loaders/realworld"

if [[ $scan_then_load -eq 1 ]]; then
  echo "=== Debian 12: scan_then_load over the SAFE torch fixtures" >&2
  "$py" "$repo/clients/python/scan_then_load_matrix.py" --fixtures "$repo/tests/fixtures" \
    --ckptscan "$build/clients/ckptscan" --out "$exp/debian12/scan_then_load.jsonl"
  if [[ $trixie -eq 1 ]]; then
    echo "=== Debian 13: scan_then_load over the SAFE torch fixtures" >&2
    bash "$here/scan_then_load_trixie.sh" --ckptscand "$build/clients/ckptscand" \
      --out "$exp/trixie/scan_then_load.jsonl"
  fi
fi
if [[ $loaders -eq 0 ]]; then
  echo "loader_expectations: done" >&2
  exit 0
fi
echo "=== Debian 12: tests/fixtures" >&2
"$py" "$matrix" --jobs "$jobs" --root "$repo/tests/fixtures" "$repo/tests/fixtures" \
  --out "$exp/debian12/fixtures.jsonl"
if [[ $realworld -eq 1 ]]; then
  echo "=== the real-world corpus" >&2
  d13=()
  if [[ $trixie -eq 1 ]]; then
    # Debian 13's packages are downloaded inside its root (made or reused here).
    root13="${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/trixie"
    bash "$here/modern_root.sh" "$root13" >&2
    d13=(--debian13-root "$root13")
  fi
  "$py" "$repo/scripts/realworld_corpus.py" --cache "$cache" "${d13[@]}" \
    --manifest "$repo/tests/loaders/realworld/manifest.json"
  echo "=== Debian 12: the real-world corpus" >&2
  "$py" "$matrix" --jobs "$jobs" --root "$cache/files" "$cache/files" \
    --out "$repo/tests/loaders/realworld/debian12.jsonl"
fi
if [[ $trixie -eq 1 ]]; then
  echo "=== Debian 13: tests/fixtures" >&2
  bash "$here/loader_matrix_trixie.sh" --files-root "$repo/tests/fixtures" \
    --out "$exp/trixie/fixtures.jsonl" -- --jobs "$jobs" --paths "$repo/tests/fixtures"
  if [[ $realworld -eq 1 ]]; then
    echo "=== Debian 13: the real-world corpus" >&2
    bash "$here/loader_matrix_trixie.sh" --files-root "$cache/files" \
      --out "$repo/tests/loaders/realworld/trixie.jsonl" -- --jobs "$jobs" --paths "$cache/files"
  fi
fi
echo "loader_expectations: done" >&2
