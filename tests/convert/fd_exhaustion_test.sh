#!/usr/bin/env bash
# Descriptor exhaustion: with RLIMIT_NOFILE from 4 to 16, `scan` and `convert` either succeed
# or fail with exit 2 naming the cause — never a crash, never a SAFE verdict without a scan,
# never a partial output.
#   tests/convert/fd_exhaustion_test.sh path/to/ckptscan path/to/fixtures
set -uo pipefail
bin="$(realpath "${1:?usage: fd_exhaustion_test.sh path/to/ckptscan path/to/fixtures}")"
fixtures="$(realpath "${2:?fixtures folder}")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../clients/test_lib.sh"
enter_tmp

seq="$fixtures/torch/sequential.pt"
evil="$fixtures/pickles/malicious/reduce_posix_system.pkl"
mkdir out
for n in 4 5 6 7 8 10 12 16; do
  for cmd in "scan $seq" "scan $evil" "convert $seq -o out/s.safetensors"; do
    name="ulimit -n $n: ckptscan ${cmd/$fixtures\//}"
    bash -c "ulimit -n $n && exec \"$bin\" $cmd" >out.txt 2>err.txt
    rc=$?
    if [[ $rc -ge 128 ]]; then fail "$name" "killed by signal $((rc - 128))"; continue; fi
    case "$cmd" in
      "scan $evil") want_ok=1 ;;   # DANGEROUS when it could scan
      *) want_ok=0 ;;
    esac
    if [[ $rc -eq $want_ok ]]; then
      pass "$name (ran)"
    elif [[ $rc -eq 2 ]] && grep -q "Too many open files" out.txt err.txt; then
      if [[ "$cmd" == convert* && -n "$(ls -A out)" ]]; then fail "$name" "left: $(ls -A out)"
      else pass "$name (refused: too many open files)"; fi
    else
      fail "$name" "exit $rc; $(head -c 300 out.txt) $(head -c 300 err.txt)"
    fi
    rm -f out/*
  done
done
finish
