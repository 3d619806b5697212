#!/usr/bin/python3
"""`ckptscan ls` against what the real loaders found in the same files.

    /usr/bin/python3 clients/ls_test.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures

tests/fixtures/torch/expectations.json records, per fixture, every tensor torch.load (and numpy
for .npy/.npz) gives: dotted name, dtype, shape, and which tensors share a storage
(gen_torch_fixtures.py, run with Debian's torch). For each file, `ckptscan ls --format json` must
list the same tensors (name, dtype, shape), bytes = numel x element size, and `shared` exactly
for the tensors whose storage another tensor uses; the text table must name each tensor; a wrong
path is an ERROR with exit 2; a malicious file keeps its verdict and exit code under ls.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

# Element sizes of the dtypes the fixtures hold (torch's names).
SIZES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
         "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
         "qint8": 1, "quint8": 1, "qint32": 4}


def ls(ckptscan, *args):
    run = subprocess.run([ckptscan, "ls", *args], capture_output=True, check=False)
    return run.returncode, run.stdout.decode(), run.stderr.decode()


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.fixtures, "torch", "expectations.json")) as f:
        expectations = json.load(f)["files"]
    failures = []
    checked = 0
    for name, want in sorted(expectations.items()):
        path = os.path.join(args.fixtures, "torch", name)
        rc, out, err = ls(args.ckptscan, "--format", "json", path)
        report = json.loads(out)
        entry = report["files"][0]
        got = entry.get("tensor_list", [])
        want_tensors = want["tensors"]
        groups = collections.Counter(t["storage_group"] for t in want_tensors
                                     if t.get("storage_group") is not None)
        want_rows = sorted((t["name"], t["dtype"], tuple(t["shape"]),
                            groups[t.get("storage_group")] > 1 if t.get("storage_group")
                            is not None else False) for t in want_tensors)
        # A tensor convert cannot write (sparse, ...) is listed by name with the reason, its
        # dtype and shape as far as the reading knows them: compared by name only.
        noted = {t["name"] for t in got if t["note"]}
        want_rows = [r if r[0] not in noted else (r[0],) for r in want_rows]
        got_rows = sorted((t["name"], t["dtype"], tuple(t["shape"]), t["shared"])
                          if t["name"] not in noted else (t["name"],) for t in got)
        if want_rows != got_rows:
            failures.append("%s: ls lists %s, the loader %s" % (name, got_rows, want_rows))
            continue
        for t in got:
            size = SIZES.get(t["dtype"])
            if size is not None and t["note"] == "" and t["bytes"] != numel(t["shape"]) * size:
                failures.append("%s: %s bytes %d, want %d" % (name, t["name"], t["bytes"],
                                                              numel(t["shape"]) * size))
        if rc not in (0, 1, 2) or (rc == 0) != (entry["verdict"] == "SAFE"):
            failures.append("%s: exit %d with verdict %s" % (name, rc, entry["verdict"]))
        checked += 1
        if want_tensors:
            rc, text, _ = ls(args.ckptscan, path)
            missing = [t["name"] for t in want_tensors if t["name"] not in text]
            if missing or "NAME" not in text or "DTYPE" not in text:
                failures.append("%s: the table lacks %s:\n%s" % (name, missing, text))
    # A malicious file: ls is a scan; its verdict and exit code are scan's.
    evil = os.path.join(args.fixtures, "containers", "malicious", "datapkl_deflated.pt")
    rc, text, _ = ls(args.ckptscan, evil)
    if rc != 1 or "DANGEROUS" not in text:
        failures.append("malicious file: exit %d, want 1 with DANGEROUS:\n%s" % (rc, text))
    rc, _, err = ls(args.ckptscan, os.path.join(args.fixtures, "no-such-file.pt"))
    if rc != 2:
        failures.append("a missing file: exit %d, want 2 (%s)" % (rc, err))
    rc, _, err = ls(args.ckptscan)
    if rc != 64:
        failures.append("no path: exit %d, want 64 (%s)" % (rc, err))
    for f in failures:
        print("FAIL " + f)
    print("ls: %d files compared with the loaders' tensors, %d failures" % (checked,
                                                                              len(failures)))
    return 1 if failures or checked < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
