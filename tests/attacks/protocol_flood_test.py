#!/usr/bin/python3
"""ckptscand under protocol-level floods from unprivileged local uids: the daemon keeps answering
root, its memory, descriptors and threads stay bounded, and they return to their baseline after.

Usage: protocol_flood_test.py --ckptscand PATH [--proto-dir DIR] [--stubs-dir DIR]
                              [--client-dir DIR] [--only reset,watch,tcp,logs]

R. Rapid reset (the CVE-2023-44487 shape). As uid 65511, one unix connection at a time sends
   HEADERS + RST_STREAM pairs for Admin.Status as fast as it can for 8 s, reconnecting whenever
   the daemon closes it. gRPC 1.51 (Debian 12) has no limit on resets: a daemon that handed the
   connection to it grew from 30 MB to 4.2 GB and kept it, and root's Admin.Status timed out.
W. Idle health watches. As uid 65512, 10 plaintext connections to --health-tcp each open 5,000
   grpc.health.v1.Health/Watch streams and hold them (the report's 50,000: +900 MB, no cap).
T. Descriptors before TLS. The daemon runs under RLIMIT_NOFILE 1024 (soft = hard) with --tcp
   and --require-client-cert; as uid 65513, 1,100 TCP connections are opened and never send a
   byte, reopened as the daemon closes them. gRPC counts none of them: the daemon reached
   1024/1024 and root's unix Admin and ScanPath timed out.
L. Log flood. As uid 65514, eight threads call Admin.Status (refused: not an admin) as fast as
   they can for 5 s; each refusal was a log line (8,500 lines/s).

During each flood root calls Admin.Status every 0.5 s (a new connection each time, as `ckptscan
admin status` does) and, in T, ScanPath: each must be answered within 2 s (LATENCY_BOUND). The
daemon's peak VmRSS must stay under its baseline + MEMORY_BOUND_MIB (docs/daemon.md, "The
daemon's own resources"); afterwards its VmRSS must return under baseline + SETTLE_MIB, and its
descriptors and threads to their baseline (+ a small margin), within SETTLE_SECONDS. Every
scenario prints VmRSS, VmHWM, descriptors and threads before, at the peak and after, and root's
latencies (the numbers docs/security.md reports).

The attackers are forks of this process that setuid to their uid and then run only code already
loaded (raw sockets and frames from tests/lib/h2_raw.py), except L's, which runs Debian's
python3-grpcio in a fresh interpreter as that uid (`python3 -c`: nothing from the checkout).
Needs root (skipped with the reason otherwise), python3-grpcio and python3-protobuf (exit 77).
Against a daemon without the defences (flags it lacks are left out) the checks fail: that is the
demonstration that the attacks work there.
"""
import argparse
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from attack_lib import become, cannot_switch_to  # noqa: E402
from daemon_harness import (MeasuredDaemon, add_client_args, check, client_package,  # noqa: E402
                            finish, log_events, require_grpc, short_tmpdir)
import h2_raw  # noqa: E402

NONE_PICKLE = b"\x80\x02N."
LATENCY_BOUND = 2.0       # seconds: root's calls during a flood
MEMORY_BOUND_MIB = 384    # the daemon's peak VmRSS over its baseline during a flood
SETTLE_MIB = 64           # VmRSS over its baseline once the flood is over
SETTLE_SECONDS = 20


class Sampler:
    """Samples the daemon's VmRSS every 0.1 s on a thread of its own; `peak` is the highest."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.peak = 0
        self.peak_fds = 0
        self.peak_threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                s = self.daemon.stats()
            except (OSError, ValueError):
                return
            self.peak = max(self.peak, s["VmRSS"])
            self.peak_fds = max(self.peak_fds, s["fds"])
            self.peak_threads = max(self.peak_threads, s["Threads"])
            time.sleep(0.1)

    def stop(self):
        self._stop.set()
        self._thread.join()


class RootProber:
    """Root's calls during a flood, every 0.5 s on a thread of its own, each on a new connection
    with a 5 s deadline: Admin.Status, and ScanPath of `path` when given. Records (seconds or
    None when it failed, what) per call."""

    def __init__(self, client, address, path=None):
        self.results = []
        self._client = client
        self._address = address
        self._path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _one(self, what, call):
        t0 = time.monotonic()
        try:
            c = self._client.ScanClient(self._address, timeout=5)
            try:
                call(c)
            finally:
                c.close()
            self.results.append((time.monotonic() - t0, what))
        except self._client.ScanClientError as e:
            self.results.append((None, "%s: %s %s" % (what, e.code, str(e)[:120])))

    def _run(self):
        while not self._stop.is_set():
            self._one("Admin.Status", lambda c: c.status())
            if self._path:
                self._one("ScanPath", lambda c: c.scan_path(self._path))
            self._stop.wait(0.5)

    def stop(self):
        self._stop.set()
        self._thread.join()

    def report(self, scenario):
        times = sorted(t for t, _ in self.results if t is not None)
        failed = [w for t, w in self.results if t is None]
        if times:
            print("%s: root's calls: %d answered, %d failed; latency median %.3f s, max %.3f s"
                  % (scenario, len(times), len(failed), times[len(times) // 2], times[-1]))
        for w in failed[:3]:
            print("  failed: %s" % w)
        return times, failed


def check_root_answered(prober, scenario):
    times, failed = prober.report(scenario)
    check(times and not failed and times[-1] <= LATENCY_BOUND,
          "%s: every call of root's is answered within %.0f s during the flood"
          % (scenario, LATENCY_BOUND),
          "%d answered (max %.2f s), %d failed" % (len(times), times[-1] if times else -1,
                                                  len(failed)))


def check_bounded_and_back(d, before, sampler, scenario, fd_margin=8, thread_margin=8):
    """The peak under the documented bound; VmRSS, descriptors and threads back afterwards."""
    print("%s: peak during the flood: VmRSS %d MiB, %d descriptors, %d threads" % (
        scenario, sampler.peak, sampler.peak_fds, sampler.peak_threads), flush=True)
    check(sampler.peak <= before["VmRSS"] + MEMORY_BOUND_MIB,
          "%s: the daemon's VmRSS stays under its baseline + %d MiB" % (scenario, MEMORY_BOUND_MIB),
          "peak %d MiB, baseline %d MiB" % (sampler.peak, before["VmRSS"]))

    def settled():
        s = d.stats()
        return (s["VmRSS"] <= before["VmRSS"] + SETTLE_MIB and
                s["fds"] <= before["fds"] + fd_margin and
                s["Threads"] <= before["Threads"] + thread_margin)
    t0 = time.monotonic()
    while not settled() and time.monotonic() - t0 < SETTLE_SECONDS:
        time.sleep(0.25)
    after = d.show("%s: after" % scenario)
    check(after["VmRSS"] <= before["VmRSS"] + SETTLE_MIB,
          "%s: afterwards VmRSS returns under its baseline + %d MiB" % (scenario, SETTLE_MIB),
          "%d MiB, baseline %d MiB" % (after["VmRSS"], before["VmRSS"]))
    check(after["fds"] <= before["fds"] + fd_margin and
          after["Threads"] <= before["Threads"] + thread_margin,
          "%s: afterwards descriptors and threads return to their baseline" % scenario,
          "%d descriptors (%d before), %d threads (%d before)" % (
              after["fds"], before["fds"], after["Threads"], before["Threads"]))


def fork_as(uid, body, *args, nofile=None):
    """Runs body(*args, report) in a fork as `uid`; `report` is a pipe's write end whose text
    the parent reads with collect(). Returns (pid, read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            become(uid)
            body(*args, w)
            code = 0
        except BaseException as e:  # pylint: disable=broad-except
            os.write(w, ("attacker failed: %r" % e).encode())
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def collect(pid, r):
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        return f.read().decode(errors="replace")


def drain(s):
    """Reads and drops what the server sent, without blocking."""
    try:
        while s.recv(1 << 16, socket.MSG_DONTWAIT):
            pass
    except (BlockingIOError, InterruptedError):
        pass


# --- R: rapid reset ------------------------------------------------------------------------------

def reset_attacker(path, seconds, report):
    """Sends HEADERS + RST_STREAM pairs as fast as the connection takes them (non-blocking, so a
    daemon that stops reading only slows it down), reconnecting when the daemon closes it."""
    block = h2_raw.grpc_headers("/ckptscan.v1.Admin/Status")
    sent = connections = closed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.setblocking(False)
            connections += 1
            out = h2_raw.PREFACE + h2_raw.settings() + h2_raw.settings(ack=True)
            stream = 1
            while time.monotonic() < end:
                if len(out) < (1 << 16):
                    out += b"".join(h2_raw.headers(sid, block) + h2_raw.rst_stream(sid)
                                    for sid in range(stream, stream + 4000, 2))
                    stream += 4000
                readable, writable, _ = select.select([s], [s], [], 0.1)
                if readable:
                    if s.recv(1 << 16) == b"":
                        raise ConnectionResetError("closed by the daemon")
                    drain(s)
                if writable:
                    n = s.send(out[:1 << 20])
                    out = out[n:]
            sent += stream // 2 - len(out) // 149
        except OSError:
            closed += 1
            sent += max(0, stream // 2 - len(out) // 149)
            time.sleep(0.05)
        finally:
            s.close()
    os.write(report, b"about %d pairs sent over %d connections, %d closed by the daemon"
             % (sent, connections, closed))


def rapid_reset(args, client, tmp, daemons):
    print("\n== R: HEADERS + RST_STREAM pairs from uid 65511 on the unix socket ==", flush=True)
    d = MeasuredDaemon(args.ckptscand, os.path.join(tmp, "r"), [("--socket-mode", "0666")])
    daemons.append(d)
    os.chmod(os.path.dirname(d.socket), 0o755)
    warm(client, d)
    before = d.show("R: before")
    sampler = Sampler(d)
    prober = RootProber(client, "unix:" + d.socket)
    pid, r = fork_as(65511, reset_attacker, d.socket, 8.0)
    print("R: attacker: %s" % collect(pid, r), flush=True)
    prober.stop()
    sampler.stop()
    check_root_answered(prober, "R")
    check_bounded_and_back(d, before, sampler, "R")
    check(any(e.get("reason") == "stream_resets" for e in d.events("connection_closed")),
          "R: the daemon closes the connection that resets streams past its budget, and logs it "
          "(connection_closed, reason stream_resets)")


# --- W: idle health watches ----------------------------------------------------------------------

def watch_attacker(port, connections, streams, seconds, report):
    """Opens `streams` Watch streams on each of `connections` connections, writing as fast as the
    daemon reads (non-blocking), then holds them for `seconds`, reading what the daemon sends."""
    block = h2_raw.grpc_headers("/grpc.health.v1.Health/Watch")
    body = h2_raw.grpc_message(b"")
    conns = {}
    for _ in range(connections):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        conns[s] = [h2_raw.PREFACE + h2_raw.settings() + h2_raw.settings(ack=True), 1]
    opened = closed = 0
    give_up = time.monotonic() + 3 * seconds
    while time.monotonic() < give_up and any(
            out or sid < 2 * streams for out, sid in conns.values()):
        readable, writable, _ = select.select(list(conns), list(conns), [], 0.1)
        for s in readable:
            try:
                if s.recv(1 << 16) == b"":
                    raise ConnectionResetError()
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed += 1
                del conns[s]
        for s in writable:
            if s not in conns:
                continue
            state = conns[s]
            if len(state[0]) < (1 << 16) and state[1] < 2 * streams:
                top = min(state[1] + 2000, 2 * streams)
                state[0] += b"".join(h2_raw.headers(sid, block) + h2_raw.data(sid, body)
                                     for sid in range(state[1], top, 2))
                opened += (top - state[1]) // 2
                state[1] = top
            try:
                n = s.send(state[0][:1 << 20])
                state[0] = state[0][n:]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed += 1
                del conns[s]
    end = time.monotonic() + seconds
    while time.monotonic() < end and conns:
        readable, _, _ = select.select(list(conns), [], [], 0.2)
        for s in readable:
            try:
                if s.recv(1 << 16) == b"":
                    raise ConnectionResetError()
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed += 1
                del conns[s]
    os.write(report, b"%d Watch streams sent on %d connections; %d closed by the daemon"
             % (opened, connections, closed))


def health_watches(args, client, tmp, daemons):
    print("\n== W: 50,000 idle health Watch streams on the plaintext health port ==", flush=True)
    d = MeasuredDaemon(args.ckptscand, os.path.join(tmp, "w"),
                       [("--health-tcp", "127.0.0.1:0"), ("--health-watch-seconds", "5")])
    daemons.append(d)
    port = [e for e in d.events("listening")][0]["health_port"]
    warm(client, d)
    before = d.show("W: before")
    sampler = Sampler(d)
    prober = RootProber(client, "unix:" + d.socket)
    pid, r = fork_as(65512, watch_attacker, port, 10, 5000, 10.0)
    said = collect(pid, r)
    print("W: attacker: %s" % said, flush=True)
    prober.stop()
    sampler.stop()
    check_root_answered(prober, "W")
    check_bounded_and_back(d, before, sampler, "W")
    # Either the Watch guard cancels the streams over --max-health-watches (logged), or gRPC
    # closes a connection that opens more than --max-streams-per-connection at once: no stream
    # stays open past the caps either way.
    closed_all = said.endswith("10 closed by the daemon")
    check(bool(d.events("stream_cancelled")) or closed_all,
          "W: Watch streams over the caps are cancelled and logged (stream_cancelled), or their "
          "connections closed by the daemon", said)


# --- T: idle TCP connections before TLS ----------------------------------------------------------

def make_pki(directory):
    """A CA, a server certificate for localhost and 127.0.0.1, signed by it."""
    os.makedirs(directory)

    def run(*cmd):
        subprocess.run(cmd, cwd=directory, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-days", "2", "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-copy_extensions", "copy", "-out", "server.pem")
    return directory


def tcp_attacker(port, count, seconds, report):
    conns, made, closed = [], 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        while len(conns) < count and time.monotonic() < end:
            s = socket.socket()
            s.settimeout(0.2)
            try:
                s.connect(("127.0.0.1", port))
                conns.append(s)
                made += 1
            except OSError:
                s.close()
                break
        alive = []
        for s in conns:
            try:
                s.settimeout(0)
                if s.recv(1) == b"":
                    raise ConnectionResetError()
                alive.append(s)
            except (BlockingIOError, InterruptedError):
                alive.append(s)
            except OSError:
                closed += 1
                s.close()
        conns = alive
        time.sleep(0.2)
    os.write(report, b"%d connections made, %d closed by the daemon, %d open at the end"
             % (made, closed, len(conns)))


def tcp_before_tls(args, client, tmp, daemons):
    print("\n== T: 1,100 idle TCP connections before TLS, RLIMIT_NOFILE 1024 ==", flush=True)
    pki = make_pki(os.path.join(tmp, "pki"))
    models = os.path.join(tmp, "models")
    os.makedirs(models)
    with open(os.path.join(models, "none.pkl"), "wb") as f:
        f.write(NONE_PICKLE)
    d = MeasuredDaemon(args.ckptscand, os.path.join(tmp, "t"),
                       [("--tcp", "127.0.0.1:0"), ("--tls-cert", os.path.join(pki, "server.pem")),
                        ("--tls-key", os.path.join(pki, "server.key")),
                        ("--tls-client-ca", os.path.join(pki, "ca.pem")),
                        ("--require-client-cert", None), ("--root", models)], nofile=1024)
    daemons.append(d)
    port = d.events("listening")[0]["tcp_port"]
    warm(client, d)
    before = d.show("T: before")
    sampler = Sampler(d)
    prober = RootProber(client, "unix:" + d.socket, os.path.join(models, "none.pkl"))
    pid, r = fork_as(65513, tcp_attacker, port, 1100, 20.0, nofile=4096)
    print("T: attacker: %s" % collect(pid, r), flush=True)
    prober.stop()
    sampler.stop()
    check_root_answered(prober, "T")
    check(sampler.peak_fds < 1024 - 64, "T: the daemon's descriptors stay well under its limit",
          "peak %d of 1024" % sampler.peak_fds)
    check_bounded_and_back(d, before, sampler, "T")


# --- L: log flood --------------------------------------------------------------------------------

LOG_FLOOD = r"""
import sys, threading, time, grpc
path, seconds = sys.argv[1], float(sys.argv[2])
calls = [0]
def run():
    ch = grpc.insecure_channel("unix:" + path)
    status = ch.unary_unary("/ckptscan.v1.Admin/Status", request_serializer=lambda m: m,
                            response_deserializer=lambda m: m)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            status(b"", timeout=5)
        except grpc.RpcError:
            pass
        calls[0] += 1
threads = [threading.Thread(target=run) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("%d refused calls" % calls[0])
"""


def log_flood(args, client, tmp, daemons):
    print("\n== L: refused calls from uid 65514 as fast as it can ==", flush=True)
    d = MeasuredDaemon(args.ckptscand, os.path.join(tmp, "l"), [("--socket-mode", "0666")])
    daemons.append(d)
    os.chmod(os.path.dirname(d.socket), 0o755)
    warm(client, d)
    before = d.show("L: before")
    sampler = Sampler(d)
    prober = RootProber(client, "unix:" + d.socket)
    seconds = 5.0
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", LOG_FLOOD, d.socket, str(seconds)],
                         capture_output=True, text=True, timeout=60, cwd="/",
                         preexec_fn=lambda: become(65514))
    took = time.monotonic() - t0
    print("L: attacker: %s %s" % (out.stdout.strip(), out.stderr.strip()[-300:]), flush=True)
    prober.stop()
    sampler.stop()
    time.sleep(1.5)  # the last suppression summary
    lines = [e for e in log_events(d.log_path) if "uid:65514" in str(e.get("caller", ""))]
    shown = [e for e in lines if e.get("event") != "log_suppressed"]
    suppressed = sum(e.get("suppressed", 0) for e in lines if e.get("event") == "log_suppressed")
    rate = len(lines) / took
    print("L: %d log lines name uid:65514 over %.1f s (%.0f a second); %d calls summarized as "
          "suppressed" % (len(lines), took, rate, suppressed), flush=True)
    check_root_answered(prober, "L")
    check(rate <= 50, "L: one caller's refused calls make at most 50 log lines a second",
          "%.0f lines a second" % rate)
    check(suppressed > 0 and len(shown) + suppressed >= 0.9 * int(out.stdout.split()[0] or 0),
          "L: a log_suppressed line says how many of that caller's lines were left out",
          "%d suppressed, %d shown" % (suppressed, len(shown)))
    check_bounded_and_back(d, before, sampler, "L")


def warm(client, d):
    c = client.ScanClient("unix:" + d.socket, timeout=30)
    c.scan_bytes("warm.pkl", NONE_PICKLE)
    c.status()
    c.close()
    time.sleep(0.5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptscand", required=True)
    add_client_args(parser)
    parser.add_argument("--only", help="scenarios to run, comma-separated (reset, watch, tcp, "
                        "logs; default: all)")
    args = parser.parse_args()
    require_grpc("protocol_flood_test")
    why = cannot_switch_to(65511)
    if why:
        print("SKIPPED: protocol_flood_test acts as other uids: %s" % why)
        sys.exit(77)
    tmp = short_tmpdir("ckptscan-flood-")
    os.chmod(tmp, 0o755)
    client = client_package(args, tmp)
    daemons = []
    try:
        for name, scenario in (("reset", rapid_reset), ("watch", health_watches),
                               ("tcp", tcp_before_tls), ("logs", log_flood)):
            if args.only is None or name in args.only.split(","):
                scenario(args, client, tmp, daemons)
                for d in daemons:
                    d.kill()
    finally:
        for d in daemons:
            d.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
