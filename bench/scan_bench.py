#!/usr/bin/python3
"""Scan time and peak RSS of `ckptscan scan` against the picklescan-style Python baseline, in
one run, on the same files.

    /usr/bin/python3 bench/scan_bench.py --ckptscan build/clients/ckptscan FILE... [--runs 5]

For each file, median wall times over --runs (after one warm-up run each, so all read from the
page cache) of: the default scan (no digest), the baseline, and their ratio (speedup); the scan
with `--digest sha256` and `openssl dgst -sha256` of the same file, and their ratio; the peak
RSS of ckptscan (wait4 of the child). Extra ckptscan flags go after `--`.
"""
import argparse
import os
import resource
import shutil
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
    ap.add_argument("--folder", action="append", default=[],
                    help="also time `scan -j 1 DIR` against `scan -j N DIR` (N: --jobs)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    cli = [os.path.abspath(args.ckptscan), "scan", "--format", "json"] + extra
    for d in args.folder:
        # A folder (e.g. tests/fixtures): one file after another against -j N, same run.
        seq = measure(cli + ["-j", "1", d], args.runs)
        par = measure(cli + ["-j", str(args.jobs), d], args.runs)
        print("folder %s: -j 1 %.3f s, -j %d %.3f s, speedup %.2fx" % (
            d, seq[0], args.jobs, par[0], seq[0] / par[0]))
    openssl = shutil.which("openssl")
    if args.files:
        print("%-28s %8s %11s %11s %11s %10s %9s %9s %8s" % (
        "file", "size_MB", "ckptscan_s", "python_s", "speedup", "sha256_s", "openssl_s",
        "sha/ossl", "RSS_KiB"))
    for f in args.files:
        scan = [os.path.abspath(args.ckptscan), "scan", "--format", "json"] + extra
        # The default scan (no digest, as `ckptscan scan` runs unless asked), the baseline, and
        # the digest path beside `openssl dgst -sha256` of the same file, all in this run.
        ours = measure(scan + [f], args.runs)
        base = measure([sys.executable, os.path.join(HERE, "picklescan_baseline.py"), f],
                       args.runs)
        digest = measure(scan + ["--digest", "sha256", f], args.runs)
        ossl = measure([openssl, "dgst", "-sha256", f], args.runs) if openssl else (float("nan"),)
        print("%-28s %8.1f %11.4f %11.4f %10.1fx %10.4f %9.4f %8.2fx %8d" % (
            os.path.basename(f)[:28], os.path.getsize(f) / 1e6, ours[0], base[0],
            base[0] / ours[0], digest[0], ossl[0], digest[0] / ossl[0], max(ours[1], digest[1])))
        for name, m in (("ckptscan", ours), ("ckptscan --digest sha256", digest)):
            if m[2] not in (0, 1, 2):
                print("  %s exit code %s" % (name, m[2]))

if __name__ == "__main__":
    main()
