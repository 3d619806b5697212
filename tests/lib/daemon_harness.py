"""What the Python tests that run live ckptscand daemons share (tests/replicas,
tests/faults/daemon_faults_test.py, tests/attacks/upload_stall_test.py, and the Python client's
client_test.py and load_test.py): PASS/FAIL checks, a temp dir short enough for unix sockets, a
ckptscand of a test's own (Daemon), the Python client's gRPC stubs
(clients/python/ckptscan_client, generated from our protos on first use) set up from the same
command-line arguments, and a torch archive written by hand.

Stdlib only: a test calls require_grpc() before it imports grpc.
"""

import json
import resource
import os
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

failures = []


def require_grpc(test):
    """Exits 77 (the tests' SKIP_RETURN_CODE) with the reason when Debian's python3-grpcio or
    python3-protobuf is missing."""
    try:
        import grpc  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as missing:
        print("SKIPPED: %s needs Debian's python3-grpcio and python3-protobuf "
              "(scripts/setup.sh installs them): %s" % (test, missing))
        sys.exit(77)


def log_events(path):
    """The JSON lines of a daemon's log (others, e.g. a partial last line, are skipped)."""
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def child_pids(pid):
    """The pids of a process's children, from every thread's /proc children list ([] once it
    is gone)."""
    kids = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def check(ok, what, detail=""):
    """Prints PASS/FAIL: what (-- detail when it failed); remembers failures."""
    print("%s: %s%s" % ("PASS" if ok else "FAIL", what, (" -- " + detail) if detail and not ok
                        else ""), flush=True)
    if not ok:
        failures.append(what)
    return ok


def settle(probe, want, seconds=5.0):
    """Polls probe() until it equals want or `seconds` pass (connection teardown and spool
    cleanup end just after a call's answer); returns the last value. The check that follows is
    on the value, not on the time."""
    deadline = time.monotonic() + seconds
    value = probe()
    while value != want and time.monotonic() < deadline:
        time.sleep(0.05)
        value = probe()
    return value


def short_tmpdir(prefix):
    """A temp dir whose paths leave room for a socket name inside sun_path (108 bytes)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    if len(tmp) > 60:
        os.rmdir(tmp)
        tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    return tmp


class Daemon:
    """A ckptscand of a test's own: socket, state and log in DIRECTORY (made here), FLAGS after
    them; started and waited for (20 s) by its "listening" JSON line on stderr, as
    daemon/daemon_test.sh does; killed by stop()."""

    def __init__(self, ckptscand, directory, *flags):
        os.makedirs(directory)
        self.socket = os.path.join(directory, "s.sock")
        self.log_path = os.path.join(directory, "log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [ckptscand, "--socket", self.socket, "--state-dir",
                 os.path.join(directory, "state"), *flags],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if b'"event":"listening"' in self.log():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError("ckptscand did not start: %s" % self.log().decode(errors="replace"))

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read()

    @property
    def address(self):
        return "unix:" + self.socket

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def add_client_args(parser):
    """--proto-dir, --stubs-dir, --client-dir: where the client's stubs come from."""
    parser.add_argument("--proto-dir", help="the protos (default: the source tree's proto/)")
    parser.add_argument("--stubs-dir", help="where the stubs are generated (default: a temp dir)")
    parser.add_argument("--client-dir", default=os.path.join(HERE, "..", "..", "clients", "python"),
                        help="the Python client, for its stub generation (default: the source "
                        "tree's clients/python)")


def client_package(args, tmp):
    """Imports and returns clients/python's ckptscan_client package, its stubs generated from
    --proto-dir into --stubs-dir (or TMP/stubs)."""
    sys.path.insert(0, os.path.abspath(args.client_dir))
    import ckptscan_client  # noqa: E402
    from ckptscan_client import _stubs  # noqa: E402,F401  (loaded into the package)
    if args.proto_dir:
        os.environ["CKPTSCAN_PROTO_DIR"] = os.path.abspath(args.proto_dir)
    os.environ["CKPTSCAN_STUBS_DIR"] = (os.path.abspath(args.stubs_dir) if args.stubs_dir
                                        else os.path.join(tmp, "stubs"))
    return ckptscan_client


def finish():
    """Prints the outcome and exits 1 if a check failed."""
    if failures:
        print("FAILED: %d check(s): %s" % (len(failures), "; ".join(failures)))
        sys.exit(1)
    print("OK: all checks passed")


def slow_torch_zip(path, tensors=4, numel=1 << 20, pad=3_000_000):
    """A torch archive (zip, stored) of `tensors` float32 tensors of `numel` each, written by
    hand (no torch needed), whose data.pkl starts with None memoized `pad` times (then popped)
    so that the worker takes about a second over it."""
    def text(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def int4(n):
        return b"J" + struct.pack("<i", n)
    p = b"\x80\x02N" + b"\x94" * pad + b"0ccollections\nOrderedDict\n)R("
    for t in range(tensors):
        p += text("layers.%d.weight" % t) + b"ctorch._utils\n_rebuild_tensor_v2\n(("
        p += text("storage") + b"ctorch\nFloatStorage\n" + text(str(t)) + text("cpu")
        p += int4(numel) + b"tQ" + b"K\x00" + int4(numel) + b"\x85K\x01\x85\x89"
        p += b"ccollections\nOrderedDict\n)RtR"
    p += b"u."
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("slow/data.pkl", p)
        block = struct.pack("<f", 0.5) * numel
        for t in range(tensors):
            z.writestr("slow/data/%d" % t, block)
        z.writestr("slow/version", "3\n")


class MeasuredDaemon:
    """A ckptscand on a unix socket in DIR (state in DIR/state), started and waited for (its
    "listening" log line), whose memory, descriptors and threads a test reads (stats, show).
    `flags`: (name, value or None) pairs; those it does not know are left out, with a note (so a
    test of a new defence runs against an older daemon too, and shows the attack working there).
    `nofile`: RLIMIT_NOFILE (soft = hard) to start it with."""

    def __init__(self, binary, directory, flags, nofile=None, env=None):
        os.makedirs(directory)
        self.socket = os.path.join(directory, "s.sock")
        self.log_path = os.path.join(directory, "log")
        known = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
        args = []
        for name, value in flags:
            if name + " " in known or name + "," in known:
                args += [name] if value is None else [name, value]
            else:
                print("note: this ckptscand has no %s: started without it" % name)

        def limits():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "--socket", self.socket, "--state-dir", os.path.join(directory, "state"),
                 *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                preexec_fn=limits, env=env)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(e.get("event") == "listening" for e in log_events(self.log_path)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise AssertionError("ckptscand did not start: " +
                             open(self.log_path, "rb").read().decode(errors="replace")[-2000:])

    def stats(self):
        """VmRSS and VmHWM (MiB), open descriptors, threads."""
        s = {}
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                key, value = line.split(":", 1)
                if key in ("VmRSS", "VmHWM"):
                    s[key] = int(value.split()[0]) // 1024
                elif key == "Threads":
                    s[key] = int(value)
        s["fds"] = len(os.listdir("/proc/%d/fd" % self.pid))
        return s

    def show(self, when):
        s = self.stats()
        print("daemon %s: VmRSS %d MiB, VmHWM %d MiB, %d descriptors, %d threads" % (
            when, s["VmRSS"], s["VmHWM"], s["fds"], s["Threads"]), flush=True)
        return s

    def events(self, name):
        return [e for e in log_events(self.log_path) if e.get("event") == name]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def stride0_torch_zip(path, numel=1 << 28):
    """A torch archive (zip, stored) of one float32 tensor of `numel` elements that is a stride-0
    view of a storage holding ONE float: a few hundred bytes that torch.load reads as a tensor of
    numel x 4 bytes (1 GiB by default), and that a conversion writes out densely."""
    def text(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b
    p = b"\x80\x02ccollections\nOrderedDict\n)R(" + text("w")
    p += b"ctorch._utils\n_rebuild_tensor_v2\n((" + text("storage") + b"ctorch\nFloatStorage\n"
    p += text("0") + text("cpu") + b"K\x01tQK\x00J" + struct.pack("<i", numel) + b"\x85K\x00\x85"
    p += b"\x89ccollections\nOrderedDict\n)RtRu."
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("e/data.pkl", p)
        z.writestr("e/data/0", struct.pack("<f", 0.5))
        z.writestr("e/version", "3\n")
