# Shared by the CLI's end-to-end test scripts (source it after setting `bin`).
# Each case names the scenario it proves; call `finish` last: it exits 1 if any case failed.

failures=0

# enter_tmp: a fresh temporary folder as the working directory (in $tmp), removed on exit.
enter_tmp() {
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  cd "$tmp" || exit 1
}
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

# run NAME EXPECTED_RC CMD...: runs CMD, keeps stdout in out.txt and stderr in err.txt.
run() {
  local name="$1" want="$2"
  shift 2
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [[ $rc -ge 128 ]]; then
    fail "$name" "killed by signal $((rc - 128)) (crash)"
    return 1
  fi
  if [[ $rc -ne $want ]]; then
    fail "$name" "exit $rc, want $want; stdout: $(head -c 600 out.txt); stderr: $(head -c 600 err.txt)"
    return 1
  fi
  return 0
}
contains() { grep -qF -- "$2" "$1"; }

finish() {
  if [[ $failures -ne 0 ]]; then
    echo "$failures case(s) failed"
    exit 1
  fi
  echo "all cases passed"
}

# job_worker PID: the pid of a jailed job's process under PID, if one runs: a child of its fork
# server (named ckptscan-job, a grandchild or deeper), or a worker spawned per job.
job_worker() {
  local p a
  for p in $(pgrep -x ckptscan-job); do
    a=$p
    while [[ -n "$a" && "$a" -gt 1 ]]; do
      a=$(ps -o ppid= -p "$a" | tr -d ' ')
      [[ "$a" == "$1" ]] && { echo "$p"; return 0; }
    done
  done
  pgrep -P "$1" -f 'ckptscan-worker --job' | head -1
}
