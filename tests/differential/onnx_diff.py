#!/usr/bin/python3
"""Our ONNX reading (core/onnx/onnx_check.h) against Debian's onnx: the same bytes decoded by
both, on the ONNX fixtures and on generated, truncated and mutated models (a fixed seed).

    onnx_diff.py --facts-tool build/tests/tools/pickle_facts --fixtures tests/fixtures/onnx
                 [--seed 1] [--count 2000]

For every input, onnx's side is `onnx.ModelProto.ParseFromString` (what onnx.load does before
anything else; no external data is loaded) plus "has a graph"; ours is pickle_facts --read-file
(torch::ReadFile, as the scanner reads): a model is decoded when the format is "onnx" and the
error is not a decoding error. A disagreement is a failure, except one explained difference: Python's protobuf stops at a
stray end-group tag and keeps what it read before (a warning, "Not all data was converted"),
where C++'s parser refuses the message; we refuse such inputs (ERROR, never SAFE). What the walk
judges (external data locations, operator domains) is asserted on the fixtures by
check_verdicts.py; this test compares which bytes are a model at all. Exit 77 (skip) without python3-onnx.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import warnings

try:
    import onnx
except ImportError:
    print("onnx_diff: SKIP: python3-onnx is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

DECODE_ERRORS = ("not a valid ONNX ModelProto", "an ONNX ModelProto without a graph")


def onnx_decodes(data):
    """(decodes, partial): partial when Python's protobuf stopped at a stray end-group tag and
    kept what came before ("Not all data was converted"), which C++'s parser refuses."""
    m = onnx.ModelProto()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            m.ParseFromString(data)
        except Exception:  # noqa: BLE001 - any decode error is "no model"
            return False, False
    partial = any("Not all data was converted" in str(w.message) for w in caught)
    return m.HasField("graph"), partial


def mutations(base, rng, count):
    """Truncations, byte flips, inserted and deleted bytes, spliced models."""
    out = []
    for i in range(count):
        data = bytearray(base[rng.randrange(len(base))])
        kind = i % 4
        if kind == 0 and len(data) > 1:
            data = data[:rng.randrange(1, len(data))]
        elif kind == 1:
            for _ in range(rng.randint(1, 4)):
                p = rng.randrange(len(data))
                data[p] ^= 1 << rng.randrange(8)
        elif kind == 2:
            p = rng.randrange(len(data))
            data[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            other = base[rng.randrange(len(base))]
            data = data[:rng.randrange(len(data))] + other[rng.randrange(len(other)):]
        if data[:1] == b"\x08":
            out.append(bytes(data))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts-tool", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    args = ap.parse_args()
    base = []
    for dirpath, _, names in sorted(os.walk(args.fixtures)):
        for n in sorted(names):
            if n.endswith(".onnx"):
                with open(os.path.join(dirpath, n), "rb") as f:
                    base.append(f.read())
    rng = random.Random(args.seed)
    inputs = base + mutations(base, rng, args.count)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, data in enumerate(inputs):
            p = os.path.join(tmp, "%05d.onnx" % i)
            with open(p, "wb") as f:
                f.write(data)
            paths.append(p)
        ours = {}
        for start in range(0, len(paths), 500):
            proc = subprocess.run([args.facts_tool, "--read-file"] + paths[start:start + 500],
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                print("onnx_diff: the facts tool failed: %s" % proc.stderr[-2000:])
                return 1
            for line in proc.stdout.splitlines():
                r = json.loads(line)
                ours[r["file"]] = r
    failures = []
    agree_model = agree_not = stricter = 0
    for p, data in zip(paths, inputs):
        r = ours.get(p)
        if r is None:
            failures.append("%s: missing from the facts tool's output" % p)
            continue
        err = r.get("stream_error") or ""
        we = r["format"] == "onnx" and not any(e in err for e in DECODE_ERRORS)
        they, partial = onnx_decodes(data)
        if they and partial and not we:
            stricter += 1  # we refuse what Python's protobuf reads only in part: never SAFE
            continue
        if we != they:
            failures.append("%s (%d bytes): onnx %s, we %s (%s, %s)" % (
                os.path.basename(p), len(data), "decodes" if they else "refuses",
                "decode" if we else "refuse", r["format"], err[:160]))
        elif we:
            agree_model += 1
        else:
            agree_not += 1
    for f in failures[:20]:
        print("DISAGREE " + f)
    print("onnx_diff: %d inputs (%d fixtures), %d decoded by both, %d refused by both, "
          "%d read only in part by Python's protobuf and refused by us, %d disagreements" % (
              len(inputs), len(base), agree_model, agree_not, stricter, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
