#!/usr/bin/python3
"""End-to-end: the client installed offline with pip, and scan_then_load.

    load_test.py --ckptscan PATH --ckptscand PATH --fixtures DIR [--proto-dir DIR]
                 [unittest args]

Builds a venv with --system-site-packages (Debian's torch, grpcio, protobuf, setuptools, wheel)
in a temporary folder, copies clients/python and proto/ there in the repository's layout, runs
`pip install --no-index --no-build-isolation` on the copy, and deletes the copy. The checks then
run in the venv's python with -I (no PYTHONPATH, not this script's folder on sys.path) from a
working folder outside the source tree, so what they import is the installed package, with the
protos it packaged. They prove:
  - the installed copy carries its own protos, gRPC stubs generated when it was built, and
    py.typed, and uses those stubs (no CKPTSCAN_PROTO_DIR, no source tree, nothing compiled);
  - it scans through ckptscand with no protobuf compiler at run time: no protoc or
    grpc_python_plugin on PATH and the grpc_tools module hidden;
  - a SAFE checkpoint loads, through the CLI and through ckptscand, into the same tensors (and
    shared storages) as torch.load gives;
  - a DANGEROUS one (a fixture its manifest calls DANGEROUS, and a checkpoint whose payload
    would create a marker file, which an unsafe torch.load here does create) raises
    UnsafeCheckpointError with verdict DANGEROUS and the report; torch.load is never called and
    the marker never appears;
  - a file swapped for a SAFE one between the read and the scan is not loaded
    (DigestMismatchError): what was scanned is not what was read;
  - stub scanners: a SAFE report of another digest or of none, a SAFE report with exit 1, no
    JSON, exit 64, a SAFE report whose file is DANGEROUS, a report of no file: none loads;
  - no CLI (ckptscan= missing, $CKPTSCAN_BIN missing, none on PATH) and an unreachable daemon
    raise ScanUnavailableError; $CKPTSCAN_BIN and PATH are used when given;
  - through ckptscand (a unix socket in a temp folder, --root): the same results, the same
    report as the CLI's, and a lying client (reporting on other bytes) is caught.

Exits 77 (the test's SKIP_RETURN_CODE) with the reason when Debian's python3-torch,
python3-grpcio, python3-protobuf, python3-venv, python3-setuptools or python3-wheel is missing,
or the build's protobuf compiler (protobuf-compiler-grpc, or python3-grpc-tools).
"""

import argparse
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
# The test harness only (stdlib; it imports no ckptscan_client): the checks must see the
# installed package, never the source tree's clients/python.
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "lib"))
from daemon_harness import Daemon, short_tmpdir  # noqa: E402

# What the package copy is made of (pyproject.toml names README.md as its readme).
PACKAGE_FILES = ("pyproject.toml", "setup.py", "README.md")

ARGS = None  # set in main()

# Checkpoints torch 1.13's weights_only loader reads (train_checkpoint.pt holds floats, which
# it does not): plain tensors of every dtype, and tensors sharing storages.
SAFE_FIXTURES = ("torch/dtypes.pt", "torch/tied.pt")
# A torch archive whose manifest entry says DANGEROUS (its payload runs `true`).
DANGEROUS_FIXTURE = ("containers", "malicious/datapkl_deflated.pt")


def missing_modules():
    """The reason to skip, or None."""
    needs = (("torch", "python3-torch"), ("grpc", "python3-grpcio"),
             ("google.protobuf", "python3-protobuf"), ("ensurepip", "python3-venv"),
             ("venv", "python3-venv"), ("setuptools", "python3-setuptools"),
             ("wheel", "python3-wheel"))
    for module, package in needs:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            return "scan_then_load's test needs Debian's %s (no module %s)" % (package, module)
    # The build compiles the stubs the package ships, with either generator _stubs.py knows.
    if not (shutil.which("protoc") and shutil.which("grpc_python_plugin")) \
            and importlib.util.find_spec("grpc_tools") is None:
        return ("the package's build needs a protobuf compiler: Debian's protobuf-compiler and "
                "protobuf-compiler-grpc, or python3-grpc-tools")
    return None


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data, mode=0o644):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


# ---------------------------------------------------------------------------------------------
# Outside the venv: install, then run this file again inside it.

def clean_env(**extra):
    """The environment of the pip and venv runs: nothing that would point Python at the source
    tree or the CLI at a daemon."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PIP_", "CKPTSCAN_"))}
    env.update(PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    env.update(extra)
    return env


def run_logged(what, command, **kwargs):
    start = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    print("%s: exit %d in %.1f s" % (what, run.returncode, time.monotonic() - start))
    if run.returncode != 0:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
        raise SystemExit("%s failed: %s" % (what, " ".join(command)))
    return run


def install(tmp):
    """The venv, with a copy of clients/python installed the documented way; returns its python.
    The copy is deleted afterwards: the installed package must stand alone."""
    src = os.path.join(tmp, "src")
    package = os.path.join(src, "clients", "python")
    os.makedirs(os.path.join(package, "ckptscan_client"))
    for name in PACKAGE_FILES:
        shutil.copyfile(os.path.join(HERE, name), os.path.join(package, name))
    modules = os.path.join(HERE, "ckptscan_client")
    for name in sorted(os.listdir(modules)):
        if name.endswith(".py") or name == "py.typed":
            shutil.copyfile(os.path.join(modules, name),
                            os.path.join(package, "ckptscan_client", name))
    shutil.copytree(os.path.join(ARGS.proto_dir, "ckptscan", "v1"),
                    os.path.join(src, "proto", "ckptscan", "v1"))

    venv = os.path.join(tmp, "venv")
    run_logged("venv", [sys.executable, "-m", "venv", "--system-site-packages", venv],
               cwd=tmp, env=clean_env())
    python = os.path.join(venv, "bin", "python")
    run_logged("pip install", [python, "-m", "pip", "install", "--no-index",
                               "--no-build-isolation", "./src/clients/python"],
               cwd=tmp, env=clean_env())
    # pip builds in the source folder: the build must leave nothing there (setup.py).
    left = sorted(set(os.listdir(package)) - set(PACKAGE_FILES) - {"ckptscan_client"})
    if left:
        raise SystemExit("the build left %s in the package folder" % left)
    shutil.rmtree(src)
    return python


def outer(rest):
    tmp = short_tmpdir("ckptscan-load-")
    try:
        python = install(tmp)
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        command = [python, "-I", os.path.abspath(__file__), "--inner", "--work", work,
                   "--ckptscan", ARGS.ckptscan, "--ckptscand", ARGS.ckptscand,
                   "--fixtures", ARGS.fixtures, "--proto-dir", ARGS.proto_dir] + rest
        return subprocess.run(command, cwd=work, check=False,
                              env=clean_env(CKPTSCAN_STUBS_DIR=os.path.join(tmp, "stubs"))
                              ).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Inside the venv: the checks, against the installed package.

class Touch:
    """Pickled as posix.system("touch MARKER"): a payload that leaves a trace when it runs."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch " + shlex.quote(self.marker),))


class LoadTestCase(unittest.TestCase):
    """Copies of the fixtures in a work folder, and a checkpoint with a marker payload."""

    @classmethod
    def setUpClass(cls):
        import torch  # pylint: disable=import-outside-toplevel
        import ckptscan_client  # pylint: disable=import-outside-toplevel
        cls.torch = torch
        cls.cc = ckptscan_client
        cls.tmp = tempfile.mkdtemp(prefix="case-", dir=ARGS.work)
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.safe = {}
        for rel in SAFE_FIXTURES:
            cls.safe[rel] = shutil.copy(os.path.join(ARGS.fixtures, rel), cls.tmp)
        folder, name = DANGEROUS_FIXTURE
        with open(os.path.join(ARGS.fixtures, folder, "manifest.json")) as f:
            entry = [e for e in json.load(f) if e["file"] == name]
        assert entry and entry[0]["expect"] == "DANGEROUS", (DANGEROUS_FIXTURE, entry)
        cls.dangerous = shutil.copy(os.path.join(ARGS.fixtures, folder, name), cls.tmp)
        # A torch checkpoint whose unpickling runs `touch MARKER`.
        cls.marker = os.path.join(cls.tmp, "MARKER")
        cls.evil = os.path.join(cls.tmp, "evil.pt")
        torch.save({"weight": torch.zeros(3), "payload": Touch(cls.marker)}, cls.evil)

    def spy(self):
        """torch.load, wrapped: call_count says whether scan_then_load called it."""
        return mock.patch.object(self.torch, "load", wraps=self.torch.load)

    def assertSameState(self, got, path):
        """got is what torch.load gives for PATH: same keys, tensors (dtype, shape, strides,
        values) and storages shared the same way."""
        want = self.torch.load(path, map_location="cpu")
        self.assertEqual(type(got), type(want))
        self.assertEqual(list(got), list(want))
        for key, w in want.items():
            g = got[key]
            self.assertEqual((g.dtype, g.shape, g.stride(), g.storage_offset()),
                             (w.dtype, w.shape, w.stride(), w.storage_offset()), key)
            self.assertTrue(self.torch.equal(g, w), key)

        def sharing(state):
            groups = {}
            for key, t in state.items():
                groups.setdefault(t.storage().data_ptr(), []).append(key)
            return sorted(groups.values())
        self.assertEqual(sharing(got), sharing(want))

    def assertNotLoaded(self, error_type, path, **kwargs):
        """scan_then_load(PATH) raises error_type (a CheckpointScanError), never calls
        torch.load, and the marker payload never ran. Returns the exception."""
        with self.spy() as load, self.assertRaises(error_type) as caught:
            self.cc.scan_then_load(path, **kwargs)
        self.assertEqual(load.call_count, 0)
        self.assertFalse(os.path.exists(self.marker))
        self.assertIsInstance(caught.exception, self.cc.CheckpointScanError)
        self.assertEqual(caught.exception.path, path)
        return caught.exception


class InstalledTest(LoadTestCase):

    def test_the_installed_package_with_its_own_protos_and_stubs(self):
        import ckptscan_client._stubs as stubs  # pylint: disable=import-outside-toplevel
        package = os.path.dirname(os.path.realpath(self.cc.__file__))
        self.assertTrue(package.startswith(os.path.realpath(sys.prefix) + os.sep), package)
        self.assertIn("site-packages", package)
        for var in ("PYTHONPATH", "CKPTSCAN_PROTO_DIR", "CKPTSCAN_BIN", "CKPTSCAN_SERVER"):
            self.assertNotIn(var, os.environ)
        self.assertNotIn(HERE, [os.path.realpath(p) for p in sys.path])
        self.assertFalse(os.getcwd().startswith(os.path.dirname(os.path.dirname(HERE))))
        self.assertEqual(stubs.find_proto_dir(), os.path.join(package, "proto"))
        for name in ("report.proto", "scanner.proto"):
            self.assertEqual(read(os.path.join(package, "proto", "ckptscan", "v1", name)),
                             read(os.path.join(ARGS.proto_dir, "ckptscan", "v1", name)))
        # The stubs are the ones the build put in the package, not compiled now: the cache the
        # run-time fallback would write to stays empty.
        loaded = stubs.load()
        self.assertEqual((loaded.source, loaded.directory),
                         ("shipped", os.path.join(package, "_generated")))
        self.assertTrue(loaded.report_pb2.__file__.startswith(loaded.directory + os.sep))
        self.assertFalse(os.listdir(os.environ["CKPTSCAN_STUBS_DIR"])
                         if os.path.isdir(os.environ["CKPTSCAN_STUBS_DIR"]) else [])
        self.assertEqual(self.cc.verdict_name(loaded.report_pb2.VERDICT_DANGEROUS), "DANGEROUS")
        # PEP 561: type checkers read the package's hints.
        self.assertTrue(os.path.isfile(os.path.join(package, "py.typed")))

    def test_the_marker_payload_is_live(self):
        # The control: an unsafe torch.load of evil.pt does run the payload (in a child).
        subprocess.run([sys.executable, "-c", "import sys, torch; "
                        "torch.load(sys.argv[1], weights_only=False)", self.evil],
                       check=True, capture_output=True)
        self.assertTrue(os.path.exists(self.marker))
        os.unlink(self.marker)


class CliTest(LoadTestCase):

    def load(self, path, **kwargs):
        kwargs.setdefault("ckptscan", ARGS.ckptscan)
        with self.spy() as load:
            got = self.cc.scan_then_load(path, map_location="cpu", **kwargs)
        self.assertEqual(load.call_count, 1)
        return got

    def test_safe_checkpoints_load_as_torch_load_gives_them(self):
        for rel, path in self.safe.items():
            with self.subTest(rel):
                self.assertSameState(self.load(path), path)

    def test_dangerous_fixture_is_not_loaded(self):
        e = self.assertNotLoaded(self.cc.UnsafeCheckpointError, self.dangerous,
                                 ckptscan=ARGS.ckptscan)
        self.assertEqual(e.verdict, "DANGEROUS")
        self.assertEqual(e.report["verdict"], "DANGEROUS")
        self.assertEqual(e.report["files"][0]["path"], self.dangerous)
        self.assertEqual(e.report["files"][0]["sha256"], sha256(read(self.dangerous)))
        self.assertIn("DANGEROUS", str(e))

    def test_marker_payload_is_dangerous_and_never_runs(self):
        e = self.assertNotLoaded(self.cc.UnsafeCheckpointError, self.evil, ckptscan=ARGS.ckptscan)
        self.assertEqual(e.verdict, "DANGEROUS")
        self.assertIn("posix.system", [f["global"] for f in e.report["files"][0]["findings"]])

    def test_file_swapped_between_read_and_scan_is_not_loaded(self):
        # evil.pt when scan_then_load reads it; a wrapper around the CLI then puts a SAFE
        # checkpoint in its place before the scanner opens it. The scan is SAFE, of other bytes.
        target = shutil.copy(self.evil, os.path.join(self.tmp, "swapped.pt"))
        safe = self.safe["torch/dtypes.pt"]
        wrapper = write(os.path.join(self.tmp, "swapping-ckptscan"), (
            "#!/bin/sh\ncp %s %s\nexec %s \"$@\"\n" % (
                shlex.quote(safe), shlex.quote(target), shlex.quote(ARGS.ckptscan))).encode(),
            0o755)
        e = self.assertNotLoaded(self.cc.DigestMismatchError, target, ckptscan=wrapper)
        self.assertEqual(e.expected, sha256(read(self.evil)))
        self.assertEqual(e.scanned, sha256(read(safe)))
        self.assertEqual(e.report["verdict"], "SAFE")
        self.assertEqual(read(target), read(safe))  # the swap happened

    def stub(self, name, stdout, exit_code):
        """A fake ckptscan printing STDOUT (bytes) and exiting EXIT_CODE (None: killed by
        SIGABRT, as a crash)."""
        out = write(os.path.join(self.tmp, name + ".out"), stdout)
        end = "kill -ABRT $$" if exit_code is None else "exit %d" % exit_code
        return write(os.path.join(self.tmp, name), (
            "#!/bin/sh\ncat %s\n%s\n" % (shlex.quote(out), end)).encode(), 0o755)

    def test_stub_scanners_that_are_not_a_safe_report_of_these_bytes(self):
        path = self.safe["torch/dtypes.pt"]
        run = subprocess.run([ARGS.ckptscan, "scan", "--format", "json", "--digest", "sha256",
                              path], capture_output=True, check=True)
        real = json.loads(run.stdout)

        def report(change):
            r = json.loads(run.stdout)
            change(r)
            return json.dumps(r).encode()

        # The real report through a stub: it loads (the stubs below differ only as they say).
        self.load(path, ckptscan=self.stub("as-is", run.stdout, 0))
        other = "0" * 64
        cases = (
            ("other-digest", report(lambda r: r["files"][0].update(sha256=other)), 0,
             self.cc.DigestMismatchError),
            ("no-digest", report(lambda r: r["files"][0].update(sha256="")), 0,
             self.cc.DigestMismatchError),
            ("safe-exit-1", run.stdout, 1, self.cc.ScanUnavailableError),
            ("not-json", b"scanned, all fine\n", 0, self.cc.ScanUnavailableError),
            ("other-schema", report(lambda r: r.update(schema="x")), 0,
             self.cc.ScanUnavailableError),
            ("usage", b"", 64, self.cc.ScanUnavailableError),
            ("crash", run.stdout, None, self.cc.ScanUnavailableError),
            ("file-dangerous", report(lambda r: r["files"][0].update(verdict="DANGEROUS")), 0,
             self.cc.UnsafeCheckpointError),
            ("error", report(lambda r: r.update(verdict="ERROR")), 2,
             self.cc.UnsafeCheckpointError),
            ("no-file", report(lambda r: r.update(files=[])), 0, self.cc.ScanUnavailableError),
        )
        self.assertEqual(real["verdict"], "SAFE")
        for name, stdout, exit_code, error in cases:
            with self.subTest(name):
                e = self.assertNotLoaded(error, path, ckptscan=self.stub(name, stdout, exit_code))
                # Each says why; none ends on an empty quote of the scanner's (empty) stderr.
                self.assertFalse(str(e).rstrip().endswith(":"), str(e))
                if name == "other-digest":
                    self.assertEqual((e.expected, e.scanned), (sha256(read(path)), other))
                if error is self.cc.UnsafeCheckpointError:
                    self.assertIn(e.verdict, ("DANGEROUS", "ERROR"))

    def test_no_cli_is_unavailable(self):
        path = self.safe["torch/dtypes.pt"]
        empty = tempfile.mkdtemp(dir=self.tmp)
        e = self.assertNotLoaded(self.cc.ScanUnavailableError, path,
                                 ckptscan=os.path.join(empty, "ckptscan"))
        self.assertIsNone(e.code)
        with mock.patch.dict(os.environ, {"PATH": empty}):
            self.assertNotLoaded(self.cc.ScanUnavailableError, path)
            with mock.patch.dict(os.environ, {"CKPTSCAN_BIN": os.path.join(empty, "nope")}):
                self.assertNotLoaded(self.cc.ScanUnavailableError, path)
            # $CKPTSCAN_BIN is used when set; ckptscan= wins over it.
            with mock.patch.dict(os.environ, {"CKPTSCAN_BIN": ARGS.ckptscan}):
                self.assertSameState(self.load(path, ckptscan=None), path)
                self.assertNotLoaded(self.cc.ScanUnavailableError, path,
                                     ckptscan=os.path.join(empty, "ckptscan"))
        # Else `ckptscan` on PATH.
        with mock.patch.dict(os.environ, {"PATH": os.path.dirname(ARGS.ckptscan)}):
            self.assertSameState(self.load(path, ckptscan=None), path)

    def test_weights_only_cannot_be_turned_off(self):
        with self.spy() as load, self.assertRaises(TypeError):
            self.cc.scan_then_load(self.safe["torch/dtypes.pt"], ckptscan=ARGS.ckptscan,
                                   weights_only=False)
        self.assertEqual(load.call_count, 0)

    def test_not_a_regular_file(self):
        fifo = os.path.join(self.tmp, "fifo.pt")
        os.mkfifo(fifo)
        self.assertNotLoaded(self.cc.ScanUnavailableError, fifo, ckptscan=ARGS.ckptscan)
        # A folder: the same error naming the path, and no descriptor left open.
        folder = os.path.join(self.tmp, "folder.pt")
        os.mkdir(folder)
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(5):
            self.assertNotLoaded(self.cc.ScanUnavailableError, folder, ckptscan=ARGS.ckptscan)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)


class DaemonTest(LoadTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        root = os.path.join(cls.tmp, "root")
        os.makedirs(root)
        cls.daemon = Daemon(ARGS.ckptscand, os.path.join(cls.tmp, "daemon"), "--root", root)
        cls.addClassCleanup(cls.daemon.stop)

    def load(self, path, server):
        with self.spy() as load:
            got = self.cc.scan_then_load(path, server=server, map_location="cpu")
        self.assertEqual(load.call_count, 1)
        return got

    def test_safe_checkpoints_load_as_torch_load_gives_them(self):
        with self.cc.ScanClient(self.daemon.address, timeout=30) as client:
            for server in (self.daemon.address, client):
                for rel, path in self.safe.items():
                    with self.subTest(rel, server=str(server)):
                        self.assertSameState(self.load(path, server), path)

    def test_dangerous_is_not_loaded_with_the_clis_report(self):
        for path in (self.dangerous, self.evil):
            with self.subTest(path):
                e = self.assertNotLoaded(self.cc.UnsafeCheckpointError, path,
                                         server=self.daemon.address)
                self.assertEqual(e.verdict, "DANGEROUS")
                cli = self.assertNotLoaded(self.cc.UnsafeCheckpointError, path,
                                           ckptscan=ARGS.ckptscan)
                self.assertEqual(e.report, cli.report)

    def test_a_report_of_other_bytes_is_not_loaded(self):
        # A client that uploads other (SAFE) bytes than it was given: the digest catches it.
        other = read(self.safe["torch/tied.pt"])

        class Lying(self.cc.ScanClient):
            def scan_bytes(self, name, data, **kwargs):
                return super().scan_bytes(name, other, **kwargs)

        path = self.safe["torch/dtypes.pt"]
        with Lying(self.daemon.address, timeout=30) as client:
            e = self.assertNotLoaded(self.cc.DigestMismatchError, path, server=client)
        self.assertEqual((e.expected, e.scanned), (sha256(read(path)), sha256(other)))

    def test_the_installed_client_needs_no_protobuf_compiler(self):
        # A child with neither generator: PATH is an empty folder (no protoc, no
        # grpc_python_plugin) and an import hook hides grpc_tools. The stub cache is fresh, so
        # nothing compiled earlier can stand in for the shipped stubs.
        empty = tempfile.mkdtemp(prefix="no-protoc-", dir=self.tmp)
        cache = os.path.join(self.tmp, "no-protoc-stubs")
        self.assertIsNone(shutil.which("protoc", path=empty))
        env = dict(os.environ, PATH=empty, CKPTSCAN_STUBS_DIR=cache)
        run = subprocess.run([sys.executable, "-I", "-c", NO_COMPILER_CHILD,
                              self.daemon.address], env=env, cwd=ARGS.work,
                             capture_output=True, text=True, timeout=60, check=False)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertEqual(json.loads(run.stdout), {"source": "shipped", "verdict": "SAFE",
                                                  "verdict_type": "Verdict",
                                                  "grpc_tools": "hidden"})
        self.assertFalse(os.path.exists(cache))

    def test_unreachable_daemon_is_unavailable(self):
        e = self.assertNotLoaded(self.cc.ScanUnavailableError, self.evil,
                                 server="unix:" + os.path.join(self.tmp, "none.sock"))
        self.assertEqual(e.code, "UNAVAILABLE")


# Run by the installed venv's python with PATH holding no compiler: a scan through the daemon
# (argv[1]) must work from the shipped stubs alone. Prints what it used, as JSON.
NO_COMPILER_CHILD = """
import json, shutil, sys

class HideGrpcTools:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc_tools" or name.startswith("grpc_tools."):
            raise ImportError("grpc_tools is hidden by load_test")
        return None

sys.meta_path.insert(0, HideGrpcTools())
assert shutil.which("protoc") is None and shutil.which("grpc_python_plugin") is None
try:
    import grpc_tools
    hidden = "importable"
except ImportError:
    hidden = "hidden"
import ckptscan_client
from ckptscan_client import _stubs
with ckptscan_client.ScanClient(sys.argv[1], timeout=30) as client:
    report = client.scan_bytes("tiny.pkl", b"\\x80\\x02N.")
print(json.dumps({"source": _stubs.load().source, "grpc_tools": hidden,
                  "verdict": ckptscan_client.verdict_name(report.verdict),
                  "verdict_type": type(report.verdict).__name__}))
"""


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptscan", required=True)
    parser.add_argument("--ckptscand", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--proto-dir", default=os.path.join(HERE, "..", "..", "proto"),
                        help="the protos to package (default: the source tree's proto/)")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    ARGS, rest = parser.parse_known_args()
    for name in ("ckptscan", "ckptscand", "fixtures", "proto_dir"):
        setattr(ARGS, name, os.path.abspath(getattr(ARGS, name)))
    if not ARGS.inner:
        reason = missing_modules()
        if reason:
            print("SKIPPED: " + reason)
            sys.exit(77)
        sys.exit(outer(rest))
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
