#!/usr/bin/env bash
# The pre-commit hook (.pre-commit-hooks.yaml at the repository root): scans the staged files
# pre-commit passes. ckptscan must be installed (on PATH, or CKPTSCAN_BIN); extra arguments
# from the hook's `args` (e.g. --fail-on dangerous) come before the files.
set -uo pipefail
bin="${CKPTSCAN_BIN:-$(command -v ckptscan || true)}"
if [[ -z "$bin" || ! -x "$bin" ]]; then
  echo "ckptscan: not installed (build it: scripts/setup.sh; cmake; ninja ckptscan ckptscan-worker; put build/clients on PATH or set CKPTSCAN_BIN)" >&2
  exit 2
fi
exec "$bin" scan "$@"
