#!/usr/bin/python3
"""Every SUSPICIOUS file clears with the flags its own findings print, run as printed.

    check_hints.py --ckptscan PATH --root DIR [--known FILE] [--extra-arg ARG]...

Scans every file under DIR (a corpus of real files: tests/fixtures/realworld) except its
manifest.json and copyright files. For each SUSPICIOUS file it collects every flag the SUSPICIOUS
findings print (`--allow NAME`, `--limit NAME=VALUE`), all of them together, duplicates
included (a user pastes what the report says), and scans the file again with them: it must be
SAFE with exit 0. A usage error (exit 64) fails as much as another verdict does.

FILE (JSON: {path relative to DIR: reason}) lists the files known not to clear, each with why;
a listed file that now clears fails too, so the list only shrinks. Stdlib only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

# A flag as a message prints it: `--allow mod.Class`, `--allow mod:Class.NAME`,
# `--limit max_x=123`; the value ends at a blank, a quote or closing punctuation.
FLAG = re.compile(r"--(allow|limit)[ =]([A-Za-z0-9_.:=]+[A-Za-z0-9_])")
BATCH = 200


def scan(args, paths, flags=()):
    cmd = [args.ckptscan, "scan", "--format", "json", "--quiet"] + args.extra_arg + list(flags)
    proc = subprocess.run(cmd + ["--"] + paths, capture_output=True, timeout=600)
    if proc.returncode not in (0, 1, 2):
        return proc.returncode, proc.stderr.decode(errors="replace").strip()[-300:], []
    return proc.returncode, "", json.loads(proc.stdout)["files"]


def printed_flags(report):
    flags = []
    for f in report["findings"]:
        if f["verdict"] == "SUSPICIOUS":
            for kind, value in FLAG.findall(f["message"]):
                flags += ["--" + kind, value]
    return flags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--known", default=None)
    ap.add_argument("--extra-arg", action="append", default=[],
                    help="an argument added to every scan (repeatable)")
    args = ap.parse_args()
    known = {}
    if args.known:
        with open(args.known) as f:
            known = json.load(f)
    paths = []
    for d, dirs, names in os.walk(args.root):
        dirs.sort()
        for n in sorted(names):
            if n not in ("manifest.json", "copyright", "loads.json"):
                paths.append(os.path.join(d, n))
    suspicious = []
    for i in range(0, len(paths), BATCH):
        rc, err, reports = scan(args, paths[i:i + BATCH])
        if err:
            print("FAIL scanning %d files: exit %d: %s" % (len(paths[i:i + BATCH]), rc, err))
            return 1
        suspicious += [r for r in reports if r["verdict"] == "SUSPICIOUS"]
    failures, cleared = [], 0
    for r in suspicious:
        rel = os.path.relpath(r["path"], args.root)
        flags = printed_flags(r)
        rc, err, again = scan(args, [r["path"]], flags)
        ok = not err and rc == 0 and again and again[0]["verdict"] == "SAFE"
        if ok:
            cleared += 1
            if rel in known:
                failures.append("%s clears with %s now: remove it from %s" % (
                    rel, " ".join(flags) or "no flag", args.known))
            continue
        if rel in known:
            continue
        left = err or "; ".join(sorted({"%s %s: %s" % (f["rule_id"], f["verdict"],
                                                        f["message"][:160])
                                        for f in again[0]["findings"]
                                        if f["verdict"] != "SAFE"}))
        failures.append("%s with the printed flags [%s]: exit %d, %s" % (
            rel, " ".join(flags), rc, left))
    for rel in sorted(set(known) - {os.path.relpath(r["path"], args.root) for r in suspicious}):
        failures.append("%s is listed as known but is not SUSPICIOUS: remove it from %s" % (
            rel, args.known))
    for line in failures:
        print("FAIL", line)
    print("%d files, %d SUSPICIOUS: %d clear with their printed flags, %d known not to "
          "(listed with reasons), %d failures" % (len(paths), len(suspicious), cleared,
                                                  len(known), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
