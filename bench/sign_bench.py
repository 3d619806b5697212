#!/usr/bin/python3
"""What signing adds to a convert, and verify against `openssl dgst -sha256`, in one run.

    /usr/bin/python3 bench/sign_bench.py --ckptscan build/clients/ckptscan --runs 3 /tmp/bench/big.pt

Stdlib only. A key is made with `ckptscan keygen` in a temporary folder next to the outputs.
For the checkpoint it times (median of --runs, after one warm-up run each):
  convert          ckptscan convert IN -o OUT                         (no signature)
  convert+files    ... --key KEY                                      (one digest per file)
  convert+shards   ... --key KEY --sign-method shards                 (128 MiB ranges)
  openssl dgst     openssl dgst -sha256 OUT                           (one core, the baseline)
  verify files     ckptscan verify OUT --pubkey PUB  (files bundle)
  verify shards    ckptscan verify OUT --pubkey PUB  (shards bundle)
and prints what signing adds to a convert (target < 10%) and verify's speed as a multiple of
`openssl dgst` on the same file (target >= 1.8x with shards, using both cores).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd, runs, before=None):
    def once():
        if before:
            before()
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t
    once()  # warm-up
    return statistics.median(once() for _ in range(runs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("checkpoint")
    a = ap.parse_args()
    ck = os.path.abspath(a.ckptscan)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(a.checkpoint))) as tmp:
        key = os.path.join(tmp, "key.pem")
        subprocess.run([ck, "keygen", "-o", key], check=True, stdout=subprocess.DEVNULL)
        out = os.path.join(tmp, "out.safetensors")

        def clean():
            for p in (out, out + ".sig"):
                if os.path.exists(p):
                    os.unlink(p)
            subprocess.run(["sync"], check=True)

        base = [ck, "convert", a.checkpoint, "-o", out]
        r = {}
        r["convert"] = timed(base, a.runs, clean)
        r["convert+files"] = timed(base + ["--key", key], a.runs, clean)
        r["verify files"] = timed([ck, "verify", out, "--pubkey", key + ".pub"], a.runs)
        r["convert+shards"] = timed(base + ["--key", key, "--sign-method", "shards"], a.runs,
                                    clean)
        r["verify shards"] = timed([ck, "verify", out, "--pubkey", key + ".pub"], a.runs)
        r["openssl dgst"] = timed(["openssl", "dgst", "-sha256", out], a.runs)
        size = os.path.getsize(out)
    print(f"{a.checkpoint}: output {size / 1e9:.2f} GB; load average {os.getloadavg()}")
    for k, v in r.items():
        print(f"  {k:16s} {v:7.3f} s  {size / v / 1e9:6.2f} GB/s")
    print(f"  signing adds: files {r['convert+files'] / r['convert'] - 1:+.0%}, "
          f"shards {r['convert+shards'] / r['convert'] - 1:+.0%} (target < +10%)")
    print(f"  verify vs openssl dgst: files {r['openssl dgst'] / r['verify files']:.2f}x, "
          f"shards {r['openssl dgst'] / r['verify shards']:.2f}x (target >= 1.8x with shards)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
