#!/usr/bin/python3
"""End-to-end: the Python client against a real ckptscand, checked against the real CLI.

    client_test.py --ckptscan PATH --ckptscand PATH --fixtures DIR [--stubs-dir DIR]
                   [--proto-dir DIR] [unittest args]

Proves: scan_bytes and scan_path give the report `ckptscan scan --format json` prints for the
same file, to the byte (report_to_dict), SAFE for a torch checkpoint and DANGEROUS for a
malicious pickle; convert_bytes returns the bytes `ckptscan convert` writes and a signature
that `ckptscan verify --pubkey` accepts with the daemon's public key, and convert_path writes
the same; a path outside the roots is PERMISSION_DENIED, an upload over the daemon's cap
RESOURCE_EXHAUSTED, a call past its deadline DEADLINE_EXCEEDED; over TCP, mTLS serves a client
with a certificate and refuses one without; a malformed answer from the daemon is DATA_LOSS;
an error whose status has no message still says which call failed with which code; the results
are typed dataclasses with Verdict, Severity and ErrorCode enums that match the protos, over the
messages they keep; the public calls carry type hints; in a source tree the stubs are generated
(outside it) from the protos as they are, and with no compiler the error says what to install.

Exits 77 (the test's SKIP_RETURN_CODE) with the reason when Debian's python3-grpcio or
python3-protobuf is missing.
"""

import argparse
import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import typing
import unittest

try:
    import grpc  # noqa: F401
    import google.protobuf  # noqa: F401
except ImportError as missing:
    print("SKIPPED: the Python client needs Debian's python3-grpcio and python3-protobuf "
          "(scripts/setup.sh installs them): %s" % missing)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "lib"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import daemon_harness  # noqa: E402
from daemon_harness import short_tmpdir  # noqa: E402

import ckptscan_client  # noqa: E402  (after the skip check)
from ckptscan_client import ScanClient, ScanClientError, report_to_dict  # noqa: E402
from ckptscan_client import ErrorCode, Severity, Verdict  # noqa: E402
from ckptscan_client import _stubs  # noqa: E402

ARGS = None  # set in main()


def cli(*args, check_rc=None):
    """Runs the ckptscan CLI; returns (exit code, stdout)."""
    run = subprocess.run([ARGS.ckptscan, *args], capture_output=True, check=False)
    if check_rc is not None and run.returncode != check_rc:
        raise AssertionError("ckptscan %s: exit %d, want %d: %s %s" % (
            " ".join(args), run.returncode, check_rc, run.stdout[:600], run.stderr[:600]))
    return run.returncode, run.stdout


def cli_report(path, *flags):
    """`ckptscan scan --format json PATH`: (the printed text, the parsed report)."""
    _, out = cli("scan", "--format", "json", *flags, path)
    return out.decode(), json.loads(out)


def as_cli_text(report):
    """The client's report as the CLI prints it (docs/report.md: 2-space indent, UTF-8)."""
    return json.dumps(report_to_dict(report), indent=2, ensure_ascii=False) + "\n"


def Daemon(directory, *flags):  # noqa: N802  (a class's constructor, with our binary)
    return daemon_harness.Daemon(ARGS.ckptscand, directory, *flags)


class DaemonTestCase(unittest.TestCase):
    """One daemon for the class, with a root holding copies of fixtures, a folder outside it,
    and symlinks from the root to outside."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = short_tmpdir("ckptscan-pyclient-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        fx = ARGS.fixtures
        cls.torch = os.path.join(fx, "torch", "train_checkpoint.pt")
        cls.evil = os.path.join(fx, "pickles", "malicious", "inst_os_system.pkl")
        cls.root = os.path.join(cls.tmp, "root")
        cls.outside = os.path.join(cls.tmp, "outside")
        os.makedirs(os.path.join(cls.root, "models"))
        os.makedirs(cls.outside)
        for src in (cls.torch, cls.evil):
            shutil.copy(src, os.path.join(cls.root, "models"))
        shutil.copy(cls.torch, os.path.join(cls.outside, "secret.pt"))
        os.symlink(os.path.join(cls.outside, "secret.pt"),
                   os.path.join(cls.root, "models", "link-out.pt"))
        os.symlink(cls.outside, os.path.join(cls.root, "models", "dir-out"))
        cls.daemon = Daemon(os.path.join(cls.tmp, "main"), "--root", cls.root,
                            "--max-running", "2")
        cls.addClassCleanup(cls.daemon.stop)
        cls.client = ScanClient(cls.daemon.address, timeout=60)
        cls.addClassCleanup(cls.client.close)

    def in_root(self, name):
        return os.path.join(self.root, "models", name)

    def work(self, name):
        return os.path.join(self.tmp, name)

    def assertSameAsCli(self, report, path, *flags):
        """The whole report, as text, is what `ckptscan scan --format json` prints for PATH."""
        text, parsed = cli_report(path, *flags)
        self.assertEqual(report_to_dict(report)["files"][0], parsed["files"][0])
        self.assertEqual(as_cli_text(report), text)
        return parsed

    def assertCode(self, code, fn, *args, **kwargs):
        with self.assertRaises(ScanClientError) as caught:
            fn(*args, **kwargs)
        self.assertEqual(caught.exception.code, code, str(caught.exception))
        self.assertIn(code, str(caught.exception))
        return caught.exception


class ScanTest(DaemonTestCase):

    def test_scan_bytes_torch_checkpoint_is_safe_and_the_cli_report(self):
        with open(self.torch, "rb") as f:
            report = self.client.scan_bytes(self.torch, f)
        parsed = self.assertSameAsCli(report, self.torch)
        self.assertEqual(parsed["files"][0]["verdict"], "SAFE")
        self.assertEqual(ckptscan_client.verdict_name(report.verdict), "SAFE")

    def test_scan_bytes_malicious_pickle_is_dangerous_and_the_cli_report(self):
        with open(self.evil, "rb") as f:
            report = self.client.scan_bytes(self.evil, f.read())
        parsed = self.assertSameAsCli(report, self.evil)
        entry = parsed["files"][0]
        self.assertEqual(entry["verdict"], "DANGEROUS")
        self.assertEqual(entry["findings"][0]["severity"], "CRITICAL")
        self.assertEqual(entry["findings"][0]["global"], "os.system")

    def test_results_are_typed_with_enums_and_keep_the_message(self):
        report = self.client.scan_path(self.in_root("inst_os_system.pkl"))
        self.assertIsInstance(report, ckptscan_client.ScanResult)
        self.assertTrue(dataclasses.is_dataclass(report))
        # Verdicts are Verdict members at every level, and still equal the proto's numbers.
        pb = _stubs.load().report_pb2
        self.assertIs(report.verdict, Verdict.DANGEROUS)
        self.assertEqual((report.verdict, pb.VERDICT_DANGEROUS), (3, 3))
        self.assertEqual((str(report.verdict), "%s" % report.verdict, f"{report.verdict}"),
                         ("DANGEROUS",) * 3)
        entry = report.files[0]
        self.assertIsInstance(entry, ckptscan_client.FileResult)
        self.assertIs(entry.verdict, Verdict.DANGEROUS)
        finding = entry.findings[0]
        self.assertIsInstance(finding, ckptscan_client.Finding)
        self.assertIs(finding.verdict, Verdict.DANGEROUS)
        self.assertIs(finding.severity, Severity.CRITICAL)
        self.assertEqual((finding.global_name, getattr(finding, "global")),
                         ("os.system", "os.system"))
        # The message stays reachable: as `proto`, and for the fields not typed, read through.
        self.assertEqual(report.proto.DESCRIPTOR.full_name, "ckptscan.v1.Report")
        self.assertEqual(report.summary.dangerous, 1)
        self.assertEqual(entry.pickles, entry.proto.pickles)
        self.assertEqual(report_to_dict(report), report_to_dict(report.proto))
        with self.assertRaises(AttributeError) as caught:
            report.no_such_field  # pylint: disable=pointless-statement
        self.assertIn("no_such_field", str(caught.exception))
        # An error's code is an ErrorCode, named as the reports name it.
        empty = self.client.scan_bytes("empty.pt", b"").files[0]
        self.assertIs(empty.verdict, Verdict.ERROR)
        self.assertEqual([e.code for e in empty.errors], [ErrorCode.NOT_PRESENT])
        self.assertEqual(ckptscan_client.error_code_name(empty.errors[0].code), "not_present")

    def test_scan_path_gives_the_cli_report(self):
        for name, verdict in (("train_checkpoint.pt", "SAFE"), ("inst_os_system.pkl", "DANGEROUS")):
            with self.subTest(name):
                path = self.in_root(name)
                report = self.client.scan_path(path)
                self.assertEqual(self.assertSameAsCli(report, path)["verdict"], verdict)

    def test_scan_path_relative_to_the_first_root(self):
        report = self.client.scan_path("models/train_checkpoint.pt")
        self.assertEqual(report_to_dict(report)["files"][0]["verdict"], "SAFE")

    def test_skip_digest_is_the_cli_digest_none(self):
        report = self.client.scan_path(self.in_root("train_checkpoint.pt"), skip_digest=True)
        self.assertEqual(report.files[0].sha256, "")
        self.assertSameAsCli(report, self.in_root("train_checkpoint.pt"), "--digest", "none")

    def test_a_digest_only_when_asked_as_the_cli(self):
        path = self.in_root("train_checkpoint.pt")
        with open(path, "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()
        report = self.client.scan_path(path, skip_digest=False)
        self.assertEqual(report.files[0].sha256, want)
        self.assertSameAsCli(report, path, "--digest", "sha256")
        report = self.client.scan_bytes("train_checkpoint.pt", open(path, "rb").read(),
                                        skip_digest=False)
        self.assertEqual(report.files[0].sha256, want)
        self.assertEqual(self.client.scan_path(path).files[0].sha256, "")

    def test_list_tensors_is_the_cli_scan_tensors(self):
        path = self.in_root("train_checkpoint.pt")
        report = self.client.scan_path(path, list_tensors=True)
        self.assertEqual(len(report.files[0].tensor_list), 28)
        parsed = self.assertSameAsCli(report, path, "--tensors")
        self.assertEqual(parsed["files"][0]["tensor_list"][0]["name"], "model.0.weight")
        self.assertNotIn("tensor_list", report_to_dict(self.client.scan_path(path))["files"][0])

    def test_upload_forms_and_chunk_sizes_give_one_report(self):
        with open(self.torch, "rb") as f:
            data = f.read()
        want = as_cli_text(self.client.scan_bytes(self.torch, data))
        for what, source, chunk in (("bytearray", bytearray(data), 1 << 20),
                                    ("memoryview, 4 KiB chunks", memoryview(data), 4096),
                                    ("BytesIO (size unknown), 1000-byte chunks",
                                     io.BytesIO(data), 1000)):
            with self.subTest(what):
                got = self.client.scan_bytes(self.torch, source, chunk=chunk)
                self.assertEqual(as_cli_text(got), want)

    def test_empty_upload_is_a_report_of_empty_data_not_an_rpc_error(self):
        # Zero bytes hold nothing a loader could run: data of format "empty"; under a name
        # loaders read weights from, the weights are missing (ERROR not_present).
        report = self.client.scan_bytes("empty.txt", b"")
        f = report_to_dict(report)["files"][0]
        self.assertEqual((f["format"], f["kind"], f["verdict"]), ("empty", "data", "SAFE"))
        report = self.client.scan_bytes("empty.pt", b"")
        f = report_to_dict(report)["files"][0]
        self.assertEqual((f["format"], f["verdict"], [e["code"] for e in f["errors"]]),
                         ("empty", "ERROR", ["not_present"]))

    def test_chunk_over_the_daemons_message_cap_is_refused_here(self):
        with self.assertRaises(ValueError):
            self.client.scan_bytes("x", b"abc", chunk=(1 << 20) + 1)

    def test_reading_the_callers_file_fails_raises_that_error(self):
        class Broken(io.RawIOBase):
            calls = 0

            def readable(self):
                return True

            def read(self, n=-1):
                self.calls += 1
                if self.calls > 1:
                    raise OSError("disk on fire")
                return b"\x80\x02N."

        with self.assertRaises(OSError) as caught:
            self.client.scan_bytes("broken.pkl", Broken())
        self.assertIn("disk on fire", str(caught.exception))

    def test_deadline_exceeded(self):
        # None memoized 4 million times keeps a worker busy for a second or more.
        slow = b"\x80\x04N" + b"\x94" * 4000000 + b"."
        self.assertCode("DEADLINE_EXCEEDED", self.client.scan_bytes, "slow.pkl", slow,
                        timeout=0.2)
        # The daemon still serves.
        self.assertEqual(self.client.scan_bytes("tiny.pkl", b"\x80\x02N.").verdict,
                         ckptscan_client._stubs.load().report_pb2.VERDICT_SAFE)


class EscapeTest(DaemonTestCase):

    def test_paths_outside_the_roots_are_permission_denied(self):
        for path in ("/etc/passwd",
                     os.path.join(self.root, "models", "..", "..", "outside", "secret.pt"),
                     os.path.join(self.outside, "secret.pt"),
                     self.in_root("link-out.pt"),
                     self.in_root("dir-out/secret.pt"),
                     "../outside/secret.pt"):
            with self.subTest(path):
                self.assertCode("PERMISSION_DENIED", self.client.scan_path, path)

    def test_convert_output_outside_the_roots_is_permission_denied_and_not_written(self):
        for out in (os.path.join(self.outside, "x.safetensors"),
                    self.in_root("dir-out/y.safetensors")):
            with self.subTest(out):
                self.assertCode("PERMISSION_DENIED", self.client.convert_path,
                                self.in_root("train_checkpoint.pt"), out)
        self.assertEqual(sorted(os.listdir(self.outside)), ["secret.pt"])

    def test_nul_in_paths_is_invalid(self):
        # A NUL would cut the name the daemon opens or writes ("a.pt\0x" opens "a.pt").
        self.assertCode("INVALID_ARGUMENT", self.client.scan_path,
                        self.in_root("train_checkpoint.pt") + "\0.x")
        for out in ("out\0.safetensors", self.in_root("nul\0dir/out.safetensors")):
            with self.subTest(repr(out)):
                self.assertCode("INVALID_ARGUMENT", self.client.convert_path,
                                self.in_root("train_checkpoint.pt"), out)
        self.assertFalse(os.path.exists(os.path.join(self.root, "out")))

    def test_missing_file_is_not_found(self):
        self.assertCode("NOT_FOUND", self.client.scan_path, self.in_root("nope.pt"))


class ConvertTest(DaemonTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.local = os.path.join(cls.tmp, "local.safetensors")
        cli("convert", cls.torch, "-o", cls.local, check_rc=0)
        with open(cls.local, "rb") as f:
            cls.local_bytes = f.read()
        cls.pubkey = os.path.join(cls.tmp, "daemon.pub")
        with open(cls.pubkey, "w") as f:
            f.write(cls.client.public_key().pem)

    def write(self, name, data):
        path = self.work(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_public_key_is_the_signer_status_names(self):
        key = self.client.public_key()
        self.assertIsInstance(key, ckptscan_client.PublicKey)
        self.assertIn("BEGIN PUBLIC KEY", key.pem)
        self.assertEqual(self.client.status().signer, key.hint)

    def test_status_counts_jobs_by_verdict(self):
        self.client.scan_bytes("t.pkl", b"\x80\x02N.")
        status = self.client.status()
        self.assertIsInstance(status, ckptscan_client.Status)
        self.assertGreaterEqual(status.jobs_done.get(Verdict.SAFE, 0), 1)
        self.assertTrue(all(type(v) is Verdict for v in status.jobs_done), status.jobs_done)
        self.assertEqual(status.roots, (self.root,))

    def test_convert_bytes_is_the_cli_conversion_and_verifies(self):
        with open(self.torch, "rb") as f:
            result = self.client.convert_bytes(self.torch, f)
        response, data, signature = result
        self.assertIsInstance(response, ckptscan_client.ConvertOutcome)
        self.assertIs(response.report.verdict, Verdict.SAFE)
        self.assertTrue(response.converted, response.error)
        self.assertEqual(response.output_size, len(data))
        self.assertEqual(data, self.local_bytes)
        self.assertEqual(report_to_dict(response.report)["verdict"], "SAFE")
        out = self.write("up.safetensors", data)
        self.write("up.safetensors.sig", signature)
        cli("verify", out, "--pubkey", self.pubkey, check_rc=0)
        # A flipped byte is caught: the signature is over these bytes.
        tampered = bytearray(data)
        tampered[-1] ^= 1
        self.write("up.safetensors", bytes(tampered))
        rc, _ = cli("verify", out, "--pubkey", self.pubkey)
        self.assertNotEqual(rc, 0)

    def test_convert_bytes_into_a_file_object(self):
        sink = io.BytesIO()
        with open(self.torch, "rb") as f:
            result = self.client.convert_bytes("model.pt", f.read(), out=sink, chunk=3000)
        self.assertIsNone(result.data)
        self.assertEqual(sink.getvalue(), self.local_bytes)

    def test_convert_bytes_bf16_is_the_cli_bf16_conversion(self):
        local = self.work("local16.safetensors")
        cli("convert", self.torch, "-o", local, "--dtype", "bf16", check_rc=0)
        with open(self.torch, "rb") as f:
            result = self.client.convert_bytes(self.torch, f, dtype="bf16")
        with open(local, "rb") as f:
            self.assertEqual(result.data, f.read())

    def test_malicious_upload_is_not_converted(self):
        with open(self.evil, "rb") as f:
            response, data, signature = self.client.convert_bytes(self.evil, f)
        self.assertFalse(response.converted)
        self.assertEqual((data, signature), (b"", b""))
        self.assertEqual(report_to_dict(response.report)["verdict"], "DANGEROUS")

    def test_convert_path_writes_the_cli_conversion_signed(self):
        out = self.in_root("out.safetensors")
        response = self.client.convert_path(self.in_root("train_checkpoint.pt"), out)
        self.assertTrue(response.converted, response.error)
        conversion = report_to_dict(response.report)["files"][0]["conversion"]
        self.assertEqual(conversion["output"], out)
        self.assertEqual(conversion["signature"], out + ".sig")
        self.assertEqual(conversion["bytes"], len(self.local_bytes))
        with open(out, "rb") as f:
            self.assertEqual(f.read(), self.local_bytes)
        cli("verify", out, "--pubkey", self.pubkey, check_rc=0)
        # An existing output is kept unless replace=True.
        self.assertCode("ALREADY_EXISTS", self.client.convert_path,
                        self.in_root("train_checkpoint.pt"), out)
        self.assertTrue(self.client.convert_path(self.in_root("train_checkpoint.pt"), out,
                                                 replace=True).converted)

    def test_bad_dtype_is_invalid_argument(self):
        with open(self.torch, "rb") as f:
            self.assertCode("INVALID_ARGUMENT", self.client.convert_bytes, "m.pt", f,
                            dtype="fp8")


class UploadCapTest(unittest.TestCase):

    def test_upload_over_the_cap_is_resource_exhausted(self):
        tmp = short_tmpdir("ckptscan-pyclient-cap-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        daemon = Daemon(os.path.join(tmp, "small"), "--max-upload-bytes", "1M")
        self.addCleanup(daemon.stop)
        with ScanClient(daemon.address) as client:
            two_mb = b"\0" * 2000000
            # Declared (bytes: the header carries the size) and undeclared (a stream).
            for what, data in (("bytes", two_mb), ("BytesIO", io.BytesIO(two_mb))):
                with self.subTest(what):
                    with self.assertRaises(ScanClientError) as caught:
                        client.scan_bytes("big.bin", data)
                    self.assertEqual(caught.exception.code, "RESOURCE_EXHAUSTED")
            with self.assertRaises(ScanClientError) as caught:
                client.convert_bytes("big.pt", two_mb)
            self.assertEqual(caught.exception.code, "RESOURCE_EXHAUSTED")
            # Under the cap it still serves.
            self.assertEqual(report_to_dict(client.scan_bytes("t.pkl", b"\x80\x02N."))["verdict"],
                             "SAFE")


class TlsTest(unittest.TestCase):
    """host:port is TLS: a client certificate is presented (mTLS), given as files or PEM bytes."""

    def test_mtls(self):
        if not shutil.which("openssl"):
            self.skipTest("openssl(1) is needed to make the test certificates")
        tmp = short_tmpdir("ckptscan-pyclient-tls-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        pki = os.path.join(tmp, "pki")
        os.makedirs(pki)

        def openssl(*args):
            subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-days", "2", "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.pem")
        for name, cn, san in (("server", "localhost", "DNS:localhost,IP:127.0.0.1"),
                              ("hub", "hub-client", "DNS:hub-client")):
            openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=" + cn, "-keyout", name + ".key", "-out", name + ".csr")
            with open(os.path.join(pki, name + ".ext"), "w") as f:
                f.write("subjectAltName=%s\n" % san)
            openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                    "-CAcreateserial", "-days", "2", "-extfile", name + ".ext",
                    "-out", name + ".pem")
        p = lambda name: os.path.join(pki, name)  # noqa: E731
        daemon = Daemon(os.path.join(tmp, "tls"), "--no-socket", "--tcp", "127.0.0.1:0",
                        "--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                        "--tls-client-ca", p("ca.pem"), "--require-client-cert")
        self.addCleanup(daemon.stop)
        port = json.loads([line for line in daemon.log().splitlines()
                           if b'"event":"listening"' in line][0])["tcp_port"]
        address = "localhost:%d" % port
        with open(p("hub.key"), "rb") as f:
            key_pem = f.read()
        with ScanClient(address, tls_ca=p("ca.pem"), tls_cert=p("hub.pem"), tls_key=key_pem,
                        timeout=30) as client:
            report = client.scan_bytes("t.pkl", b"\x80\x02N.")
            self.assertEqual(report_to_dict(report)["verdict"], "SAFE")
        with ScanClient(address, tls_ca=p("ca.pem"), timeout=10) as client:
            with self.assertRaises(ScanClientError) as caught:
                client.scan_bytes("t.pkl", b"\x80\x02N.")
            self.assertEqual(caught.exception.code, "UNAVAILABLE")

    def test_default_address_is_the_daemons_default_socket(self):
        # app/paths.h DefaultSocketPath, for root and for another user.
        from unittest import mock
        from ckptscan_client import client as client_module
        cases = ((0, {"XDG_RUNTIME_DIR": "/run/user/0"}, "/run/ckptscan/ckptscand.sock"),
                 (1000, {"XDG_RUNTIME_DIR": "/run/user/1000"},
                  "/run/user/1000/ckptscan/ckptscand.sock"),
                 (1000, {"XDG_RUNTIME_DIR": "relative"}, "/tmp/ckptscan-1000/ckptscand.sock"),
                 (1000, {}, "/tmp/ckptscan-1000/ckptscand.sock"))
        for uid, env, want in cases:
            with self.subTest(uid=uid, env=env), \
                    mock.patch.object(client_module.os, "geteuid", return_value=uid), \
                    mock.patch.dict(os.environ, env, clear=False):
                if "XDG_RUNTIME_DIR" not in env:
                    os.environ.pop("XDG_RUNTIME_DIR", None)
                self.assertEqual(ckptscan_client.default_socket_path(), want)
                if uid == 0:
                    with ScanClient() as c, ScanClient("local") as local:
                        self.assertEqual((c.target, local.target), ("unix:" + want,) * 2)
                    continue
                # Another user's default socket is checked before the client exists
                # (untrusted_socket_test plants one of each kind); here none is there.
                for address in (None, "local"):
                    with self.assertRaises(ckptscan_client.ScanClientError) as caught:
                        ScanClient(address)
                    self.assertEqual((caught.exception.code, caught.exception.target),
                                     ("UNAVAILABLE", "unix:" + want))

    def test_tls_arguments_are_for_tcp_only(self):
        with self.assertRaises(ValueError):
            ScanClient("unix:/nonexistent.sock", tls_ca=b"x")
        with self.assertRaises(ValueError):
            ScanClient("localhost:1", tls_cert=b"x")


def fake_daemon(test, scanner=None, admin=None):
    """A gRPC server of the given servicers on a unix socket, stopped at the test's end;
    returns its address."""
    from concurrent import futures
    grpc_pb = _stubs.load().scanner_pb2_grpc
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    if scanner is not None:
        grpc_pb.add_ScannerServicer_to_server(scanner, server)
    if admin is not None:
        grpc_pb.add_AdminServicer_to_server(admin, server)
    sock = os.path.join(short_tmpdir("ckptscan-fake-"), "s.sock")
    test.addCleanup(shutil.rmtree, os.path.dirname(sock), ignore_errors=True)
    server.add_insecure_port("unix:" + sock)
    server.start()
    test.addCleanup(server.stop, None)
    return "unix:" + sock


class FakeConvertAnswers(unittest.TestCase):
    """convert_bytes checks the daemon's stream: a fake Scanner sends malformed answers."""

    def answer(self, messages):
        pb = _stubs.load()

        class Fake(pb.scanner_pb2_grpc.ScannerServicer):
            def ConvertUpload(self, request_iterator, context):
                for _ in request_iterator:
                    pass
                yield from messages

        with ScanClient(fake_daemon(self, scanner=Fake()), timeout=10) as client:
            return client.convert_bytes("m.pt", b"x")

    def chunk(self, **kwargs):
        return _stubs.load().scanner_pb2.ConvertChunk(**kwargs)

    def response(self, size):
        return self.chunk(response=_stubs.load().scanner_pb2.ConvertResponse(
            converted=True, output_size=size, signature=b"{}"))

    def test_well_formed(self):
        got = self.answer([self.response(5), self.chunk(data=b"abc"), self.chunk(data=b"de")])
        self.assertEqual((got.data, got.signature), (b"abcde", b"{}"))

    def test_malformed_answers_are_data_loss(self):
        for what, messages in (
                ("data before the response", [self.chunk(data=b"a"), self.response(1)]),
                ("more than output_size", [self.response(2), self.chunk(data=b"abc")]),
                ("less than output_size", [self.response(4), self.chunk(data=b"abc")]),
                ("a second response", [self.response(0), self.response(0)]),
                ("no response at all", [])):
            with self.subTest(what):
                with self.assertRaises(ScanClientError) as caught:
                    self.answer(messages)
                self.assertEqual(caught.exception.code, "DATA_LOSS")
                self.assertEqual(caught.exception.method, "ConvertUpload")


class ErrorMessagesTest(unittest.TestCase):
    """No client error has an empty message, though gRPC lets a status carry none."""

    def test_a_status_without_details_still_says_which_call_and_code(self):
        pb = _stubs.load()

        def fail(request, context):
            # An abort with no message, as a proxy or a crashed handler may answer.
            for _ in request if hasattr(request, "__next__") else ():
                pass
            context.abort(grpc.StatusCode.INTERNAL, "")

        class Scanner(pb.scanner_pb2_grpc.ScannerServicer):
            ScanPath = ScanUpload = ConvertPath = staticmethod(fail)

            def ConvertUpload(self, request_iterator, context):
                fail(request_iterator, context)
                yield  # a generator, as the streaming method's servicer is

        class Admin(pb.scanner_pb2_grpc.AdminServicer):
            Status = PublicKey = staticmethod(fail)

        address = fake_daemon(self, scanner=Scanner(), admin=Admin())
        with ScanClient(address, timeout=10) as client:
            for method, call in (("ScanPath", lambda: client.scan_path("a.pt")),
                                 ("ScanUpload", lambda: client.scan_bytes("a.pt", b"x")),
                                 ("ConvertPath", lambda: client.convert_path("a.pt", "b")),
                                 ("ConvertUpload", lambda: client.convert_bytes("a.pt", b"x")),
                                 ("Status", client.status),
                                 ("PublicKey", client.public_key)):
                with self.subTest(method), self.assertRaises(ScanClientError) as caught:
                    call()
                e = caught.exception
                self.assertEqual((e.code, e.method, e.target), ("INTERNAL", method, address))
                self.assertIn(method, e.details)
                self.assertIn("INTERNAL", e.details)
                self.assertFalse(str(e).rstrip().endswith(":"), str(e))

    def test_an_error_made_without_details_gets_a_message(self):
        for details in ("", None):
            e = ScanClientError("UNKNOWN", details, "unix:/x.sock")
            self.assertTrue(e.details)
            self.assertIn("UNKNOWN", str(e))
        self.assertEqual(ScanClientError("UNAVAILABLE", "gone", "unix:/x.sock").details, "gone")


class TypesTest(unittest.TestCase):
    """The public API carries type hints, and the enums are the protos'."""

    def test_enums_match_the_protos(self):
        enums = _stubs.load().report_pb2.DESCRIPTOR.enum_types_by_name
        for name, prefix, cls in (("Verdict", "VERDICT_", Verdict),
                                  ("Severity", "SEVERITY_", Severity),
                                  ("ErrorCode", "ERROR_CODE_", ErrorCode)):
            with self.subTest(name):
                self.assertTrue(issubclass(cls, int))  # IntEnum: old int comparisons hold
                self.assertEqual({prefix + m.name: m.value for m in cls},
                                 {v.name: v.number for v in enums[name].values})
        # A number these protos do not know (a newer daemon's) is UNSPECIFIED, never SAFE.
        self.assertIs(Verdict(42), Verdict.UNSPECIFIED)
        self.assertIs(ckptscan_client.ScanResult.from_proto(
            _stubs.load().report_pb2.Report(verdict=42)).verdict, Verdict.UNSPECIFIED)

    def test_public_calls_are_annotated(self):
        returns = {"scan_path": ckptscan_client.ScanResult,
                   "scan_bytes": ckptscan_client.ScanResult,
                   "convert_path": ckptscan_client.ConvertOutcome,
                   "convert_bytes": ckptscan_client.ConvertResult,
                   "status": ckptscan_client.Status, "public_key": ckptscan_client.PublicKey}
        for name, want in returns.items():
            with self.subTest(name):
                method = getattr(ScanClient, name)
                hints = typing.get_type_hints(method)
                self.assertIs(hints["return"], want)
                code = method.__code__
                params = code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount]
                self.assertEqual([p for p in params if p not in hints], [])
        hints = typing.get_type_hints(ckptscan_client.ScanResult)
        self.assertEqual(hints["verdict"], Verdict)
        self.assertEqual(hints["files"], tuple[ckptscan_client.FileResult, ...])
        self.assertEqual(typing.get_type_hints(ckptscan_client.scan_then_load)["timeout"], float)

    def test_the_package_is_marked_typed(self):
        # PEP 561 (load_test.py checks that the installed copy carries it too).
        self.assertTrue(os.path.isfile(os.path.join(HERE, "ckptscan_client", "py.typed")))


class ReportToDictTest(unittest.TestCase):
    """report_to_dict's mapping from json_format's rendering to the CLI's, field by field."""

    def test_enums_numbers_and_optional_keys(self):
        pb = _stubs.load().report_pb2
        report = pb.Report(schema="ckptscan.report.v1", verdict=pb.VERDICT_ERROR)
        f = report.files.add(path="p", size=2**63 + 5, verdict=pb.VERDICT_SUSPICIOUS)
        f.findings.add(rule_id="r", severity=pb.SEVERITY_HIGH, verdict=pb.VERDICT_SUSPICIOUS,
                       location=pb.Location(offset=2**40, pickle_index=2))
        f.errors.add(code=pb.ERROR_CODE_LIMIT, limit_name="max_opcodes", limit_value=7)
        f.errors.add(code=pb.ERROR_CODE_MISSING_SHARD)
        f.conversion.output = "o"
        f.conversion.signature = "o.sig"
        f.conversion.not_written.add(path="epoch", type="int")
        f.conversion.dtypes.add(source="complex64", written="F32", how="as-real", tensors=2**40)
        d = report_to_dict(report)
        self.assertEqual(list(d), ["schema", "scanner_version", "rules_version", "verdict",
                                   "files", "summary", "skipped"])
        self.assertEqual(d["verdict"], "ERROR")
        self.assertEqual(list(d["summary"]), ["files", "safe", "suspicious", "dangerous", "error",
                                              "skipped", "kinds"])
        self.assertEqual(d["skipped"], [])
        fd = d["files"][0]
        self.assertEqual(list(fd), ["path", "sha256", "size", "format", "kind", "verdict",
                                    "findings", "errors", "tensors", "pickles", "globals",
                                    "conversion"])
        self.assertEqual(fd["size"], 2**63 + 5)  # a number, exact, not json_format's string
        self.assertEqual(fd["verdict"], "SUSPICIOUS")
        self.assertEqual(fd["findings"][0]["severity"], "HIGH")
        self.assertEqual(fd["findings"][0]["location"],
                         {"member": "", "offset": 2**40, "opcode": "", "pickle_index": 2})
        self.assertEqual(fd["errors"][0]["code"], "limit")
        self.assertEqual(fd["errors"][1]["code"], "missing_shard")
        self.assertEqual(fd["errors"][0]["limit_name"], "max_opcodes")
        self.assertEqual(fd["errors"][0]["limit_value"], 7)
        self.assertNotIn("limit_name", fd["errors"][1])
        self.assertEqual(fd["tensors"], {"count": 0, "bytes": 0, "storages": 0, "shared": 0,
                                         "unsupported": 0})
        self.assertEqual(fd["conversion"], {
            "output": "o", "tensors": 0, "aliases": 0, "bytes": 0, "dtype": "",
            "dtypes": [{"source": "complex64", "written": "F32", "how": "as-real",
                        "tensors": 2**40}],
            "not_written": [{"path": "epoch", "type": "int"}], "not_written_total": 0,
            "signature": "o.sig"})

    def test_unknown_enum_numbers_are_unspecified_as_in_the_cli(self):
        pb = _stubs.load().report_pb2
        report = pb.Report()
        report.files.add().verdict = 42
        report.files[0].errors.add().code = 42
        report.files[0].errors.add()
        d = report_to_dict(report)
        self.assertEqual((d["verdict"], d["files"][0]["verdict"]), ("UNSPECIFIED", "UNSPECIFIED"))
        self.assertEqual([e["code"] for e in d["files"][0]["errors"]],
                         ["unspecified", "unspecified"])
        self.assertEqual(ckptscan_client.severity_name(pb.SEVERITY_CRITICAL), "CRITICAL")
        self.assertEqual(ckptscan_client.verdict_name("VERDICT_DANGEROUS"), "DANGEROUS")
        self.assertEqual(ckptscan_client.error_code_name(pb.ERROR_CODE_DIGEST_MISMATCH),
                         "digest_mismatch")
        self.assertEqual(ckptscan_client.error_code_name("ERROR_CODE_IO"), "io")

    def test_only_reports(self):
        with self.assertRaises(TypeError):
            report_to_dict(_stubs.load().report_pb2.Finding())


class StubsTest(unittest.TestCase):

    def test_stubs_are_generated_outside_the_source_tree(self):
        # A source tree ships no stubs: they are the run-time fallback's (load_test.py checks
        # that an installed package uses the ones its build shipped).
        stubs = _stubs.load()
        self.assertIsNone(_stubs.shipped_dir())
        self.assertEqual(stubs.source, "generated")
        self.assertFalse(stubs.directory.startswith(HERE + os.sep), stubs.directory)
        committed = [os.path.join(d, n) for d, _, names in os.walk(HERE) for n in names
                     if n.endswith(("_pb2.py", "_pb2_grpc.py"))]
        self.assertEqual(committed, [])

    def test_stubs_carry_the_protos_as_they_are_now(self):
        # Regenerated into a fresh directory, the descriptors are the ones loaded.
        out = tempfile.mkdtemp(prefix="ckptscan-stubs-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        _stubs.generate(out)
        loaded = _stubs.load()
        for mod in ("report_pb2", "scanner_pb2"):
            with open(os.path.join(out, "ckptscan", "v1", mod + ".py")) as f:
                fresh = f.read()
            with open(os.path.join(loaded.directory, "ckptscan", "v1", mod + ".py")) as f:
                self.assertEqual(f.read(), fresh, mod)

    def test_no_stubs_and_no_compiler_says_what_to_install(self):
        # Neither generator (no protoc on PATH, grpc_tools not importable) and nothing cached:
        # the error names the Debian packages and the other way out, installing the package.
        from unittest import mock
        cache = tempfile.mkdtemp(prefix="ckptscan-stubs-none-")
        self.addCleanup(shutil.rmtree, cache, ignore_errors=True)
        with mock.patch.object(_stubs, "_loaded", None), \
                mock.patch.object(_stubs.shutil, "which", return_value=None), \
                mock.patch.dict(sys.modules, {"grpc_tools": None}), \
                self.assertRaises(_stubs.StubError) as caught:
            _stubs.load(cache_dir=cache)
        message = str(caught.exception)
        for words in ("protobuf-compiler", "protobuf-compiler-grpc", "python3-grpc-tools",
                      "no shipped gRPC stubs", "pip install"):
            self.assertIn(words, message)
        self.assertEqual(os.listdir(cache), [])

    def test_grpc_tools_output_has_the_same_descriptors(self):
        try:
            import grpc_tools  # noqa: F401
        except ImportError:
            self.skipTest("python3-grpc-tools is not installed (the fallback generator)")
        out = tempfile.mkdtemp(prefix="ckptscan-stubs-gt-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        _stubs.generate(out, command=[sys.executable, "-m", "grpc_tools.protoc"])
        # Loaded in a child: the modules share names with the ones loaded here.
        code = ("import sys; sys.path.insert(0, sys.argv[1]);"
                "from ckptscan.v1 import report_pb2, scanner_pb2, scanner_pb2_grpc;"
                "sys.stdout.buffer.write(report_pb2.DESCRIPTOR.serialized_pb +"
                " b'|' + scanner_pb2.DESCRIPTOR.serialized_pb)")
        run = subprocess.run([sys.executable, "-c", code, out], capture_output=True, check=True)
        pb = _stubs.load()
        self.assertEqual(run.stdout, pb.report_pb2.DESCRIPTOR.serialized_pb + b"|"
                         + pb.scanner_pb2.DESCRIPTOR.serialized_pb)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptscan", required=True)
    parser.add_argument("--ckptscand", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--stubs-dir", help="where the stubs are generated (default: a temp dir)")
    parser.add_argument("--proto-dir", help="the protos (default: the source tree's proto/)")
    ARGS, rest = parser.parse_known_args()
    ARGS.ckptscan = os.path.abspath(ARGS.ckptscan)
    ARGS.ckptscand = os.path.abspath(ARGS.ckptscand)
    ARGS.fixtures = os.path.abspath(ARGS.fixtures)
    if ARGS.proto_dir:
        os.environ["CKPTSCAN_PROTO_DIR"] = os.path.abspath(ARGS.proto_dir)
    stubs_tmp = None
    if ARGS.stubs_dir:
        os.environ["CKPTSCAN_STUBS_DIR"] = os.path.abspath(ARGS.stubs_dir)
    elif "CKPTSCAN_STUBS_DIR" not in os.environ:
        stubs_tmp = tempfile.mkdtemp(prefix="ckptscan-stubs-")
        os.environ["CKPTSCAN_STUBS_DIR"] = stubs_tmp
    try:
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        if stubs_tmp:
            shutil.rmtree(stubs_tmp, ignore_errors=True)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
