#!/usr/bin/python3
"""Differential test: CPython's C unpickler versus our symbolic VM (the pickle_facts tool).

    /usr/bin/python3 tests/differential/diff_test.py --facts-tool build/tests/tools/pickle_facts \
        --fixtures tests/fixtures/pickles [--random N] [--seed S] [--keep-failures DIR]

Inputs: every fixture; N random pickles over all protocol 0-5 opcodes (valid ones and subtly
invalid ones, framed only well); N byte-level mutations of the fixtures; and a few FRAME
straddling streams, where CPython 3.11 and a strict VM must disagree and we only require that the
VM does not pass them clean. CPython runs in this process with cpython_oracle's recording
unpickler (nothing imported; checked). Our side is one batched run of the facts tool.

Rules, for the first top-level pickle of each input:
  (a) CPython loads it -> we report no error and exactly CPython's (module, name) list, in order,
      and the same end offset;
  (b) CPython fails -> CPython's globals are a prefix of ours, or we failed too;
  (c) CPython loads it and we report an error -> a mismatch, unless a documented strictness
      explains it (framing per PEP 3154; a fixture whose manifest accepts ERROR); every such case
      is printed with its reason.
Later top-level pickles are compared the same way while framing is clean. Exit status 1 on any
mismatch (the first 20 are printed with hex dumps; --keep-failures saves every failing input).

Stdlib only. Run with Debian's /usr/bin/python3 (3.11): the oracle is that interpreter's _pickle.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import List, NamedTuple, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpython_oracle  # noqa: E402
import pickle_gen  # noqa: E402

MAX_MUTATION_SOURCE = 64 << 10  # do not mutate the oversize resource fixtures


class Case(NamedTuple):
    kind: str  # fixture | random | mutation | straddle
    name: str
    data: bytes
    error_ok: Optional[str]  # why an error from us is acceptable when CPython loads it


class Ours(NamedTuple):
    ok: bool
    globals: list
    error: Optional[str]
    end: int


def load_fixtures(root):
    cases = []
    manifest = os.path.join(root, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest, "rb") as f:
            entries = json.loads(f.read().decode("utf-8"))
    else:
        entries = [{"file": os.path.relpath(os.path.join(d, n), root), "expect": "?"}
                   for d, _, names in sorted(os.walk(root)) for n in sorted(names)
                   if n.endswith(".pkl")]
    for e in entries:
        with open(os.path.join(root, e["file"]), "rb") as f:
            data = f.read()
        verdicts = set(e.get("accept", [e["expect"]]))
        why = "manifest expects %s: %s" % (e["expect"], e.get("why", "")) if "ERROR" in verdicts \
            else None
        cases.append(Case("fixture", e["file"], data, why))
    return cases


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not b:
            b = bytearray(rng.randbytes(rng.randint(1, 4)))
            continue
        k = rng.randrange(7)
        i = rng.randrange(len(b))
        if k == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif k == 1:
            b[i] = rng.randrange(256)
        elif k == 2:
            b[i:i] = rng.randbytes(rng.randint(1, 4))
        elif k == 3:
            del b[i:i + rng.randint(1, 8)]
        elif k == 4:
            del b[rng.randrange(len(b) + 1):]
        elif k == 5:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 16)]
        else:
            b[i:i] = pickle_gen.random_opcode(rng)
    return bytes(b)


def build_cases(opts) -> List[Case]:
    fixtures = load_fixtures(opts.fixtures)
    cases = list(fixtures)
    for i in range(opts.random):
        rng = random.Random("random-%d-%d" % (opts.seed, i))
        cases.append(Case("random", "random#%d" % i, pickle_gen.random_pickle(rng), None))
    sources = [c for c in fixtures if len(c.data) < MAX_MUTATION_SOURCE]
    for i in range(opts.random if sources else 0):
        rng = random.Random("mutation-%d-%d" % (opts.seed, i))
        src = rng.choice(sources)
        cases.append(Case("mutation", "mutation#%d<%s" % (i, src.name), mutate(src.data, rng),
                          None))
    for i in range(max(10, opts.random // 30)):
        rng = random.Random("straddle-%d-%d" % (opts.seed, i))
        cases.append(Case("straddle", "straddle#%d" % i, pickle_gen.straddle_pickle(rng), None))
    return cases


def run_cpython(cases):
    results = []
    with cpython_oracle.no_imports(), cpython_oracle.memory_limit():
        for c in cases:
            results.append(cpython_oracle.run(c.data, timeout_s=5.0))
    return results


def run_facts(tool, cases, tmp):
    paths = []
    for i, c in enumerate(cases):
        p = os.path.join(tmp, "%06d.pkl" % i)
        with open(p, "wb") as f:
            f.write(c.data)
        paths.append(p)
    facts, crashed = {}, {}

    def batch(ps):
        try:
            proc = subprocess.run([tool, "--stdin"], input="".join(p + "\n" for p in ps).encode(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        except subprocess.TimeoutExpired as e:  # killed; keep what it printed
            proc = subprocess.CompletedProcess(e.cmd, "timeout", e.stdout or b"",
                                               (e.stderr or b"") + b"\n(killed after 600s)")
        # One JSON object per "\n"-ended line. Not splitlines(): it also splits at U+0085,
        # U+2028 and U+2029, which a global's name may hold and JSON leaves unescaped.
        for line in proc.stdout.decode("utf-8", "surrogatepass").split("\n"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue  # a torn last line; that file counts as unreported
            facts[obj["file"]] = obj
        return proc

    # The tool reports files in order: when it dies, the first unreported file is the suspect;
    # confirm it alone, then resume the batch after it.
    pending, rounds = paths, 0
    while pending:
        proc = batch(pending)
        rest = [p for p in pending if p not in facts]
        if not rest:
            break
        rounds += 1
        print("facts tool exit %s with %d of %d files unreported%s" % (
            proc.returncode, len(rest), len(pending),
            (": " + proc.stderr.decode(errors="replace")[-500:].strip()) if rounds == 1 else ""))
        if rounds > 50:
            for p in rest:
                crashed[p] = "facts tool did not report this file (gave up retrying)"
            break
        alone = batch(rest[:1])
        if rest[0] not in facts:
            crashed[rest[0]] = "facts tool exit %s on this file alone: %s" % (
                alone.returncode, alone.stderr.decode(errors="replace")[-300:].strip())
        pending = rest[1:]
    return [facts.get(p) for p in paths], [crashed.get(p) for p in paths]


def ours_top(fact) -> List[Ours]:
    out = []
    for p in fact.get("pickles") or []:
        if p.get("depth", 0) != 0:
            continue
        out.append(Ours(p.get("error") is None, [tuple(g) for g in p.get("globals") or []],
                        p.get("error"), p.get("end", -1)))
    return out


def is_prefix(short, long):
    return len(short) <= len(long) and list(long[:len(short)]) == list(short)


def fmt_globals(gs):
    return "[" + ", ".join("%s.%s" % g for g in gs) + "]"


class Verdict(NamedTuple):
    category: str  # both-accept | both-reject | cpython-reject | strict | fewer | mismatch
    detail: str


def printable(s: str) -> str:
    """What the facts tool prints for a name: lone surrogates are kept by the VM as 3-byte
    sequences, which its JSON writer replaces like Python's UTF-8 'replace' decoder."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def normalized(results):
    return [r._replace(globals=[(printable(m), printable(n)) for m, n in r.globals])
            for r in results]


def compare(case: Case, cp, fact, crash) -> Verdict:
    if crash or fact is None:
        return Verdict("mismatch", crash or "no facts")
    cp = normalized(cp)
    ours = ours_top(fact)
    frames = cpython_oracle.frame_violation(case.data)
    cp_all = [g for r in cp for g in r.globals]
    ours_all = [tuple(g) for p in fact.get("pickles") or [] for g in p.get("globals") or []]
    any_err = (any(not o.ok for o in ours) or not ours or fact.get("stream_error") is not None
               or (fact.get("trailing_bytes") or 0) > 0)

    if case.kind == "straddle":
        if any_err or set(cp_all) <= set(ours_all):
            return Verdict("strict", "straddle: %s" % (frames or "no violation found"))
        return Verdict("mismatch", "FRAME straddle passes clean: CPython %s, ours %s" % (
            fmt_globals(cp_all), fmt_globals(ours_all)))

    first = ours[0] if ours else Ours(False, [], "no pickle reported", -1)
    c0 = cp[0]
    if c0.ok:
        if not first.ok:
            reason = ("framing: %s" % frames) if frames else case.error_ok
            if not reason and (first.error or "").startswith("limit "):
                reason = "a documented VM limit (docs/pickle_vm.md)"
            if reason:
                return Verdict("strict", "we reject (%s); allowed: %s" % (first.error, reason))
            return Verdict("mismatch", "(c) CPython loads it, we report: %s" % first.error)
        if first.globals != c0.globals:
            return Verdict("mismatch", "(a) globals differ: CPython %s, ours %s" % (
                fmt_globals(c0.globals), fmt_globals(first.globals)))
        if first.end != c0.end and not frames:
            return Verdict("mismatch", "(a) first pickle ends at %d for CPython, %d for us" % (
                c0.end, first.end))
    else:
        if not is_prefix(c0.globals, first.globals):
            if first.ok:
                return Verdict("mismatch", "(b) CPython (%s) saw %s, we saw %s and no error" % (
                    c0.error, fmt_globals(c0.globals), fmt_globals(first.globals)))
            return Verdict("fewer", "both fail; CPython (%s) saw %s, we (%s) saw %s%s" % (
                c0.error, fmt_globals(c0.globals), first.error, fmt_globals(first.globals),
                "; framing: %s" % frames if frames else ""))
        return Verdict("both-reject" if not first.ok else "cpython-reject", "")

    # Later top-level pickles, while the framing is clean (a frame not fully consumed makes
    # CPython resume at the frame end rather than after STOP).
    if frames or not first.ok:
        return Verdict("both-accept", "")
    trailing = (fact.get("trailing_bytes") or 0) > 0
    for k in range(1, len(cp)):
        r = cp[k]
        mine = ours[k] if k < len(ours) else None
        if r.ok:
            if mine is None or not mine.ok or mine.globals != r.globals or mine.end != r.end:
                return Verdict("mismatch", "(a) pickle %d: CPython loads it (%s, end %d), ours %s"
                               % (k, fmt_globals(r.globals), r.end,
                                  "missing" if mine is None else "%s, error %s, end %d" % (
                                      fmt_globals(mine.globals), mine.error, mine.end)))
        elif mine is None:
            if r.globals:
                return Verdict("mismatch", "(b) pickle %d: CPython (%s) saw %s, we report %s" % (
                    k, r.error, fmt_globals(r.globals),
                    "trailing bytes" if trailing else "nothing"))
        elif not is_prefix(r.globals, mine.globals) and mine.ok:
            return Verdict("mismatch", "(b) pickle %d: CPython (%s) saw %s, we saw %s" % (
                k, r.error, fmt_globals(r.globals), fmt_globals(mine.globals)))
    consumed_all = all(r.ok for r in cp) and cp[-1].end >= len(case.data)
    if consumed_all and (trailing or len(ours) > len(cp)):
        return Verdict("mismatch", "CPython loads %d pickles to the end; we report %d and %d "
                       "trailing bytes" % (len(cp), len(ours), fact.get("trailing_bytes") or 0))
    return Verdict("both-accept", "")


def hexdump(data, limit=512):
    lines = []
    for off in range(0, min(len(data), limit), 16):
        chunk = data[off:off + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append("    %06x  %-48s %s" % (off, " ".join("%02x" % b for b in chunk), text))
    if len(data) > limit:
        lines.append("    ... %d bytes in all" % len(data))
    return "\n".join(lines)


def cpython_only(cases, cp, elapsed):
    ok = sum(1 for r in cp if r[0].ok)
    kinds = {}
    for c in cases:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    print("differential (CPython side only): %d inputs (%s), %d load, %d fail, %.1fs" % (
        len(cases), ", ".join("%s %d" % kv for kv in sorted(kinds.items())), ok,
        len(cases) - ok, elapsed))
    return 0


def main():
    ap = argparse.ArgumentParser(description="CPython's C unpickler versus the pickle_facts VM")
    ap.add_argument("--facts-tool", help="path of the pickle_facts binary")
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/pickles")
    ap.add_argument("--random", type=int, default=3000,
                    help="number of random pickles, and of fixture mutations (default 3000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep-failures", metavar="DIR", help="save every failing input here")
    ap.add_argument("--cpython-only", action="store_true",
                    help="run only the CPython side (no facts tool): a self-check")
    opts = ap.parse_args()
    if not opts.cpython_only and not opts.facts_tool:
        ap.error("--facts-tool is required (or --cpython-only)")

    t0 = time.monotonic()
    cases = build_cases(opts)
    cp = run_cpython(cases)
    t_cp = time.monotonic() - t0
    if opts.cpython_only:
        return cpython_only(cases, cp, t_cp)

    with tempfile.TemporaryDirectory(prefix="ckpt-diff-") as tmp:
        facts, crashes = run_facts(opts.facts_tool, cases, tmp)
    t_all = time.monotonic() - t0

    counts = {k: 0 for k in ("both-accept", "both-reject", "cpython-reject", "strict", "fewer",
                             "mismatch")}
    strict, fewer, mismatches = [], [], []
    for i, c in enumerate(cases):
        v = compare(c, cp[i], facts[i], crashes[i])
        counts[v.category] += 1
        if v.category == "strict":
            strict.append((c, v))
        elif v.category == "fewer":
            fewer.append((c, v))
        elif v.category == "mismatch":
            mismatches.append((i, c, v))

    for c, v in strict:
        print("strict: %s: %s" % (c.name, v.detail))
    for c, v in fewer:
        print("fewer: %s: %s" % (c.name, v.detail))
    for n, (i, c, v) in enumerate(mismatches[:20]):
        print("\nMISMATCH %d: %s (%d bytes)\n  %s\n  CPython: %s\n%s" % (
            n + 1, c.name, len(c.data), v.detail,
            "; ".join("%s %s" % ("ok" if r.ok else r.error, fmt_globals(r.globals))
                      for r in cp[i]), hexdump(c.data)))
    if opts.keep_failures and mismatches:
        os.makedirs(opts.keep_failures, exist_ok=True)
        for i, c, v in mismatches:
            stem = os.path.join(opts.keep_failures, "%06d-%s" % (i, c.kind))
            with open(stem + ".pkl", "wb") as f:
                f.write(c.data)
            with open(stem + ".txt", "w") as f:
                f.write("%s\n%s\n" % (c.name, v.detail))
        print("saved %d failing inputs under %s" % (len(mismatches), opts.keep_failures))

    print("differential: %d inputs, %d both-accept, %d both-reject, %d cpython-only-reject, "
          "%d strict-allowed, %d both-reject-fewer, %d mismatches (%.1fs, CPython side %.1fs)" % (
              len(cases), counts["both-accept"], counts["both-reject"], counts["cpython-reject"],
              counts["strict"], counts["fewer"], counts["mismatch"], t_all, t_cp))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
