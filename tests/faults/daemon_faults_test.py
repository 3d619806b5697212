#!/usr/bin/python3
"""Daemon faults (hardening): workers killed across ckptscand's job lifecycle, and the
daemon itself under memory pressure.

    daemon_faults_test.py --ckptscand PATH --ckptscan PATH --fixtures DIR [--proto-dir DIR]
                          [--client-dir DIR] [--stubs-dir DIR] [--rounds N] [--seed N]
                          [--daemon-as SIZE] [--only kills|memory] [--keep]

A. Killed workers. One ckptscand (unix socket, --root, --max-running 2). Each of --rounds rounds
   starts one call on a slow input -- ScanUpload and ScanPath of a pickle that memoizes None 4
   million times, ConvertPath (output beneath the root) and ConvertUpload of a torch archive
   whose pickle is padded the same way -- waits a random 0-400 ms (at most the job's own time,
   measured first without a kill) and SIGKILLs the daemon's jailed worker, if one runs
   then. Which worker exit the daemon saw (its
   ckptscand_worker_exits_total counter, by reason) tells whether the kill landed or the worker
   had finished first. A landed kill must give a report with verdict ERROR (a convert: a
   ConvertResponse not converted, its report ERROR, no output written: scanner.proto says a
   file that cannot be verified is a report, not an RPC error); a missed one the normal answer.
   Never SAFE for a killed job. Afterwards the daemon is alive, SERVING, scans a benign and a
   malicious fixture right, has the descriptors it had before, an empty spool, and nothing
   beneath the root but the inputs.

B. Memory pressure. A ckptscand whose own address space is limited (RLIMIT_AS soft --daemon-as,
   default 256M + 8M per core, hard left as it is, so workers set their own; --worker-memory 256M, --max-running 2,
   --max-queued 2), sent from 8 threads at once uploads of a 100 MiB benign pickle (one
   BINBYTES) and of a pickle of 3,900,000 lists that needs more than 256 MiB to parse;
   then, with every upload place (--max-uploads 4) held by stalled uploads, which hold no job
   place, more uploads than places. Every call is answered (a report, or RESOURCE_EXHAUSTED
   for the surplus); the memory-hungry files are
   ERROR naming the limit; the big ones get the verdict the CLI gives them; the daemon never
   dies, and its peak RSS (VmHWM) stays far below the bytes uploaded (a memory bound, printed);
   afterwards it is SERVING, scans right, with an empty spool and its descriptors as before.

Exits 0 when every check passes, 1 otherwise, 77 (the test's SKIP_RETURN_CODE) with the reason
when Debian's python3-grpcio or python3-protobuf is missing.
"""

import argparse
import collections
import json
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from daemon_harness import (add_client_args, check, child_pids, client_package,  # noqa: E402
                            finish, log_events, require_grpc, settle, short_tmpdir,
                            slow_torch_zip)

require_grpc("the daemon faults test")
import grpc  # noqa: E402
_stubs = None  # clients/python/ckptscan_client/_stubs.py, imported in main()
ScanClient = None
ScanClientError = None

MiB = 1 << 20
# A pickle the worker needs about a second for: None memoized 4 million times (as
# tests/faults/faults_test.sh; memo entries are real work, a stream of None is not). Its memo
# takes ~200 MiB, so scenario A's daemon keeps the default --worker-memory.
SLOW_PICKLE = b"\x80\x04N" + b"\x94" * 4_000_000 + b"."
# ~100 MiB that parse in no time: one BINBYTES (protocol 3) holding zeros. SAFE.
BIG_SIZE = 100 * MiB
BIG_PICKLE = b"\x80\x03B" + struct.pack("<I", BIG_SIZE) + bytes(BIG_SIZE) + b"."
# 3,900,000 lists built and popped: under the VM's own max_nodes (4,000,000) but ~620 MiB of
# graph, far over a 256 MiB worker.
HOG_PICKLE = b"\x80\x02" + b"]0" * 3_900_000 + b"N."
WORKER_MEMORY = "256M"
KINDS = ("ScanUpload", "ScanPath", "ConvertPath", "ConvertUpload")

def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


def cli_verdict(ckptscan, path, *flags):
    """The local CLI's verdict for a file (its JSON report), as the daemon must give it."""
    run = subprocess.run([ckptscan, "scan", "--format", "json", *flags, path],
                         capture_output=True, text=True, check=False)
    try:
        return json.loads(run.stdout)["verdict"]
    except (ValueError, KeyError):
        return "no report (exit %d): %s" % (run.returncode, run.stderr.strip()[:200])


class Daemon:
    """A ckptscand on a unix socket in DIR, its state in DIR/state; started, waited for (its
    "listening" log line), observed through /proc."""

    def __init__(self, binary, directory, *flags, as_soft=None):
        os.makedirs(directory)
        self.socket = os.path.join(directory, "s.sock")
        self.state = os.path.join(directory, "state")
        self.spool = os.path.join(self.state, "spool")
        self.log_path = os.path.join(directory, "log")

        def limit_address_space():
            # The soft limit only: the hard one stays, so a worker may set its own.
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (as_soft, hard))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "--socket", self.socket, "--state-dir", self.state, *flags],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                preexec_fn=limit_address_space if as_soft else None)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(e.get("event") == "listening" for e in self.events()):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise AssertionError("ckptscand did not start (%s): %s" % (
            " ".join(flags), open(self.log_path, "rb").read().decode(errors="replace")[-2000:]))

    def events(self):
        return log_events(self.log_path)

    def alive(self):
        return self.proc.poll() is None

    def workers(self):
        """Pids of the jailed workers of the jobs it runs: its fork server's children (named
        ckptscan-job, at any depth below it) or ckptscan-worker children spawned per job (not
        the fork server, whose argument is --fork-server=PID)."""
        workers = []
        pending = child_pids(self.pid)
        while pending:
            k = pending.pop()
            try:
                with open("/proc/%d/comm" % k) as f:
                    comm = f.read().strip()
                with open("/proc/%d/cmdline" % k, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            argv0 = os.path.basename(argv[0].decode(errors="replace"))
            if comm == "ckptscan-job":
                workers.append(k)
            elif argv0 == "ckptscan-worker" and len(argv) > 1 and argv[1].startswith(b"--job="):
                workers.append(k)
            else:
                pending += child_pids(k)
        return workers

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def fds(self):
        out = []
        for fd in sorted(os.listdir("/proc/%d/fd" % self.pid), key=int):
            try:
                out.append("%s->%s" % (fd, os.readlink("/proc/%d/fd/%s" % (self.pid, fd))))
            except OSError:
                pass
        return out

    def status_kb(self, field):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return -1

    def spool_entries(self):
        try:
            return sorted(os.listdir(self.spool))
        except FileNotFoundError:
            return []

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def proc_state(pid):
    """The state letter of /proc/PID/stat (R, S, Z ...), "" when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def health(socket_path, timeout=5):
    """grpc.health.v1.Health/Check, service "", encoded by hand (as replicas_test.py)."""
    with grpc.insecure_channel("unix:" + socket_path) as ch:
        try:
            reply = ch.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=timeout)
        except grpc.RpcError as e:
            return e.code().name
    return "SERVING" if reply == b"\x08\x01" else "NOT_SERVING(%r)" % reply


class Admin:
    """Admin.Metrics on its own channel: the worker exits the daemon counted, by reason."""

    def __init__(self, pb, socket_path):
        self._pb = pb
        self._channel = grpc.insecure_channel("unix:" + socket_path)
        self._stub = pb.scanner_pb2_grpc.AdminStub(self._channel)

    def worker_exits(self):
        text = self._stub.Metrics(self._pb.scanner_pb2.MetricsRequest(), timeout=10).text
        out = collections.Counter()
        for line in text.splitlines():
            if line.startswith('ckptscand_worker_exits_total{reason="'):
                reason = line.split('"')[1]
                out[reason] = int(float(line.split()[-1]))
        return out

    def gauge(self, name):
        """A gauge without labels (-1 when the daemon has no such metric)."""
        text = self._stub.Metrics(self._pb.scanner_pb2.MetricsRequest(), timeout=10).text
        for line in text.splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[-1]))
        return -1

    def close(self):
        self._channel.close()


class CountingSink:
    """A binary file object that only counts what ConvertUpload sends back."""

    def __init__(self):
        self.n = 0

    def write(self, b):
        self.n += len(b)


def verdict_name(pb, v):
    return pb.report_pb2.Verdict.Name(v)[len("VERDICT_"):]


def errors_of(report):
    from ckptscan_client import error_code_name  # pylint: disable=import-outside-toplevel
    return ["%s: %s%s" % (error_code_name(e.code), e.message, " [%s=%d]" % (e.limit_name, e.limit_value)
                          if e.limit_name else "")
            for f in report.files for e in f.errors]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptscand", required=True)
    parser.add_argument("--ckptscan", required=True, help="the CLI: the expected verdicts")
    parser.add_argument("--fixtures", required=True)
    add_client_args(parser)
    parser.add_argument("--rounds", type=int, default=12, help="scenario A's kill rounds")
    parser.add_argument("--seed", type=int, help="random seed (default: from the clock, printed)")
    # 256 MiB plus 8 MiB per core (gRPC's threads grow with the cores). The daemon peaks at
    # ~160 MiB of address space here (2 cores); with glibc's default 8 MiB thread stacks it
    # peaked at 254-289 MiB and died or answered UNKNOWN under 256M (daemon/main.cc).
    parser.add_argument("--daemon-as", default="%dM" % (256 + 8 * (os.cpu_count() or 1)),
                        help="scenario B: the daemon's RLIMIT_AS soft limit (default 256M + "
                        "8M per core)")
    parser.add_argument("--threads", type=int, default=8, help="scenario B's concurrent callers")
    parser.add_argument("--only", choices=("kills", "memory"), help="run one scenario only")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temp dir (daemon logs, state), printed at the end")
    args = parser.parse_args()
    global _stubs, ScanClient, ScanClientError
    tmp = short_tmpdir("ckptscan-dfault-")
    client = client_package(args, tmp)  # the same stubs as the Python client
    _stubs, ScanClient, ScanClientError = client._stubs, client.ScanClient, client.ScanClientError
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1_000_000
    print("seed %d (--seed %d repeats this run)" % (seed, seed), flush=True)
    daemons = []
    try:
        pb = _stubs.load()
        if args.only in (None, "kills"):
            killed_workers(args, pb, os.path.join(tmp, "a"), daemons, random.Random(seed))
        if args.only in (None, "memory"):
            memory_pressure(args, pb, os.path.join(tmp, "b"), daemons)
    finally:
        for d in daemons:
            d.kill()
        if args.keep:
            print("kept %s (daemon logs: */d/log)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    finish()


# --- A: workers killed across the job lifecycle ------------------------------------------------

def killed_workers(args, pb, tmp, daemons, rng):
    print("\n== A: workers SIGKILLed at random points of %d jobs ==" % args.rounds, flush=True)
    root = os.path.join(tmp, "root")
    os.makedirs(os.path.join(root, "out"))
    fixtures = os.path.abspath(args.fixtures)
    slow_pkl = os.path.join(root, "slow.pkl")
    with open(slow_pkl, "wb") as f:
        f.write(SLOW_PICKLE)
    slow_pt = os.path.join(root, "slow.pt")
    slow_torch_zip(slow_pt)
    benign = os.path.join(root, "train_checkpoint.pt")
    shutil.copy(os.path.join(fixtures, "torch", "train_checkpoint.pt"), benign)
    malicious = os.path.join(root, "inst_os_system.pkl")
    shutil.copy(os.path.join(fixtures, "pickles", "malicious", "inst_os_system.pkl"), malicious)
    inputs = {"slow.pkl", "slow.pt", "train_checkpoint.pt", "inst_os_system.pkl"}

    expected = {p: cli_verdict(args.ckptscan, p) for p in (slow_pkl, slow_pt, benign, malicious)}
    check(expected[slow_pkl] == "SAFE" and expected[slow_pt] == "SAFE" and
          expected[benign] == "SAFE" and expected[malicious] == "DANGEROUS",
          "the local CLI: slow.pkl, slow.pt, train_checkpoint.pt SAFE, inst_os_system.pkl "
          "DANGEROUS", repr({os.path.basename(k): v for k, v in expected.items()}))
    with open(slow_pt, "rb") as f:
        slow_pt_bytes = f.read()

    d = Daemon(args.ckptscand, os.path.join(tmp, "d"), "--root", root, "--max-running", "2")
    daemons.append(d)
    client = ScanClient("unix:" + d.socket, timeout=60)
    admin = Admin(pb, d.socket)
    try:
        # Warm-up: one call of each kind, so that the baseline has the connection and whatever
        # the daemon opens once.
        client.scan_path(benign)
        client.scan_bytes("warm.pt", open(benign, "rb").read())
        warm = os.path.join(root, "out", "warm.safetensors")
        client.convert_path(benign, warm)
        client.convert_bytes("warm.pt", open(benign, "rb").read(), out=CountingSink())
        for p in (warm, warm + ".sig"):
            if os.path.exists(p):
                os.unlink(p)
        # Each kind once on the slow input with no kill: the normal answer, and how long the
        # job takes here; a round's kill comes after 0..min(400 ms, that time).
        duration, bad = {}, []
        for kind in KINDS:
            problem, duration[kind] = kill_round(
                pb, d, client, admin, rng, "no-kill", kind, root, slow_pkl, slow_pt,
                slow_pt_bytes, collections.Counter(), None)
            if problem:
                bad.append("%s without a kill: %s" % (kind, problem))
        check(not bad, "each call on its slow input, not killed: SAFE (converts written and "
              "signed)", "; ".join(bad))
        max_delay = {k: min(0.4, duration[k]) for k in KINDS}
        time.sleep(0.3)
        fds_before = d.fd_count()
        fd_list_before = d.fds()
        print("daemon pid %d, %d descriptors after the warm-up" % (d.pid, fds_before), flush=True)

        kinds = [KINDS[i % len(KINDS)] for i in range(args.rounds)]
        rng.shuffle(kinds)
        tally = {k: collections.Counter() for k in KINDS}
        bad = []
        for i, kind in enumerate(kinds):
            problem, _ = kill_round(pb, d, client, admin, rng, "round %d" % i, kind, root,
                                    slow_pkl, slow_pt, slow_pt_bytes, tally[kind],
                                    max_delay[kind])
            if problem:
                bad.append("round %d %s: %s" % (i, kind, problem))
        print("\n%-14s %6s %12s %12s %14s" % ("call", "rounds", "kills landed", "kill missed",
                                             "no worker seen"))
        for k in KINDS:
            t = tally[k]
            print("%-14s %6d %12d %12d %14d" % (k, t["rounds"], t["landed"], t["missed"],
                                              t["no_worker"]))
        landed = sum(t["landed"] for t in tally.values())
        print("rounds %d, kills landed %d (missed: the worker had ended; no worker: none ran at "
              "the kill time)" % (args.rounds, landed), flush=True)
        check(not bad, "every call: ERROR (a convert not converted, no output) when its worker "
              "was killed, the normal answer otherwise; never SAFE after a kill",
              "; ".join(bad[:6]))
        # Kills that miss prove nothing: most must land (the kill time is capped by the job's
        # own time, so they do, unless the machine is far faster than the inputs assume).
        check(landed >= max(1, args.rounds // 4),
              "kills landed in at least a quarter of the rounds (%d of %d)" % (
                  landed, args.rounds))

        # --- afterwards ---
        check(d.alive(), "the daemon is alive after %d worker kills" % landed)
        check(health(d.socket) == "SERVING", "health SERVING after the kills")
        after_scans(pb, client, benign, malicious, by_path=True)
        check(settle(d.workers, []) == [], "no worker left running")
        fds_after = settle(d.fd_count, fds_before)
        check(fds_after == fds_before, "no descriptor leaked (%d before the rounds, %d after)" % (
            fds_before, fds_after), "new: %s" % sorted(set(d.fds()) - set(fd_list_before)))
        left = settle(d.spool_entries, [])
        check(left == [], "the spool (%s) is empty" % d.spool, "left: %s" % left[:10])
        found = set()
        for dirpath, _, files in os.walk(root):
            for name in files:
                found.add(os.path.relpath(os.path.join(dirpath, name), root))
        check(found == inputs, "nothing beneath the root but the inputs (no partial convert "
              "output, no temp file)", "extra: %s" % sorted(found - inputs))
    finally:
        client.close()
        admin.close()
        d.kill()


def kill_round(pb, d, client, admin, rng, i, kind, root, slow_pkl, slow_pt, slow_pt_bytes,
               tally, max_delay):
    """One call; a SIGKILL of its worker after a random 0..max_delay s (None: no kill, the
    normal answer is due). Returns (what went wrong or "", the call's time in s)."""
    exits_before = admin.worker_exits()
    out = os.path.join(root, "out", "%s.safetensors" % i.replace(" ", "-"))
    result = {}

    def call():
        try:
            if kind == "ScanUpload":
                result["report"] = client.scan_bytes("slow.pkl", SLOW_PICKLE)
            elif kind == "ScanPath":
                result["report"] = client.scan_path(slow_pkl)
            elif kind == "ConvertPath":
                result["convert"] = client.convert_path(slow_pt, out)
            else:
                sink = CountingSink()
                r = client.convert_bytes("slow.pt", slow_pt_bytes, out=sink)
                result["convert"], result["received"] = r.response, sink.n
        except ScanClientError as e:
            result["error"] = "%s: %s" % (e.code, e.details)

    started = time.monotonic()
    t = threading.Thread(target=call, daemon=True)
    t.start()
    sent = []
    if max_delay is not None:
        delay = rng.uniform(0.0, max_delay)
        time.sleep(delay)
        for w in d.workers():
            if proc_state(w) not in ("", "Z", "X"):  # a zombie has ended: no kill to send
                try:
                    os.kill(w, signal.SIGKILL)
                    sent.append(w)
                except ProcessLookupError:
                    pass
    t.join(120)
    elapsed = time.monotonic() - started
    if t.is_alive():
        return "no answer within 120 s", elapsed
    # The daemon's count of worker exits says what became of the worker: "signaled" (the kill
    # landed) or "ok" (it had finished: the kill, if sent, missed). One worker per job.
    deadline = time.monotonic() + 5
    while True:
        exits = admin.worker_exits() - exits_before
        if sum(exits.values()) >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    landed = exits["signaled"] >= 1
    tally["rounds"] += 1
    if landed:
        tally["landed"] += 1
    elif sent:
        tally["missed"] += 1
    else:
        tally["no_worker"] += 1
    how = ("no kill (%.0f ms)" % (elapsed * 1000) if max_delay is None else
           "kill at %3.0f ms: %s" % (delay * 1000, "landed" if landed else
                                     "missed (worker ended first)" if sent else "no worker"))
    if landed and not sent:
        return ("the daemon counted a signaled worker, yet none was killed (%s)" % dict(exits),
                elapsed)
    if sum(exits.values()) != 1:
        return "expected one worker exit, the daemon counted %s" % dict(exits), elapsed

    problem = ""
    if "error" in result:
        answer = result["error"]
        problem = "an RPC error instead of a report: %s" % answer
    elif "report" in result:
        r = result["report"]
        answer = "%s %s" % (verdict_name(pb, r.verdict), errors_of(r)[:1])
        want = "ERROR" if landed else "SAFE"
        if verdict_name(pb, r.verdict) != want:
            problem = "verdict %s, want %s" % (answer, want)
        elif landed and not errors_of(r):
            problem = "ERROR without an error saying why"
    else:
        resp = result["convert"]
        v = verdict_name(pb, resp.report.verdict)
        answer = "converted=%s %s %s" % (resp.converted, v, errors_of(resp.report)[:1])
        written = os.path.exists(out) or os.path.exists(out + ".sig")
        if landed:
            if resp.converted or v != "ERROR":
                problem = "a killed convert answered %s" % answer
            elif kind == "ConvertPath" and written:
                problem = "a killed convert left %s" % sorted(
                    p for p in (out, out + ".sig") if os.path.exists(p))
            elif kind == "ConvertUpload" and (result["received"] or resp.output_size):
                problem = "a killed convert sent %d bytes (output_size %d)" % (
                    result["received"], resp.output_size)
        else:
            if not resp.converted or v != "SAFE":
                problem = "answered %s, want converted SAFE" % answer
            elif kind == "ConvertPath" and not (os.path.isfile(out) and
                                                os.path.isfile(out + ".sig")):
                problem = "converted, yet %s and its .sig are not both there" % out
            elif kind == "ConvertUpload" and (result["received"] != resp.output_size or
                                              not resp.output_size):
                problem = "announced %d bytes, sent %d" % (resp.output_size, result["received"])
    print("%-8s %-13s %-38s -> %s%s" % (i, kind, how, answer,
                                             "  <-- " + problem if problem else ""), flush=True)
    # A finished conversion's output is removed here, so that at the end the root must hold
    # only the inputs.
    for p in (out, out + ".sig"):
        if not landed and os.path.exists(p):
            os.unlink(p)
    return problem, elapsed


def after_scans(pb, client, benign, malicious, by_path):
    """A normal scan of a benign and of a malicious fixture gives SAFE and DANGEROUS."""
    for path, want in ((benign, "SAFE"), (malicious, "DANGEROUS")):
        try:
            if by_path:
                r = client.scan_path(path)
            else:
                with open(path, "rb") as f:
                    r = client.scan_bytes(os.path.basename(path), f.read())
            got = verdict_name(pb, r.verdict)
        except ScanClientError as e:
            got = "%s: %s" % (e.code, e.details)
        check(got == want, "a normal %s of %s afterwards: %s" % (
            "ScanPath" if by_path else "ScanUpload", os.path.basename(path), want), "got " + got)


# --- B: the daemon under memory pressure -------------------------------------------------------

class GatedReader:
    """A binary file object whose first read returns one chunk at once and whose later reads
    wait for `gate`: an upload that holds its job place until released."""

    def __init__(self, data, gate):
        self._data = memoryview(data)
        self._pos = 0
        self._gate = gate
        self.started = threading.Event()

    def read(self, n):
        if self._pos > 0:
            self._gate.wait()
        block = bytes(self._data[self._pos:self._pos + n])
        self._pos += len(block)
        self.started.set()
        return block


def memory_pressure(args, pb, tmp, daemons):
    as_soft = parse_size(args.daemon_as)
    print("\n== B: ckptscand with RLIMIT_AS soft %s (%d bytes), --worker-memory %s ==" % (
        args.daemon_as, as_soft, WORKER_MEMORY), flush=True)
    os.makedirs(tmp)
    files = os.path.join(tmp, "files")
    os.makedirs(files)
    big, hog = os.path.join(files, "big.pkl"), os.path.join(files, "hog.pkl")
    with open(big, "wb") as f:
        f.write(BIG_PICKLE)
    with open(hog, "wb") as f:
        f.write(HOG_PICKLE)
    fixtures = os.path.abspath(args.fixtures)
    benign = os.path.join(fixtures, "torch", "train_checkpoint.pt")
    malicious = os.path.join(fixtures, "pickles", "malicious", "inst_os_system.pkl")
    want_big = cli_verdict(args.ckptscan, big, "--worker-memory", WORKER_MEMORY)
    want_hog = cli_verdict(args.ckptscan, hog, "--worker-memory", WORKER_MEMORY)
    print("the local CLI under --worker-memory %s: big.pkl (%d MiB) %s, hog.pkl %s" % (
        WORKER_MEMORY, len(BIG_PICKLE) // MiB, want_big, want_hog), flush=True)
    check(want_big == "SAFE" and want_hog == "ERROR",
          "the local CLI: big.pkl SAFE, hog.pkl ERROR under --worker-memory %s" % WORKER_MEMORY,
          "big %s, hog %s" % (want_big, want_hog))

    max_running, max_queued = 2, 2
    places = max_running + max_queued  # job places, and as many upload places
    # Every caller here is this one uid: it may take every upload place and every job place.
    d = Daemon(args.ckptscand, os.path.join(tmp, "d"), "--max-running", str(max_running),
               "--max-queued", str(max_queued), "--max-uploads", str(places),
               "--max-uploads-per-caller", str(places), "--max-jobs-per-caller", str(places),
               "--worker-memory", WORKER_MEMORY, as_soft=as_soft)
    daemons.append(d)
    with open("/proc/%d/limits" % d.pid) as f:
        limit_line = [l.strip() for l in f if l.startswith("Max address space")]
    print("daemon pid %d: %s" % (d.pid, " ".join(" ".join(limit_line).split())), flush=True)
    client = ScanClient("unix:" + d.socket, timeout=120)
    try:
        client.scan_bytes("warm.pt", open(benign, "rb").read())
        time.sleep(0.3)
        fds_before = d.fd_count()
        fd_list_before = d.fds()
        hwm_start = d.status_kb("VmHWM")
        print("%d descriptors, VmHWM %d KiB after the warm-up" % (fds_before, hwm_start),
              flush=True)

        # --- concurrent uploads: big and memory-hungry, from --threads threads at once. A call
        # refused with RESOURCE_EXHAUSTED is made again after a pause, as a client would, until
        # the file has its report (for up to 60 s): every attempt must be answered. ---
        with open(big, "rb") as f:
            big_bytes = f.read()
        uploads = ["big" if i % 2 == 0 else "hog" for i in range(2 * args.threads)]
        lock = threading.Lock()
        answers = []  # every attempt: (kind, "OK"|code, verdict, errors, report)
        died = threading.Event()
        barrier = threading.Barrier(args.threads)

        def caller(mine):
            barrier.wait()
            for kind in mine:
                data = big_bytes if kind == "big" else HOG_PICKLE
                # Retried for a time, not a count: on a loaded machine the places free up
                # more slowly, and a client waits rather than giving up after N refusals.
                give_up = time.monotonic() + 60
                while True:
                    try:
                        r = client.scan_bytes(kind + ".pkl", data)
                        a = (kind, "OK", verdict_name(pb, r.verdict), errors_of(r), r)
                    except ScanClientError as e:
                        a = (kind, e.code, None, [e.details], None)
                    with lock:
                        answers.append(a)
                    if a[1] != "RESOURCE_EXHAUSTED" or time.monotonic() > give_up:
                        break
                    time.sleep(0.05)

        started = time.monotonic()
        # Thread i uploads uploads[i], uploads[i+1]: big then hog, or hog then big.
        threads = [threading.Thread(target=caller, args=(uploads[i:i + 2],), daemon=True)
                   for i in range(args.threads)]
        for t in threads:
            t.start()
        peak_workers = 0
        while any(t.is_alive() for t in threads):
            if not d.alive():
                died.set()
                break
            peak_workers = max(peak_workers, len(d.workers()))
            time.sleep(0.02)
        for t in threads:
            t.join(180)
        elapsed = time.monotonic() - started
        uploaded = sum(len(BIG_PICKLE) if a[0] == "big" else len(HOG_PICKLE) for a in answers
                       if a[1] == "OK")
        codes = collections.Counter((a[0], a[1] if a[1] != "OK" else a[2]) for a in answers)
        print("storm: %d uploads, %d calls from %d threads in %.1f s: %s; at most %d workers "
              "at once" % (len(uploads), len(answers), args.threads, elapsed,
            ", ".join("%s %s x%d" % (k, c, n) for (k, c), n in sorted(codes.items())),
            peak_workers), flush=True)
        check(not died.is_set() and d.alive(), "the daemon survived the storm",
              "exit %s" % d.proc.poll())
        check(not any(t.is_alive() for t in threads), "every call of the storm answered")
        odd = [a for a in answers if a[1] not in ("OK", "RESOURCE_EXHAUSTED")]
        check(not odd, "every answer a report or RESOURCE_EXHAUSTED (%d refused)" % sum(
            1 for a in answers if a[1] == "RESOURCE_EXHAUSTED"),
              "; ".join("%s %s %s" % (a[0], a[1], a[3][:1]) for a in odd[:5]))
        reported = collections.Counter(a[0] for a in answers if a[1] == "OK")
        check(reported == collections.Counter(uploads),
              "every upload of the storm got its report (%d big, %d memory-hungry)" % (
                  reported["big"], reported["hog"]), "of %s" % dict(collections.Counter(uploads)))
        hog_reports = [a for a in answers if a[0] == "hog" and a[1] == "OK"]
        hog_bad = [a for a in hog_reports if a[2] != "ERROR" or not any(
            e.code == pb.report_pb2.ERROR_CODE_LIMIT and (e.limit_name or "memory" in e.message)
            for f in a[4].files for e in f.errors)]
        check(hog_reports and not hog_bad,
              "memory-hungry uploads: ERROR naming the limit (%d reports; e.g. %s)" % (
                  len(hog_reports), hog_reports[0][3][:1] if hog_reports else "none"),
              "; ".join("%s %s" % (a[2], a[3][:1]) for a in hog_bad[:5]))
        big_reports = [a for a in answers if a[0] == "big" and a[1] == "OK"]
        big_bad = [a for a in big_reports if a[2] != want_big]
        check(big_reports and not big_bad, "100 MiB uploads: %s, as the CLI says (%d reports)" % (
            want_big, len(big_reports)), "; ".join("%s %s" % (a[2], a[3][:1])
                                                  for a in big_bad[:5]))

        # --- more uploads than places: every upload place held by a stalled upload (they hold
        # no job place until complete), then the surplus ---
        gate = threading.Event()
        holders = []
        held = []

        def hold():
            reader = GatedReader(big_bytes, gate)
            try:
                r = client.scan_bytes("held.pkl", reader)
                a = ("OK", verdict_name(pb, r.verdict))
            except ScanClientError as e:
                a = (e.code, e.details)
            with lock:
                held.append(a)
        for _ in range(places):
            t = threading.Thread(target=hold, daemon=True)
            t.start()
            holders.append(t)
        admin = Admin(pb, d.socket)
        st = settle(lambda: admin.gauge("ckptscand_uploads_in_flight"), places, seconds=20)
        status = client.status()
        admin.close()
        print("held: %d uploads in flight; %d running + %d queued of %d + %d job places" % (
            st, status.jobs_running, status.jobs_queued, status.max_running, status.max_queued),
            flush=True)
        check(st == places and status.jobs_running + status.jobs_queued == 0,
              "stalled uploads hold every upload place (%d) and no job place" % places,
              "uploads %d, running %d queued %d" % (st, status.jobs_running, status.jobs_queued))
        surplus = []
        for _ in range(places):
            try:
                r = client.scan_bytes("surplus.pkl", HOG_PICKLE, timeout=30)
                surplus.append("OK " + verdict_name(pb, r.verdict))
            except ScanClientError as e:
                surplus.append(e.code)
        check(surplus == ["RESOURCE_EXHAUSTED"] * places,
              "the surplus: %d uploads past --max-uploads %d answered RESOURCE_EXHAUSTED" % (
                  places, places), "got %s" % surplus)
        gate.set()
        for t in holders:
            t.join(120)
        check(len(held) == places and all(a == ("OK", want_big) for a in held),
              "the stalled uploads, released, are %s" % want_big, "got %s" % held)

        # --- afterwards ---
        hwm = d.status_kb("VmHWM")
        total = uploaded + len(held) * len(BIG_PICKLE)
        print("daemon VmHWM %.1f MiB (%d KiB) after %.0f MiB uploaded in reports; VmPeak %.0f "
              "MiB of the %s address-space limit" % (hwm / 1024, hwm, total / MiB,
                                                      d.status_kb("VmPeak") / 1024,
                                                      args.daemon_as), flush=True)
        check(d.alive(), "the daemon never died")
        check(0 < hwm < 300 * 1024, "the daemon's peak RSS (VmHWM %.0f MiB) is below 300 MiB, "
              "far below the %.0f MiB uploaded" % (hwm / 1024, total / MiB))
        check(health(d.socket) == "SERVING", "health SERVING after the memory pressure")
        after_scans(pb, client, benign, malicious, by_path=False)
        check(settle(d.workers, []) == [], "no worker left running")
        fds_after = settle(d.fd_count, fds_before)
        check(fds_after == fds_before, "no descriptor leaked (%d before, %d after)" % (
            fds_before, fds_after), "new: %s" % sorted(set(d.fds()) - set(fd_list_before)))
        left = settle(d.spool_entries, [])
        check(left == [], "the spool (%s) is empty" % d.spool, "left: %s" % left[:10])
        refused = client.status().jobs_refused
        print("daemon status: %d calls refused (RESOURCE_EXHAUSTED) in all" % refused)
    finally:
        client.close()
        d.kill()


if __name__ == "__main__":
    main()
