#!/usr/bin/python3
"""Uploads that stall, and a ConvertUpload whose caller never reads, do not hold ckptscand.

    upload_stall_test.py --ckptscand PATH --ckptscan PATH --fixtures DIR [--proto-dir DIR]
                         [--stubs-dir DIR] [--client-dir DIR] [--only a|b|c|d|e] [--keep]
                         [--skip-exit N]

A. N+1 stalled uploads, N job places. A ckptscand with --max-running 1 --max-queued 1 (two job
   places) and --upload-idle-timeout 2 gets three ScanUploads that send their header and one
   chunk, then nothing. A ScanPath and a ScanUpload made after them must still complete within
   a few seconds (an upload holds no job place until its last byte is in), and each stalled one
   must be cancelled (DEADLINE_EXCEEDED, or CANCELLED) within the idle timeout plus a margin,
   its job line naming upload_idle_timeout, its spool file closed.
B. The per-caller cap. With --max-uploads-per-caller 2, two stalled uploads from this process
   (uid:0 on the unix socket) hold this caller's places: a third upload from it is refused at
   once with RESOURCE_EXHAUSTED naming max_uploads_per_caller, while another caller (the CLI as
   uid 65534, when this runs as root) still gets its report. Once one stalled upload finishes,
   the caller may upload again.
C. A ConvertUpload whose caller sends the whole upload and never reads the answer. With
   --max-running 1 --max-queued 0 and --output-idle-timeout 2, once the conversion is done its
   unread output stops the daemon's writes; the call must be cancelled, its job slot freed (a
   later scan gets its report) and its job directory in the spool removed.
D. The spool budget. With --max-spool-bytes 1M, while one stalled upload has spooled 600 KiB a
   second one's 600 KiB chunk is refused with RESOURCE_EXHAUSTED naming max_spool_bytes.
E. One caller holds job places it never gives back. With --max-running 3 --max-queued 1
   --max-jobs-per-caller 2 and a long --output-idle-timeout, this process (uid:0) makes
   ConvertUploads whose output it never reads until one is refused: two hold places (they run,
   converted, their output unread), the third is refused at once with RESOURCE_EXHAUSTED naming
   max_jobs_per_caller, and another caller (the CLI as uid 65534) still gets its report promptly
   from a running slot left. Without the cap the first caller takes all four places and the
   other caller is refused for as long as the first one likes.

Every check fails against a ckptscand without these defences. A binary that lacks one of the
flags (today's main) is run without it, which is printed: then the test shows its default
behaviour.

Exits 0 when every check passes, 1 otherwise, --skip-exit (77 for ctest) with the reason when
Debian's python3-grpcio or python3-protobuf is missing.
"""

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from other_uid import ReadableCopy, cannot_switch_to  # noqa: E402
from daemon_harness import (add_client_args, check, client_package, finish,  # noqa: E402
                            log_events, settle, short_tmpdir, slow_torch_zip)

IDLE = 2.0  # --upload-idle-timeout and --output-idle-timeout of the daemons here
MARGIN = 6.0  # how much later than IDLE a stalled call may end (a loaded machine)
PROMPT = 10.0  # a normal call must be answered within this many seconds
NOBODY = 65534
MiB = 1 << 20

grpc = None  # imported in main(), after the skip check
pb = None


class Daemon:
    """A ckptscand on a unix socket in DIR (state in DIR/state), started with `flags` minus the
    ones the binary does not know, which are printed."""

    def __init__(self, binary, directory, known, *flags):
        os.makedirs(directory)
        os.chmod(directory, 0o755)  # the CLI as another uid reaches the socket
        self.socket = os.path.join(directory, "s.sock")
        self.spool = os.path.join(directory, "state", "spool")
        self.log_path = os.path.join(directory, "log")
        argv = [binary, "--socket", self.socket, "--socket-mode", "0666",
                "--state-dir", os.path.join(directory, "state")]
        i = 0
        while i < len(flags):
            if flags[i] in known:
                argv += [flags[i], flags[i + 1]]
            else:
                print("NOTE: %s has no %s: run with its default behaviour" % (binary, flags[i]),
                      flush=True)
            i += 2
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(e.get("event") == "listening" for e in log_events(self.log_path)):
                break
            time.sleep(0.05)
        else:
            self.kill()
            raise AssertionError("ckptscand did not start: %s" % open(
                self.log_path, "rb").read().decode(errors="replace")[-2000:])
        self.channel = grpc.insecure_channel("unix:" + self.socket,
                                             options=[("grpc.http2.bdp_probe", 0)])
        self.scanner = pb.scanner_pb2_grpc.ScannerStub(self.channel)

    def jobs(self, rpc):
        return [e for e in log_events(self.log_path)
                if e.get("event") == "job" and e.get("rpc") == rpc]

    def spool_files(self):
        """The daemon's open spool files (unlinked O_TMPFILE uploads) and job directories."""
        fds = []
        for fd in os.listdir("/proc/%d/fd" % self.proc.pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (self.proc.pid, fd))
            except OSError:
                continue
            if target.startswith(self.spool + "/"):
                fds.append(target)
        return sorted(fds) + sorted(os.listdir(self.spool))

    def kill(self):
        if getattr(self, "channel", None) is not None:
            self.channel.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def known_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False).stdout
    return {w.rstrip(",=") for w in out.split() if w.startswith("--")}


def header(name, size=0, **convert):
    h = pb.scanner_pb2.UploadHeader(name=name, size=size)
    if convert:
        h.convert.CopyFrom(pb.scanner_pb2.ConvertOptions(**convert))
    return pb.scanner_pb2.UploadChunk(header=h)


class Stalled:
    """A ScanUpload that sends its header and one chunk (`first`), then nothing until
    release()."""

    def __init__(self, daemon, name, first=b"\x80\x02"):
        self.gate = threading.Event()
        self.sent = threading.Event()
        self.sent_at = None

        def chunks():
            yield header(name)
            yield pb.scanner_pb2.UploadChunk(data=first)
            self.sent_at = time.monotonic()
            self.sent.set()
            self.gate.wait(120)
            yield pb.scanner_pb2.UploadChunk(data=b"N.")
        self.future = daemon.scanner.ScanUpload.future(chunks(), timeout=120)
        self.ended_at = None
        self.future.add_done_callback(lambda _: setattr(self, "ended_at", time.monotonic()))

    def outcome(self):
        """None while in flight, else "OK <verdict>" or the status code's name."""
        if not self.future.done():
            return None
        e = self.future.exception()
        return "OK %d" % self.future.result().verdict if e is None else e.code().name

    def release(self):
        self.gate.set()


def verdict_name(v):
    return pb.report_pb2.Verdict.Name(v).replace("VERDICT_", "")


def scan_upload(daemon, name, data, timeout=30):
    """A whole ScanUpload: ("OK", verdict name) or (code name, details)."""
    try:
        r = daemon.scanner.ScanUpload(iter([header(name, len(data)),
                                            pb.scanner_pb2.UploadChunk(data=data)]),
                                      timeout=timeout)
        return "OK", verdict_name(r.verdict)
    except grpc.RpcError as e:
        return e.code().name, e.details()


def timed(fn, *a):
    start = time.monotonic()
    out = fn(*a)
    return out, time.monotonic() - start


def open_spool_files(daemon):
    return [f for f in daemon.spool_files() if f.endswith("(deleted)")]


def stalled_uploads(args, tmp, known, benign):
    print("\n== A: 3 stalled uploads, 2 job places, --upload-idle-timeout %g ==" % IDLE,
          flush=True)
    root = os.path.join(tmp, "root")
    os.mkdir(root)
    shutil.copy(benign, os.path.join(root, "benign.pkl"))
    d = Daemon(args.ckptscand, os.path.join(tmp, "a"), known, "--root", root,
               "--max-running", "1", "--max-queued", "1", "--upload-idle-timeout", str(IDLE),
               "--max-uploads", "16", "--max-uploads-per-caller", "16")
    try:
        held = [Stalled(d, "stalled-%d.pkl" % i) for i in range(3)]
        for h in held:
            h.sent.wait(10)
        time.sleep(0.3)  # the daemon has read what they sent
        print("the stalled uploads, 0.3 s after their chunk: %s" % [h.outcome() for h in held],
              flush=True)
        try:
            (r, took) = timed(lambda: d.scanner.ScanPath(
                pb.scanner_pb2.ScanPathRequest(path=os.path.join(root, "benign.pkl")),
                timeout=30))
            by_path = ("OK", verdict_name(r.verdict))
        except grpc.RpcError as e:
            by_path, took = (e.code().name, e.details()), 0
        check(by_path == ("OK", "SAFE") and took < PROMPT,
              "a ScanPath while 3 uploads stall: SAFE in %.2f s" % took, "got %s" % (by_path,))
        with open(benign, "rb") as f:
            upload, took = timed(scan_upload, d, "benign.pkl", f.read())
        check(upload == ("OK", "SAFE") and took < PROMPT,
              "a ScanUpload while 3 uploads stall: SAFE in %.2f s" % took, "got %s" % (upload,))
        deadline = time.monotonic() + IDLE + MARGIN
        while time.monotonic() < deadline and not all(h.future.done() for h in held):
            time.sleep(0.05)
        outcomes = [h.outcome() for h in held]
        waits = ["%.1f s" % (h.ended_at - h.sent_at) for h in held
                 if h.ended_at is not None and h.sent_at is not None]
        early = [h for h in held if h.ended_at is not None and h.sent_at is not None
                 and h.ended_at - h.sent_at < IDLE * 0.9]
        check(not early, "no stalled upload is cancelled before the idle timeout",
              "%d ended sooner" % len(early))
        check(all(o in ("DEADLINE_EXCEEDED", "CANCELLED") for o in outcomes),
              "the stalled uploads are cancelled after the idle timeout (%s after their last "
              "chunk)" % ", ".join(waits),
              "after %g s: %s" % (IDLE + MARGIN, outcomes))
        details = [h.future.exception().details() for h in held
                   if h.future.done() and h.future.exception() is not None]
        print("what the stalled callers were told: %s" % sorted(set(details)), flush=True)
        # The caller is told as the watchdog cancels the call; the handler's job line follows
        # when its thread wakes from the read, which on a loaded machine can be later.
        line_deadline = time.monotonic() + 5
        while True:
            stalled_jobs = [j for j in d.jobs("ScanUpload")
                            if j.get("name", "").startswith("stalled")]
            if len(stalled_jobs) >= 3 or time.monotonic() > line_deadline:
                break
            time.sleep(0.05)
        check(len(stalled_jobs) == 3 and all(
            j.get("code") == 4 and "upload_idle_timeout" in j.get("error", "")
            for j in stalled_jobs),
              "each stalled upload has a job line: code 4 (DEADLINE_EXCEEDED), naming "
              "upload_idle_timeout", "got %s" % stalled_jobs)
        left = settle(lambda: open_spool_files(d), [])
        check(left == [], "no spool file left open by the stalled uploads", "open: %s" % left)
    finally:
        for h in locals().get("held", []):
            h.release()
            h.future.cancel()
        d.kill()


def per_caller_cap(args, tmp, known, benign):
    print("\n== B: --max-uploads-per-caller 2 ==", flush=True)
    d = Daemon(args.ckptscand, os.path.join(tmp, "b"), known, "--max-running", "1",
               "--max-queued", "8", "--max-uploads", "8", "--max-uploads-per-caller", "2")
    with open(benign, "rb") as f:
        data = f.read()
    held = []
    try:
        held = [Stalled(d, "held-%d.pkl" % i) for i in range(2)]
        for h in held:
            h.sent.wait(10)
        time.sleep(0.3)
        third, took = timed(scan_upload, d, "third.pkl", data)
        check(third[0] == "RESOURCE_EXHAUSTED" and "max_uploads_per_caller" in third[1]
              and took < PROMPT,
              "a third upload from the same caller: RESOURCE_EXHAUSTED naming "
              "max_uploads_per_caller, in %.2f s" % took, "got %s" % (third,))
        if third[0] == "RESOURCE_EXHAUSTED":
            print("  told: %s" % third[1], flush=True)
        other = other_caller_scan(args, d, benign)
        if other is not None:
            check(other[0] == 0 and "SAFE" in other[1],
                  "another caller (uid %d, the CLI) meanwhile: SAFE" % NOBODY,
                  "exit %d: %s" % other)
        held[0].release()
        check(settle(held[0].outcome, "OK 1", seconds=PROMPT) == "OK 1",
              "a held upload, finished, is SAFE", "got %s" % held[0].outcome())
        again = scan_upload(d, "again.pkl", data)
        check(again == ("OK", "SAFE"), "with one place back, the caller uploads again: SAFE",
              "got %s" % (again,))
    finally:
        for h in held:
            h.release()
            h.future.cancel()
        d.kill()


def other_caller_scan(args, d, benign):
    """The CLI's `scan --server unix:SOCKET FILE` as uid 65534: (exit, output); None (printed)
    where this cannot run as another uid. The CLI and the file are copies in a folder that uid
    can read (tests/lib/other_uid.py): the checkout and its build tree may be private."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP (this check only): another caller needs root and setpriv(1) to run the CLI "
              "as uid %d" % NOBODY, flush=True)
        return None
    why = cannot_switch_to(NOBODY)
    if why:  # e.g. Bazel's sandbox, which runs tests as root without CAP_SETUID
        print("SKIP (this check only): uid %d cannot be taken here: %s" % (NOBODY, why),
              flush=True)
        return None
    with ReadableCopy("stall-other-") as copy:
        cli = copy.add(args.ckptscan, "ckptscan")
        pkl = copy.add(benign, "other.pkl")
        unreadable = copy.unreadable_by(NOBODY)
        if unreadable:
            return 2, "uid %d cannot read its copy: %s" % (NOBODY, unreadable)
        run = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                              "--clear-groups", cli, "scan", "--server", "unix:" + d.socket, pkl],
                             capture_output=True, text=True, timeout=60, cwd=copy.dir,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    if run.returncode != 0 and ("setresuid failed" in run.stderr or
                                "setresgid failed" in run.stderr):
        print("SKIP (this check only): uid %d cannot be taken here: %s" % (
            NOBODY, run.stderr.strip()[:200]), flush=True)
        return None
    return run.returncode, (run.stdout + run.stderr).strip()[:400]


def big_model_upload(tmp):
    """The chunks of an upload of model.pt: 32 MiB of float32, far more output than the
    flow-control windows between us and the daemon hold."""
    model = os.path.join(tmp, "model.pt")
    slow_torch_zip(model, tensors=8, numel=1 << 20, pad=0)
    with open(model, "rb") as f:
        data = f.read()
    return [header("model.pt", len(data))] + [
        pb.scanner_pb2.UploadChunk(data=data[i:i + MiB]) for i in range(0, len(data), MiB)]


def unread_convert(args, tmp, known, benign):
    print("\n== C: a ConvertUpload whose caller never reads, --output-idle-timeout %g ==" % IDLE,
          flush=True)
    chunks = big_model_upload(tmp)
    d = Daemon(args.ckptscand, os.path.join(tmp, "c"), known, "--max-running", "1",
               "--max-queued", "0", "--output-idle-timeout", str(IDLE), "--max-uploads", "4",
               "--max-uploads-per-caller", "4")
    with open(benign, "rb") as f:
        small = f.read()
    try:
        started = time.monotonic()
        unread = d.scanner.ConvertUpload(iter(chunks), timeout=300)  # never iterated
        # The upload takes the slot only once its last byte is in: probes start after that,
        # or the first probe could take the slot first and the conversion be refused.
        admin = pb.scanner_pb2_grpc.AdminStub(d.channel)
        settle(lambda: unread.done() or admin.Status(
            pb.scanner_pb2.StatusRequest(), timeout=10).jobs_running == 1, True, seconds=PROMPT)
        probes = []
        freed_after = None
        while time.monotonic() - started < 60:
            out = scan_upload(d, "probe.pkl", small)
            probes.append(out[0])
            if out == ("OK", "SAFE") and "RESOURCE_EXHAUSTED" in probes:
                freed_after = time.monotonic() - started
                break
            time.sleep(0.25)
        seen = sorted(set(probes))
        print("probe scans meanwhile: %d, answers %s" % (len(probes), seen), flush=True)
        check("RESOURCE_EXHAUSTED" in probes,
              "while the conversion runs, its job holds the only slot (a probe is refused)")
        check(freed_after is not None,
              "the unread ConvertUpload gives its slot back: a later scan is SAFE %.1f s after "
              "the call began" % (freed_after or 0), "not within 60 s: %s" % seen)
        jobs = settle(lambda: len(d.jobs("ConvertUpload")), 1)
        line = (d.jobs("ConvertUpload") or [{}])[0]
        check(jobs == 1 and line.get("code") == 4 and "output_idle_timeout" in line.get(
            "error", ""), "its job line: code 4 (DEADLINE_EXCEEDED) naming output_idle_timeout",
              "got %s" % line)
        left = settle(d.spool_files, [])
        check(left == [], "the spool holds nothing of it (no job directory, no open file)",
              "left: %s" % left)
        unread.cancel()
    finally:
        d.kill()


def spool_budget(args, tmp, known, benign):
    print("\n== D: --max-spool-bytes 1M ==", flush=True)
    d = Daemon(args.ckptscand, os.path.join(tmp, "d"), known, "--max-upload-bytes", "1M",
               "--max-spool-bytes", "1M", "--max-uploads", "8", "--max-uploads-per-caller", "8")
    held = []
    try:
        # 600 KiB each (a BINBYTES opcode and its first bytes): the second does not fit.
        first = b"\x80\x03B" + (2 << 20).to_bytes(4, "little") + bytes(600 << 10)
        held.append(Stalled(d, "first.pkl", first))
        held[0].sent.wait(10)
        time.sleep(0.3)
        held.append(Stalled(d, "second.pkl", first))
        second = settle(held[1].outcome, "RESOURCE_EXHAUSTED", seconds=PROMPT)
        told = held[1].future.exception().details() if held[1].future.done() else ""
        check(second == "RESOURCE_EXHAUSTED" and "max_spool_bytes" in told,
              "a second 600 KiB upload while 600 KiB are spooled: RESOURCE_EXHAUSTED naming "
              "max_spool_bytes", "got %s %s" % (second, told))
        check(held[0].outcome() is None, "the first upload is still in flight")
    finally:
        for h in held:
            h.release()
            h.future.cancel()
        d.kill()


def held_job_places(args, tmp, known, benign):
    print("\n== E: one caller's unread ConvertUploads, --max-jobs-per-caller 2 of 4 places ==",
          flush=True)
    chunks = big_model_upload(tmp)
    d = Daemon(args.ckptscand, os.path.join(tmp, "e"), known, "--max-running", "3",
               "--max-queued", "1", "--output-idle-timeout", "120", "--max-uploads", "4",
               "--max-uploads-per-caller", "4", "--max-jobs-per-caller", "2")
    admin = pb.scanner_pb2_grpc.AdminStub(d.channel)

    def places():
        s = admin.Status(pb.scanner_pb2.StatusRequest(), timeout=10)
        return s.jobs_running + s.jobs_queued

    held = []
    try:
        # Until one is refused: each unread ConvertUpload converts, then holds its place.
        refused = None
        for _ in range(5):
            call = d.scanner.ConvertUpload(iter(chunks), timeout=300)  # never iterated
            want = len(held) + 1
            settle(lambda: call.done() or places() == want, True, seconds=PROMPT)
            if call.done():
                refused = (call.code().name, call.details())
                break
            held.append(call)
        check(len(held) == 2, "this caller's unread ConvertUploads hold 2 of the 4 job places",
              "they hold %d" % len(held))
        check(refused is not None and refused[0] == "RESOURCE_EXHAUSTED"
              and "max_jobs_per_caller" in refused[1],
              "its next one: RESOURCE_EXHAUSTED naming max_jobs_per_caller", "got %s" % (refused,))
        if refused is not None:
            print("  told: %s" % refused[1], flush=True)
        started = time.monotonic()
        other = other_caller_scan(args, d, benign)
        took = time.monotonic() - started
        if other is not None:
            check(other[0] == 0 and "SAFE" in other[1] and took < PROMPT,
                  "another caller (uid %d, the CLI) meanwhile: SAFE in %.2f s" % (NOBODY, took),
                  "exit %d: %s" % other)
        check(held and all(not h.done() for h in held),
              "the first caller's ConvertUploads still hold their places")
    finally:
        for h in held:
            h.cancel()
        d.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptscand", required=True)
    parser.add_argument("--ckptscan", required=True, help="the CLI, as another caller")
    parser.add_argument("--fixtures", required=True)
    add_client_args(parser)
    parser.add_argument("--only", choices=("a", "b", "c", "d", "e"),
                        help="run one scenario only")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (daemon logs)")
    parser.add_argument("--skip-exit", type=int, default=77)
    args = parser.parse_args()
    global grpc, pb
    try:
        import grpc as grpc_module
        import google.protobuf  # noqa: F401
    except ImportError as missing:
        print("SKIPPED: the upload stall test needs Debian's python3-grpcio and "
              "python3-protobuf (scripts/setup.sh installs them): %s" % missing)
        sys.exit(args.skip_exit)
    grpc = grpc_module
    tmp = short_tmpdir("ckptscan-stall-")
    os.chmod(tmp, 0o755)
    try:
        pb = client_package(args, tmp)._stubs.load()
        known = known_flags(args.ckptscand)
        benign = os.path.join(os.path.abspath(args.fixtures), "pickles", "benign",
                              "concat_two_pickles.pkl")
        scenarios = {"a": stalled_uploads, "b": per_caller_cap, "c": unread_convert,
                     "d": spool_budget, "e": held_job_places}
        for key, run in scenarios.items():
            if args.only in (None, key):
                os.makedirs(os.path.join(tmp, key + "-files"))
                run(args, os.path.join(tmp, key + "-files"), known, benign)
    finally:
        if args.keep:
            print("kept %s (daemon logs: */log)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
