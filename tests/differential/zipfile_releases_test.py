#!/usr/bin/python3
"""Our model of each release of Python's zipfile against what the real releases did with one
archive of each way they differ (tests/fixtures/zipfile_releases, recorded by its
gen_zipfile_releases.py from Debian's python3.11 3.11.2-6+deb12u6, u8 and u9, Debian 13's
python3.13 and CPython 3.13.0).

    zipfile_releases_test.py --listing-tool PATH --fixtures DIR

For every archive and every real release recorded for it, zip_listing's reading for that
release (core/zip/zipfile_view.h) must agree with the recording: whether it opens, each entry,
which entry each name opens, which local headers ZipFile.open gets past. Every one of the
model's readings must have a recording, and the model must open each archive exactly in the
releases the fixture names. This needs no other zipfile than the recordings: it checks every
release on any machine. Stdlib only.
"""
import argparse
import json
import os
import subprocess
import sys

from zipfile_diff import compare_one

MODELS = ("3.11", "3.11+zip64check", "3.13", "3.13+zip64check")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listing-tool", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.fixtures, "expectations.json")) as f:
        expectations = json.load(f)
    failures = []
    seen_models = {r["model"] for r in expectations["releases"]}
    for m in MODELS:
        if m not in seen_models:
            failures.append("no real release is recorded for the %s reading" % m)
    names = sorted(expectations["archives"])
    paths = [os.path.join(args.fixtures, n) for n in names]
    proc = subprocess.run([args.listing_tool, "--stdin"], input="".join(p + "\n" for p in paths),
                          capture_output=True, text=True, check=True)
    ours = [json.loads(line) for line in proc.stdout.split("\n") if line]
    checks = 0
    for name, listing in zip(names, ours):
        e = expectations["archives"][name]
        opened_by = [m for m in MODELS if listing["releases"][m]["ok"]]
        if opened_by != e["opened_by"]:
            failures.append("%s: opened by our %s, the fixture says %s" % (
                name, opened_by, e["opened_by"]))
        for r in e["seen"]:
            checks += 1
            why = compare_one(r["result"], listing["releases"][r["model"]])
            if why:
                failures.append("%s: %s (%s): %s" % (name, r["model"], r["package"], why))
    for f in failures:
        print("FAIL: " + f)
    print("zipfile releases: %d archives, %d recordings from %d releases (%s), %d failures" % (
        len(names), checks, len(expectations["releases"]),
        ", ".join("%s as %s" % (r["package"], r["model"]) for r in expectations["releases"]),
        len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
