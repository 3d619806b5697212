#!/usr/bin/python3
"""One application layer: every surface gives the same report for the same request.

    surfaces_test.py --ckptscan PATH --ckptscand PATH --fixtures DIR [--stubs-dir DIR]
                     [--proto-dir DIR] [unittest args]

Proves, on every file of the fixture corpus and on sharded sets made here (complete, a shard
missing, every shard missing, a shard name that leaves the folder):
  - `ckptscan scan --format json` prints the same bytes locally, through ckptscand by path
    (--by-path) and by upload (the CLI walks the set and sends each file);
  - the Python client's scan_path is that report (an index is followed by its shards, and a
    missing shard is an error of its index, on the daemon as in the CLI);
  - the Python client's scan_bytes is that report for every file but an index, whose shards an
    upload cannot hold: ERROR, one missing_shard error per shard, never SAFE;
  - a safetensors input converts (keep and bf16) to the same bytes locally, through the CLI by
    upload and by path, and through the Python client's convert_bytes and convert_path, with
    every tensor of the input (names, shapes, dtypes, data digests).
Exits 77 like client_test.py when Debian's python3-grpcio or python3-protobuf is missing.
"""

import hashlib
import json
import os
import shutil
import struct
import unittest

import client_test as ct  # noqa: E402  (exits 77 when grpc or protobuf is missing)
from ckptscan_client import ScanClient, report_to_dict  # noqa: E402

# Files per CLI run (argv stays small; the three surfaces get the same batches).
BATCH = 120


def corpus(fixtures):
    """Every regular file under the fixture folder, sorted, as absolute paths."""
    out = []
    for top, dirs, files in os.walk(fixtures):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(top, name)
            if os.path.isfile(path) and not os.path.islink(path):
                out.append(path)
    return out


def write_safetensors(path):
    """A small safetensors file, stdlib only: F32, F16, I64 and a 0-d F64 tensor."""
    tensors = [("w", "F32", [2, 3], struct.pack("<6f", 1.0, -2.5, 3.25, 1e-3, 7.0, -0.0)),
               ("h", "F16", [2], struct.pack("<2e", 0.5, -1.5)),
               ("i", "I64", [3], struct.pack("<3q", 1, -2, 3)),
               ("s", "F64", [], struct.pack("<d", 2.5))]
    header, data = {"__metadata__": {"source": "surfaces_test"}}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def tensors_of(data):
    """name -> (dtype, shape, sha256 of its bytes) of safetensors bytes."""
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"],
                hashlib.sha256(data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
                .hexdigest()) for k, v in header.items()}


class SurfacesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        args = ct.ARGS
        cls.tmp = ct.short_tmpdir("ckptscan-surfaces-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.sets = os.path.join(cls.tmp, "sets")
        sharded = os.path.join(args.fixtures, "torch", "sharded")
        index = "pytorch_model.bin.index.json"
        shards = sorted(n for n in os.listdir(sharded) if n != index)
        # complete: the committed set; one_missing: its second shard gone; all_missing: the
        # index alone; escaping: an index whose shard name leaves the folder.
        shutil.copytree(sharded, os.path.join(cls.sets, "complete"))
        os.makedirs(os.path.join(cls.sets, "one_missing"))
        shutil.copy(os.path.join(sharded, index), os.path.join(cls.sets, "one_missing"))
        shutil.copy(os.path.join(sharded, shards[0]), os.path.join(cls.sets, "one_missing"))
        os.makedirs(os.path.join(cls.sets, "all_missing"))
        shutil.copy(os.path.join(sharded, index), os.path.join(cls.sets, "all_missing"))
        os.makedirs(os.path.join(cls.sets, "escaping"))
        with open(os.path.join(sharded, index), encoding="utf-8") as f:
            weight_map = json.load(f)
        escaping = json.loads(json.dumps(weight_map))
        escaping["weight_map"][next(iter(escaping["weight_map"]))] = "../complete/" + shards[0]
        with open(os.path.join(cls.sets, "escaping", index), "w", encoding="utf-8") as f:
            json.dump(escaping, f)
        os.makedirs(os.path.join(cls.sets, "self_named"))  # an index naming itself as a shard
        with open(os.path.join(cls.sets, "self_named", index), "w", encoding="utf-8") as f:
            json.dump({"weight_map": {"w": index}}, f)
        cls.shard_count = len(set(weight_map["weight_map"].values()))
        cls.indexes = [os.path.join(cls.sets, d, index)
                       for d in ("complete", "one_missing", "all_missing", "escaping",
                                 "self_named")]
        cls.files = corpus(args.fixtures) + cls.indexes
        cls.daemon = ct.Daemon(os.path.join(cls.tmp, "d"), "--root", args.fixtures,
                               "--root", cls.sets, "--max-running", "2")
        cls.addClassCleanup(cls.daemon.stop)
        cls.client = ScanClient(cls.daemon.address, timeout=120)
        cls.addClassCleanup(cls.client.close)
        # The local CLI's report of every file, by path (one run per batch).
        cls.local = {}
        cls.local_text = []
        for i in range(0, len(cls.files), BATCH):
            batch = cls.files[i:i + BATCH]
            _, out = ct.cli("scan", "--format", "json", *batch)
            cls.local_text.append(out)
            for entry in json.loads(out)["files"]:
                cls.local.setdefault(entry["path"], entry)

    def batches(self):
        return [self.files[i:i + BATCH] for i in range(0, len(self.files), BATCH)]

    def assertSameBytes(self, got, want, what):
        if got == want:
            return
        g, w = json.loads(got), json.loads(want)
        for a, b in zip(g["files"], w["files"]):
            self.assertEqual(a, b, "%s: %s differs from the local CLI" % (what, b["path"]))
        self.assertEqual(g, w, what)
        self.assertEqual(got, want, what)

    def test_the_corpus_is_scanned(self):
        self.assertGreater(len(self.files), 400)
        verdicts = {e["verdict"] for e in self.local.values()}
        self.assertEqual(verdicts, {"SAFE", "SUSPICIOUS", "DANGEROUS", "ERROR"})

    def test_cli_by_path_prints_the_local_bytes(self):
        for n, batch in enumerate(self.batches()):
            _, out = ct.cli("scan", "--server", self.daemon.address, "--by-path", "--format",
                            "json", *batch)
            self.assertSameBytes(out, self.local_text[n], "--by-path batch %d" % n)

    def test_a_bare_socket_path_is_the_unix_address(self):
        # --server /path/to.sock is unix:/path/to.sock (it used to fail with a DNS error).
        source = self.files[0]
        _, want = ct.cli("scan", "--server", self.daemon.address, "--format", "json", source)
        for address in (self.daemon.socket,
                        "./" + os.path.relpath(self.daemon.socket, os.getcwd())):
            with self.subTest(address):
                _, got = ct.cli("scan", "--server", address, "--format", "json", source)
                self.assertTrue(got.strip(), address)  # a report, not a connection error
                self.assertSameBytes(got, want, address)

    def test_cli_upload_prints_the_local_bytes(self):
        for n, batch in enumerate(self.batches()):
            _, out = ct.cli("scan", "--server", self.daemon.address, "--format", "json", *batch)
            self.assertSameBytes(out, self.local_text[n], "upload batch %d" % n)

    def test_sets_alone_give_one_report_on_every_surface(self):
        for index in self.indexes:
            with self.subTest(index):
                _, local = ct.cli("scan", "--format", "json", index)
                for flags in (["--by-path"], []):
                    _, out = ct.cli("scan", "--server", self.daemon.address, *flags,
                                    "--format", "json", index)
                    self.assertSameBytes(out, local, "%s %s" % (flags, index))
                self.assertEqual(ct.as_cli_text(self.client.scan_path(index)), local.decode())

    def test_missing_shards_are_errors_of_their_index_everywhere(self):
        expect = {"complete": (0, "SAFE"), "one_missing": (1, "ERROR"),
                  "all_missing": (self.shard_count, "ERROR")}
        for name, (missing, verdict) in expect.items():
            with self.subTest(name):
                index = os.path.join(self.sets, name, "pytorch_model.bin.index.json")
                report = report_to_dict(self.client.scan_path(index))
                codes = [e["code"] for e in report["files"][0].get("errors", [])]
                self.assertEqual(codes.count("missing_shard"), missing, report)
                self.assertEqual(report["verdict"], verdict)
                self.assertEqual(len(report["files"]), 1 + self.shard_count - missing)
        for index, why in ((self.indexes[3], "a shard name leaving the folder"),
                           (self.indexes[4], "an index naming itself as a shard")):
            report = report_to_dict(self.client.scan_path(index))
            self.assertEqual(report["verdict"], "ERROR", why)

    def test_safetensors_input_converts_the_same_on_every_surface(self):
        source = os.path.join(self.sets, "model.safetensors")
        write_safetensors(source)
        with open(source, "rb") as f:
            source_bytes = f.read()
        addr = self.daemon.address
        for dtype in ("keep", "bf16"):
            with self.subTest(dtype):
                out = {name: os.path.join(self.sets, "%s-%s.safetensors" % (name, dtype))
                       for name in ("local", "upload", "path", "py_path")}
                ct.cli("convert", "--dtype", dtype, source, "-o", out["local"], check_rc=0)
                ct.cli("convert", "--server", addr, "--dtype", dtype, source, "-o",
                       out["upload"], check_rc=0)
                ct.cli("convert", "--server", addr, "--by-path", "--dtype", dtype, source, "-o",
                       out["path"], check_rc=0)
                response = self.client.convert_path(source, out["py_path"], dtype=dtype)
                self.assertTrue(response.converted, response.error)
                uploaded = self.client.convert_bytes(source, source_bytes, dtype=dtype)
                self.assertTrue(uploaded.response.converted, uploaded.response.error)
                with open(out["local"], "rb") as f:
                    local = f.read()
                for name, path in out.items():
                    with open(path, "rb") as f:
                        self.assertEqual(f.read(), local, name)
                self.assertEqual(uploaded.data, local)
                want = tensors_of(source_bytes)
                got = tensors_of(local)
                self.assertEqual(sorted(got), sorted(want))
                for name, (st_dtype, shape, digest) in want.items():
                    if dtype == "keep" or st_dtype not in ("F32", "F16"):
                        self.assertEqual(got[name], (st_dtype, shape, digest), name)
                    else:
                        self.assertEqual(got[name][:2], ("BF16", shape), name)

    def test_a_declared_quantization_is_read_beside_the_input_on_every_surface(self):
        # tests/fixtures/quantized/declared_hqq: an HQQ-shaped checkpoint beside a config.json
        # declaring "hqq" (docs/safetensors.md, "Quantized weights"): --dtype bf16 is refused
        # locally, by path and through the Python client; an upload has no neighbours to read.
        source = os.path.join(ct.ARGS.fixtures, "quantized", "declared_hqq", "pytorch_model.bin")
        addr = self.daemon.address
        out = os.path.join(self.sets, "declared-%s.safetensors")
        ct.cli("convert", "--dtype", "bf16", source, "-o", out % "local", check_rc=2)
        ct.cli("convert", "--server", addr, "--by-path", "--dtype", "bf16", source, "-o",
               out % "path", check_rc=2)
        response = self.client.convert_path(source, out % "py", dtype="bf16")
        self.assertFalse(response.converted)
        self.assertIn('quant_method "hqq"', response.error)
        for name in ("local", "path", "py"):
            self.assertFalse(os.path.exists(out % name), name)
        _, text = ct.cli("convert", "--server", addr, "--by-path", "--format", "json", source,
                         "-o", out % "keep", check_rc=0)
        self.assertEqual(json.loads(text)["files"][0]["conversion"]["declared_quantization"],
                         "hqq")
        _, text = ct.cli("convert", "--server", addr, "--format", "json", "--dtype", "bf16",
                         source, "-o", out % "upload", check_rc=0)
        self.assertNotIn("declared_quantization", json.loads(text)["files"][0]["conversion"])

    def test_a_config_json_leaving_the_roots_is_not_read_by_the_daemon(self):
        # A hostile caller's folder beneath a root whose config.json is a symlink to a file
        # outside every root: the daemon opens neighbours through the same confined opener as
        # inputs, so it never reads (or reports) that file; the local CLI, reading as its user,
        # follows it.
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside, exist_ok=True)
        with open(os.path.join(outside, "config.json"), "w", encoding="utf-8") as f:
            json.dump({"quantization_config": {"quant_method": "hqq"}}, f)
        folder = os.path.join(self.sets, "config_escape")
        os.makedirs(folder, exist_ok=True)
        source = os.path.join(folder, "pytorch_model.bin")
        shutil.copy(os.path.join(ct.ARGS.fixtures, "quantized", "declared_hqq",
                                 "pytorch_model.bin"), source)
        os.symlink(os.path.join(outside, "config.json"), os.path.join(folder, "config.json"))
        out = os.path.join(self.sets, "escape-%s.safetensors")
        _, text = ct.cli("convert", "--server", self.daemon.address, "--by-path", "--format",
                         "json", "--dtype", "bf16", source, "-o", out % "path", check_rc=0)
        self.assertNotIn("declared_quantization", json.loads(text)["files"][0]["conversion"])
        ct.cli("convert", "--dtype", "bf16", source, "-o", out % "local", check_rc=2)

    def test_python_scan_path_is_the_cli_report(self):
        for path in self.files:
            if path in self.indexes:
                continue  # whole sets: test_sets_alone_give_one_report_on_every_surface
            with self.subTest(path):
                report = report_to_dict(self.client.scan_path(path))
                self.assertEqual(report["files"][0], self.local[path])
                if self.local[path].get("format") != "hf-index":
                    self.assertEqual(len(report["files"]), 1)

    def test_python_scan_bytes_is_the_cli_report_but_for_an_index(self):
        for path in self.files:
            with self.subTest(path):
                with open(path, "rb") as f:
                    report = report_to_dict(self.client.scan_bytes(path, f))
                entry = report["files"][0]
                if entry.get("format") != "hf-index":
                    self.assertEqual(entry, self.local[path])
                    continue
                # An upload is one file: its shards cannot be verified, so never SAFE.
                self.assertEqual(report["verdict"], "ERROR")
                codes = [e["code"] for e in entry.get("errors", [])]
                if "malformed" not in codes:
                    self.assertEqual(codes.count("missing_shard"), self.shard_count, entry)


if __name__ == "__main__":
    ct.main()  # client_test.py's flags and runner, this module's tests
