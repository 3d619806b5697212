#!/usr/bin/python3
"""Our .npy reading of a header's descr against numpy's own descr_to_dtype (numpy 1.24 live,
numpy 2.2 recorded), on generated descrs: strings, subarrays, nested fields, titles, padding.

    npy_descr_diff.py --ckptscan PATH [--seed 1] [--count 1500] [--numpy22 FILE]
    npy_descr_diff.py --record-numpy OUT [--seed 1] [--count 1500]    # run under numpy 2.2

For each descr, numpy.lib.format.descr_to_dtype says: refused, or (hasobject, itemsize). The
file given to ckptscan is an .npy of shape (2,) with that descr; its data is a pickle calling
os.getcwd when the dtype holds an object in either numpy (numpy.load unpickles it), else
2 x itemsize zero bytes. Then, per descr:
  - an object in either numpy: ckptscan must be DANGEROUS (it read the data as the pickle);
  - no object, and both numpys take it with the same size: ckptscan is SAFE with no error and
    no trailing data (our item size is numpy's), or ERROR with an "unsupported" error (a form
    we refuse rather than guess; counted and printed, never SAFE on a wrong size);
  - numpy refuses: anything but a crash (numpy.load fails before the data).
--numpy22 FILE is what --record-numpy wrote in the Debian 13 root for the same seed and count
(scripts: `chroot ROOT python3 tests/differential/npy_descr_diff.py --record-numpy OUT`).
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import warnings

PAYLOAD = b"\x80\x02cos\ngetcwd\n)R."
LEAVES = ["<f4", ">f8", "|u1", "|b1", "<c16", "<f2", "|S3", "|S0", "<U2", "|V4", "|V0",
          "<M8[ns]", "<m8", "<m8[10s]", "|O", "O8", "<O", "object", "<f16", "<c32", "<i8",
          "=i4", "f4", "<f12", "|S", "float64", "i4,f4", "(2,)i4", "<U0", "O4", "|O4", ">i2"]
SHAPES = [(), 0, 1, 2, (1,), (2, 3), [1], [2], [], (0,)]
NAMES = ["", "a", "b", "c", ("t", "a"), ("", "c"), ("a", "a"), ("u", "")]


def gen(rng, depth=0):
    r = rng.random()
    if depth >= 3 or r < 0.45:
        return rng.choice(LEAVES)
    if r < 0.6:
        return (gen(rng, depth + 1), rng.choice(SHAPES))
    fields = []
    for _ in range(rng.randrange(0, 4)):
        f = [rng.choice(NAMES), gen(rng, depth + 1)]
        if rng.random() < 0.35:
            f.append(rng.choice(SHAPES))
        fields.append(tuple(f))
    return fields


def descrs(seed, count):
    rng = random.Random(seed)
    return [gen(rng) for _ in range(count)]


def numpy_results(items):
    import numpy  # pylint: disable=import-outside-toplevel
    from numpy.lib import format as fmt  # pylint: disable=import-outside-toplevel
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in items:
            try:
                dt = fmt.descr_to_dtype(d)
                out.append({"object": bool(dt.hasobject), "itemsize": int(dt.itemsize)})
            except Exception as e:  # pylint: disable=broad-except
                out.append({"refused": type(e).__name__})
    return {"numpy": numpy.__version__, "results": out}


def npy(descr, data):
    d = "{'descr': %r, 'fortran_order': False, 'shape': (2,), }" % (descr,)
    h = d.encode("latin1")
    h += b" " * ((-(10 + len(h) + 1)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=1500)
    ap.add_argument("--numpy22")
    ap.add_argument("--record-numpy")
    args = ap.parse_args()
    items = descrs(args.seed, args.count)
    reprs = [repr(d) for d in items]
    if args.record_numpy:
        rec = numpy_results(items)
        rec.update(seed=args.seed, count=args.count, descrs=reprs)
        with open(args.record_numpy, "w") as f:
            json.dump(rec, f, indent=0)
            f.write("\n")
        return 0
    try:
        live = numpy_results(items)
    except ImportError:
        print("SKIP: numpy is not installed (python3-numpy)")
        return 77
    sides = [live]
    if args.numpy22:
        with open(args.numpy22) as f:
            rec = json.load(f)
        if rec["descrs"] != reprs:
            print("FAIL: %s was recorded for other descrs (seed %s, count %s): record it again"
                  % (args.numpy22, rec.get("seed"), rec.get("count")))
            return 1
        sides.append(rec)
    failures, refused_by_us, by_kind = [], 0, {}
    with tempfile.TemporaryDirectory() as tmp:
        paths, expect = [], []
        for i, d in enumerate(items):
            res = [s["results"][i] for s in sides]
            obj = any(r.get("object") for r in res)
            taken = [r for r in res if "refused" not in r]
            sizes = {r["itemsize"] for r in taken}
            if obj:
                kind, data = "object", PAYLOAD
            elif len(taken) == len(res) and len(sizes) == 1:
                kind, data = "data", b"\0" * (2 * sizes.pop())
            else:
                kind, data = "refused", b"\0" * 8
            by_kind[kind] = by_kind.get(kind, 0) + 1
            p = os.path.join(tmp, "%05d.npy" % i)
            with open(p, "wb") as f:
                f.write(npy(d, data))
            paths.append(p)
            expect.append(kind)
        reports = {}
        for k in range(0, len(paths), 300):
            r = subprocess.run([args.ckptscan, "scan", "--format", "json", "--quiet", "--"] +
                               paths[k:k + 300], capture_output=True)
            if r.returncode not in (0, 1, 2):
                print("FAIL: ckptscan exited %d: %s" % (r.returncode, r.stderr[-500:]))
                return 1
            for fr in json.loads(r.stdout)["files"]:
                reports[fr["path"]] = fr
        for p, d, kind in zip(paths, items, expect):
            fr = reports.get(p)
            if fr is None:
                failures.append("%r: no report" % (d,))
                continue
            v = fr["verdict"]
            codes = {e["code"] for e in fr.get("errors", [])}
            odd = [f["rule_id"] for f in fr.get("findings", []) if f["verdict"] != "SAFE"]
            if kind == "object" and v != "DANGEROUS":
                failures.append("%r: numpy unpickles the data, ckptscan says %s %s" %
                                (d, v, sorted(codes)))
            elif kind == "data":
                # A descr we refuse (its data then also read as a pickle when it names an
                # object): ERROR, which never passes.
                if v == "ERROR" and "unsupported" in codes:
                    refused_by_us += 1
                elif v != "SAFE" or odd:
                    failures.append("%r: numpy reads %d bytes of data, ckptscan says %s %s %s %s"
                                    % (d, os.path.getsize(p), v, sorted(codes), odd,
                                       [e["message"][:80] for e in fr.get("errors", [])]))
    for line in failures[:40]:
        print("FAIL", line)
    print("npy_descr_diff: numpy %s; %d descrs (seed %d): %s; %d data descrs we refuse as "
          "unsupported; %d failures" % (
              "+".join(s["numpy"] for s in sides), len(items), args.seed,
              json.dumps(by_kind, sort_keys=True), refused_by_us, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
