#!/usr/bin/python3
"""The conversion differential: generated checkpoints through `ckptscan convert`, tensor by
tensor against what torch.load returns.

    differential_test.py --ckptscan build/clients/ckptscan [--count 5000] [--jobs 2]

differential_gen.py writes COUNT checkpoints (fixed seed) into a temporary folder. Each is
converted with `ckptscan convert --dtype keep` (unjailed, --no-sandbox, for speed; every
--jailed-every'th file through the default jailed worker), while one child process of
/usr/bin/python3 (Debian 12: torch 1.13, numpy 1.24) loads every file with
differential_load.py (torch.load weights_only False and True; numpy.load for an .npz).
torch 2.6 and numpy 2.2 (Debian 13) are not installed here: what they returned for the same
files was recorded by differential_record.py into differential_trixie.json (a digest of each
load's tensors), and the generated files must still be those files (their SHA-256).

A file is
  equal       converted, and every load that succeeded (1.13 and 2.6, each mode) returned
              exactly the output's tensors: the same names (a tied weight's alias in
              __metadata__ counts), dtypes, shapes and bytes; a quantized tensor's parameters
              too; nothing more, nothing less;
  differs     converted, and some load returned other tensors: a failure;
  refused     ckptscan refused it (not SAFE: exit 1; or the conversion was refused: exit 2);
  unverified  converted, but no loader loaded it (nothing to compare with; counted apart);
  crashed     any other exit: a failure.
Exit 1 when any file differs or crashed (each is printed with what differed), else 0.
"""
import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import differential_gen  # noqa: E402
import roundtrip_test  # noqa: E402  read_safetensors

# safetensors dtype -> the loaders' dtype name
FROM_ST = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
           "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
           "BOOL": "bool", "C64": "complex64", "U16": "uint16", "U32": "uint32", "U64": "uint64",
           "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn"}
RESERVED = {"format", "ckptscan.source_sha256", "ckptscan.source_format", "ckptscan.version",
            "ckptscan.rules_version", "ckptscan.verdict", "ckptscan.dtype_policy",
            "ckptscan.complex64_as_real", "ckptscan.quantized"}


# The name `convert` gives a tensor whose key path is empty (torch.save(t), a dict key '').
ROOT_NAME = "tensor"


def canonical(records):
    """The records as a sorted list without repeats (a tensor listed twice under one name
    with the same content is one record; with different content, two); the empty name is
    the one convert writes for it."""
    seen = {json.dumps(dict(r, name=r["name"] or ROOT_NAME), sort_keys=True,
                       separators=(",", ":")) for r in records}
    return [json.loads(s) for s in sorted(seen)]


def digest(records):
    text = json.dumps(canonical(records), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def output_records(path):
    """What a converted file holds, as the loaders' records (differential_load.py)."""
    meta, got = roundtrip_test.read_safetensors(path)
    as_real = set(json.loads(meta.get("ckptscan.complex64_as_real", "[]")))
    quant = json.loads(meta.get("ckptscan.quantized", "{}"))
    params = set()
    for n in quant:
        params |= {n + ".scale", n + ".zero_point", n + ".axis"}
    by_name = {}
    for name, (dt, shape, raw) in got.items():
        if name in params:
            continue
        rec = {"name": name, "dtype": FROM_ST.get(dt, dt), "shape": list(shape),
               "sha256": hashlib.sha256(raw).hexdigest()}
        if name in as_real:
            rec["dtype"], rec["shape"] = "complex64", list(shape[:-1])
        if name in quant:
            rec["dtype"] = quant[name]["dtype"]
            q = {"scheme": quant[name]["scheme"]}
            sdt, sshape, sraw = got[name + ".scale"]
            zdt, zshape, zraw = got[name + ".zero_point"]
            if name + ".axis" in got:
                q["scales"] = [FROM_ST[sdt], hashlib.sha256(sraw).hexdigest()]
                q["zero_points"] = [FROM_ST[zdt], hashlib.sha256(zraw).hexdigest()]
                q["axis"] = int.from_bytes(got[name + ".axis"][2], "little", signed=True)
            else:
                import struct
                q["scale"] = struct.unpack("<d", sraw)[0].hex()
                q["zero_point"] = struct.unpack("<q", zraw)[0]
            rec["q"] = q
        by_name[name] = rec
    for alias, kept in meta.items():
        if alias in RESERVED or kept not in by_name:
            continue
        rec = dict(by_name[kept])
        rec["name"] = alias
        by_name[alias] = rec
    return list(by_name.values())


def convert(ckptscan, src, out, jailed):
    cmd = [ckptscan, "convert", "-f", "json", "--dtype", "keep"]
    if not jailed:
        cmd.append("--no-sandbox")
    r = subprocess.run(cmd + [src, "-o", out], capture_output=True, text=True)
    verdict, message = None, r.stderr.strip()
    try:
        report = json.loads(r.stdout)
        verdict = report["files"][0]["verdict"]
    except (ValueError, KeyError, IndexError):
        pass
    return r.returncode, verdict, message


def explain(expected, got):
    """A short account of how two record lists differ."""
    e = {r["name"]: r for r in canonical(expected)}
    g = {r["name"]: r for r in canonical(got)}
    lines = []
    for n in sorted(set(e) | set(g)):
        if e.get(n) != g.get(n):
            lines.append("      %r: loader %s / output %s" % (n, e.get(n), g.get(n)))
    return "\n".join(lines[:8]) + ("\n      ..." if len(lines) > 8 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--count", type=int, default=differential_gen.COUNT)
    ap.add_argument("--seed", type=int, default=differential_gen.SEED)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--jailed-every", type=int, default=25,
                    help="every Nth file is converted by the default jailed worker")
    ap.add_argument("--python", default="/usr/bin/python3", help="a Python with torch and numpy")
    ap.add_argument("--expectations", default=os.path.join(HERE, "differential_trixie.json"))
    ap.add_argument("--work", help="keep the files and outputs here (default: a temporary folder)")
    ap.add_argument("--summary", help="write the per-file outcomes here (JSON)")
    a = ap.parse_args()
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or tmp
        files_dir = os.path.join(work, "files")
        out_dir = os.path.join(work, "out")
        os.makedirs(out_dir, exist_ok=True)
        files = differential_gen.generate(files_dir, a.seed, a.count)
        names = sorted(files)
        modern = {}
        failures = []
        if a.expectations and os.path.exists(a.expectations):
            rec = json.load(open(a.expectations))
            if (rec["seed"], rec["count"]) == (a.seed, a.count):
                modern = rec["files"]
                stale = [n for n in names if modern.get(n, {}).get("sha256") != files[n]["sha256"]]
                if stale:
                    failures.append("%d generated files are not the ones torch 2.6 loaded "
                                    "(e.g. %s): re-record with differential_record.py" % (
                                        len(stale), stale[0]))
                    modern = {}
        loader = subprocess.Popen([a.python, os.path.join(HERE, "differential_load.py"),
                                   "--dir", files_dir], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

        def one(i_name):
            i, name = i_name
            jailed = a.jailed_every > 0 and i % a.jailed_every == 0
            out = os.path.join(out_dir, name + ".safetensors")
            rc, verdict, message = convert(a.ckptscan, os.path.join(files_dir, name), out, jailed)
            return name, rc, verdict, message, jailed

        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            results = {r[0]: r for r in pool.map(one, enumerate(names))}
        loaded, _ = loader.communicate("\n".join(names))
        converted_at = time.time()
        live = collections.defaultdict(dict)
        for line in loaded.splitlines():
            r = json.loads(line)
            live[r["file"]][r["mode"]] = r
        counts = collections.Counter()
        by_trick = collections.defaultdict(collections.Counter)
        summary = {}
        for name in names:
            _, rc, verdict, message, jailed = results[name]
            if rc not in (0, 1, 2):
                outcome = "crashed"
                failures.append("%s: exit %d: %s" % (name, rc, message[-300:]))
            elif rc != 0:
                outcome = "refused"
            else:
                got = output_records(os.path.join(out_dir, name + ".safetensors"))
                want = [("1.13 " + m, r["tensors"]) for m, r in sorted(live[name].items())
                        if r["ok"]]
                got_digest = digest(got)
                compared = len(want)
                bad = ["%s:\n%s" % (label, explain(t, got)) for label, t in want
                       if digest(t) != got_digest]
                for m, r in sorted(modern.get(name, {}).get("loads", {}).items()):
                    if not r["ok"]:
                        continue
                    compared += 1
                    if r["digest"] != got_digest:
                        bad.append("2.6 %s: digest %s, output %s\n%s" % (
                            m, r["digest"][:16], got_digest[:16],
                            explain(r["tensors"], got) if "tensors" in r else
                            "      (output %s)" % canonical(got)[:4]))
                if bad:
                    outcome = "differs"
                    failures.append("%s (%s%s) differs from the loaders:\n    %s" % (
                        name, ", ".join(files[name]["tricks"]), ", jailed" if jailed else "",
                        "\n    ".join(bad)))
                elif compared == 0:
                    outcome = "unverified"
                else:
                    outcome = "equal"
            counts[outcome] += 1
            if jailed:
                counts["jailed " + outcome] += 1
            for t in files[name]["tricks"]:
                by_trick[t][outcome] += 1
            summary[name] = {"outcome": outcome, "exit": rc, "verdict": verdict,
                             "message": message[-200:] if rc else ""}
        if a.summary:
            with open(a.summary, "w") as f:
                json.dump(summary, f, indent=0, sort_keys=True)
    for f in failures:
        print("FAIL", f)
    print("per trick (equal/refused/unverified/differs):")
    for t in sorted(by_trick):
        c = by_trick[t]
        print("  %-42s %5d %5d %5d %5d" % (t, c["equal"], c["refused"], c["unverified"],
                                           c["differs"] + c["crashed"]))
    print("%d files (%d 2.6 recordings): %s; %.0f s (conversions and loads %.0f s)" % (
        len(names), len(modern), ", ".join("%s %d" % kv for kv in sorted(counts.items())),
        time.time() - start, converted_at - start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
