#!/usr/bin/env bash
# What the ckptscan GitHub Action runs (action.yml); usable on its own in any CI.
#
# Uses the ckptscan and ckptscan-worker binaries kept in CKPTSCAN_CACHE_DIR when they were built
# from exactly these sources (the binaries are statically linked: nothing to install), else
# installs and builds them from this repository (scripts/setup.sh, then CMake/Ninja, a few
# minutes) and keeps them there; then scans, prints the report in the job log and writes SARIF
# for upload. `run.sh --stamp` prints the sources' stamp (action.yml keys its cache on it).
# Exits with ckptscan's exit code (0 SAFE, 1 findings, 2 ERROR, 64 usage) and, under GitHub
# Actions, also writes it to $GITHUB_OUTPUT as exit-code (with sarif-file).
#
# Environment (all optional):
#   CKPTSCAN_PATHS     files or folders, separated by whitespace (default "." unless
#                      CKPTSCAN_MANIFEST is given)
#   CKPTSCAN_FAIL_ON   suspicious (default) or dangerous
#   CKPTSCAN_FORMAT    text (default), json, sarif or junit: the report in the log
#   CKPTSCAN_SERVER    a ckptscand address (ckptscan scan --server): the daemon scans the uploaded
#                      files; empty: the embedded sandbox
#   CKPTSCAN_MANIFEST  a manifest to scan and check digests against
#   CKPTSCAN_INCLUDE   gitignore-style patterns to scan only (scan --include), whitespace-separated
#   CKPTSCAN_EXCLUDE   gitignore-style patterns to leave out (scan --exclude), whitespace-separated
#   CKPTSCAN_UNKNOWN   error (default), warn or skip: a file in no format ckptscan verifies
#   CKPTSCAN_ALLOW     names to trust (scan --allow, one per name), whitespace-separated
#   CKPTSCAN_RULES_OVERLAY  a rules overlay file (scan --rules-overlay)
#   CKPTSCAN_ARGS      more scan arguments, whitespace-separated, before the paths
#   CKPTSCAN_SARIF     where to write SARIF (default: $RUNNER_TEMP or /tmp, ckptscan.sarif)
#   CKPTSCAN_SKIP_INSTALL=1 with CKPTSCAN_BIN=path/to/ckptscan: use that build, install nothing
#   CKPTSCAN_BUILD_DIR where to build (default: $RUNNER_TEMP/ckptscan-build)
#   CKPTSCAN_CACHE_DIR where built binaries are kept between runs, with their sources' stamp
#                      (default: $HOME/.cache/ckptscan-action)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

# The SHA-256 of every file the binaries are built from (tests, docs and build trees left out).
stamp() {
  (cd "$repo" && find . \( -path ./.git -o -path './build*' -o -path ./tests -o -path ./docs \
      -o -path ./bench -o -path './bazel-*' \) -prune -o -type f -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}
if [[ "${1:-}" == "--stamp" ]]; then
  stamp
  exit 0
fi
paths="${CKPTSCAN_PATHS:-}"
fail_on="${CKPTSCAN_FAIL_ON:-suspicious}"
format="${CKPTSCAN_FORMAT:-text}"
server="${CKPTSCAN_SERVER:-}"
manifest="${CKPTSCAN_MANIFEST:-}"
unknown="${CKPTSCAN_UNKNOWN:-error}"
tmpdir="${RUNNER_TEMP:-${TMPDIR:-/tmp}}"
sarif="${CKPTSCAN_SARIF:-$tmpdir/ckptscan.sarif}"

output() {  # output NAME VALUE: a step output under GitHub Actions
  if [[ -n "${GITHUB_OUTPUT:-}" ]]; then echo "$1=$2" >>"$GITHUB_OUTPUT"; fi
}
finish() {
  output exit-code "$1"
  exit "$1"
}

if [[ "${CKPTSCAN_SKIP_INSTALL:-0}" == 1 ]]; then
  bin="${CKPTSCAN_BIN:?CKPTSCAN_SKIP_INSTALL=1 needs CKPTSCAN_BIN=path/to/ckptscan}"
else
  cache="${CKPTSCAN_CACHE_DIR:-${HOME:-/root}/.cache/ckptscan-action}"
  want="$(stamp)"
  if [[ -x "$cache/ckptscan" && -x "$cache/ckptscan-worker" && "$(cat "$cache/stamp" 2>/dev/null)" == "$want" ]]; then
    echo "ckptscan: the binaries built from these sources (stamp ${want:0:12}) in $cache"
  else
    build="${CKPTSCAN_BUILD_DIR:-$tmpdir/ckptscan-build}"
    echo "::group::Install ckptscan (scripts/setup.sh, cmake, ninja)"
    bash "$repo/scripts/setup.sh" || finish 2
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || finish 2
    ninja -C "$build" ckptscan ckptscan-worker || finish 2
    echo "::endgroup::"
    mkdir -p "$cache" || finish 2
    cp "$build/clients/ckptscan" "$build/clients/ckptscan-worker" "$cache/" || finish 2
    echo "$want" >"$cache/stamp"
  fi
  bin="$cache/ckptscan"
fi
[[ -x "$bin" ]] || { echo "ckptscan: $bin is missing or not executable" >&2; finish 2; }

args=(scan --format "$format" --fail-on "$fail_on" --sarif-output "$sarif")
[[ -z "$server" ]] || args+=(--server "$server")
[[ -z "$manifest" ]] || args+=(--manifest "$manifest")
args+=(--unknown "$unknown")
[[ -z "${CKPTSCAN_RULES_OVERLAY:-}" ]] || args+=(--rules-overlay "$CKPTSCAN_RULES_OVERLAY")
words=()
read -r -d '' -a words <<<"${CKPTSCAN_ALLOW:-}"
for w in "${words[@]}"; do args+=(--allow "$w"); done
words=()
read -r -d '' -a words <<<"${CKPTSCAN_ARGS:-}"
args+=("${words[@]}")
# Patterns are separated by whitespace, like paths.
patterns=()
read -r -d '' -a patterns <<<"${CKPTSCAN_INCLUDE:-}"
for p in "${patterns[@]}"; do args+=(--include "$p"); done
patterns=()
read -r -d '' -a patterns <<<"${CKPTSCAN_EXCLUDE:-}"
for p in "${patterns[@]}"; do args+=(--exclude "$p"); done
[[ -n "$paths" || -n "$manifest" ]] || paths="."
# Split on whitespace on purpose: paths are separated by spaces or newlines.
path_list=()
read -r -d '' -a path_list <<<"$paths"

"$bin" "${args[@]}" -- "${path_list[@]}"
code=$?
[[ -f "$sarif" ]] && output sarif-file "$sarif"
finish "$code"
