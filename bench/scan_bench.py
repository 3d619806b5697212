#!/usr/bin/python3
"""Scan time and peak RSS of `ckptscan scan` against the picklescan-style Python baseline, in
one run, on the same files.

    /usr/bin/python3 bench/scan_bench.py --ckptscan build/clients/ckptscan FILE... [--runs 5]

For each file: median wall time over --runs of each tool (after one warm-up run each, so both
read from the page cache), peak RSS of each (getrusage of the child), and the ratio
baseline / ckptscan. Extra ckptscan flags go after `--`.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    """Wall seconds and peak RSS (KiB) of one child process."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss, code


def measure(cmd, runs):
    run(cmd)  # warm-up: page cache
    walls, rss, code = [], 0, None
    for _ in range(runs):
        w, r, code = run(cmd)
        walls.append(w)
        rss = max(rss, r)
    return statistics.median(walls), rss, code


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    print("%-40s %10s %12s %10s %12s %8s %8s" % ("file", "ckptscan_s", "ckptscan_KiB",
                                                 "python_s", "python_KiB", "speedup", "size_MB"))
    for f in args.files:
        ours = measure([os.path.abspath(args.ckptscan), "scan", "--format", "json"] + extra + [f],
                       args.runs)
        base = measure([sys.executable, os.path.join(HERE, "picklescan_baseline.py"), f],
                       args.runs)
        print("%-40s %10.4f %12d %10.4f %12d %7.1fx %8.1f" % (
            os.path.basename(f)[:40], ours[0], ours[1], base[0], base[1], base[0] / ours[0],
            os.path.getsize(f) / 1e6))
        if ours[2] not in (0, 1, 2):
            print("  ckptscan exit code %s" % ours[2])


if __name__ == "__main__":
    main()
