#!/usr/bin/python3
"""ckptscand's own resources under three attacks (memory, descriptors, threads): each must leave
the daemon answering, and its memory, descriptors and threads bounded.

Usage: daemon_resources_test.py --ckptscand PATH [--proto-dir DIR] [--stubs-dir DIR]
                                [--client-dir DIR]
                                [--only memory|items|descriptors|reflection|lockout]

A. Memory. pickle.dumps(list(range(3_000_000))) is a 15 MB honest pickle whose facts (3,000,003
   graph values, a ~57 MB result frame) cost the daemon ~1.2 GB to decode and judge; two at once
   took a daemon to 2.4 GB and it kept 2.2 GB afterwards. With --facts-memory 1400M the two
   decode one after the other: both are SAFE, the daemon's peak RSS (VmHWM) stays under
   BOUND = --facts-memory + 2 x 64 MiB (two frames being read, --max-frame-bytes) + 160 MiB
   (the daemon's own baseline with its gRPC threads), and after them its RSS (VmRSS) is back
   under baseline + 256 MiB (the heap is trimmed). A daemon whose --facts-memory is below one
   job's estimate answers ERROR naming facts_memory, never SAFE.
A2. List items. A 47 MB honest pickle: a list of 23.4M references to one memoised int (BINGET +
   APPENDS in batches of 900,000; SAFE). Its frame is ~23 MB and holds 4 graph values, but 23.4M
   packed list items (1 wire byte each, ~15-25 decoded); a daemon that counted only values
   reserved ~24 MB for it and took ~300 MB a job (VmHWM 637 MiB at once), two at once past their --facts-memory 128M.
   Now the items are counted (16 to a value): the estimate (~610 MB) is over the budget, both
   jobs are ERROR naming facts_memory, and VmHWM stays under 128 + 2 x 64 + 160 MiB.
B. Descriptors. The daemon runs with RLIMIT_NOFILE 256 (soft = hard: systemd's 1024 scaled
   down) and --max-unix-connections 40 --first-byte-timeout 2 --max-connection-idle 3; 300
   connections that send nothing are opened (the 1,100 against 1,024 of the report, scaled).
   A real caller must still get a scan answer and Admin Status (at the cap a new connection
   displaces the oldest silent one); the daemon's descriptors stay under 40 + its baseline + 40;
   the silent connections are closed by the daemon within the first-byte timeout (+ 3 s), a connection that sent one byte and stopped within the idle
   timeout (+ 3 s), and the daemon's descriptors return to its baseline (+ 4).
C. Threads. A daemon with --reflection; 80 reflection streams (ServerReflectionInfo, a
   bidirectional stream) are opened and send nothing; the old thread pool (max_running +
   max_queued + 64 = 74 here) is smaller than that. Admin Status and a scan must still succeed
   within 15 s; once the idle streams are past --reflection-stream-seconds (4 s) a reflection
   client is answered; after the streams are gone the daemon's threads return to its baseline
   (+ 8).
D. Lockout (one uid holds every unix connection). --max-unix-connections 40
   --max-unix-connections-per-uid 10 --unix-connections-reserved 4 --first-byte-timeout 2
   --max-connection-idle 30. As uid 65501 (setuid in a fork) a process keeps 40 connections
   open that each sent ONE byte, reconnecting whenever the daemon closes one; as uid 65503 one
   keeps 40 that each sent the whole HTTP/2 preface and an empty SETTINGS frame (gRPC holds those
   until --max-connection-idle), reconnecting likewise. Then root's Admin Status and uid 65502's
   scan (an upload) must each be answered within 5 s, three times over 6 s; the one-byte
   connections are closed within --first-byte-timeout + 2 s; the refusals are logged
   (unix_connections refused_over_uid_cap). Skipped, with the reason, when not root.

Against a ckptscand without the new flags (today's main) each scenario runs with the flags it
knows, and the checks fail: that is the demonstration that the attacks work there.

Every scenario prints the daemon's VmRSS, VmHWM, descriptors and threads before and after.
Needs Debian's python3-grpcio and python3-protobuf; exits 77 with the reason without them.
"""
import argparse
import atexit
import os
import pickle
import resource
import select
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from attack_lib import ReadableCopy, as_uid, become, cannot_switch_to  # noqa: E402
from daemon_harness import (add_client_args, check, client_package, finish,  # noqa: E402
                            log_events, require_grpc, short_tmpdir)
from daemon_harness import MeasuredDaemon as Daemon  # noqa: E402

MIB = 1 << 20
NONE_PICKLE = b"\x80\x02N."  # pickle.dumps(None, 2): SAFE


def settle(predicate, seconds):
    """Polls `predicate` until it is true or `seconds` pass; returns its last value."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.1)


def verdict(client, report):
    return client.verdict_name(report.verdict)


def two_job_daemon(args, client, directory, daemons, budget):
    """A daemon with --max-running 2 and --facts-memory BUDGET MiB, and a client that has scanned
    one small file through it (so that its baseline is warm)."""
    d = Daemon(args.ckptscand, directory,
               [("--max-running", "2"), ("--facts-memory", "%dM" % budget),
                # The second job waits for the first one's budget within its own job timeout:
                # on a loaded machine (Bazel runs tests side by side) the default 60 s is short.
                ("--job-timeout", "300")])
    daemons.append(d)
    c = client.ScanClient("unix:" + d.socket, timeout=300)
    c.scan_bytes("warm.pkl", NONE_PICKLE)
    return d, c


def scan_twice(client, c, name, data):
    """Uploads `data` twice at once through `c`; returns (reports, ScanClientErrors)."""
    results, failures = [], []

    def scan():
        try:
            results.append(c.scan_bytes(name, data))
        except client.ScanClientError as e:
            failures.append(e)
    threads = [threading.Thread(target=scan) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, failures


def errors(report):
    from ckptscan_client import error_code_name  # pylint: disable=import-outside-toplevel
    return ["%s: %s [%s]" % (error_code_name(e.code), e.message, e.limit_name) for f in report.files
            for e in f.errors]


# --- A: memory -----------------------------------------------------------------------------------

def memory(args, client, tmp, daemons):
    print("\n== A: the facts of a 3,000,000-int pickle, twice at once ==", flush=True)
    data = pickle.dumps(list(range(3_000_000)))
    budget = 1400
    d, c = two_job_daemon(args, client, os.path.join(tmp, "a"), daemons, budget)
    before = d.show("before")
    results, failures = scan_twice(client, c, "ints.pkl", data)
    verdicts = [verdict(client, r) for r in results]
    check(not failures and verdicts == ["SAFE", "SAFE"], "both uploads of the honest pickle are "
          "SAFE", "verdicts %s, failures %s, errors %s" % (verdicts, failures,
                                                           [errors(r) for r in results]))
    bound = budget + 2 * 64 + 160
    peak = d.stats()["VmHWM"]
    check(peak <= bound, "the daemon's peak RSS stays under %d MiB (--facts-memory %dM + two "
          "frames + baseline)" % (bound, budget), "VmHWM %d MiB" % peak)
    rest = settle(lambda: d.stats()["VmRSS"] <= before["VmRSS"] + 256 and d.stats(), 5)
    after = d.show("after")
    check(bool(rest), "the daemon gives the memory back (VmRSS under its %d MiB before + 256 MiB)"
          % before["VmRSS"], "VmRSS %d MiB" % after["VmRSS"])
    c.close()
    d.kill()

    small = Daemon(args.ckptscand, os.path.join(tmp, "a2"), [("--facts-memory", "500M")])
    daemons.append(small)
    c = client.ScanClient("unix:" + small.socket, timeout=300)
    r = c.scan_bytes("ints.pkl", data)
    errs = errors(r)
    check(verdict(client, r) == "ERROR" and any("facts_memory" in e for e in errs),
          "with --facts-memory 500M the pickle is ERROR naming facts_memory",
          "%s %s" % (verdict(client, r), errs))
    small.show("after the refused job")
    c.close()
    small.kill()


def items(args, client, tmp, daemons):
    print("\n== A2: 23.4M list items (one memoised int), twice at once ==", flush=True)
    data = b"\x80\x02]q\x01K\x05q\x000" + (b"(" + b"h\x00" * 900_000 + b"e") * 26 + b"."
    budget = 128
    d, c = two_job_daemon(args, client, os.path.join(tmp, "a3"), daemons, budget)
    d.show("before")
    results, failures = scan_twice(client, c, "items.pkl", data)
    verdicts = [verdict(client, r) for r in results]
    refused = [any("facts_memory" in e for e in errors(r)) for r in results]
    check(not failures and verdicts == ["ERROR", "ERROR"] and all(refused),
          "both jobs are ERROR naming facts_memory (their items are over the budget), never SAFE",
          "verdicts %s, failures %s, errors %s" % (verdicts, failures,
                                                   [errors(r) for r in results]))
    bound = budget + 2 * 64 + 160
    peak = d.stats()["VmHWM"]
    check(peak <= bound, "the daemon's peak RSS stays under %d MiB (--facts-memory %dM + two "
          "frames + baseline)" % (bound, budget), "VmHWM %d MiB" % peak)
    d.show("after")
    c.close()
    d.kill()


# --- B: descriptors ------------------------------------------------------------------------------

def descriptors(args, client, tmp, daemons):
    print("\n== B: 300 silent connections against RLIMIT_NOFILE 256 ==", flush=True)
    cap, first_byte, idle = 40, 2, 3
    d = Daemon(args.ckptscand, os.path.join(tmp, "b"),
               [("--max-unix-connections", str(cap)), ("--first-byte-timeout", str(first_byte)),
                ("--max-connection-idle", str(idle))], nofile=256)
    daemons.append(d)
    c = client.ScanClient("unix:" + d.socket, timeout=20)
    c.scan_bytes("warm.pkl", NONE_PICKLE)
    c.close()
    time.sleep(idle + 1)  # the warm-up's connection goes idle and is closed
    before = d.show("before")
    silent = []
    deadline = time.monotonic() + 15
    while len(silent) < 300 and time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(d.socket)
        except BlockingIOError:  # the backlog is full: the daemon is not accepting (yet)
            s.close()
            time.sleep(0.01)
            continue
        silent.append(s)
    print("%d silent connections made" % len(silent))
    one_byte = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    one_byte.connect(d.socket)
    one_byte.sendall(b"P")  # the first byte of the HTTP/2 preface, then nothing
    time.sleep(0.5)
    during = d.show("with the silent connections")
    check(during["fds"] <= before["fds"] + cap + 40, "the daemon's descriptors stay under its "
          "baseline + the cap + 40", "%d descriptors, %d before" % (during["fds"], before["fds"]))
    c = client.ScanClient("unix:" + d.socket, timeout=15)
    try:
        r = c.scan_bytes("none.pkl", NONE_PICKLE)
        status = c.status()
        check(verdict(client, r) == "SAFE" and status is not None,
              "a real caller still gets a scan answer and Admin Status", verdict(client, r))
    except client.ScanClientError as e:
        check(False, "a real caller still gets a scan answer and Admin Status", str(e))
    c.close()

    def closed(s):
        """Whether the daemon closed `s` (what it sent before, e.g. gRPC's SETTINGS and GOAWAY
        frames, is read and dropped)."""
        try:
            s.settimeout(0.01)
            while True:
                if s.recv(65536) == b"":
                    return True
        except socket.timeout:
            return False
        except OSError:
            return True
    gone = settle(lambda: all(closed(s) for s in silent), first_byte + 3)
    check(gone, "the daemon closes every silent connection within --first-byte-timeout + 3 s",
          "%d of %d still open" % (sum(not closed(s) for s in silent), len(silent)))
    check(settle(lambda: closed(one_byte), idle + 3),
          "a connection that sent one byte is closed within --max-connection-idle + 3 s")
    for s in silent + [one_byte]:
        s.close()
    back = settle(lambda: d.stats()["fds"] <= before["fds"] + 4, 5)
    after = d.show("after")
    check(bool(back), "the daemon's descriptors return to its baseline",
          "%d, %d before" % (after["fds"], before["fds"]))
    check(bool(d.events("unix_connections")), "the refusals and closes are logged "
          "(unix_connections)")
    d.kill()


# --- D: one uid holds every unix connection -----------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def hold(uid, path, count, payload, seconds, report):
    """Forks a process that, as `uid`, keeps `count` connections to `path` open that each sent
    `payload`, reconnecting when the daemon closes one (at most every 20 ms); when it stops it
    writes to `report` (a pipe) the longest any of its connections stayed open (closed by the
    daemon or still open), in seconds. Returns its pid."""
    pid = os.fork()
    if pid != 0:
        return pid
    code = 1
    try:
        become(uid)
        conns, longest, end = {}, 0.0, time.monotonic() + seconds
        while time.monotonic() < end:
            while len(conns) < count:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(path)
                    s.sendall(payload)
                    conns[s] = time.monotonic()
                except OSError:
                    s.close()
                    break
            readable, _, _ = select.select(list(conns), [], [], 0.02)
            for s in readable:
                try:
                    if s.recv(65536):  # gRPC's SETTINGS: still open
                        continue
                except OSError:
                    pass
                longest = max(longest, time.monotonic() - conns.pop(s))
                s.close()
            time.sleep(0.02)
        now = time.monotonic()
        longest = max([longest] + [now - t for t in conns.values()])
        os.write(report, b"%.1f\n" % longest)
        code = 0
    finally:
        os._exit(code)


def lockout(args, client, tmp, daemons):
    print("\n== D: uids 65501 and 65503 each try to hold every unix connection ==", flush=True)
    if os.geteuid() != 0:
        print("SKIP: D needs root to act as uids 65501-65503 (setuid in a fork)")
        return
    why = cannot_switch_to(65501)  # a uid the kernel cannot map (a sandbox's user namespace)
    if why:
        print("SKIP: D cannot act as uid 65501 here: %s" % why)
        return
    cap, per_uid, first_byte, idle = 40, 10, 2, 30
    os.chmod(tmp, 0o755)
    d = Daemon(args.ckptscand, os.path.join(tmp, "d"),
               [("--max-unix-connections", str(cap)),
                ("--max-unix-connections-per-uid", str(per_uid)),
                ("--unix-connections-reserved", "4"), ("--first-byte-timeout", str(first_byte)),
                ("--max-connection-idle", str(idle)), ("--socket-mode", "0666")])
    daemons.append(d)
    os.chmod(os.path.dirname(d.socket), 0o755)
    c = client.ScanClient("unix:" + d.socket, timeout=20)
    c.scan_bytes("warm.pkl", NONE_PICKLE)
    c.close()
    # uid 65502 imports the client and compiles its stubs from a copy of the package and the
    # protos that it can read: the checkout may be private (tests/lib/other_uid.py).
    copy = ReadableCopy("uid65502-")
    atexit.register(copy.remove)  # not in the forked holders: they leave by os._exit
    client_copy = copy.add(args.client_dir, "python")
    proto_copy = copy.add(client._stubs.find_proto_dir(), "proto")
    other_stubs = copy.mkdir("stubs", uid=65502, mode=0o700)  # its own stub cache
    unreadable = copy.unreadable_by(65502)
    check(unreadable is None, "uid 65502 can read its copy of the client and the protos",
          str(unreadable))
    before = d.show("before")
    duration = 25
    pipes = [os.pipe() for _ in range(2)]
    holders = [hold(65501, d.socket, cap, b"P", duration, pipes[0][1]),
               hold(65503, d.socket, cap, PREFACE, duration, pipes[1][1])]
    time.sleep(first_byte + 2)  # the daemon has had time to close one-byte connections
    during = d.show("with the holders")
    other_scan = (
        "import sys; sys.path.insert(0, %r)\n"
        "import ckptscan_client\n"
        "from ckptscan_client import _stubs\n"
        "c = ckptscan_client.ScanClient(%r, timeout=5)\n"
        "print(ckptscan_client.verdict_name(c.scan_bytes('other.pkl', %r).verdict))\n"
        % (client_copy, "unix:" + d.socket, NONE_PICKLE))

    answered = []
    for attempt in range(3):
        t0 = time.monotonic()
        try:
            c = client.ScanClient("unix:" + d.socket, timeout=5)
            ok_admin = c.status() is not None
            c.close()
        except client.ScanClientError as e:
            ok_admin = False
            print("root Admin Status: %s" % e)
        r = subprocess.run([sys.executable, "-c", other_scan], capture_output=True, text=True,
                           timeout=30, preexec_fn=as_uid(65502), cwd=copy.dir,
                           env=dict(os.environ, CKPTSCAN_STUBS_DIR=other_stubs,
                                    CKPTSCAN_PROTO_DIR=proto_copy))
        ok_scan = r.returncode == 0 and r.stdout.strip() == "SAFE"
        if not ok_scan:
            print("uid 65502's scan: rc %d %s" % (r.returncode, (r.stdout + r.stderr)[-300:]))
        print("attempt %d: root Admin Status %s, uid 65502 scan %s (%.1f s)" % (
            attempt, ok_admin, ok_scan, time.monotonic() - t0), flush=True)
        answered.append(ok_admin and ok_scan and time.monotonic() - t0 < 10)
        time.sleep(2)
    check(all(answered), "root's Admin Status and uid 65502's scan are answered while two uids "
          "try to hold every connection", "%d of %d answered" % (sum(answered), len(answered)))
    longest = []
    for pid, (r, w) in zip(holders, pipes):
        os.waitpid(pid, 0)
        os.close(w)
        longest.append(float(os.read(r, 64) or b"-1"))
        os.close(r)
    print("longest a connection stayed open: uid 65501 (one byte) %.1f s, uid 65503 (preface) "
          "%.1f s, of %d s" % (longest[0], longest[1], duration))
    check(0 <= longest[0] <= first_byte + 2,
          "connections that sent one byte are closed within --first-byte-timeout + 2 s",
          "one stayed open %.1f s" % longest[0])
    check(during["fds"] <= before["fds"] + cap + 10, "the daemon's descriptors stay under its "
          "baseline + the cap + 10", "%d, %d before" % (during["fds"], before["fds"]))
    check(any(e.get("refused_over_uid_cap", 0) > 0 for e in d.events("unix_connections")),
          "connections over the per-uid cap are refused and logged (refused_over_uid_cap)")
    d.kill()


# --- C: reflection threads -----------------------------------------------------------------------

def reflection(args, client, tmp, daemons):
    import grpc
    print("\n== C: 80 idle reflection streams ==", flush=True)
    age = 4
    d = Daemon(args.ckptscand, os.path.join(tmp, "c"),
               [("--reflection", None), ("--max-running", "2"), ("--max-queued", "8"),
                ("--reflection-stream-seconds", str(age))])
    daemons.append(d)
    c = client.ScanClient("unix:" + d.socket, timeout=15)
    c.scan_bytes("warm.pkl", NONE_PICKLE)
    before = d.show("before")
    stop = threading.Event()

    def silence():
        stop.wait()
        return
        yield  # a generator that sends nothing until stopped

    channels = [grpc.insecure_channel("unix:" + d.socket) for _ in range(8)]
    calls = []
    for i in range(80):
        method = channels[i % len(channels)].stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda m: m, response_deserializer=lambda m: m)
        calls.append(method(silence(), timeout=60))
    opened = time.monotonic()
    time.sleep(2)
    during = d.show("with 80 reflection streams")
    ok = True
    t0 = time.monotonic()
    try:
        status = c.status()
        r = c.scan_bytes("none.pkl", NONE_PICKLE)
        ok = status is not None and verdict(client, r) == "SAFE"
        detail = verdict(client, r)
    except client.ScanClientError as e:
        ok, detail = False, str(e)
    check(ok, "Admin Status and a scan succeed beside 80 idle reflection streams",
          "%s after %.1f s" % (detail, time.monotonic() - t0))
    # Reflection itself still answers once the idle streams are past their age (the cap lets 4
    # of them in, cancelled after --reflection-stream-seconds): list_services
    # (ServerReflectionRequest field 7, "").
    time.sleep(max(0.0, age + 1.5 - (time.monotonic() - opened)))
    try:
        list_services = channels[0].stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda m: m, response_deserializer=lambda m: m)
        answers = list(list_services(iter([b"\x3a\x00"]), timeout=15))
        listed = b"ckptscan.v1.Scanner" in b"".join(answers)
        detail = repr(answers)[:200]
    except grpc.RpcError as e:
        listed, detail = False, "%s: %s" % (e.code(), e.details())
    check(listed, "after --reflection-stream-seconds a reflection client is answered "
          "(list_services names ckptscan.v1.Scanner)", detail)
    stop.set()
    for call in calls:
        call.cancel()
    for ch in channels:
        ch.close()
    back = settle(lambda: d.stats()["Threads"] <= before["Threads"] + 8, 10)
    after = d.show("after")
    check(bool(back), "the daemon's threads return to its baseline",
          "%d threads, %d before, %d during" % (after["Threads"], before["Threads"],
                                                during["Threads"]))
    c.close()
    d.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptscand", required=True)
    add_client_args(parser)
    parser.add_argument("--only", choices=("memory", "items", "descriptors", "reflection", "lockout"))
    args = parser.parse_args()
    require_grpc("daemon_resources_test")
    tmp = short_tmpdir("ckptscan-dres-")
    client = client_package(args, tmp)
    daemons = []
    try:
        if args.only in (None, "memory"):
            memory(args, client, tmp, daemons)
        if args.only in (None, "items"):
            items(args, client, tmp, daemons)
        if args.only in (None, "descriptors"):
            descriptors(args, client, tmp, daemons)
        if args.only in (None, "reflection"):
            reflection(args, client, tmp, daemons)
        if args.only in (None, "lockout"):
            lockout(args, client, tmp, daemons)
    finally:
        for d in daemons:
            d.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
