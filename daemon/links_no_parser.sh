#!/usr/bin/env bash
# The daemon never parses untrusted bytes itself (docs/sandbox.md): no parser may be linked into it.
# Bazel enforces this with visibility (//:parser_users); this is the CMake build's check, on the
# linked binary: none of the parsers' entry points may be in ckptscand. The CLI is the control:
# it links them (for --no-sandbox), so the same symbols must be found there, or the check is void.
#   links_no_parser.sh CKPTSCAND CKPTSCAN
set -uo pipefail
parsers='ckptscan::(pickle::Vm::|zip::Archive::|torch::Detect|pipeline::ExtractFacts)'
in_cli=$(nm -C "$2" | grep -cE "$parsers")
if [[ $in_cli -eq 0 ]]; then
  echo "FAIL: the control found no parser symbol in $2: the pattern is stale"; exit 1
fi
found=$(nm -C "$1" | grep -E "$parsers" | head -5)
if [[ -n "$found" ]]; then
  echo "FAIL: ckptscand links a parser:"; echo "$found"; exit 1
fi
echo "ok   ckptscand links no parser ($in_cli parser symbols in the CLI, none in the daemon)"
