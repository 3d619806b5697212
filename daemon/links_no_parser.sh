#!/usr/bin/env bash
# Neither surface parses untrusted bytes itself (docs/architecture.md): no parser may be linked
# into ckptscand or ckptscan. Bazel enforces this with visibility (//:worker_side); this is the
# check on the linked binaries of either build. The worker is the control: it links the parsers,
# so the same symbols must be found there, or the check is void.
#   links_no_parser.sh CKPTSCAND CKPTSCAN CKPTSCAN-WORKER
set -uo pipefail
parsers='ckptscan::(pickle::Vm::|zip::Archive::|torch::Detect|sandbox::ExtractFacts|sandbox::TraceListing|sandbox::EncodeFacts|sandbox::EnterJail)'
in_worker=$(nm -C "$3" 2>/dev/null | grep -cE "$parsers")
if [[ $in_worker -eq 0 ]]; then
  echo "FAIL: the control found no parser symbol in $3: the pattern is stale (or the binary is stripped)"
  exit 1
fi
status=0
for bin in "$1" "$2"; do
  if ! nm "$bin" >/dev/null 2>&1; then
    echo "FAIL: cannot read the symbols of $bin"; status=1; continue
  fi
  found=$(nm -C "$bin" | grep -E "$parsers" | head -5)
  if [[ -n "$found" ]]; then
    echo "FAIL: $bin links a parser:"; echo "$found"; status=1
  else
    echo "ok   $(basename "$bin") links no parser"
  fi
done
[[ $status -eq 0 ]] && echo "ok   ($in_worker parser symbols in the worker, the control)"
exit $status
