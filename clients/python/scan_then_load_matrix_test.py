#!/usr/bin/python3
"""scan_then_load on torch 1.13 (live) and torch 2.6 (recorded), over every SAFE torch fixture.

    scan_then_load_matrix_test.py --ckptscan PATH --fixtures DIR --expectations DIR

EXPECTATIONS is tests/loaders/expectations: debian12/scan_then_load.jsonl and
trixie/scan_then_load.jsonl, written by scan_then_load_matrix.py (its doc says what a line
holds and which fixtures are in the set).
  (a) Debian 12, live: scan_then_load_matrix.py runs with this Python (/usr/bin/python3, torch
      1.13) and the CLI; its lines must equal debian12/scan_then_load.jsonl, fixture by
      fixture, and every one must keep the invariant: the scan passes the SAFE file and
      scan_then_load returns what torch.load(weights_only=True) returns (the same digest of
      tensors and structure), or both refuse it the same way, with the reason recorded.
  (b) Debian 13 (torch 2.6), recorded: trixie/scan_then_load.jsonl must hold a line for every
      fixture of (a)'s live set (the same file: sha256, format and verdict agree), none for a
      fixture no longer in it, and every line must keep the same invariant. A fixture added
      later without a trixie record fails here, naming the command that records it (the root
      needs chroot, so it is not run here).
  (c) the checks can fail: each is run again on expectations broken on purpose (a digest
      changed, a line dropped, a refusal's reason emptied) and must report it.
Exits 77 (skipped) when this Python has no torch (Debian's python3-torch).
"""
import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import scan_then_load_matrix as matrix  # noqa: E402  (stdlib only at import)

RECORD_DEBIAN12 = ("/usr/bin/python3 clients/python/scan_then_load_matrix.py --fixtures "
                   "tests/fixtures --ckptscan build/clients/ckptscan "
                   "--out tests/loaders/expectations/debian12/scan_then_load.jsonl")
RECORD_TRIXIE = ("sudo bash scripts/scan_then_load_trixie.sh --ckptscand build/clients/ckptscand "
                 "--out tests/loaders/expectations/trixie/scan_then_load.jsonl")
RECORD_BOTH = "bash scripts/loader_expectations.sh --scan-then-load-only (as root)"


def read_lines(path):
    """(meta, {fixture: record}) of a scan_then_load_matrix.py output."""
    meta, records = None, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if "meta" in r:
                meta = r["meta"]
            else:
                records[r["fixture"]] = r
    return meta, records


def invariant_failures(records, where):
    out = []
    for name, r in sorted(records.items()):
        why = matrix.check_record(r)
        if why:
            out.append("%s: %s: %s" % (where, name, why))
    return out


def compare_debian12(live_meta, live, want_meta, want):
    """(a): the live lines against the committed ones."""
    out = []
    if live_meta != want_meta:
        out.append("debian12: meta is %s, the expectations say %s" % (live_meta, want_meta))
    for name in sorted(set(live) | set(want)):
        if name not in want:
            out.append("debian12: %s is not in the expectations (new fixture?)" % name)
        elif name not in live:
            out.append("debian12: %s is in the expectations, not in the live set" % name)
        elif live[name] != want[name]:
            fields = sorted(k for k in set(live[name]) | set(want[name])
                            if live[name].get(k) != want[name].get(k))
            out.append("debian12: %s differs in %s: live %s, expected %s" % (
                name, ", ".join(fields), {k: live[name].get(k) for k in fields},
                {k: want[name].get(k) for k in fields}))
    return out


def check_trixie(live, trixie_meta, trixie):
    """(b): the recorded Debian 13 lines cover the live set, each keeping the invariant."""
    out = []
    if not trixie_meta or not str(trixie_meta.get("torch", "")).startswith("2.6"):
        out.append("trixie: the record's meta is %s, not a torch 2.6 run" % trixie_meta)
    for name in sorted(live):
        got = trixie.get(name)
        if got is None:
            out.append("trixie: %s (SAFE, %s) has no record" % (name, live[name]["format"]))
            continue
        same_file = {k: (live[name][k], got.get(k)) for k in ("sha256", "format", "verdict")
                     if live[name][k] != got.get(k)}
        if same_file:
            out.append("trixie: %s was recorded for another file or scan: %s (live, recorded)"
                       % (name, same_file))
    for name in sorted(set(trixie) - set(live)):
        out.append("trixie: %s has a record but is no SAFE torch fixture now" % name)
    out += invariant_failures(trixie, "trixie")
    return out


def self_test(live_meta, live, want_meta, want, trixie_meta, trixie):
    """(c): each check reports expectations broken on purpose."""
    out = []
    loaded = next(n for n, r in sorted(want.items()) if r["status"] == "same")
    refused = next(n for n, r in sorted(trixie.items()) if r["status"] == "refused")

    broken = copy.deepcopy(want)
    broken[loaded]["scan_then_load"]["digest"] = "0" * 64
    if not compare_debian12(live_meta, live, want_meta, broken):
        out.append("self-test: a changed debian12 digest (%s) went unnoticed" % loaded)

    dropped = copy.deepcopy(trixie)
    del dropped[loaded]
    if not any(loaded in f for f in check_trixie(live, trixie_meta, dropped)):
        out.append("self-test: a missing trixie record (%s) went unnoticed" % loaded)
    differs = copy.deepcopy(trixie)
    differs[loaded]["scan_then_load"]["digest"] = "0" * 64
    differs[loaded]["status"] = matrix.status(differs[loaded]["scan_then_load"],
                                              differs[loaded]["torch_wo"])
    if not any(loaded in f for f in check_trixie(live, trixie_meta, differs)):
        out.append("self-test: a trixie load unlike torch.load's (%s) went unnoticed" % loaded)
    unexplained = copy.deepcopy(trixie)
    unexplained[refused]["scan_then_load"]["reason"] = ""
    unexplained[refused]["torch_wo"]["reason"] = ""
    if not any(refused in f for f in check_trixie(live, trixie_meta, unexplained)):
        out.append("self-test: a trixie refusal without its reason (%s) went unnoticed" % refused)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--expectations", required=True,
                    help="tests/loaders/expectations (debian12/ and trixie/ scan_then_load.jsonl)")
    args = ap.parse_args()
    if importlib.util.find_spec("torch") is None:
        print("SKIPPED: scan_then_load_matrix_test needs Debian's python3-torch")
        return 77

    with tempfile.TemporaryDirectory(prefix="ckptscan-s2l-") as tmp:
        out = os.path.join(tmp, "debian12.jsonl")
        start = time.monotonic()
        run = subprocess.run([sys.executable, os.path.join(HERE, "scan_then_load_matrix.py"),
                              "--fixtures", args.fixtures, "--ckptscan", args.ckptscan,
                              "--out", out], capture_output=True, text=True, check=False)
        print("scan_then_load_matrix.py: exit %d in %.1f s; %s" % (
            run.returncode, time.monotonic() - start, run.stderr.strip()[-2000:]))
        if not os.path.exists(out):
            print("FAIL: scan_then_load_matrix.py wrote nothing")
            return 1
        live_meta, live = read_lines(out)

    want_meta, want = read_lines(os.path.join(args.expectations, "debian12",
                                              "scan_then_load.jsonl"))
    trixie_meta, trixie = read_lines(os.path.join(args.expectations, "trixie",
                                                  "scan_then_load.jsonl"))
    failures = []
    if run.returncode not in (0, 1):
        failures.append("scan_then_load_matrix.py exited %d" % run.returncode)
    debian12 = compare_debian12(live_meta, live, want_meta, want)
    debian12 += invariant_failures(live, "debian12 (live)")
    trixie_failures = check_trixie(live, trixie_meta, trixie)
    failures += debian12 + trixie_failures + self_test(live_meta, live, want_meta, want,
                                                        trixie_meta, trixie)
    for f in failures:
        print("FAIL:", f)
    if debian12:
        print("If the change is meant (a fixture added or changed, another torch), record "
              "Debian 12 again: %s" % RECORD_DEBIAN12)
    if trixie_failures:
        print("If the change is meant, record Debian 13 (torch 2.6) again: %s" % RECORD_TRIXIE)
    if debian12 or trixie_failures:
        print("(or both at once: %s)" % RECORD_BOTH)

    def counts(records):
        c = {}
        for r in records.values():
            key = r["status"] + ("/" + r["refused_by"] if "refused_by" in r else "")
            c[key] = c.get(key, 0) + 1
        return ", ".join("%d %s" % (v, k) for k, v in sorted(c.items()))
    print("torch %s (live): %d SAFE torch fixtures of %d expected SAFE: %s"
          % (live_meta["torch"], len(live), live_meta["expected_safe"], counts(live)))
    print("torch %s (recorded): %d: %s" % (trixie_meta and trixie_meta.get("torch"), len(trixie),
                                          counts(trixie)))
    print("FAILED: %d" % len(failures) if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
