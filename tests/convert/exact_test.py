#!/usr/bin/python3
"""The conversion fixtures of tests/fixtures/convert_exact (gen_convert_exact.py): each converts
to exactly what torch.load returned, or is refused.

    exact_test.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures/convert_exact

Stdlib only. Each file is converted with `ckptscan convert --dtype keep` (jailed, the default),
and
  "equal"    exit 0, and the output's tensors (names, a tied weight's alias included; dtypes,
             shapes, bytes, quantizer parameters) are exactly what every recorded load that
             succeeded returned (torch 1.13 and 2.6, weights_only False and True; numpy);
  "refused"  exit 1 or 2, nothing written, and the message holds `refusal`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import differential_test as dt  # noqa: E402  output_records, digest, explain


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True)
    a = ap.parse_args()
    files = json.load(open(os.path.join(a.fixtures, "expectations.json")))["files"]
    failures = []
    counts = {"equal": 0, "refused": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(files):
            e = files[name]
            out = os.path.join(tmp, name + ".safetensors")
            r = subprocess.run([a.ckptscan, "convert", "-f", "json", "--dtype", "keep",
                                os.path.join(a.fixtures, name), "-o", out],
                               capture_output=True, text=True)
            label = "%s (%s)" % (name, e["why"])
            if e["expect"] == "refused":
                if r.returncode not in (1, 2) or os.path.exists(out):
                    failures.append("%s: want it refused, got exit %d" % (label, r.returncode))
                elif e["refusal"] not in r.stderr:
                    failures.append("%s: refused, but the message lacks %r: %s" % (
                        label, e["refusal"], r.stderr.strip()[-300:]))
                else:
                    counts["refused"] += 1
                continue
            if r.returncode != 0:
                failures.append("%s: exit %d: %s" % (label, r.returncode, r.stderr.strip()[-300:]))
                continue
            got = dt.output_records(out)
            loads = {m: v for m, v in e["loads"].items() if v["ok"]}
            if not loads:
                failures.append("%s: no recorded load to compare with" % label)
            for m, v in sorted(loads.items()):
                if dt.digest(v["tensors"]) != dt.digest(got):
                    failures.append("%s: output differs from %s:\n%s" % (
                        label, m, dt.explain(v["tensors"], got)))
            counts["equal"] += 1
    for f in failures:
        print("FAIL", f)
    print("%d files: %d converted equal to every load, %d refused; %d failures" % (
        len(files), counts["equal"], counts["refused"], len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
