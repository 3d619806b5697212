#!/usr/bin/python3
"""Tests of the loader matrix itself: a harness bug would hide real defects.

    /usr/bin/python3 tests/loaders/test_harness.py [-v]

- Known-malicious samples (a raw pickle in three protocols, a torch zip, a torch legacy file,
  joblib, an object .npy, an .npz, a PyTables file with a pickled attribute, a tar inside an
  .npy) whose payload would create a marker file (`posix.system('touch M')`,
  `builtins.open(M, 'w')` (pickled as io.open), `builtins.exec(...)`, `subprocess.Popen`): every loader's record
  says blocked or refused, the payload's global is recorded as blocked by at least one loader
  per file, no loader "opened" a file having used the payload global, and the marker files do
  not exist afterwards.
- The audit hook is a real second line: the original C unpickler (not the recording subclass)
  is stopped by the `pickle.find_class` audit event.
- A benign torch checkpoint (zip and legacy), a .npy and an .npz: opened, with the expected
  globals and the tensors' dtype, shape and sha256 of their bytes.
- A child that crashes, hangs (SIGPROF blocked) or spins is recorded as crash / hang / timeout,
  and the files after it still get their records.
Needs Debian's python3-torch, python3-numpy, python3-joblib, python3-tables; a loader whose
library is missing is skipped with the reason.
"""
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
MATRIX = os.path.join(HERE, "loader_matrix.py")
sys.path.insert(0, HERE)
import polyglots  # noqa: E402
from compare import _fix_imports  # noqa: E402


def canon(glob):
    """module.name as find_class resolves it (protocol < 3 pickles write __builtin__)."""
    if not glob:
        return glob
    m, n = glob.rsplit(".", 1)
    return "%s.%s" % _fix_imports(m, n)


def _have(mod):
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def run_matrix(root, paths, loaders=None, extra=(), env=None):
    out = os.path.join(root, "..", "matrix.jsonl")
    cmd = [sys.executable, MATRIX, "--root", root, "--out", out] + list(extra)
    if loaders:
        cmd += ["--loaders", ",".join(loaders)]
    subprocess.run(cmd + list(paths), check=True, env=env)
    recs = {}
    with open(out) as f:
        for line in f:
            r = json.loads(line)
            if "meta" not in r:
                recs.setdefault(r["file"], {})[r["loader"]] = r
    return recs


class Payload:
    """Pickles as a call of `func(*args)`; never called here."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


class MaliciousSamples(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ckpt_harness.")
        cls.root = os.path.join(cls.tmp, "files")
        os.makedirs(cls.root)
        cls.markers = []
        cls.expect = {}  # file -> the payload global
        import builtins
        import posix
        import subprocess as sp

        def marker(tag):
            m = os.path.join(cls.tmp, "MARKER_" + tag)
            cls.markers.append(m)
            return m

        payloads = {
            "system": (Payload(posix.system, ("touch " + marker("system"),)), "posix.system"),
            "open": (Payload(builtins.open, (marker("open"), "w")), "io.open"),
            "exec": (Payload(builtins.exec, ("open(%r, 'w')" % marker("exec"),)),
                     "builtins.exec"),
            "popen": (Payload(sp.Popen, (["touch", marker("popen")],)), "subprocess.Popen"),
        }

        def write(name, data, glob):
            with open(os.path.join(cls.root, name), "wb") as f:
                f.write(data)
            cls.expect[name] = glob

        for tag, (obj, glob) in payloads.items():
            for proto in (0, 2, 4):
                write("%s_p%d.pkl" % (tag, proto), pickle.dumps(obj, protocol=proto), glob)
            p2 = pickle.dumps(obj, protocol=2)
            write("%s_tar_in.npy" % tag, polyglots.tar_in_npy(p2), glob)
            write("%s_in_torchzip_storage.pt" % tag,
                  polyglots.torch_zip(storages={"0": polyglots.npy("|O", (1,), p2)}), glob)
        cls.have_torch = _have("torch")
        if cls.have_torch:
            import torch
            for tag, (obj, glob) in payloads.items():
                p = os.path.join(cls.root, "%s_torch_zip.pt" % tag)
                torch.save({"x": obj}, p)
                cls.expect[os.path.basename(p)] = glob
                p = os.path.join(cls.root, "%s_torch_legacy.pt" % tag)
                torch.save({"x": obj}, p, _use_new_zipfile_serialization=False)
                cls.expect[os.path.basename(p)] = glob
        if _have("joblib"):
            import joblib
            obj, glob = payloads["system"]
            p = os.path.join(cls.root, "system.joblib")
            joblib.dump({"x": obj}, p)
            cls.expect["system.joblib"] = glob
        if _have("numpy"):
            import numpy as np
            obj, glob = payloads["open"]
            a = np.empty(1, dtype=object)
            a[0] = obj
            np.save(os.path.join(cls.root, "open_object.npy"), a, allow_pickle=True)
            cls.expect["open_object.npy"] = glob
            np.savez(os.path.join(cls.root, "open_object.npz"), a=a)
            cls.expect["open_object.npz"] = glob
        if _have("tables"):
            import tables
            obj, glob = payloads["system"]
            p = os.path.join(cls.root, "system_attr.h5")
            with tables.open_file(p, "w") as h:
                h.root._v_attrs.evil = obj  # PyTables pickles it
            cls.expect["system_attr.h5"] = glob
        cls.recs = run_matrix(cls.root, [cls.root])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_markers_absent(self):
        for m in self.markers:
            self.assertFalse(os.path.exists(m), "payload ran: %s exists" % m)

    def test_every_file_blocked_by_some_loader(self):
        self.assertEqual(sorted(self.recs), sorted(self.expect))
        for name, glob in self.expect.items():
            if name.endswith("_tar_in.npy") and not self.have_torch:
                # Only torch.load reads a legacy tar checkpoint: no loader here reaches it.
                print("not checked without torch: %s (only torch.load reads it)" % name,
                      file=sys.stderr)
                continue
            recs = self.recs[name]
            blocked = [lo for lo, r in recs.items() if r["outcome"] == "blocked" and
                       canon(r["blocked"]) == glob]
            self.assertTrue(blocked, "%s: no loader stopped at %s: %s" % (
                name, glob, {lo: (r["outcome"], r["blocked"]) for lo, r in recs.items()}))
            for lo in blocked:
                self.assertIn((glob, "blocked"),
                              [(canon("%s.%s" % (g[0], g[1])), g[2])
                               for g in recs[lo]["globals"]], "%s/%s" % (name, lo))

    def test_no_loader_used_the_payload(self):
        for name, glob in self.expect.items():
            for lo, r in self.recs[name].items():
                used = [g for g in r["globals"] if canon("%s.%s" % (g[0], g[1])) == glob and
                        g[2] != "blocked" and g[2] != "refused"]
                self.assertFalse(used, "%s/%s let %s through" % (name, lo, glob))
                self.assertIn(r["outcome"], ("blocked", "refused", "opened"), (name, lo))
                if r["outcome"] == "opened":
                    self.assertNotIn(glob, [canon("%s.%s" % (g[0], g[1]))
                                            for g in r["globals"]],
                                     "%s/%s opened after asking for %s" % (name, lo, glob))

    def test_expected_loaders_reach_the_payload(self):
        want = {"system_p2.pkl": ["pickle", "pickle_py", "joblib", "numpy", "torch"],
                "system_tar_in.npy": ["torch"],
                "system_in_torchzip_storage.pt": ["numpy"]}
        if self.have_torch:
            want["system_torch_zip.pt"] = ["torch"]
            want["system_torch_legacy.pt"] = ["torch"]  # pickle.load: the magic number only
        if "system_attr.h5" in self.expect:
            want["system_attr.h5"] = ["tables"]
        if "system.joblib" in self.expect:
            want["system.joblib"] = ["joblib", "pickle", "pickle_py"]
        for name, loaders in want.items():
            for lo in loaders:
                r = self.recs[name].get(lo)
                if r is None:
                    continue  # loader not available here
                self.assertEqual((r["outcome"], r["blocked"]), ("blocked", "posix.system"),
                                 "%s/%s: %s" % (name, lo, r))


class AuditHookBackstop(unittest.TestCase):
    def test_original_c_unpickler_is_stopped_by_the_audit_hook(self):
        marker = tempfile.mktemp(prefix="ckpt_audit_marker.")
        import posix
        data = pickle.dumps(Payload(posix.system, ("touch " + marker,)), protocol=2)
        code = r"""
import sys, _pickle, io
sys.path.insert(0, %r)
import loader_matrix as m
orig = _pickle.Unpickler            # saved before the hooks: no recording find_class
m._install_pickle_hooks()
m.S.scratch = "/nonexistent"
sys.addaudithook(m._audit)
m.S.active = True
try:
    orig(io.BytesIO(%r)).load()
    print("LOADED")
except m.Blocked as e:
    print("BLOCKED", m.S.blocked, m.S.globals)
""" % (HERE, data)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertIn("BLOCKED posix.system [['posix', 'system', 'blocked']]", r.stdout,
                      r.stdout + r.stderr)
        self.assertFalse(os.path.exists(marker))


@unittest.skipUnless(_have("torch") and _have("numpy"), "needs torch and numpy")
class BenignTensors(unittest.TestCase):
    def test_tensors_recorded(self):
        import numpy as np
        import torch
        tmp = tempfile.mkdtemp(prefix="ckpt_harness_benign.")
        root = os.path.join(tmp, "files")
        os.makedirs(root)
        try:
            w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
            b = torch.tensor([1, 2], dtype=torch.int64)
            h = torch.tensor([0.5, 1.5], dtype=torch.bfloat16)
            sd = {"layer.weight": w, "layer.bias": b, "half": h, "view": w[:, 1]}
            torch.save(sd, os.path.join(root, "benign.pt"))
            torch.save(sd, os.path.join(root, "benign_legacy.pt"),
                       _use_new_zipfile_serialization=False)
            a = np.arange(12, dtype="<i2").reshape(3, 4).T  # Fortran order view
            np.save(os.path.join(root, "benign.npy"), a)
            np.savez(os.path.join(root, "benign.npz"), a=a, f=np.ones(3, "<f8"))
            recs = run_matrix(root, [root], loaders=["torch", "numpy", "pickle"])

            def sha(t):
                return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy()
                                      .tobytes()).hexdigest()
            want = {".layer.weight": ("float32", [2, 3], sha(w)),
                    ".layer.bias": ("int64", [2], sha(b)),
                    ".half": ("bfloat16", [2], sha(h)),
                    ".view": ("float32", [2], sha(w[:, 1]))}
            for name in ("benign.pt", "benign_legacy.pt"):
                r = recs[name]["torch"]
                self.assertEqual(r["outcome"], "opened", r)
                got = {x["key"]: (x["dtype"], x["shape"], x["sha256"]) for x in r["arrays"]}
                self.assertEqual(got, want, name)
                gl = {"%s.%s" % (g[0], g[1]) for g in r["globals"]}
                self.assertIn("torch._utils._rebuild_tensor_v2", gl)
                self.assertTrue(all(g[2] == "allowed" for g in r["globals"]), r["globals"])
            r = recs["benign.npy"]["numpy"]
            self.assertEqual(r["outcome"], "opened")
            self.assertEqual(r["arrays"], [{"key": "", "kind": "ndarray", "dtype": "<i2",
                                            "shape": [4, 3], "sha256": hashlib.sha256(
                                                np.ascontiguousarray(a).tobytes()).hexdigest()}])
            r = recs["benign.npz"]["numpy"]
            self.assertEqual([(x["key"], x["dtype"], x["shape"]) for x in r["arrays"]],
                             [(".a", "<i2", [4, 3]), (".f", "<f8", [3])])
            self.assertEqual(recs["benign.pt"]["pickle"]["outcome"], "refused")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class CrashHangRestart(unittest.TestCase):
    def test_crash_hang_timeout_then_next_file(self):
        tmp = tempfile.mkdtemp(prefix="ckpt_harness_crash.")
        root = os.path.join(tmp, "files")
        os.makedirs(root)
        try:
            names = ["a__crash__.pkl", "b__hang__.pkl", "c__slow__.pkl", "d_ok.pkl"]
            for n in names:
                with open(os.path.join(root, n), "wb") as f:
                    f.write(pickle.dumps({"k": 1}, protocol=2))
            env = dict(os.environ, CKPT_MATRIX_SELFTEST="1")
            recs = run_matrix(root, [root], loaders=["pickle"],
                              extra=["--timeout", "1", "--grace", "3"], env=env)
            self.assertEqual(recs["a__crash__.pkl"]["pickle"]["outcome"], "crash")
            self.assertIn("SIGSEGV", recs["a__crash__.pkl"]["pickle"]["error"])
            self.assertEqual(recs["b__hang__.pkl"]["pickle"]["outcome"], "hang")
            self.assertEqual(recs["c__slow__.pkl"]["pickle"]["outcome"], "timeout")
            self.assertEqual(recs["d_ok.pkl"]["pickle"]["outcome"], "opened")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
