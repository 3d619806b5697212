#!/usr/bin/python3
"""Hand-built quantized checkpoints meant to fool `convert`, against the recorded expectations.

    quantized_attacks_test.py --ckptscan build/clients/ckptscan \
        --fixtures tests/fixtures/quantized/attacks

For every file of attacks.json (tests/fixtures/quantized/attacks/gen_attacks.py): `scan` gives
the recorded verdict; `convert --dtype keep` exits with the recorded code, its last stderr line
holds the recorded message, and nothing is written unless it exits 0; a file that converts and
that torch 1.13 loaded holds exactly torch's tensors (a quantized one as its int_repr, scale,
zero point and axis, tests/convert/quantized_test.py); with "bf16_kept", `--dtype bf16` keeps
exactly those float tensors and casts every other. Stdlib only.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quantized_test import check_quantized  # noqa: E402
from roundtrip_test import ST, check, failures, read_safetensors  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def compare_with_torch(label, tensors, meta, got):
    qmeta = json.loads(meta.get("ckptscan.quantized", "{}"))
    names = set()
    for t in tensors:
        if "qscheme" in t:
            names.update(check_quantized(label, t, got, qmeta))
            continue
        name = t["name"]
        names.add(name)
        stored = name if name in got else meta.get(name)  # a tied name: its alias
        if not check(stored in got, f"{label}: {name} missing"):
            continue
        dt, shape, raw = got[stored]
        check(dt == ST[t["dtype"]] and shape == t["shape"] and
              hashlib.sha256(raw).hexdigest() == t["sha256"],
              f"{label}: {name} is {dt} {shape}, torch has {t['dtype']} {t['shape']}")
    extra = sorted(set(got) - names)
    check(not extra, f"{label}: output holds {extra}, which torch did not return")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/quantized/attacks")
    a = ap.parse_args()
    files = json.load(open(os.path.join(a.fixtures, "attacks.json")))["files"]
    compared = 0
    with tempfile.TemporaryDirectory() as tmp:
        for rel, entry in sorted(files.items()):
            src = os.path.join(a.fixtures, rel)
            want = entry["expect"]
            rc, out, err = run([a.ckptscan, "scan", "-f", "json", src])
            verdict = json.loads(out)["files"][0]["verdict"] if out.strip() else f"exit {rc}"
            check(verdict == want["scan"], f"{rel}: scan says {verdict}, want {want['scan']}")
            dst = os.path.join(tmp, "out.safetensors")
            rc, out, err = run([a.ckptscan, "convert", src, "-o", dst])
            last = err.strip().splitlines()[-1] if err.strip() else ""
            check(rc == want["convert"], f"{rel}: convert exits {rc}, want {want['convert']}: "
                                         f"{last}")
            check(want.get("message", "") in last,
                  f"{rel}: convert says {last!r}, want {want.get('message')!r} in it")
            if rc != 0:
                check(not os.path.exists(dst), f"{rel}: exit {rc}, yet an output exists")
                continue
            meta, got = read_safetensors(dst)
            os.unlink(dst)
            if "tensors" in entry.get("torch", {}):
                compare_with_torch(rel, entry["torch"]["tensors"], meta, got)
                compared += 1
            if "bf16_kept" in want:
                rc, _, err = run([a.ckptscan, "convert", src, "-o", dst, "--dtype", "bf16"])
                if not check(rc == 0, f"{rel} --dtype bf16: exit {rc}: {err.strip()}"):
                    continue
                _, cast = read_safetensors(dst)
                os.unlink(dst)
                for name, (dt, _, _) in got.items():
                    if dt not in ("F32", "F16"):
                        continue
                    expected = dt if name in want["bf16_kept"] else "BF16"
                    check(cast[name][0] == expected,
                          f"{rel} --dtype bf16: {name} is {cast[name][0]}, want {expected}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(files)} hand-built quantized files checked; {compared} conversions compared with "
          f"what torch 1.13 loaded; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
