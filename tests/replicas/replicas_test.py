#!/usr/bin/python3
"""Many replicas on loopback: three ckptscand behind one round_robin gRPC channel, one killed.

    replicas_test.py --ckptscand PATH --fixtures DIR [--proto-dir DIR] [--stubs-dir DIR]
                     [--client-dir DIR] [--calls N] [--threads N] [--time-cap S]
                     [--without-retry-policy]

Issue 11, "Tests": three daemons on 127.0.0.1 (TLS, a CA and a server certificate made here with
openssl(1), each daemon with a state directory of its own; the third one small:
--max-running 1 --max-queued 1), one client channel with the address list
`ipv4:127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3` and a service config: round_robin, and a
retryPolicy on ckptscan.v1.Scanner for UNAVAILABLE and RESOURCE_EXHAUSTED. The client loop does
no retrying of its own: every retry is gRPC's, from the service config.

A bounded run (--calls ScanPath calls from --threads threads, under --time-cap seconds) over a
benign torch checkpoint and a malicious pickle copied into the daemons' shared root. Proves:
every call returns OK with the right verdict (SAFE / DANGEROUS); every replica served calls
(its "job" log lines); when one replica is SIGKILLed midway, while it runs a job, no scan is
lost and the others carry on (their health ports still say SERVING, the dead one's is gone);
the small replica answered RESOURCE_EXHAUSTED (a job line with code 8) yet no call failed;
SIGTERM stops the survivors with exit 0. Each call carries a traceparent of its own, so the
daemons' logs tell, per call, where each attempt ended.

Exits 77 (the test's SKIP_RETURN_CODE) with the reason when Debian's python3-grpcio or
python3-protobuf, or openssl(1), is missing.
"""

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from daemon_harness import (add_client_args, check, child_pids, client_package,  # noqa: E402
                            finish, log_events, require_grpc, short_tmpdir)

require_grpc("the replicas test")
import grpc  # noqa: E402
if not shutil.which("openssl"):
    print("SKIPPED: openssl(1) is needed to make the test certificates")
    sys.exit(77)
_stubs = None  # clients/python/ckptscan_client/_stubs.py, imported in main()

SCANNER = "ckptscan.v1.Scanner"
RETRY_POLICY = {
    "maxAttempts": 5,
    "initialBackoff": "0.05s",
    "maxBackoff": "0.5s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
}
SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [{"name": [{"service": SCANNER}], "retryPolicy": RETRY_POLICY}],
}

def make_pki(pki):
    """A CA and a server certificate for localhost and 127.0.0.1, as daemon/daemon_test.sh."""
    os.makedirs(pki)

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-days", "2", "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(pki, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem")
    return {n: os.path.join(pki, n) for n in ("ca.pem", "server.pem", "server.key")}


class Daemon:
    """A ckptscand on 127.0.0.1:0 (TLS) with a plaintext health port, its state in DIR; the
    ports are read back from its "listening" log line."""

    def __init__(self, binary, name, directory, *flags):
        self.name = name
        os.makedirs(directory)
        self.log_path = os.path.join(directory, "log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "--no-socket", "--tcp", "127.0.0.1:0", "--health-tcp", "127.0.0.1:0",
                 "--state-dir", os.path.join(directory, "state"), *flags],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ready = [e for e in self.events() if e.get("event") == "listening"]
            if ready:
                self.tcp_port, self.health_port = ready[0]["tcp_port"], ready[0]["health_port"]
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise AssertionError("ckptscand %s did not start: %s" % (
            name, open(self.log_path, "rb").read().decode(errors="replace")))

    def events(self):
        return log_events(self.log_path)

    def jobs(self):
        return [e for e in self.events() if e.get("event") == "job"]

    def workers(self):
        """Pids of its children (the jailed workers of the jobs it runs)."""
        return child_pids(self.proc.pid)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def health(port, timeout=5):
    """grpc.health.v1.Health/Check on a plaintext port, service "" (encoded by hand: the empty
    request; the reply's field 1, 1 = SERVING). Returns "SERVING", "NOT_SERVING" or the gRPC
    error code's name."""
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        check_rpc = ch.unary_unary("/grpc.health.v1.Health/Check")
        try:
            reply = check_rpc(b"", timeout=timeout)
        except grpc.RpcError as e:
            return e.code().name
    return "SERVING" if reply == b"\x08\x01" else "NOT_SERVING(%r)" % reply


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptscand", required=True)
    parser.add_argument("--fixtures", required=True)
    add_client_args(parser)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--time-cap", type=float, default=60.0,
                        help="seconds the calls may take in all; past it no call is started")
    parser.add_argument("--without-retry-policy", action="store_true",
                        help="diagnostic: no retryPolicy in the service config (calls then fail: "
                        "this shows what the policy does)")
    args = parser.parse_args()
    if args.without_retry_policy:
        del SERVICE_CONFIG["methodConfig"]
    global _stubs
    tmp = short_tmpdir("ckptscan-replicas-")
    _stubs = client_package(args, tmp)._stubs  # the same stubs as the Python client
    daemons = []
    try:
        run(args, tmp, daemons)
    finally:
        for d in daemons:
            d.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


def run(args, tmp, daemons):
    pb = _stubs.load()
    pki = make_pki(os.path.join(tmp, "pki"))
    root = os.path.join(tmp, "root")
    os.makedirs(root)
    fixtures = os.path.abspath(args.fixtures)
    expected = {}  # path beneath the root -> verdict
    for src, verdict in (("torch/train_checkpoint.pt", pb.report_pb2.VERDICT_SAFE),
                         ("pickles/malicious/inst_os_system.pkl",
                          pb.report_pb2.VERDICT_DANGEROUS)):
        dst = os.path.join(root, os.path.basename(src))
        shutil.copy(os.path.join(fixtures, src), dst)
        expected[dst] = verdict
    paths = sorted(expected)

    # Every job line is checked below, and the hub is one caller making ~60 calls a second:
    # above the per-caller log rate a daemon keeps by default (--log-lines-per-second 10, burst
    # 100), which would count the rest as suppressed instead of writing them.
    tls = ["--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"], "--root", root,
           "--log-lines-per-second", "10000", "--log-burst", "10000"]
    started = time.monotonic()
    # The hub is one caller without a client certificate (the "anonymous" bucket): on the small
    # replica it may take both places (by default one caller holds half, rounded up, and one of
    # two places is the operator's reserve: none is reserved here).
    for name, extra in (("r1", ["--max-running", "2"]), ("r2", ["--max-running", "2"]),
                        ("small", ["--max-running", "1", "--max-queued", "1",
                                   "--max-jobs-per-caller", "2", "--reserved-job-places", "0"])):
        daemons.append(Daemon(args.ckptscand, name, os.path.join(tmp, name), *tls, *extra))
    print("replicas: %s (startup %.1f s)" % (", ".join(
        "%s tcp %d health %d" % (d.name, d.tcp_port, d.health_port) for d in daemons),
        time.monotonic() - started), flush=True)
    for d in daemons:
        check(health(d.health_port) == "SERVING", "%s health SERVING at start" % d.name)
    victim = daemons[1]  # r2: a full-size replica; the small one stays to answer RESOURCE_EXHAUSTED

    target = "ipv4:" + ",".join("127.0.0.1:%d" % d.tcp_port for d in daemons)
    with open(pki["ca.pem"], "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    channel = grpc.secure_channel(target, creds, options=[
        ("grpc.ssl_target_name_override", "localhost"),
        ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
        ("grpc.enable_retries", 1),
    ])
    print("channel: %s\nservice config: %s" % (target, json.dumps(SERVICE_CONFIG)), flush=True)
    stub = pb.scanner_pb2_grpc.ScannerStub(channel)

    # --- the bounded run; one replica SIGKILLed midway while it runs a job -------------------
    lock = threading.Lock()
    next_call = [0]
    results = {}  # call index -> (trace id, path, "OK" or the error, verdict, start, end)
    deadline = time.monotonic() + args.time_cap
    kill_at = args.calls // 2
    killed = threading.Event()

    def worker():
        while True:
            with lock:
                i = next_call[0]
                if i >= args.calls or time.monotonic() > deadline:
                    return
                next_call[0] += 1
            path = paths[i % len(paths)]
            trace = uuid.uuid4().hex
            t0 = time.monotonic()
            try:
                report = stub.ScanPath(
                    pb.scanner_pb2.ScanPathRequest(path=path),
                    timeout=max(1.0, min(30.0, deadline - t0 + 5)),
                    metadata=[("traceparent", "00-%s-%s-01" % (trace, uuid.uuid4().hex[:16]))],
                    wait_for_ready=False)
                outcome, verdict = "OK", report.verdict
                if len(report.files) != 1 or report.files[0].path != path:
                    outcome = "OK but the report is for %r" % [f.path for f in report.files]
            except grpc.RpcError as e:
                outcome, verdict = "%s: %s" % (e.code().name, e.details()), None
            with lock:
                results[i] = (trace, path, outcome, verdict, t0, time.monotonic())

    run_start = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.threads)]
    for t in threads:
        t.start()
    # Midway: wait for the victim to run a job (a worker child), then SIGKILL it.
    in_flight_at_kill = 0
    kill_time = None
    while time.monotonic() < deadline and any(t.is_alive() for t in threads):
        with lock:
            done = len(results)
        if done >= kill_at:
            running = victim.workers()
            if running:
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait()
                kill_time = time.monotonic()
                in_flight_at_kill = len(running)
                killed.set()
                print("killed %s (SIGKILL) after %d calls, %.1f s in, while it ran %d job(s)"
                      % (victim.name, done, kill_time - run_start, in_flight_at_kill), flush=True)
                break
        time.sleep(0.002)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 35)
    elapsed = time.monotonic() - run_start
    channel.close()

    # --- what the client saw -----------------------------------------------------------------
    check(killed.is_set(), "a replica was SIGKILLed midway while it ran a job")
    check(not any(t.is_alive() for t in threads), "every client thread finished")
    check(len(results) == args.calls, "the run was not cut by the time cap: %d of %d calls made "
          "in %.1f s (cap %.0f s)" % (len(results), args.calls, elapsed, args.time_cap))
    bad = {i: r for i, r in results.items() if r[2] != "OK" or r[3] != expected[r[1]]}
    if bad:
        print("failed calls by code: %s" % dict(collections.Counter(
            r[2].split(":")[0] for r in bad.values())))
    check(not bad, "every call OK with the right verdict (%d SAFE, %d DANGEROUS expected)" % (
        sum(1 for r in results.values() if expected[r[1]] == pb.report_pb2.VERDICT_SAFE),
        sum(1 for r in results.values() if expected[r[1]] == pb.report_pb2.VERDICT_DANGEROUS)),
        "; ".join("call %d %s: %s verdict %s" % (i, os.path.basename(r[1]), r[2], r[3])
                  for i, r in sorted(bad.items())[:10]))

    # --- what the daemons saw ----------------------------------------------------------------
    # The survivors keep serving; the victim's health port is gone.
    survivors = [d for d in daemons if d is not victim]
    for d in survivors:
        check(health(d.health_port) == "SERVING", "%s health SERVING after the kill" % d.name)
    check(health(victim.health_port, timeout=2) == "UNAVAILABLE",
          "%s (killed) no longer answers health" % victim.name)
    # The killed daemon's workers die with it (PR_SET_PDEATHSIG in sandbox/worker/jail.cc).
    check(not victim.workers(), "no worker of the killed replica left")

    survivor_codes = {}
    for d in survivors:
        d.proc.send_signal(signal.SIGTERM)
    for d in survivors:
        try:
            survivor_codes[d.name] = d.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            survivor_codes[d.name] = "still running 40 s after SIGTERM"
        check(survivor_codes[d.name] == 0, "%s exits 0 on SIGTERM" % d.name,
              "exit %s" % survivor_codes[d.name])

    # Per replica: job lines, by code; attempts per trace id.
    by_trace = collections.defaultdict(list)  # trace id -> [(replica, code)]
    print("\n%-6s %6s %6s %8s %8s %s" % ("replica", "jobs", "OK", "RES_EX", "other", "notes"))
    counts = {}
    for d in daemons:
        jobs = [j for j in d.jobs() if j.get("rpc") == "ScanPath"]
        codes = collections.Counter(j.get("code") for j in jobs)
        for j in jobs:
            by_trace[j.get("trace_id", "")].append((d.name, j.get("code")))
        counts[d.name] = codes
        note = "SIGKILLed midway" if d is victim else "exit %s" % survivor_codes.get(d.name)
        print("%-7s %6d %6d %8d %8d %s" % (d.name, len(jobs), codes[0], codes[8],
                                          len(jobs) - codes[0] - codes[8], note))
    print("total calls %d in %.1f s (%d threads); %d job(s) in flight on %s when it was killed"
          % (len(results), elapsed, args.threads, in_flight_at_kill, victim.name))
    for d in daemons:
        check(counts[d.name][0] > 0, "%s served calls (%d OK job lines)" % (d.name,
                                                                          counts[d.name][0]))
    small = daemons[2]
    check(counts[small.name][8] > 0,
          "the small replica answered RESOURCE_EXHAUSTED (%d job lines with code 8), yet no call "
          "failed" % counts[small.name][8])
    others = sum(n for d in daemons for code, n in counts[d.name].items() if code not in (0, 8))
    check(others == 0, "no job line with a code other than OK or RESOURCE_EXHAUSTED",
          "%d others" % others)
    # Every call's trace id: one OK job line (a call in flight on the killed replica has no line
    # there; its retry elsewhere has). Calls that needed more than one attempt, by the logs.
    traces = {r[0]: i for i, r in results.items()}
    missing = [t for t in traces if not any(code == 0 for _, code in by_trace.get(t, []))]
    check(not missing, "every call has an OK job line under its trace id at some replica",
          "%d without" % len(missing))
    retried = sum(1 for t in traces if len(by_trace.get(t, [])) > 1)
    attempts = collections.Counter(len(by_trace.get(t, [])) for t in traces)
    # Calls that ended after the kill but were not logged by the victim: among them, those the
    # victim was running or queueing when it died, retried elsewhere with no trace in its log.
    print("calls with more than one logged attempt (RESOURCE_EXHAUSTED, then OK): %d; logged "
          "attempts per call: %s (attempts that died with the killed replica or were refused "
          "by its closed port leave no line)" % (retried, dict(sorted(attempts.items()))))
    if kill_time is not None:
        spanning = [i for i, r in results.items() if r[4] < kill_time < r[5]]
        print("calls in flight (client side) at the kill: %d, %d of them OK" % (
            len(spanning), sum(1 for i in spanning if i not in bad)))


if __name__ == "__main__":
    main()
