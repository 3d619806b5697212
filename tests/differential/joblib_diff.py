#!/usr/bin/python3
"""joblib.load as an oracle for the joblib reading: which globals would loading import?

    joblib_diff.py --facts-tool PATH [--seed N] [--count N] [--fixtures DIR]... [--keep-failures DIR]
                   [--compressed]

Generates joblib-style files (NumpyArrayWrapper placeholders made as joblib.dump makes them or
otherwise, numpy dtypes of every kind with varied state sizes, flags and versions, alignment
pads, allow_mmap, raw array bytes that are data or opcodes, nested object-array pickles) and
byte-level mutations of them and of the benign joblib fixtures. Each file is loaded by Debian's
joblib 1.2 (numpy 1.24) with a recording find_class that imports nothing: it hands back the real
placeholder classes, numpy.dtype, numpy.ndarray, copyreg._reconstructor and object (none of which
runs code from the file) and an inert stub for any other name; joblib's nested pickle.load for
object arrays is recorded the same way. The loader runs in a child process under a memory limit
and a per-file alarm, so a crash in numpy on a crafted dtype loses only that file's tail.

The same file is read by `pickle_facts --joblib` (our joblib.load reading) and `pickle_facts`
(our pickle.load reading). A mismatch is a global joblib imports that neither of our readings
reports, on a file whose joblib reading ended without any error (any error makes the file ERROR,
which blocks it). 0 mismatches is the pass condition. Needs python3-joblib and python3-numpy;
without them it exits 77 with the reason.

--compressed: every input (generated, mutated, fixture) is also compressed with one of joblib's
codecs (zlib, gzip, bz2, lzma-alone, xz, lz4; python3-lz4 needed), as one stream or split over
two, then possibly truncated, byte-mutated, followed by garbage or by a second stream holding a
payload. joblib.load then opens each file as it opens any (_read_fileobject: the compressor
sniffed, the bytes decompressed; gen_readings.joblib_file_load_recording), under a 1 s alarm
(reading past a zlib/gzip file's first stream hangs), and our side is `pickle_facts
--read-file`: the scanner's whole reading of the file (torch::ReadFile), every member's globals.
A mismatch is again a global joblib imports that we do not report, on a file that our reading
does not make ERROR.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures", "readings"))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
import gen_readings as g  # noqa: E402  (the fixtures' byte builders)
from input_files import InputFiles  # noqa: E402

PAYLOAD_GLOBAL = b"cposix\nsystem\n"
CODES = ["f8", "f4", "f2", "i4", "i8", "u1", "b1", "c16", "O8", "S3", "U2", "V4", "float64",
         "int32", "M8", "f16"]


# ---- the oracle (child process) ----

def oracle_main(opened):
    import resource
    import signal
    import warnings
    warnings.simplefilter("ignore")
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    real = g.real_classes()
    load = g.joblib_file_load_recording if opened else g.joblib_load_recording

    def timeout(signum, frame):
        raise TimeoutError("alarm")

    signal.signal(signal.SIGALRM, timeout)
    for line in sys.stdin:
        idx, path = json.loads(line)

        def record(module, name):
            sys.stdout.write(json.dumps(["G", idx, module, name]) + "\n")
            sys.stdout.flush()

        signal.setitimer(signal.ITIMER_REAL, 1 if opened else 5)
        try:
            load(path, record, real)
        except TimeoutError:
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout.write(json.dumps(["E", idx]) + "\n")
        sys.stdout.flush()


def run_oracle(paths, opened=False):
    """{index: [(module, name), ...]} for every path, restarting the child after a crash."""
    seen = {i: [] for i in range(len(paths))}
    start = 0
    while start < len(paths):
        child = subprocess.Popen([sys.executable, __file__,
                                  "--oracle-opened" if opened else "--oracle"],
                                 stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        feed = "".join(json.dumps([i, paths[i]]) + "\n" for i in range(start, len(paths)))
        stdout, _ = child.communicate(feed)
        last = start - 1
        for line in stdout.split("\n"):  # not splitlines(): U+0085 may be inside a name
            if not line:
                continue
            rec = json.loads(line)
            if rec[0] == "G":
                seen[rec[1]].append((rec[2], rec[3]))
            else:
                last = rec[1]
        # A crash ends the child at file last + 1, which keeps what it recorded so far; the
        # next child starts after it.
        start = last + 2
    return seen


# ---- our readings ----

def our_facts(tool, paths, joblib, read_file=False):
    args = [tool] + (["--joblib"] if joblib else []) + (["--read-file"] if read_file else [])
    args += ["--stdin"]
    proc = subprocess.run(args, input="".join(p + "\n" for p in paths), capture_output=True,
                          text=True, check=True)
    return [json.loads(line) for line in proc.stdout.split("\n") if line]


# ---- the generator ----

# (code, item size, flags) as numpy 1.24's dtype.__reduce__ writes them (elsize -1 for the
# builtin types, the size for S/U/V; NPY_OBJECT_DTYPE_FLAGS for objects).
AS_WRITTEN = [("f8", -1, 0), ("f4", -1, 0), ("i8", -1, 0), ("u1", -1, 0), ("b1", -1, 0),
              ("c16", -1, 0), ("f2", -1, 0), ("O8", -1, 63), ("S3", 3, 0), ("U2", 8, 0),
              ("V4", 4, 0)]


def random_dtype(rng):
    if rng.random() < 0.7:
        code, elsize, flags = rng.choice(AS_WRITTEN)
        return g.dtype(code, elsize=elsize, flags=flags, version=3)
    code = rng.choice(CODES)
    version = rng.choice([3, 3, 3, 2, 4])
    elsize = rng.choice([-1, -1, 0, 1, 3, 4, 8, 16])
    flags = rng.choice([0, 0, 0, 1, 16, 63])
    dt = g.dtype(code, elsize=elsize, flags=flags, version=version)
    if rng.random() < 0.1:
        dt = dt.replace(b"\x89\x88\x87R", b"\x89\x89\x87R")  # copy=False
    return dt


def random_array(rng):
    shape = [rng.randint(0, 6) for _ in range(rng.randint(0, 2))]
    dt = random_dtype(rng)
    dims = b"".join(b"J" + struct.pack("<i", d) for d in shape)
    keys = (g.ustr("subclass") + b"cnumpy\nndarray\n" + g.ustr("shape") + b"(" + dims + b"t" +
            g.ustr("order") + g.ustr("C") + g.ustr("dtype") + dt)
    mmap = rng.random()
    if mmap < 0.4:
        keys += g.ustr("allow_mmap") + b"\x88"
    elif mmap < 0.7:
        keys += g.ustr("allow_mmap") + b"\x89"
    aligned = rng.random() < 0.5
    if aligned:
        keys += g.ustr("numpy_array_alignment_bytes") + b"K\x10"
    state = b"}(" + keys + b"u"
    if rng.random() < 0.95:
        head = g.WRAPPER + b")\x81" + state + b"b"
    else:
        head = (b"ccopyreg\n_reconstructor\n" + g.WRAPPER + b"cbuiltins\nobject\nN\x87R" +
                state + b"b")
    # What follows: raw bytes (data to joblib), a payload as opcodes, or a whole pickle.
    tail = b""
    if aligned and rng.random() < 0.8:
        pad = rng.randint(0, 3)
        tail += bytes([pad]) + b"\0" * pad
    for _ in range(rng.randint(0, 3)):
        r = rng.random()
        if r < 0.35:
            tail += bytes(rng.choice(b"\0NN0(.cK") for _ in range(rng.choice([1, 2, 4, 8, 12, 16])))
        elif r < 0.6:
            tail += g.PAYLOAD
        elif r < 0.8:
            tail += b"cposix\nsystem\n(S'true'\ntR."
        else:
            tail += g.fillers(2 * rng.randint(1, 8))
    return head + tail


def generate(rng):
    body = b"".join(random_array(rng) + (b"0" if rng.random() < 0.3 else b"")
                    for _ in range(rng.randint(1, 3)))
    if rng.random() < 0.3:
        body += g.PAYLOAD
    return b"\x80\x02" + body + b"."


def mutate(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        pos = rng.randrange(len(b)) if b else 0
        if op < 0.5 and b:
            b[pos] = rng.randint(0, 255)
        elif op < 0.75:
            b[pos:pos] = bytes([rng.randint(0, 255)])
        elif b:
            del b[pos]
    return bytes(b)


# joblib's codecs, as joblib.dump writes them (lzma: FORMAT_ALONE).
def codecs():
    import bz2
    import gzip
    import lzma
    import zlib
    import lz4.frame
    return {
        "zlib": lambda b, lv: zlib.compress(b, lv),
        "gzip": lambda b, lv: gzip.compress(b, lv, mtime=0),
        "bz2": lambda b, lv: bz2.compress(b, max(lv, 1)),
        "lzma": lambda b, lv: lzma.compress(b, lzma.FORMAT_ALONE, preset=lv),
        "xz": lambda b, lv: lzma.compress(b, lzma.FORMAT_XZ, preset=lv),
        "lz4": lambda b, lv: lz4.frame.compress(b, compression_level=lv),
    }


def compress_variant(rng, data, table):
    """`data` compressed with a random codec, then perhaps damaged or extended."""
    name = rng.choice(sorted(table))
    c = table[name]
    level = rng.choice([1, 3, 9])
    r = rng.random()
    if r < 0.15 and len(data) > 1:
        cut = rng.randrange(1, len(data))
        out = c(data[:cut], level) + c(data[cut:], level)
    else:
        out = c(data, level)
    r = rng.random()
    if r < 0.1:
        out = out[:rng.randrange(1, len(out))]
    elif r < 0.25:
        b = bytearray(out)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(b))
            b[pos] = rng.randint(0, 255)
        out = bytes(b)
    elif r < 0.3:
        out += bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 16)))
    elif r < 0.38:
        out += c(g.PAYLOAD + b".", level)
    elif r < 0.42:
        other = table[rng.choice(sorted(table))]
        out += other(b"\x80\x02" + g.PAYLOAD + b".", level)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--facts-tool", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000, help="generated inputs; as many mutants")
    ap.add_argument("--fixtures", action="append", default=[])
    ap.add_argument("--keep-failures")
    ap.add_argument("--compressed", action="store_true",
                    help="compress every input with one of joblib's codecs (see above)")
    args = ap.parse_args()
    try:
        import joblib  # noqa: F401
        import numpy  # noqa: F401
        if args.compressed:
            import lz4.frame  # noqa: F401
    except ImportError as e:
        print("skip: the joblib differential needs Debian's python3-joblib, python3-numpy and, "
              "with --compressed, python3-lz4 (%s)" % e)
        return 77
    rng = random.Random(args.seed)
    inputs = []
    seeds = []
    for d in args.fixtures:
        for root, _, names in os.walk(d):
            for n in sorted(names):
                if n.endswith((".joblib", ".pkl")):
                    with open(os.path.join(root, n), "rb") as f:
                        seeds.append(f.read())
    for _ in range(args.count):
        inputs.append(generate(rng))
    pool = inputs + seeds
    for _ in range(args.count):
        inputs.append(mutate(rng, rng.choice(pool)))
    inputs += seeds
    if args.compressed:
        table = codecs()
        inputs = [compress_variant(rng, d, table) for d in inputs] + seeds

    with InputFiles(inputs, "joblib_diff.", ".joblib",
                    keep_all=bool(os.environ.get("JOBLIB_DIFF_WHY"))) as files:
        failures = compare(args, files.paths)
        files.keep([p for p, _, _ in failures], args.keep_failures)
    return 1 if failures else 0


def compare(args, paths):
    """The mismatches [(path, missing globals, our facts)], with the counts printed."""
    oracle = run_oracle(paths, opened=args.compressed)
    if args.compressed:
        ours_joblib = our_facts(args.facts_tool, paths, False, read_file=True)
        ours_plain = [{"pickles": []} for _ in paths]
    else:
        ours_joblib = our_facts(args.facts_tool, paths, True)
        ours_plain = our_facts(args.facts_tool, paths, False)

    counts = {"complete": 0, "blocked": 0, "mismatch": 0, "imports": 0}
    failures = []
    diverged = []  # blocked, but joblib imported something our readings never reached
    for i, p in enumerate(paths):
        j = ours_joblib[i]
        reported = set()
        for facts in (j, ours_plain[i]):
            for pk in facts["pickles"]:
                reported.update(tuple(x) for x in pk["globals"])
        computed = any(m == "<computed>" for m, _ in reported)
        if args.compressed:
            # --read-file's stream_error: the file is ERROR (an error of the file, a stop of
            # its own reading, or an alternative reading stopped where its loader reads on).
            blocked = j["stream_error"] is not None
        else:
            blocked = (j["stream_error"] is not None or not j["pickles"] or
                       any(pk["error"] is not None for pk in j["pickles"]))
        missing = [x for x in oracle[i] if tuple(x) not in reported]
        counts["imports"] += bool(oracle[i])
        if blocked:
            counts["blocked"] += 1
            if missing and not computed:
                diverged.append((p, missing, j))
            if os.environ.get("JOBLIB_DIFF_WHY"):
                errs = [pk["error"] for pk in j["pickles"] if pk["error"]] or [j["stream_error"]]
                print("blocked:", str(errs[0])[:90])
        elif missing and not computed:
            counts["mismatch"] += 1
            failures.append((p, missing, j))
        else:
            counts["complete"] += 1
    print("joblib differential%s, seed %d: %d inputs (%d that joblib.load imported from), "
          "%d read whole by us and in agreement, %d blocked by an error of our reading, "
          "%d mismatches" % (" (compressed)" if args.compressed else "", args.seed, len(paths), counts["imports"], counts["complete"],
                             counts["blocked"], counts["mismatch"]))
    print("of the blocked ones, %d where joblib.load imports something before failing that our "
          "readings did not reach (blocked all the same)" % len(diverged))
    if os.environ.get("JOBLIB_DIFF_WHY"):
        for p, missing, j in diverged[:10]:
            print("DIVERGED %s: %s; ours %s" % (p, missing, json.dumps(j["pickles"])[:300]))
    for p, missing, j in failures[:20]:
        print("MISMATCH %s: joblib.load imports %s, our readings do not report it; ours: %s"
              % (os.path.basename(p), missing, json.dumps(j["pickles"])[:400]))
    return failures


if __name__ == "__main__":
    if sys.argv[1:2] == ["--oracle"]:
        oracle_main(False)
    elif sys.argv[1:2] == ["--oracle-opened"]:
        oracle_main(True)
    else:
        sys.exit(main())
