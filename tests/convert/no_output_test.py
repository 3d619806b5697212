#!/usr/bin/python3
"""Malicious and broken fixtures never produce an output file.

    no_output_test.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures

Stdlib only. Every fixture whose manifest expects anything but SAFE (pickles, containers,
joblib, zip corpora) goes through `ckptscan convert` (jailed, the default): the exit code must
be the scan's (1 for SUSPICIOUS/DANGEROUS, 2 for ERROR), and the output folder must stay empty —
no output, no temporary, no staging directory. The fixtures are only read by ckptscan.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CORPORA = ("pickles", "containers", "joblib", "zip")
EXIT = {"SUSPICIOUS": 1, "DANGEROUS": 1, "ERROR": 2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True)
    a = ap.parse_args()
    failures, checked = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = os.path.join(tmp, "out")
        os.mkdir(out_dir)
        for corpus in CORPORA:
            manifest = os.path.join(a.fixtures, corpus, "manifest.json")
            if not os.path.exists(manifest):
                continue
            for entry in json.load(open(manifest)):
                expect = entry.get("expect", entry.get("verdict"))
                if expect not in EXIT:
                    continue
                src = os.path.join(a.fixtures, corpus, entry["file"])
                r = subprocess.run([a.ckptscan, "convert", src, "-o",
                                    os.path.join(out_dir, "x.safetensors")],
                                   capture_output=True, text=True)
                left = os.listdir(out_dir)
                checked += 1
                # Some fixtures accept more than one verdict (the manifest's "accept").
                want = {EXIT[v] for v in entry.get("accept", [expect]) if v in EXIT}
                if r.returncode not in want or left:
                    failures.append(f"{corpus}/{entry['file']} ({expect}): exit "
                                    f"{r.returncode}, want {sorted(want)}; left {left}; "
                                    f"{r.stderr.strip()[-200:]}")
                for f in left:
                    os.unlink(os.path.join(out_dir, f))
    for f in failures:
        print("FAIL", f)
    print(f"{checked} malicious or broken fixtures converted, {len(failures)} failures")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
