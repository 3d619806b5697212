#!/usr/bin/env bash
# End-to-end: a real ckptscand on a real socket, started here, driven by the real CLI.
#   daemon_test.sh CKPTSCAN CKPTSCAND FIXTURES
# Proves: scan and convert by path and by upload give the local CLI's reports and outputs on
# the fixture corpus; path escapes are refused; Admin needs an admin; mTLS refuses clients
# without a certificate; a killed worker, a client gone mid-upload, an upload over the cap, a
# bad rules reload and a full queue each get the right answer while the daemon keeps serving
# and leaks no descriptor or spool file; SIGTERM lets running jobs finish and exits 0.
set -uo pipefail
bin="$(realpath "$1")"
daemon_bin="$(realpath "$2")"
fixtures="$(realpath "$3")"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../clients/test_lib.sh"
enter_tmp
nobody=""
trap 'kill_daemons; rm -rf "$tmp" ${nobody:+"$nobody"}' EXIT

pids=()
kill_daemons() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
}

# start_daemon NAME ARGS...: starts ckptscand with a socket and state of its own, waits until
# it serves, sets $sock (unix:PATH) and $dpid.
start_daemon() {
  local name="$1"
  shift
  mkdir -p "$tmp/$name"
  "$daemon_bin" --socket "$tmp/$name/s.sock" --state-dir "$tmp/$name/state" "$@" \
    2>"$tmp/$name/log" &
  dpid=$!
  pids+=("$dpid")
  sock="unix:$tmp/$name/s.sock"
  for _ in $(seq 100); do
    grep -q '"event":"listening"' "$tmp/$name/log" 2>/dev/null && return 0
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.05
  done
  echo "ckptscand $name did not start:"; cat "$tmp/$name/log"
  return 1
}
fd_count() { ls "/proc/$1/fd" | wc -l; }
# Acting as another uid (65534) needs root and setpriv, and a uid the kernel can map (not so in
# every sandbox, e.g. Bazel's linux-sandbox user namespace).
can_be_nobody=false
if command -v setpriv >/dev/null && [[ $(id -u) -eq 0 ]] &&
   setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
  can_be_nobody=true
fi
# What uid 65534 runs and reads is copied where it can read it (tests/lib/other_uid.py): the
# checkout and the build tree may sit in a private home directory (/root/src).
if $can_be_nobody; then
  nobody=$(/usr/bin/python3 "$here/../tests/lib/other_uid.py" --uid 65534 --prefix ckpt-nobody- \
             "$bin" "$daemon_bin" "$(dirname "$bin")/ckptscan-worker" "$fixtures/torch/tied.pt") ||
    exit 1
  chmod 0755 "$tmp"  # its daemons' sockets
  nobody_bin="$nobody/$(basename "$bin")"
  nobody_daemon="$nobody/$(basename "$daemon_bin")"
  nobody_tied="$nobody/tied.pt"
fi

# wait_for_worker PID: the pid of a jailed job's process under the daemon, once one runs.
wait_for_worker() {
  for _ in $(seq 200); do
    local w
    w=$(job_worker "$1")
    [[ -n "$w" ]] && { echo "$w"; return 0; }
    sleep 0.02
  done
  return 1
}

# A pickle that keeps a worker busy for a second or two (None memoized 4 million times: the
# memo is real work, a stream of None is not), and a sparse file whose SHA-256 keeps a job
# busy as long (no disk, no memory).
python3 -c "import sys; sys.stdout.buffer.write(b'\x80\x04N' + b'\x94' * 4000000 + b'.')" >slow.pkl
mkdir -p "$tmp/big"  # the small daemon's root: apart from every daemon's state and socket
truncate -s 3G "$tmp/big/long.bin"
# The corpus both modes scan: every torch fixture and a sample of every malicious kind.
corpus=("$fixtures/torch" "$fixtures/pickles" "$fixtures/zip")

root="$tmp/root"
mkdir -p "$root/models" "$tmp/outside"
cp "$fixtures/torch/train_checkpoint.pt" "$fixtures/torch/tied.pt" "$root/models/"
cp "$fixtures/torch/tied.pt" "$tmp/outside/secret.pt"
ln -s "$tmp/outside/secret.pt" "$root/models/link-out.pt"
ln -s "$tmp/outside" "$root/models/dir-out"
chmod 0755 "$tmp" "$root" "$root/models"

metrics_port=$((20000 + RANDOM % 20000))
start_daemon main --root "$root" --root "$fixtures" --max-running 2 --socket-mode 0666 \
  --metrics-port "$metrics_port" || exit 1
main_pid=$dpid
main_sock=$sock

# --- the same reports as the local CLI -----------------------------------------------------
"$bin" scan -f json "${corpus[@]}" >local.json 2>/dev/null
local_rc=$?
run "scan by upload: exit code of the local CLI" "$local_rc" \
  "$bin" scan -f json --server "$main_sock" "${corpus[@]}"
cp out.txt upload.json
if cmp -s local.json upload.json; then
  pass "scan by upload: the same JSON report as the local CLI ($(grep -c '"path"' local.json) files)"
else
  fail "scan by upload report" "$(diff local.json upload.json | head -20)"
fi
run "scan by path: exit code of the local CLI" "$local_rc" \
  "$bin" scan -f json --server "$main_sock" --by-path "${corpus[@]}"
if cmp -s local.json out.txt; then
  pass "scan by path: the same JSON report as the local CLI"
else
  fail "scan by path report" "$(diff local.json out.txt | head -20)"
fi
run "health" 0 "$bin" health --server "$main_sock" && contains out.txt "SERVING" &&
  pass "ckptscan health: SERVING (exit 0)"
run "text report by upload" 0 "$bin" scan --server "$main_sock" "$fixtures/torch/tied.pt" &&
  contains out.txt "tied.pt: SAFE" && pass "text report by upload says SAFE"
run "a dangerous upload exits 1" 1 "$bin" scan --server "$main_sock" \
  "$fixtures/pickles/malicious/inst_os_system.pkl" && pass "a dangerous upload exits 1"

# --- convert: the same bytes as the local CLI, signed by the daemon's key ------------------
"$bin" convert "$fixtures/torch/train_checkpoint.pt" -o local.safetensors >/dev/null 2>&1
run "convert by upload" 0 "$bin" convert --server "$main_sock" \
  "$fixtures/torch/train_checkpoint.pt" -o up.safetensors
if cmp -s local.safetensors up.safetensors; then
  pass "convert by upload: byte for byte the local conversion"
else
  fail "convert by upload" "differs from the local conversion"
fi
run "admin public-key" 0 "$bin" admin public-key --server "$main_sock" && cp out.txt daemon.pub
run "the upload's signature verifies with the daemon's public key" 0 \
  "$bin" verify up.safetensors --pubkey daemon.pub && pass "upload conversion signed by the daemon"
run "convert by path" 0 "$bin" convert --server "$main_sock" --by-path \
  "$root/models/train_checkpoint.pt" -o "$root/models/out.safetensors"
if cmp -s local.safetensors "$root/models/out.safetensors"; then
  pass "convert by path: byte for byte the local conversion, written beneath the root"
else
  fail "convert by path" "differs from the local conversion"
fi
run "by-path output signed" 0 "$bin" verify "$root/models/out.safetensors" --pubkey daemon.pub &&
  pass "by-path conversion signed by the daemon (out.safetensors.sig)"
run "convert by path refuses to overwrite" 2 "$bin" convert --server "$main_sock" --by-path \
  "$root/models/train_checkpoint.pt" -o "$root/models/out.safetensors" &&
  contains err.txt "exists" && pass "convert by path does not overwrite without --force"
run "a dangerous upload is not converted" 1 "$bin" convert --server "$main_sock" \
  "$fixtures/pickles/malicious/inst_os_system.pkl" -o bad.safetensors &&
  [[ ! -e bad.safetensors ]] && pass "a dangerous upload is not converted, nothing written"

# --- path confinement ----------------------------------------------------------------------
for p in "$root/models/../../outside/secret.pt" "$tmp/outside/secret.pt" \
         "$root/models/link-out.pt" "$root/models/dir-out/secret.pt" "/etc/passwd"; do
  run "escape $p" 2 "$bin" scan --server "$main_sock" --by-path "$p" &&
    contains out.txt "PERMISSION_DENIED" && pass "refused with PERMISSION_DENIED: ${p#$tmp/}"
done
run "convert output outside the roots" 2 "$bin" convert --server "$main_sock" --by-path \
  "$root/models/tied.pt" -o "$tmp/outside/x.safetensors" &&
  [[ ! -e "$tmp/outside/x.safetensors" ]] && contains out.txt "PERMISSION_DENIED" &&
  pass "convert output outside the roots refused, nothing written"
run "convert output through a symlink out" 2 "$bin" convert --server "$main_sock" --by-path \
  "$root/models/tied.pt" -o "$root/models/dir-out/x.safetensors" &&
  [[ ! -e "$tmp/outside/x.safetensors" ]] && pass "convert output through a symlink out refused"

# --- Admin needs an admin ------------------------------------------------------------------
run "admin status as root" 0 "$bin" admin status --server "$main_sock" &&
  contains out.txt "running (max 2)" && pass "admin status for an admin uid"
if $can_be_nobody; then
  run "admin as nobody" 2 setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$nobody_bin" admin status --server "$main_sock" &&
    contains err.txt "PERMISSION_DENIED" && contains err.txt "uid:65534" &&
    pass "admin status refused for uid 65534 (PERMISSION_DENIED)"
  grep -q '"event":"admin","rpc":"Status","caller":"uid:65534","code":7' "$tmp/main/log" &&
    pass "the refused admin call is logged (event admin, caller uid:65534, code 7)" ||
    fail "admin log" "$(grep '"event":"admin"' "$tmp/main/log" | tail -3)"
  run "reload as nobody" 2 setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$nobody_bin" admin reload-rules --server "$main_sock" && pass "reload-rules refused for uid 65534"
  run "scan as nobody" 0 setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$nobody_bin" scan --server "$main_sock" "$nobody_tied" && pass "Scanner open to non-admins"
else
  echo "skip admin-as-another-uid cases: needs root, setpriv and a mappable uid 65534 (not here)"
fi

# --- faults: the daemon answers each and keeps serving, leaking nothing --------------------
fds_before=$(fd_count "$main_pid")
"$bin" scan --server "$main_sock" slow.pkl >killed.txt 2>&1 &
client=$!
worker=$(wait_for_worker "$main_pid") && kill -9 "$worker"
wait "$client"
rc=$?
if [[ $rc -eq 2 ]] && grep -q "SIGKILL" killed.txt; then
  pass "a worker killed mid-job: the file is ERROR (exit 2), not SAFE"
else
  fail "worker killed mid-job" "rc=$rc $(head -c 400 killed.txt)"
fi

# A client killed mid-upload (a large upload, cut after the daemon has started spooling).
head -c 300000000 /dev/zero >big.bin
"$bin" scan --server "$main_sock" big.bin >/dev/null 2>&1 &
client=$!
sleep 0.3
{ kill -9 "$client"; wait "$client"; } 2>/dev/null

run "still serving after the faults" 0 "$bin" scan --server "$main_sock" "$fixtures/torch/tied.pt" &&
  pass "the daemon still serves after a killed worker and a vanished client"
sleep 0.5
fds_after=$(fd_count "$main_pid")
if [[ $fds_after -le $fds_before ]]; then
  pass "no descriptor leaked ($fds_before before, $fds_after after)"
else
  fail "descriptor leak" "$fds_before before, $fds_after after: $(ls -l /proc/$main_pid/fd | tail -5)"
fi
left=$(find "$tmp/main/state/spool" -mindepth 1 | wc -l)
[[ $left -eq 0 ]] && pass "no spool file left" || fail "spool" "$left entries left"
run "status counts the failure" 0 "$bin" admin status --server "$main_sock" &&
  contains out.txt "sandbox 1" && pass "status counts the killed worker (worker failures: sandbox 1)"
if run "status as JSON" 0 "$bin" admin status --server "$main_sock" -f json; then
  /usr/bin/python3 -c 'import json, sys
s = json.load(open("out.txt"))
done = {d["verdict"]: d["count"] for d in s["jobs_done"]}
fails = {f["kind"]: f["count"] for f in s["worker_failures"]}
ints = [s[k] for k in ("uptime_seconds", "jobs_refused", "max_running")] + list(done.values())
assert all(type(n) is int for n in ints), ints
assert done.get("DANGEROUS", 0) >= 1 and fails.get("sandbox") == 1, (done, fails)
assert all(not v.startswith("VERDICT_") for v in done), done' 2>err.txt &&
    pass "status JSON: verdicts spelled as in reports (DANGEROUS), counts as JSON numbers" ||
    fail "status JSON" "$(tail -1 err.txt): $(head -c 300 out.txt)"
fi

# A job line names the rules that fired, so that logs can be searched and alerted on by rule.
if grep '"event":"job"' "$tmp/main/log" | grep '"verdict":"DANGEROUS"' |
     grep -qE '"rules":"[a-z_]+\.[a-z_.]+(,[a-z_]+\.[a-z_.]+)*"'; then
  pass "a DANGEROUS job's log line lists its rule ids"
else
  fail "job line rules" "$(grep '"event":"job"' "$tmp/main/log" | grep DANGEROUS | head -2)"
fi

# --- metrics: the Prometheus text, linted by promtool, from the port and from Admin ----------
run "admin metrics" 0 "$bin" admin metrics --server "$main_sock" && cp out.txt admin_metrics.txt
/usr/bin/python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode())' \
  "$metrics_port" >port_metrics.txt
for m in admin_metrics.txt port_metrics.txt; do
  if grep -q 'ckptscand_worker_exits_total{reason="signaled"} 1' "$m" &&
     grep -qE 'ckptscand_requests_total\{code="OK",rpc="ScanUpload"\} [1-9]' "$m" &&
     grep -qE 'ckptscand_jobs_total\{verdict="DANGEROUS"\} [1-9]' "$m" &&
     grep -q 'ckptscand_phase_duration_seconds_count{phase="parse"}' "$m" &&
     grep -qE 'ckptscand_build_info\{version="[0-9.]+"\} 1' "$m" &&
     grep -qE 'ckptscand_rules_info\{version="[^"]+"\} 1' "$m" &&
     grep -q 'ckptscand_rules_reloads_total{result="failed"} 0' "$m"; then
    pass "metrics ($m): the killed worker, OK uploads by code name, the dangerous files, phase times, build and rules info are counted"
  else
    fail "metrics $m" "$(grep -E 'worker_exits|jobs_total' "$m" | head -12)"
  fi
  if command -v promtool >/dev/null; then
    promtool check metrics <"$m" >lint.txt 2>&1 && pass "promtool check metrics accepts $m" ||
      fail "promtool $m" "$(head -c 400 lint.txt)"
  else
    echo "skip promtool lint of $m: promtool (Debian package prometheus) is not installed"
  fi
done
if $can_be_nobody; then
  run "metrics as nobody" 2 setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$nobody_bin" admin metrics --server "$main_sock" && pass "admin metrics refused for a non-admin uid"
else
  echo "skip metrics-as-another-uid: needs root, setpriv and a mappable uid 65534 (not here)"
fi

# --- an upload over the cap, a bad reload, a full queue -------------------------------------
cp "$here/../rules/default_rules.textproto" rules.textproto
start_daemon small --max-upload-bytes 1M --max-running 1 --max-queued 0 \
  --rules "$tmp/rules.textproto" --root "$tmp/big" --health-tcp 127.0.0.1:0 || exit 1
health_addr="plain:127.0.0.1:$(grep -o '"health_port":[0-9]*' "$tmp/small/log" | cut -d: -f2)"
run "plaintext health port" 0 "$bin" health --server "$health_addr" &&
  contains out.txt "SERVING" && pass "the plaintext health port answers SERVING"
run "plain: is for health only" 64 "$bin" scan --server "$health_addr" "$fixtures/torch/tied.pt" &&
  pass "plain: addresses are refused for scans (usage)"
small_pid=$dpid
small_sock=$sock
head -c 2000000 /dev/zero >two_mb.bin
run "upload over the cap" 2 "$bin" scan --server "$small_sock" two_mb.bin &&
  contains out.txt "RESOURCE_EXHAUSTED" && pass "an upload over the cap: RESOURCE_EXHAUSTED"
version_before=$("$bin" admin status --server "$small_sock" -f json | grep rules_version)
echo 'this is { not a rules file' >rules.textproto
run "malformed rules reload" 2 "$bin" admin reload-rules --server "$small_sock" &&
  contains err.txt "FAILED_PRECONDITION" && pass "a malformed rules file is refused"
version_after=$("$bin" admin status --server "$small_sock" -f json | grep rules_version)
[[ "$version_before" == "$version_after" ]] && pass "the old rules stay in force" ||
  fail "rules after a bad reload" "$version_before -> $version_after"
sed 's/^version: .*/version: "test.sighup"/' "$here/../rules/default_rules.textproto" >rules.textproto
kill -HUP "$small_pid"
for _ in $(seq 50); do grep -q '"rules_version":"test.sighup"' "$tmp/small/log" && break; sleep 0.05; done
run "status after SIGHUP" 0 "$bin" admin status --server "$small_sock" &&
  contains out.txt "rules test.sighup" && pass "SIGHUP reloads the rules file"
"$bin" scan --digest sha256 --server "$small_sock" --by-path "$tmp/big/long.bin" >slow1.txt 2>&1 &
client=$!
sleep 0.5
run "queue full" 2 "$bin" scan --server "$small_sock" "$fixtures/torch/tied.pt" &&
  contains out.txt "RESOURCE_EXHAUSTED" && pass "queue full: RESOURCE_EXHAUSTED at once"
wait "$client"

# --- a local rules overlay: trusted names, reload, and a refused overlay ---------------------
# A user class as pickle writes a dataclass: NEWOBJ train.config.RunConfig() then BUILD {}.
/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"\x80\x04\x8c\x0ctrain.config\x8c\tRunConfig\x93)\x81}b.")' >user_class.pkl
printf 'allow { module: "train.config" name: "Other" note: "site" }\n' >overlay.textproto
start_daemon ovl --rules-overlay "$tmp/overlay.textproto" || exit 1
ovl_sock=$sock
run "user class without the overlay's name" 1 "$bin" scan --server "$ovl_sock" user_class.pkl &&
  contains out.txt "--allow train.config.RunConfig" &&
  pass "an unlisted class is SUSPICIOUS and the finding names the --allow that trusts it"
printf 'allow { module: "train.config" name: "RunConfig" note: "site"\n  calls { op: CALL_NEWOBJ min_args: 0 max_args: 0 } build_target: true }\n' >overlay.textproto
run "reload a changed overlay" 0 "$bin" admin reload-rules --server "$ovl_sock" &&
  pass "reload-rules re-reads the overlay"
run "user class allowed by the overlay" 0 "$bin" scan -f json --server "$ovl_sock" user_class.pkl &&
  grep -q '"rules_version": "[^"]*+overlay-sha256-[0-9a-f]\{64\}"' out.txt &&
  pass "the overlay's name is SAFE and the report names the overlay's digest"
ovl_version=$("$bin" admin status --server "$ovl_sock" -f json | grep rules_version)
printf 'allow { module: "posix" name: "system" note: "no" }\n' >overlay.textproto
run "overlay allowing a dangerous name" 2 "$bin" admin reload-rules --server "$ovl_sock" &&
  contains err.txt "an overlay cannot allow this name" &&
  pass "an overlay that allows a DANGEROUS name is refused at reload"
[[ "$ovl_version" == "$("$bin" admin status --server "$ovl_sock" -f json | grep rules_version)" ]] &&
  pass "the old rules and overlay stay in force" || fail "rules after a refused overlay" "changed"
mkdir -p "$tmp/ovl2"
if "$daemon_bin" --socket "$tmp/ovl2/s.sock" --state-dir "$tmp/ovl2/state" \
     --allow posix.system 2>"$tmp/ovl2/log"; then
  fail "daemon --allow posix.system" "started"
else
  grep -q "an overlay cannot allow this name" "$tmp/ovl2/log" &&
    pass "ckptscand --allow of a DANGEROUS name does not start" ||
    fail "daemon --allow posix.system" "$(head -c 400 "$tmp/ovl2/log")"
fi

# --- --scan-digest: the operator decides whether reports carry the digest ------------------
start_daemon digest --root "$fixtures" --scan-digest always || exit 1
digest_sock=$sock
want=$(sha256sum "$fixtures/torch/tied.pt" | cut -d' ' -f1)
run "scan-digest always" 0 "$bin" scan -f json --server "$digest_sock" "$fixtures/torch/tied.pt" &&
  contains out.txt "\"sha256\": \"$want\"" &&
  pass "--scan-digest always: the digest although the CLI did not ask for one"
kill "$dpid" 2>/dev/null
start_daemon nodigest --root "$fixtures" --scan-digest never || exit 1
run "scan-digest never" 0 "$bin" scan -f json --digest sha256 --server "$sock" \
  "$fixtures/torch/tied.pt" && contains out.txt '"sha256": ""' &&
  pass "--scan-digest never: no digest although the CLI asked for one"
kill "$dpid" 2>/dev/null

# --- SIGTERM drains ------------------------------------------------------------------------
"$bin" scan -f json --digest sha256 --server "$small_sock" --by-path "$tmp/big/long.bin" >drained.txt 2>&1 &
client=$!
sleep 0.5
kill -TERM "$small_pid"
sleep 0.2
run "health while draining" 1 "$bin" health --server "$health_addr" &&
  contains out.txt "NOT_SERVING" && pass "health says NOT_SERVING while draining (exit 1)"
run "new job while draining" 2 "$bin" scan --server "$small_sock" "$fixtures/torch/tied.pt" &&
  grep -qE "UNAVAILABLE" out.txt && pass "a new job during the drain is refused (UNAVAILABLE)"
wait "$client"
rc=$?
if [[ $rc -eq 2 ]] && grep -q '"code": "unsupported"' drained.txt &&
   grep -qE '"sha256": "[0-9a-f]{64}"' drained.txt; then
  pass "the job in flight at SIGTERM finished with its report (3 GB hashed, verdict ERROR)"
else
  fail "in-flight job at SIGTERM" "rc=$rc $(head -c 300 drained.txt)"
fi
wait "$small_pid"
rc=$?
[[ $rc -eq 0 ]] && pass "ckptscand exited 0 after the drain" || fail "drain exit" "rc=$rc"
[[ ! -e "$tmp/small/s.sock" ]] && pass "the socket was removed"


# --- TCP: TLS only; mTLS refuses clients without a certificate -----------------------------
mkdir -p pki && (
  cd pki || exit 1
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=test-ca \
    -keyout ca.key -out ca.pem 2>/dev/null
  issue() {  # issue NAME CN [SAN]
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
      -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf 'subjectAltName=%s\n' "${3:-DNS:$2}" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  }
  issue server localhost "DNS:localhost,IP:127.0.0.1"
  issue hub hub-client
  # The admin's name in every SAN type but under another common name: a typed identity
  # (cn:ops-admin) matches none of them.
  issue sneaky hub-user "DNS:ops-admin,URI:ops-admin,email:ops-admin"
  # Two common names, the admin's first: which one counts is not defined, so neither does.
  issue twocn "ops-admin/CN=hub-user" "DNS:twocn"
  issue ops ops-admin
)
start_daemon tls --no-socket --tcp 127.0.0.1:0 --tls-cert pki/server.pem --tls-key pki/server.key \
  --tls-client-ca pki/ca.pem --require-client-cert --admin-identity cn:ops-admin || exit 1
port=$(grep -o '"tcp_port":[0-9]*' "$tmp/tls/log" | cut -d: -f2)
tls_addr="localhost:$port"
run "mTLS scan with a client certificate" 0 "$bin" scan --server "$tls_addr" --tls-ca pki/ca.pem \
  --tls-cert pki/hub.pem --tls-key pki/hub.key "$fixtures/torch/tied.pt" &&
  contains out.txt "tied.pt: SAFE" && pass "mTLS: a client with a certificate is served"
run "mTLS without a client certificate" 2 "$bin" scan --server "$tls_addr" --tls-ca pki/ca.pem \
  "$fixtures/torch/tied.pt" && contains out.txt "UNAVAILABLE" &&
  ! contains out.txt "SAFE (" && pass "mTLS: a client without a certificate is refused"
run "mTLS admin with a non-admin certificate" 2 "$bin" admin status --server "$tls_addr" \
  --tls-ca pki/ca.pem --tls-cert pki/hub.pem --tls-key pki/hub.key &&
  contains err.txt "PERMISSION_DENIED" && contains err.txt "cert:dns:hub-client" &&
  pass "mTLS: Admin refused for a certificate not in --admin-identity"
run "mTLS admin with the admin's name as SANs" 2 "$bin" admin status --server "$tls_addr" \
  --tls-ca pki/ca.pem --tls-cert pki/sneaky.pem --tls-key pki/sneaky.key &&
  contains err.txt "PERMISSION_DENIED" && contains err.txt "cert:uri:ops-admin" &&
  pass "mTLS: Admin refused for SANs that spell the admin's common name (identities are typed)"
run "mTLS admin with two common names" 2 "$bin" admin status --server "$tls_addr" \
  --tls-ca pki/ca.pem --tls-cert pki/twocn.pem --tls-key pki/twocn.key &&
  contains err.txt "PERMISSION_DENIED" && contains err.txt "cert:dns:twocn" &&
  pass "mTLS: Admin refused for a subject with two common names, the admin's among them"
run "mTLS admin with the admin certificate" 0 "$bin" admin status --server "$tls_addr" \
  --tls-ca pki/ca.pem --tls-cert pki/ops.pem --tls-key pki/ops.key &&
  pass "mTLS: Admin served for the --admin-identity certificate"
run "TCP without TLS is refused at start" 1 "$daemon_bin" --no-socket --tcp 127.0.0.1:0 \
  --state-dir "$tmp/plain" && contains err.txt "TLS only" && pass "TCP without TLS: refused at start"

# --- no flags at all: a per-user socket, state and key, as on a laptop ----------------------
if $can_be_nobody; then
  mkdir -p "$tmp/user/home" "$tmp/user/run"
  chown -R 65534:65534 "$tmp/user"
  chmod 0755 "$tmp/user"
  as_user=(env -i PATH=/usr/bin:/bin HOME="$tmp/user/home" XDG_RUNTIME_DIR="$tmp/user/run"
           setpriv --reuid=65534 --regid=65534 --clear-groups)
  "${as_user[@]}" "$nobody_daemon" 2>"$tmp/user/log" &
  upid=$!
  pids+=("$upid")
  for _ in $(seq 100); do grep -q '"event":"listening"' "$tmp/user/log" && break; sleep 0.05; done
  run "no-flags daemon, --server local" 0 "${as_user[@]}" "$nobody_bin" scan --server local \
    "$nobody_tied" && contains out.txt "tied.pt: SAFE" &&
    [[ -S "$tmp/user/run/ckptscan/ckptscand.sock" ]] &&
    [[ -f "$tmp/user/home/.local/state/ckptscan/signing-key.pem" ]] &&
    pass "ckptscand with no flags serves 'ckptscan scan --server local' (per-user socket, key made)"
  kill -TERM "$upid"
  wait "$upid" && pass "the no-flags daemon drains and exits 0"
else
  echo "skip the no-flags case: needs root, setpriv and a mappable uid 65534 to run as a user with a private HOME"
fi

# --- a second instance cannot take the socket over -----------------------------------------
"$daemon_bin" --socket "$tmp/main/s.sock" --state-dir "$tmp/second" 2>second.txt
rc=$?
[[ $rc -ne 0 ]] && grep -q "another ckptscand" second.txt &&
  pass "a second instance refuses the socket a running one holds" ||
  fail "second instance" "rc=$rc $(head -c 300 second.txt)"
run "the first still serves" 0 "$bin" scan --server "$main_sock" "$fixtures/torch/tied.pt" &&
  pass "the first instance still serves"

finish
