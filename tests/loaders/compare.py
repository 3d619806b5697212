#!/usr/bin/python3
"""Checks ckptscan's reports against the loader matrix (tests/loaders/loader_matrix.py).

    compare.py --matrix M.jsonl [--matrix M2.jsonl]... --root DIR
               (--ckptscan BUILD/clients/ckptscan | --reports R.json...)
               [--facts-tool BUILD/tests/tools/pickle_facts] [--jailed]
               [--explained tests/loaders/explained.json] [--out D.jsonl] [--check-tensors]
               [--top N]

The matrix's file keys are relative to --root (as loader_matrix.py --root wrote them). ckptscan
runs on every file of the matrix (`scan --format json --digest sha256 --tensors`, batched;
`--no-sandbox` unless --jailed); pickle_facts --read-file, when given, adds every global the
scanner's reading saw (the report names only the globals that are not allowlisted: findings'
`global`; allowlisted ones are counted, not named).

Invariants, each disagreement one line with its kind and a short reason:

  a  every global ANY loader asked find_class for (allowed, blocked or seen by the audit hook)
     is among the globals ckptscan reports for the file (findings' `global`, and with
     --facts-tool the reading's full list). Without --facts-tool only the globals the oracle
     blocked (non-data) are checked, since the report names allowlisted globals only by count.
     Kinds: a:missing-global/<VERDICT>
  b  a file ckptscan calls SAFE is never one where a loader was blocked on a non-data global
     or action, timed out, hung or crashed. Kinds: b:safe-but-blocked, b:safe-but-timeout,
     b:safe-but-hang, b:safe-but-crash
  c  (with --check-tensors) the tensors a torch loader returned (name, dtype, shape) are the
     ones ckptscan lists (`tensor_list`). Kind: c:tensor-mismatch

--explained FILE: a JSON list of {"kind", "file" (fnmatch pattern on the key) or "sha256",
optional "global", "loader" (fnmatch), "format" (ckptscan's, exact), and "reason"}; a disagreement matching one is reported as
explained and does not fail. Exit status: 0 when every disagreement is explained, 1 otherwise,
2 on usage or tool errors.
"""
import argparse
import collections
import fnmatch
import json
import os
import re
import subprocess
import sys

_FIX = None


def _fix_imports(module, name):
    """The names find_class resolves for a protocol < 3 global (fix_imports)."""
    global _FIX
    if _FIX is None:
        import _compat_pickle
        _FIX = _compat_pickle
    if (module, name) in _FIX.NAME_MAPPING:
        return _FIX.NAME_MAPPING[(module, name)]
    if module in _FIX.IMPORT_MAPPING:
        return _FIX.IMPORT_MAPPING[module], name
    return module, name


def read_matrix(paths):
    """{file: {"sha256", "records": {loader: rec}}}, and the metas."""
    files, metas = {}, []
    for p in paths:
        with open(p) as f:
            for line in f:
                r = json.loads(line)
                if "meta" in r:
                    metas.append(r["meta"])
                    continue
                e = files.setdefault(r["file"], {"sha256": r["sha256"], "records": {}})
                tag = r["loader"]
                if tag in e["records"] and len(paths) > 1:
                    tag = "%s@%d" % (tag, paths.index(p))
                e["records"][tag] = r
    return files, metas


def run_ckptscan(tool, paths, jailed, batch=200):
    """{abs path: FileReport}."""
    out = {}
    for i in range(0, len(paths), batch):
        part = paths[i:i + batch]
        cmd = [tool, "scan", "--format", "json", "--digest", "sha256", "--tensors",
               "--quiet", "--jobs", "1"]
        if not jailed:
            cmd.append("--no-sandbox")
        r = subprocess.run(cmd + ["--"] + part, capture_output=True)
        if r.returncode not in (0, 1, 2):
            sys.stderr.write(r.stderr.decode(errors="replace")[-2000:])
            raise SystemExit("compare: ckptscan exited %d" % r.returncode)
        rep = json.loads(r.stdout)
        for fr in rep["files"]:
            out[os.path.abspath(fr["path"])] = fr
        for sk in rep.get("skipped", []):
            out.setdefault(os.path.abspath(sk["path"]), {"skipped": sk["reason"]})
    return out


def run_facts(tool, paths):
    """{abs path: [module.name, ...]} from pickle_facts --read-file."""
    out = {}
    r = subprocess.run([tool, "--read-file", "--stdin"], input="\n".join(paths) + "\n",
                       capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise SystemExit("compare: %s exited %d: %s" % (tool, r.returncode, r.stderr[-500:]))
    for line in r.stdout.splitlines():
        j = json.loads(line)
        gl = []
        for p in j.get("pickles", []):
            for m, n in p.get("globals", []):
                gl.append((m, n))
        out[os.path.abspath(j["file"])] = {"globals": gl, "format": j.get("format"),
                                           "stream_error": j.get("stream_error")}
    return out


def _dotted(key):
    """The matrix's key path (.name, [i]) as ckptscan names tensors (name.0)."""
    return re.sub(r"\[(\d+)\]", r".\1", key).lstrip(".")


def _gname(m, n):
    return "%s.%s" % (m, n)


def scanner_globals(report, facts):
    names = set()
    for f in report.get("findings", []):
        if f.get("global"):
            names.add(f["global"])
    if facts:
        for m, n in facts["globals"]:
            names.add(_gname(m, n))
            names.add(_gname(*_fix_imports(m, n)))
    return names


def check_file(key, entry, report, facts, check_tensors):
    """[(kind, loader, global, reason)]"""
    out = []
    if report is None or "skipped" in report:
        out.append(("x:no-report", "", "", "ckptscan did not report the file%s" % (
            ": skipped (%s)" % report["skipped"] if report else "")))
        return out
    verdict = report["verdict"]
    seen = scanner_globals(report, facts)
    # (a)
    missing = collections.OrderedDict()
    for loader, rec in entry["records"].items():
        for g in rec.get("globals", []):
            m, n, status = g
            if status == "refused":  # torch weights_only looked it up, imported nothing
                continue
            if facts is None and status != "blocked":
                # Without the reading's full list only non-allowlisted globals are named in
                # the report: check the ones the oracle found non-data.
                continue
            if (m, n) == ("torch.jit", "load"):  # not a pickle global (TorchScript)
                continue
            names = {_gname(m, n), _gname(*_fix_imports(m, n))}
            if names & seen:
                continue
            missing.setdefault(_gname(m, n), []).append(loader)
    for g, loaders in missing.items():
        out.append(("a:missing-global/%s" % verdict, ",".join(sorted(set(loaders))), g,
                    "%s imported %s; ckptscan (%s, %s) reports %s" % (
                        "+".join(sorted(set(loaders))), g, report.get("format"), verdict,
                        "no global" if not seen else "only " + ", ".join(sorted(seen)[:6]))))
    # (b)
    if verdict == "SAFE":
        for loader, rec in entry["records"].items():
            o = rec["outcome"]
            if o == "blocked":
                out.append(("b:safe-but-blocked", loader, rec.get("blocked") or "",
                            "SAFE, but %s was stopped at %s (%s)" % (
                                loader, rec.get("blocked"), (rec.get("error") or "")[:100])))
            elif o in ("timeout", "hang", "crash"):
                out.append(("b:safe-but-%s" % o, loader, "",
                            "SAFE, but %s: %s" % (loader, (rec.get("error") or "")[:100])))
    # (c)
    if check_tensors:
        mine = collections.Counter(
            (t["name"], t["dtype"], tuple(t["shape"])) for t in report.get("tensor_list", []))
        for loader, rec in entry["records"].items():
            if not loader.startswith("torch") or rec["outcome"] != "opened":
                continue
            theirs = collections.Counter(
                (_dotted(a["key"]), a["dtype"], tuple(a["shape"]))
                for a in rec.get("arrays", []) if a.get("kind") == "tensor")
            if theirs and theirs != mine:
                only_t = list((theirs - mine).elements())[:3]
                only_m = list((mine - theirs).elements())[:3]
                out.append(("c:tensor-mismatch", loader, "",
                            "%s returned %d tensors, ckptscan lists %d; only loader: %s; "
                            "only ckptscan: %s" % (loader, sum(theirs.values()),
                                                   sum(mine.values()), only_t, only_m)))
    return out


def load_explained(path):
    if not path:
        return []
    with open(path) as f:
        items = json.load(f)
    for it in items:
        if "kind" not in it or "reason" not in it or not ("file" in it or "sha256" in it or
                                                          "format" in it):
            raise SystemExit("compare: %s: every entry needs kind, reason and file, sha256 or "
                             "format: "
                             "%r" % (path, it))
    return items


def explained_by(items, key, sha, kind, loader, glob, fmt=""):
    for it in items:
        if "format" in it and it["format"] != fmt:
            continue
        if not fnmatch.fnmatchcase(kind, it["kind"]):
            continue
        if "file" in it and not fnmatch.fnmatchcase(key, it["file"]):
            continue
        if "sha256" in it and it["sha256"] != sha:
            continue
        if "global" in it and not fnmatch.fnmatchcase(glob, it["global"]):
            continue
        if "loader" in it and not any(fnmatch.fnmatchcase(x, it["loader"])
                                      for x in loader.split(",")):
            continue
        return it
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--matrix", action="append", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--ckptscan")
    ap.add_argument("--reports", action="append", default=[])
    ap.add_argument("--facts-tool")
    ap.add_argument("--jailed", action="store_true")
    ap.add_argument("--explained")
    ap.add_argument("--out")
    ap.add_argument("--check-tensors", action="store_true")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args(argv)
    files, metas = read_matrix(args.matrix)
    root = os.path.abspath(args.root)
    paths = {k: os.path.join(root, k) for k in files}
    missing = [k for k, p in paths.items() if not os.path.isfile(p)]
    if missing:
        print("compare: %d matrix files are not under %s (first: %s)" % (
            len(missing), root, missing[0]), file=sys.stderr)
        return 2
    reports = {}
    if args.ckptscan:
        reports = run_ckptscan(args.ckptscan, sorted(paths.values()), args.jailed)
    for rp in args.reports:
        with open(rp) as f:
            for fr in json.load(f)["files"]:
                reports[os.path.abspath(fr["path"])] = fr
    if not reports:
        ap.error("give --ckptscan or --reports")
    facts = run_facts(args.facts_tool, sorted(paths.values())) if args.facts_tool else None
    explained = load_explained(args.explained)
    rows = []
    for key in sorted(files):
        entry = files[key]
        p = paths[key]
        f = None if facts is None else facts.get(p, {"globals": []})
        for kind, loader, glob, reason in check_file(key, entry, reports.get(p), f,
                                                     args.check_tensors):
            ex = explained_by(explained, key, entry["sha256"], kind, loader, glob,
                              (reports.get(p) or {}).get("format", ""))
            rows.append({"file": key, "sha256": entry["sha256"], "kind": kind,
                         "loader": loader, "global": glob, "reason": reason,
                         "explained": ex["reason"] if ex else None,
                         "verdict": (reports.get(p) or {}).get("verdict"),
                         "format": (reports.get(p) or {}).get("format")})
    if args.out:
        with open(args.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    by_kind = collections.Counter(r["kind"] for r in rows if not r["explained"])
    ex_kind = collections.Counter(r["kind"] for r in rows if r["explained"])
    files_bad = len({r["file"] for r in rows if not r["explained"]})
    verdicts = collections.Counter((reports.get(paths[k]) or {}).get("verdict", "none")
                                   for k in files)
    print("compare: %d files, %d loader records; ckptscan verdicts %s" % (
        len(files), sum(len(e["records"]) for e in files.values()), dict(sorted(
            verdicts.items()))))
    if facts is None:
        print("(no --facts-tool: invariant a checks only the globals the loaders were stopped at)")
    print("unexplained disagreements: %d on %d files" % (sum(by_kind.values()), files_bad))
    for k, n in sorted(by_kind.items()):
        print("  %-34s %d" % (k, n))
    if ex_kind:
        print("explained: %d" % sum(ex_kind.values()))
        for k, n in sorted(ex_kind.items()):
            print("  %-34s %d" % (k, n))
    shown = [r for r in rows if not r["explained"]][:args.top]
    if shown:
        print("first %d unexplained:" % len(shown))
        for r in shown:
            print("  %s  %s  [%s %s] %s" % (r["kind"], r["file"], r["format"], r["verdict"],
                                            r["reason"]))
    return 1 if by_kind else 0


if __name__ == "__main__":
    sys.exit(main())
