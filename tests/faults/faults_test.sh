#!/usr/bin/env bash
# Fault tests: what the jailed CLI answers when the world changes under a scan.
#   faults_test.sh CKPTSCAN
# Proves: a file that shrinks while it is scanned is never SAFE (the hash notices, or the worker
# sees the short file), nor is one rewritten in place at the same size (its mtime and ctime
# move); a worker killed at random points of its run always leaves an ERROR report and exit 2,
# never a verdict, never a crash of ckptscan.
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

# Waits (up to 20 s) until process PID holds FILE open, so a change made after it is a change
# under the scan, however loaded the machine is (a fixed sleep alone once let the write land
# before the scan opened the file, which then rightly read the new bytes as SAFE).
wait_open() {
  local pid="$1" file i
  file="$(realpath "$2")"
  for ((i = 0; i < 2000; i++)); do
    for fd in /proc/"$pid"/fd/*; do
      [[ "$(readlink "$fd" 2>/dev/null)" == "$file" ]] && return 0
    done
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
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

# --- a file rewritten in place, same size, under the scan -----------------------------------
# Neither the hash nor the worker can see this by length: the trusted side compares the file's
# size, inode, mtime and ctime before and after (sandbox/run.cc).
# (No sparse tail here: trailing bytes would make the file SUSPICIOUS, which outranks ERROR.)
for delay in 0.1 0.4; do
  make_slow rewrite.pkl
  # The byte written is the one already there: only the write itself can be noticed.
  "$bin" scan rewrite.pkl >out.txt 2>err.txt &
  scan=$!
  wait_open "$scan" rewrite.pkl || echo "note: the scan never held rewrite.pkl open"
  sleep "$delay"
  printf '\x94' | dd of=rewrite.pkl bs=1 seek=1000 conv=notrunc status=none
  wait "$scan"
  rc=$?
  if [[ $rc -eq 2 ]] && grep -q 'changed while it was being scanned' out.txt &&
     ! grep -q ': SAFE' out.txt; then
    pass "rewritten in place after ${delay}s: ERROR, exit 2 (the file changed while it was being scanned)"
  else
    fail "rewrite after ${delay}s" "rc=$rc $(head -c 300 out.txt) $(head -c 200 err.txt)"
  fi
done

# A conversion whose input is rewritten the same way is not published: no output, exit 2.
/usr/bin/python3 - <<'PY'
import struct, zipfile
def text(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b
# A torch archive of one 4-float tensor whose data.pkl first memoizes None 4 million times.
p = b"\x80\x02N" + b"\x94" * 4_000_000 + b"0ccollections\nOrderedDict\n)R("
p += (text("w") + b"ctorch._utils\n_rebuild_tensor_v2\n((" + text("storage") +
      b"ctorch\nFloatStorage\n" + text("0") + text("cpu") +
      b"K\x04tQK\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRu.")
# A fixed date: the local header's time and date are bytes the file's other readings (as a
# raw pickle) also see, and a 0x0a among them once changed that reading's verdict.
with zipfile.ZipFile("slow.pt", "w", zipfile.ZIP_STORED) as z:
    for name, data in (("archive/data.pkl", p), ("archive/data/0", b"\0" * 16),
                       ("archive/version", b"3\n")):
        z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
PY
"$bin" convert slow.pt -o untouched.safetensors >out.txt 2>err.txt
rc=$?
[[ $rc -eq 0 && -s untouched.safetensors ]] && pass "the slow archive converts when left alone" ||
  fail "slow archive convert" "rc=$rc $(head -c 300 out.txt) $(head -c 200 err.txt)"
"$bin" convert slow.pt -o changed.safetensors >out.txt 2>err.txt &
convert=$!
wait_open "$convert" slow.pt || echo "note: the conversion never held slow.pt open"
sleep 0.3
printf '\x94' | dd of=slow.pt bs=1 seek=2000 conv=notrunc status=none
wait "$convert"
rc=$?
leftovers=$(find . -maxdepth 1 -name 'changed.safetensors*' | wc -l)
if [[ $rc -eq 2 ]] && grep -q 'changed while it was being scanned' out.txt && ((leftovers == 0)); then
  pass "input rewritten during convert: ERROR, exit 2, no output published"
else
  fail "rewrite during convert" "rc=$rc leftovers=$leftovers $(head -c 300 out.txt) $(head -c 200 err.txt)"
fi


# --- a worker killed at random points -------------------------------------------------------
make_slow slow.pkl
killed=0
for i in $(seq 8); do
  "$bin" scan slow.pkl >out.txt 2>err.txt &
  cli=$!
  worker=""
  for _ in $(seq 500); do
    worker=$(job_worker "$cli")
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
