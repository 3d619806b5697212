#!/usr/bin/env bash
# Fault tests (issue 9): what the jailed CLI answers when the world changes under a scan.
#   faults_test.sh CKPTSCAN
# Proves: a file that shrinks while it is scanned is never SAFE (the hash notices, or the worker
# sees the short file); a worker killed at random points of its run always leaves an ERROR
# report and exit 2, never a verdict, never a crash of ckptscan.
set -uo pipefail
bin="$(realpath "$1")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../clients/test_lib.sh"
enter_tmp

# A pickle the worker needs a second or so for (None memoized 4 million times: memo entries
# are real work, a stream of None is not), padded with a sparse tail below so that hashing it
# takes a while too.
make_slow() {
  /usr/bin/python3 -c "import sys; sys.stdout.buffer.write(b'\x80\x04N' + b'\x94' * 4000000 + b'.')" >"$1"
}

# --- a file that shrinks under the scan -----------------------------------------------------
for delay in 0.05 0.2 0.5; do
  make_slow shrink.pkl
  truncate -s 1G shrink.pkl
  (sleep "$delay"; truncate -s 1000 shrink.pkl) &
  truncator=$!
  "$bin" scan shrink.pkl >out.txt 2>err.txt
  rc=$?
  wait "$truncator"
  if [[ $rc -eq 2 ]] && ! grep -q ': SAFE' out.txt; then
    pass "shrunk to 1000 bytes after ${delay}s: ERROR, exit 2 ($(grep -o 'error [a-z]*: [^(]*' out.txt | head -1))"
  else
    fail "shrink after ${delay}s" "rc=$rc $(head -c 300 out.txt) $(head -c 200 err.txt)"
  fi
done

# --- a worker killed at random points -------------------------------------------------------
make_slow slow.pkl
killed=0
for i in $(seq 8); do
  "$bin" scan slow.pkl >out.txt 2>err.txt &
  cli=$!
  worker=""
  for _ in $(seq 500); do
    worker=$(pgrep -P "$cli" -f ckptscan-worker | head -1)
    [[ -n "$worker" ]] && break
    sleep 0.002
  done
  # Somewhere in the first ~0.4 s of its run: before, during or after the jail is set up.
  sleep "0.0$((RANDOM % 40))"
  [[ -n "$worker" ]] && kill -9 "$worker" 2>/dev/null && killed=$((killed + 1))
  wait "$cli"
  rc=$?
  if [[ $rc -eq 2 ]] && grep -q 'ERROR' out.txt && ! grep -q ': SAFE' out.txt; then
    :
  elif [[ $rc -eq 0 ]] && grep -q ': SAFE' out.txt && [[ -z "$worker" ]]; then
    :  # the worker finished before we saw it: nothing was killed
  else
    fail "worker killed (run $i)" "rc=$rc $(head -c 300 out.txt) $(head -c 200 err.txt)"
  fi
done
[[ $killed -ge 4 ]] && pass "$killed workers killed at random points: each file ERROR, exit 2, ckptscan intact" ||
  fail "worker kills" "only $killed of 8 workers were caught running"

finish
