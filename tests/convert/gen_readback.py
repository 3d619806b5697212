#!/usr/bin/python3
"""Records what the real safetensors library reads from `ckptscan convert`'s outputs.

    sudo /usr/bin/python3 tests/convert/gen_readback.py --root DEBIAN13_ROOT \\
        --ckptscan build/clients/ckptscan [--fixtures tests/fixtures/torch ...] [--out FILE]

Run by hand, as root (it uses chroot), with a Debian 13 root holding python3-safetensors and
python3-torch; CI does not run it (tests/convert/readback_test.py checks the record). For every
input of every fixture folder (each regular file there that is not .json/.py/.md/.txt, and each
*.index.json of a sharded set in a subfolder) and for `--dtype keep` and `--dtype bf16`, it runs
`ckptscan convert -f json` and records:

  exit          ckptscan's exit code (only 0 writes anything)
  dtypes        the report's conversion.dtypes (what was done per dtype)
  outputs       per .safetensors file written ("out.safetensors", or a set's
                "set/model-0000K-of-0000N.safetensors"), its SHA-256, its SHA-256
                normalized (see below), the provenance it carries, and what
                `safetensors.safe_open(path, framework="pt")` in the root returned: per tensor
                its name, torch dtype, shape and the SHA-256 of its elements in row-major order,
                and the file's __metadata__; `restored`: the same for each tensor listed in
                __metadata__ "ckptscan.complex64_as_real" after torch.view_as_complex (the
                restoration docs/safetensors.md documents); or the library's error.

The normalized digest covers the file with the values of the two provenance fields that change
with every release, "ckptscan.version" and "ckptscan.rules_version", emptied in the header text
(and the header's space padding dropped): what the library reads does not depend on them, so
a later build's output is the file the library read when its normalized digest is the same.

Default folders: tests/fixtures/torch and tests/fixtures/dtypes; default output:
tests/convert/readback.json. The folders are stored relative to the repository root.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
SKIP_SUFFIXES = (".json", ".py", ".md", ".txt")
PROVENANCE = ("ckptscan.version", "ckptscan.rules_version")
OUT_NAME = "out.safetensors"  # a file's output; a set's are set/model-0000K-of-0000N.safetensors

# Runs in the Debian 13 root: reads each file named on the command line with safe_open (pt).
READER = r'''
import hashlib, json, sys
import safetensors, torch, numpy
def digest(t):
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()
out = {"versions": {"safetensors": safetensors.__version__, "torch": torch.__version__,
                    "numpy": numpy.__version__, "python": sys.version.split()[0]},
       "files": {}}
for path in sys.argv[1:]:
    try:
        tensors, got, restored = [], {}, []
        with safetensors.safe_open(path, framework="pt") as f:
            meta = f.metadata()
            for name in sorted(f.keys()):
                t = got[name] = f.get_tensor(name)
                tensors.append({"name": name, "dtype": str(t.dtype), "shape": list(t.shape),
                                "sha256": digest(t)})
        # docs/safetensors.md, "complex64 as real": the documented restoration, run.
        for name in json.loads((meta or {}).get("ckptscan.complex64_as_real", "[]")):
            c = torch.view_as_complex(got[name])
            restored.append({"name": name, "dtype": str(c.dtype), "shape": list(c.shape),
                             "sha256": digest(c)})
        out["files"][path] = {"tensors": tensors, "metadata": meta, "restored": restored}
    except Exception as e:  # what the library raises is the record
        out["files"][path] = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0])}
json.dump(out, sys.stdout)
'''


def inputs(folder):
    """The inputs of a fixture folder, relative to it, in byte order."""
    found = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not name.endswith(SKIP_SUFFIXES):
            found.append(name)
        elif os.path.isdir(path):
            for sub in sorted(os.listdir(path)):
                if sub.endswith(".index.json"):
                    found.append(name + "/" + sub)
    return found


def header_of(data):
    (n,) = struct.unpack("<Q", data[:8])
    return n, data[8:8 + n].decode("utf-8")


def normalized_sha256(data):
    """SHA-256 of the file with the provenance values emptied (module docstring)."""
    n, text = header_of(data)
    meta = json.loads(text).get("__metadata__") or {}
    text = text.rstrip(" ")
    for key in PROVENANCE:
        if key in meta:
            field = json.dumps(key) + ":" + json.dumps(meta[key], ensure_ascii=False)
            if text.count(field) != 1:
                raise ValueError("provenance field %s not found once in the header" % key)
            text = text.replace(field, json.dumps(key) + ':""')
    return hashlib.sha256(text.encode("utf-8") + data[8 + n:]).hexdigest()


def provenance(data):
    _, text = header_of(data)
    meta = json.loads(text).get("__metadata__") or {}
    return {k: meta[k] for k in PROVENANCE if k in meta}


def convert(ckptscan, src, out, dtype):
    """ckptscan's exit code, the report's conversion.dtypes, and the .safetensors files written
    (relative to `out`'s directory for a set)."""
    r = subprocess.run([ckptscan, "convert", "-f", "json", "--dtype", dtype, src, "-o", out],
                       capture_output=True, text=True, check=False)
    report = json.loads(r.stdout) if r.stdout.strip() else {}
    files = report.get("files") or [{}]
    dtypes = (files[0].get("conversion") or {}).get("dtypes", [])
    if r.returncode != 0:
        return r.returncode, dtypes, []
    if os.path.isdir(out):
        return 0, dtypes, [os.path.join(out, n) for n in sorted(os.listdir(out))
                           if n.endswith(".safetensors")]
    return 0, dtypes, [out]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="a Debian 13 root (chroot)")
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", action="append",
                    help="a fixture folder (repeatable); default tests/fixtures/torch and "
                         "tests/fixtures/dtypes")
    ap.add_argument("--out", default=os.path.join(HERE, "readback.json"))
    a = ap.parse_args()
    folders = a.fixtures or [os.path.join(REPO, "tests", "fixtures", "torch"),
                             os.path.join(REPO, "tests", "fixtures", "dtypes")]
    ckptscan = os.path.abspath(a.ckptscan)
    work = tempfile.mkdtemp(prefix="ckptscan-readback-", dir=os.path.join(a.root, "tmp"))
    inside = "/tmp/" + os.path.basename(work)  # the same directory, seen from the root
    try:
        entries = []
        for folder in folders:
            rel_folder = os.path.relpath(os.path.abspath(folder), REPO)
            for rel in inputs(folder):
                for dtype in ("keep", "bf16"):
                    here = os.path.join(work, str(len(entries)))
                    os.mkdir(here)
                    out = os.path.join(here, "set" if rel.endswith(".json") else OUT_NAME)
                    code, dtypes, files = convert(ckptscan, os.path.join(folder, rel), out, dtype)
                    outputs = {}
                    for path in files:
                        data = open(path, "rb").read()
                        outputs[os.path.relpath(path, here)] = {
                            "path_in_root": inside + path[len(work):],
                            "sha256": hashlib.sha256(data).hexdigest(),
                            "sha256_normalized": normalized_sha256(data),
                            "provenance": provenance(data),
                        }
                    entries.append({"folder": rel_folder, "input": rel, "dtype": dtype,
                                    "exit": code, "dtypes": dtypes, "outputs": outputs})
                    print("%s/%s --dtype %s: exit %d, %d outputs" % (rel_folder, rel, dtype, code,
                                                                     len(outputs)))
        paths = [o["path_in_root"] for e in entries for o in e["outputs"].values()]
        with open(os.path.join(work, "reader.py"), "w") as f:
            f.write(READER)
        r = subprocess.run(["chroot", a.root, "python3", inside + "/reader.py"] + paths,
                           capture_output=True, text=True, check=True)
        read = json.loads(r.stdout)
        for e in entries:
            for o in e["outputs"].values():
                o["safe_open_pt"] = read["files"][o.pop("path_in_root")]
        record = {
            "generator": "tests/convert/gen_readback.py",
            "library": read["versions"],
            "reader": 'safetensors.safe_open(path, framework="pt"): get_tensor for every key',
            "entries": entries,
        }
        with open(a.out, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True, ensure_ascii=False)
            f.write("\n")
        errors = sum(1 for e in entries for o in e["outputs"].values()
                     if "error" in o["safe_open_pt"])
        print("%d conversions, %d outputs read, %d library errors; written %s" % (
            len(entries), len(paths), errors, a.out))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
