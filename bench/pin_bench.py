#!/usr/bin/python3
"""What pinning the input costs a by-path `ckptscan scan` (docs/security.md, "Bytes hashed are
bytes parsed"): the median wall time of a baseline binary and a candidate, on the same file,
with the lease (nobody has the file open for writing) and with the sealed copy (this script
holds the file open for writing during the runs, so no lease can be had).

    /usr/bin/python3 bench/pin_bench.py --baseline OLD/ckptscan --candidate build/clients/ckptscan
        [--file F | --make-gib 1] [--runs 5]

Without --file it writes a benign pickle of --make-gib GiB (one BINBYTES of zeros, written
out: not sparse) and removes it afterwards. Each configuration gets one warm-up run (the page
cache), then --runs timed runs of each binary, alternating; the ratio is candidate / baseline.
"""
import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def make_file(path, gib):
    payload = gib << 30
    chunk = bytes(8 << 20)
    with open(path, "wb") as f:
        f.write(b"\x80\x03B" + struct.pack("<I", payload - 1))
        left = payload - 1
        while left:
            n = min(left, len(chunk))
            f.write(chunk[:n])
            left -= n
        f.write(b"0N.")


def once(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if r.returncode != 0:
        sys.exit("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr[:300]))
    return time.perf_counter() - t0


def timed_pair(a, b, runs):
    """Medians of `a` and `b`, run alternately (a machine whose load drifts affects both)."""
    once(a)  # warm-up: the page cache
    once(b)
    ta, tb = [], []
    for _ in range(runs):
        ta.append(once(a))
        tb.append(once(b))
    return statistics.median(ta), statistics.median(tb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--file")
    ap.add_argument("--make-gib", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    path = args.file
    made = None
    if path is None:
        made = path = os.path.join(tempfile.mkdtemp(prefix="pin_bench_"), "big.pkl")
        make_file(path, args.make_gib)
    size = os.path.getsize(path)
    print("file %s: %.2f GiB" % (path, size / (1 << 30)))
    try:
        results = {}
        for pin in ("lease", "copy"):
            writer = os.open(path, os.O_RDWR) if pin == "copy" else None
            try:
                results[pin, "baseline"], results[pin, "candidate"] = timed_pair(
                    [args.baseline, "scan", path], [args.candidate, "scan", path], args.runs)
            finally:
                if writer is not None:
                    os.close(writer)
        for pin in ("lease", "copy"):
            b, c = results[pin, "baseline"], results[pin, "candidate"]
            print("%-5s baseline %.3f s  candidate %.3f s  ratio %.2f" % (pin, b, c, c / b))
    finally:
        if made:
            os.unlink(made)
            os.rmdir(os.path.dirname(made))
    return 0


if __name__ == "__main__":
    sys.exit(main())
