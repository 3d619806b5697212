#!/usr/bin/python3
"""Differential test: pickle._Unpickler, the pure-Python unpickler (Lib/pickle.py, which
joblib.load's NumpyUnpickler subclasses), versus our VM's reading of it (Loader::kPython, the
pickle_facts tool's --python).

    /usr/bin/python3 tests/differential/python_diff.py --facts-tool build/tests/tools/pickle_facts \
        --fixtures tests/fixtures/pickles [--fixtures tests/fixtures/router] [--random N] [--seed S]

Inputs: the fixtures, N random pickles of all protocols and N mutations (diff_test.py's), and N
text pickles (protocol 0) spelled the ways Python's int(), float() and readline() accept and
_pickle.c does not: blanks and '_' in numbers, '+' signs, 'L' suffixes, a last line without its
newline, INST before any MARK, persistent ids, short frames. The rules are diff_test.py's (a, b,
c) with pickle._Unpickler as the oracle: it runs in this process with a recording find_class
(nothing imported) and no persistent_load (the class defines none: it raises, as joblib's does).
Exit status 1 on any mismatch.

Stdlib only; run with Debian's /usr/bin/python3 (3.11). pickle.py reads the same in 3.13.
"""
import argparse
import os
import pickle
import random
import stat
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpython_oracle  # noqa: E402
import diff_test  # noqa: E402


class PythonRecordingUnpickler(pickle._Unpickler):
    """pickle._Unpickler with defaults; find_class records and returns an inert stub."""

    def __init__(self, file):
        super().__init__(file)
        self.recorded = []

    def find_class(self, module, name):
        self.recorded.append((module, name))
        return type("Stub", (cpython_oracle.Stub,), {"__module__": "ckptscan_stub"})


# --- Text pickles --------------------------------------------------------------------------

NUMBERS = [b"1", b" 1", b"1 ", b"+1", b"-1", b"1_0", b"1__0", b"_1", b"0x10", b"010", b"00",
           b"01", b"1L", b"1.5", b" 1.5", b"1_0.5", b"1e3", b"inf", b" nan", b"1\x00", b"",
           b"\t2\x0b", b"99999999999999999999999", b"0b11", b"0o7", b"1.", b".5", b"1e",
           b"infinity", b"-0", b"1.5_0"]
GLOBALS = [(b"os", b"getcwd"), (b"builtins", b"list"), (b"ckpt_harmless", b"payload"),
           (b"collections", b"OrderedDict")]


def text_pickle(rng):
    """A protocol-0 stream of a few opcodes, spelled as Python's readers allow."""
    out = bytearray()
    for _ in range(rng.randint(1, 6)):
        op = rng.choice("IILFSVgpPcimt(lda0.")
        n = rng.choice(NUMBERS)
        m, name = rng.choice(GLOBALS)
        if op == "I":
            out += b"I" + n + b"\n"
        elif op == "L":
            out += b"L" + n + rng.choice([b"", b"L"]) + b"\n"
        elif op == "F":
            out += b"F" + n + b"\n"
        elif op == "S":
            out += b"S" + rng.choice([b"'x'", b'"x"', b"x", b"'x\"", b"''", b"'\\x41'"]) + b"\n"
        elif op == "V":
            out += b"V" + rng.choice([b"x", b"\\u0041", b"", b"\\x"]) + b"\n"
        elif op in "gp":
            out += op.encode() + rng.choice([b"0", b" 0", b"1", b"-1", b"0_0", b"x"]) + b"\n"
        elif op == "P":
            out += b"P" + rng.choice([b"abc", b"", b"\xff"]) + b"\n"
        elif op in "ci":
            out += op.encode() + m + b"\n" + name + b"\n"
        else:
            out += op.encode()
    tail = rng.random()
    if tail < 0.5:
        out += b"."
    elif tail < 0.7 and out.endswith(b"\n"):
        del out[-1]  # the last line without its newline: readline()[:-1] drops a byte
    elif tail < 0.8:
        m, name = rng.choice(GLOBALS)
        out += b"c" + m + b"\n" + name + rng.choice([b"X", b"", b"\n"])
    return bytes(out)


def framed(rng):
    """Protocol 4 with a FRAME whose length is short, long or right."""
    body = b"\x8c\x02os\x94\x8c\x06getcwd\x94\x93)R."
    size = len(body) + rng.choice([-3, -1, 0, 0, 1, 50, 1 << 20])
    return b"\x80\x04\x95" + struct.pack("<Q", max(size, 0)) + body + rng.choice([b"", b"N."])


def build_cases(opts):
    cases = []
    for root in opts.fixtures:
        cases += diff_test.load_fixtures(root)
    sub = argparse.Namespace(fixtures=opts.fixtures[0], random=opts.random, seed=opts.seed)
    cases += [c for c in diff_test.build_cases(sub) if c.kind != "fixture"]
    for i in range(opts.random):
        rng = random.Random("text-%d-%d" % (opts.seed, i))
        cases.append(diff_test.Case("text", "text#%d" % i, text_pickle(rng), None))
    for i in range(max(20, opts.random // 20)):
        rng = random.Random("frame-%d-%d" % (opts.seed, i))
        cases.append(diff_test.Case("frame", "frame#%d" % i, framed(rng), None))
    return cases


def main():
    ap = argparse.ArgumentParser(description="pickle._Unpickler versus the VM's kPython reading")
    ap.add_argument("--facts-tool", required=True)
    ap.add_argument("--fixtures", action="append", required=True)
    ap.add_argument("--random", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    opts = ap.parse_args()
    cpython_oracle.RecordingUnpickler = PythonRecordingUnpickler  # the oracle's unpickler
    # pickle.py's _Unframer refuses what the fixed C unpickler refuses (a read across a frame
    # end): no framing strictness of ours is excused here.
    cpython_oracle.frame_violation = lambda data: None

    t0 = time.monotonic()
    cases = build_cases(opts)
    cp = diff_test.run_cpython(cases)
    t_cp = time.monotonic() - t0
    with tempfile.TemporaryDirectory(prefix="ckpt-pydiff-") as tmp:
        tool = os.path.join(tmp, "facts-python")
        with open(tool, "w") as f:
            f.write('#!/bin/sh\nexec "%s" --python "$@"\n' % os.path.abspath(opts.facts_tool))
        os.chmod(tool, stat.S_IRWXU)
        facts, crashes = diff_test.run_facts(tool, cases, tmp)
    counts, mismatches = {}, []
    for i, c in enumerate(cases):
        v = diff_test.compare(c, cp[i], facts[i], crashes[i])
        counts[v.category] = counts.get(v.category, 0) + 1
        if v.category == "mismatch":
            mismatches.append((i, c, v))
        elif v.category in ("strict", "fewer"):
            print("%s: %s: %s" % (v.category, c.name, v.detail))
    for n, (i, c, v) in enumerate(mismatches[:20]):
        print("\nMISMATCH %d: %s (%d bytes)\n  %s\n  pickle._Unpickler: %s\n%s" % (
            n + 1, c.name, len(c.data), v.detail,
            "; ".join("%s %s" % ("ok" if r.ok else r.error, diff_test.fmt_globals(r.globals))
                      for r in cp[i]), diff_test.hexdump(c.data)))
    print("python differential: %d inputs, %s, %d mismatches (%.1fs, Python side %.1fs)" % (
        len(cases), ", ".join("%s %d" % kv for kv in sorted(counts.items())), len(mismatches),
        time.monotonic() - t0, t_cp))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
