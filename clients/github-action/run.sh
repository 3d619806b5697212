#!/usr/bin/env bash
# What the ckptscan GitHub Action runs (action.yml); usable on its own in any CI.
#
# Installs ckptscan from this repository (scripts/setup.sh, then a CMake/Ninja build of ckptscan
# and ckptscan-worker), scans, prints the report in the job log and writes SARIF for upload.
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
#   CKPTSCAN_SARIF     where to write SARIF (default: $RUNNER_TEMP or /tmp, ckptscan.sarif)
#   CKPTSCAN_SKIP_INSTALL=1 with CKPTSCAN_BIN=path/to/ckptscan: use that build, install nothing
#   CKPTSCAN_BUILD_DIR where to build (default: $RUNNER_TEMP/ckptscan-build)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
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
  build="${CKPTSCAN_BUILD_DIR:-$tmpdir/ckptscan-build}"
  echo "::group::Install ckptscan (scripts/setup.sh, cmake, ninja)"
  bash "$repo/scripts/setup.sh" || finish 2
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || finish 2
  ninja -C "$build" ckptscan ckptscan-worker || finish 2
  echo "::endgroup::"
  bin="$build/clients/ckptscan"
fi
[[ -x "$bin" ]] || { echo "ckptscan: $bin is missing or not executable" >&2; finish 2; }

args=(scan --format "$format" --fail-on "$fail_on" --sarif-output "$sarif")
[[ -z "$server" ]] || args+=(--server "$server")
[[ -z "$manifest" ]] || args+=(--manifest "$manifest")
args+=(--unknown "$unknown")
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
