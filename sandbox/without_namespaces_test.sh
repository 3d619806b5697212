#!/usr/bin/env bash
# The jail holds without its namespace layer, as in a Kubernetes pod or a Docker container under
# the runtime's default seccomp profile (docs/operations.md, "The jail in a pod").
#   without_namespaces_test.sh WITHOUT_NAMESPACES JAIL_TEST CKPTSCAN CKPTSCAND FIXTURES
# Everything below runs under without_namespaces (unshare/setns EPERM, clone with CLONE_NEW*
# EPERM, clone3 ENOSYS), which every spawned worker inherits. Proves:
#   - the wrapper really forbids namespaces (util-linux unshare fails under it) and nothing else
#     a scan needs;
#   - the whole jail suite (jail_test: forbidden actions die of SIGSYS and are DANGEROUS,
#     rlimits, deadlines, bad frames, descriptors, die-with-parent) passes, and its real worker
#     reports "namespaces: none";
#   - the CLI: a malicious pickle is DANGEROUS (exit 1), a real training checkpoint SAFE (exit 0),
#     an over-limit worker ERROR (exit 2);
#   - ckptscand starts (its start-up job goes through the jail), logs jail layers with seccomp,
#     rlimits and no_new_privs but no namespace, and serves scans with the same verdicts.
set -uo pipefail
wrap="$(realpath "$1")"
jail_test="$(realpath "$2")"
bin="$(realpath "$3")"
daemon_bin="$(realpath "$4")"
fixtures="$(realpath "$5")"
tmp="$(mktemp -d)"
dpid=
trap '[[ -n "$dpid" ]] && kill -9 "$dpid" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# 0. The wrapper forbids namespaces and lets ordinary processes run.
"$wrap" /bin/true || fail "without_namespaces /bin/true exited $?"
if [[ -x /usr/bin/unshare ]]; then
  if "$wrap" /usr/bin/unshare --user --map-root-user /bin/true 2>"$tmp/unshare.err"; then
    fail "unshare --user succeeded under without_namespaces"
  elif grep -q "Operation not permitted" "$tmp/unshare.err"; then
    pass "unshare(2) is EPERM under without_namespaces"
  else
    fail "unshare failed, but not with EPERM: $(cat "$tmp/unshare.err")"
  fi
else
  echo "note: /usr/bin/unshare (util-linux) missing; the EPERM check relies on the layers below"
fi

# 1. The jail's own suite, every case.
if "$wrap" "$jail_test" --gtest_brief=1 >"$tmp/jail_test.out" 2>&1; then
  pass "jail_test passes without namespaces: $(grep -m1 'PASSED' "$tmp/jail_test.out")"
else
  cat "$tmp/jail_test.out"
  fail "jail_test failed without namespaces"
fi
layers_line=$(grep -m1 "jail layers here:" "$tmp/jail_test.out" || true)
echo "  $layers_line"
if [[ "$layers_line" == *"namespaces: none"* && "$layers_line" == *seccomp* ]]; then
  pass "the real worker reports seccomp and no namespace"
else
  fail "the real worker's layers should list seccomp and 'namespaces: none': '$layers_line'"
fi

# 2. The CLI, jailed (the default).
expect_scan() {  # expect_scan WANT_EXIT WANT_VERDICT FILE [FLAGS...]
  local want_exit="$1" want="$2" file="$3"
  shift 3
  "$wrap" "$bin" scan -f json "$@" "$file" >"$tmp/scan.json" 2>"$tmp/scan.err"
  local rc=$?
  local got
  got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' \
        "$tmp/scan.json" 2>/dev/null || echo "no-report")
  if [[ $rc -eq $want_exit && "$got" == "$want" ]]; then
    pass "ckptscan scan $(basename "$file") $* -> $got, exit $rc"
  else
    fail "ckptscan scan $file $*: want $want exit $want_exit, got $got exit $rc: $(cat "$tmp/scan.err")"
  fi
}
expect_scan 1 DANGEROUS "$fixtures/pickles/malicious/reduce_os_system.pkl"
expect_scan 1 DANGEROUS "$fixtures/pickles/malicious/inst_os_system.pkl"
expect_scan 0 SAFE "$fixtures/torch/train_checkpoint.pt"
expect_scan 0 SAFE "$fixtures/torch/legacy_sequential.pt"
# rlimits still bound the worker: with a tiny address space the real worker cannot even start
# its parse, and that is ERROR, never SAFE.
expect_scan 2 ERROR "$fixtures/torch/train_checkpoint.pt" --worker-memory 1M

# 3. The daemon: starts (its start-up job runs through the jail), says which layers hold.
mkdir -p "$tmp/d"
"$wrap" "$daemon_bin" --socket "$tmp/d/s.sock" --state-dir "$tmp/d/state" --max-running 1 \
  2>"$tmp/d/log" &
dpid=$!
started=0
for _ in $(seq 200); do
  grep -q '"event":"listening"' "$tmp/d/log" 2>/dev/null && { started=1; break; }
  kill -0 "$dpid" 2>/dev/null || break
  sleep 0.05
done
if [[ $started -eq 1 ]]; then
  jail=$(grep -m1 '"event":"listening"' "$tmp/d/log" |
         python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["jail"])')
  echo "  ckptscand jail: $jail"
  ns_part="${jail#*namespaces:}"
  if [[ "$jail" == *seccomp* && "$jail" == *rlimits* && "$jail" == *no_new_privs* &&
        "$jail" == *"namespaces: none"* ]] &&
     ! grep -Eq '\b(user|net|ipc|uts|mount|pid)\b' <<<"$ns_part"; then
    pass "ckptscand's listening line lists seccomp, rlimits, no_new_privs and no namespace"
  else
    fail "ckptscand's jail layers: want seccomp, rlimits, no_new_privs, 'namespaces: none'; got '$jail'"
  fi
  for pair in "1 DANGEROUS $fixtures/pickles/malicious/reduce_os_system.pkl" \
              "0 SAFE $fixtures/torch/train_checkpoint.pt"; do
    read -r want_exit want file <<<"$pair"
    "$bin" scan -f json --server "unix:$tmp/d/s.sock" "$file" >"$tmp/r.json" 2>"$tmp/r.err"
    rc=$?
    got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' \
          "$tmp/r.json" 2>/dev/null || echo "no-report")
    if [[ $rc -eq $want_exit && "$got" == "$want" ]]; then
      pass "ckptscand (no namespaces) scans $(basename "$file") -> $got"
    else
      fail "ckptscand scan of $file: want $want exit $want_exit, got $got exit $rc: $(cat "$tmp/r.err")"
    fi
  done
  kill -TERM "$dpid"
  wait "$dpid"
  rc=$?
  dpid=
  [[ $rc -eq 0 ]] && pass "ckptscand drains and exits 0 on SIGTERM" ||
    fail "ckptscand exited $rc on SIGTERM"
else
  fail "ckptscand did not start without namespaces:"
  cat "$tmp/d/log"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS: the jail holds without namespaces"
