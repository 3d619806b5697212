#!/usr/bin/python3
"""Resource attacks (docs/security.md "Resource attacks").

Every hostile input below is generated here at full size (none is committed: several are tens
of megabytes), scanned by the real jailed CLI, and must be answered with ERROR (DANGEROUS where
the file also carries a call) by the parser's own limit, named in the report: not by the jail's
deadline or memory kill, which are only the backstop. The jail is given a deliberately small
address space (--worker-memory, default 1G here; the product default is 8G) and a generous
deadline, so an attack whose limit fires too late fails this test as a memory error instead of
passing quietly. The time and peak memory of each scan (the CLI and its worker, measured by
tests/tools/peak_rss) are printed; they are measurements, not assertions (no timed
asserts).

  attacks.py --cli build/clients/ckptscan --peak-rss build/tests/tools/peak_rss
             [--worker-memory 1G] [--keep DIR] [--only NAME...]

Exit 0 when every attack is answered as expected, 1 otherwise. Needs only the stdlib.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

# ---- pickles ---------------------------------------------------------------------------------

P2 = b"\x80\x02"
P4 = b"\x80\x04"


def laughs(levels=9, fan=10):
    """A list shared fan times at each level through the memo: fan**levels values if copied."""
    out = b"]q\x00"
    for i in range(levels):
        out += b"0(" + b"h" + bytes([i]) + b"2" * (fan - 1) + b"lq" + bytes([i + 1])
    return out


def pickle_attacks():
    yield ("memo_billion_laughs", "pickle", P2 + laughs() + b".",
           "10^9 list elements by reference (memo + DUP fan-out) in 150 bytes",
           {"ERROR"}, "max_expanded_values")
    yield ("memo_entries", "pickle", P4 + b"N" + b"\x94" * 5_000_001 + b".",
           "5,000,001 MEMOIZE: one memo entry each",
           {"ERROR"}, "max_memo_entries")
    yield ("memo_index_huge", "pickle", P2 + b"Nr\xff\xff\xff\xff0j\xff\xff\xff\xff.",
           "LONG_BINPUT 0xffffffff (CPython sizes its memo array by the index)",
           {"ERROR"}, "max_memo_index")
    yield ("stack_of_none", "pickle", P2 + b"N" * 1_000_001 + b".",
           "1,000,001 NONE left on the stack",
           {"ERROR"}, "max_stack_depth")
    yield ("stack_of_lists", "pickle", P2 + b"]" * 1_000_001 + b".",
           "1,000,001 EMPTY_LIST left on the stack (a new object each)",
           {"ERROR"}, "max_stack_depth")
    yield ("nodes_built_and_popped", "pickle", P2 + b"]0" * 4_000_001 + b"N.",
           "4,000,001 lists built and popped: the stack stays empty",
           {"ERROR"}, "max_nodes")
    yield ("opcodes", "pickle", P2 + b"N0" * 25_000_001 + b"N.",
           "50,000,002 opcodes that build nothing lasting",
           {"ERROR"}, "max_opcodes")
    yield ("mark_depth", "pickle", P2 + b"(" * 100_001 + b"N.",
           "100,001 nested MARKs (CPython loads it)",
           {"ERROR"}, "max_mark_depth")
    yield ("nested_tuple1", "pickle", P2 + b"N" + b"\x85" * 10_000_000 + b".",
           "a tuple nested 10,000,000 deep by TUPLE1 (no MARK, one stack slot)",
           {"ERROR"}, "max_value_depth")
    yield ("nested_lists_by_append", "pickle",
           P2 + b"]" * 900_000 + b"a" * 899_999 + b".",
           "a list nested 900,000 deep by APPEND",
           {"ERROR"}, "max_value_depth")
    yield ("nested_call_argument", "pickle",
           P2 + b"cposix\nsystem\n" + b"N" + b"\x85" * 10_000_000 + b"\x85R.",
           "posix.system called with a 10,000,000-deep argument",
           {"DANGEROUS"}, "max_value_depth")
    yield ("binbytes8_huge", "pickle", P4 + b"\x8e" + struct.pack("<Q", 1 << 62) + b"abc.",
           "BINBYTES8 declaring 2^62 bytes", {"ERROR"}, "max_string_bytes")
    yield ("binunicode8_huge", "pickle",
           P4 + b"\x8d" + struct.pack("<Q", (1 << 64) - 1) + b"abc.",
           "BINUNICODE8 declaring 2^64-1 bytes (CPython: exceeds system's maximum size)",
           {"ERROR"}, "code:malformed")
    yield ("bytearray8_huge", "pickle", b"\x80\x05\x96" + struct.pack("<Q", 1 << 40) + b"abc.",
           "BYTEARRAY8 declaring 2^40 bytes", {"ERROR"}, "max_string_bytes")
    yield ("binunicode_past_end", "pickle", P2 + b"X" + struct.pack("<I", 0xFFFFFFFF) + b"abc.",
           "BINUNICODE declaring 4 GiB - 1 in a 12-byte file", {"ERROR"}, "code:malformed")
    yield ("frame_huge", "pickle", P4 + b"\x95" + struct.pack("<Q", 1 << 62) + b"N.",
           "FRAME declaring 2^62 bytes", {"ERROR"}, "code:malformed")
    body = b"N0" * 4_000_000 + b"N."
    yield ("frame_past_end", "pickle",
           P4 + b"\x95" + struct.pack("<Q", len(body) + 1) + body,
           "an 8 MB FRAME declaring one byte more than the file has", {"ERROR"}, "code:malformed")
    yield ("long_line", "pickle", b"S'" + b"a" * (2 << 20),
           "a protocol-0 string argument of 2 MiB without its newline",
           {"ERROR"}, "max_line_bytes")
    yield ("many_tiny_pickles", "pickle", b"N." * 1_000_000,
           "1,000,000 two-byte pickles in one file", {"ERROR"}, "max_pickles")


# ---- zip archives (torch layout) -------------------------------------------------------------

def zip_archive(members, entries=None):
    """A zip: members are (name, stored_bytes, method, crc, declared_size). entries (optional) is
    the central directory as (name, member_index, declared_size), so that several entries can
    share one member's bytes; by default one entry per member."""
    out = bytearray()
    offsets = []
    for name, data, method, crc, size in members:
        offsets.append(len(out))
        n = name.encode()
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(data),
                           min(size, 0xFFFFFFFF), len(n), 0) + n + data
    if entries is None:
        entries = [(m[0], i, m[4]) for i, m in enumerate(members)]
    cd = bytearray()
    for name, idx, size in entries:
        _, data, method, crc, _ = members[idx]
        n = name.encode()
        extra = b""
        if size >= 0xFFFFFFFF:
            extra = struct.pack("<HHQ", 1, 8, size)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45 if extra else 20, 0, method,
                          0, 0, crc, len(data), 0xFFFFFFFF if extra else size, len(n),
                          len(extra), 0, 0, 0, 0, offsets[idx]) + n + extra
    cd_off = len(out)
    out += cd
    count = len(entries)
    if count >= 0xFFFF:
        z64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, len(cd),
                           cd_off)
        out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, len(cd), cd_off, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(cd), cd_off, 0)
    return bytes(out)


def stored(name, data):
    return (name, data, 0, zlib.crc32(data), len(data))


def deflated(name, raw):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(raw) + c.flush()
    return (name, data, 8, zlib.crc32(raw), len(raw))


def torch_pickle():
    # {} in a torch archive's data.pkl: a state dict with nothing in it.
    return P2 + b"}q\x00."


def zip_attacks():
    members = [stored("archive/data.pkl", torch_pickle()), stored("archive/version", b"3\n")]
    members += [stored("archive/data/%d" % i, b"") for i in range(65_536)]
    yield ("zip_entry_count", "torch-zip", zip_archive(members),
           "65,538 members (the limit is 65,536)", {"ERROR"}, "max_entries")

    # 256 MiB deflated to ~254 KiB (DEFLATE's ~1032:1), declared as 512 MiB: a size no stream
    # of that length can inflate to, refused before anything is allocated.
    name, data, method, crc, _ = deflated("archive/data.pkl", P2 + b"N0" * (128 << 20))
    bomb = (name, data, method, crc, 512 << 20)
    yield ("zip_ratio_bomb", "torch-zip",
           zip_archive([bomb, stored("archive/version", b"3\n")]),
           "data.pkl of %d KiB declaring 512 MiB (ratio over 1,100)" % (len(bomb[1]) >> 10),
           {"ERROR"}, "max_compression_ratio")

    # Declared 2 GiB from 12 MiB (ratio 170, under the ratio limit): over max_member_bytes.
    # The bytes are not a deflate stream at all: the limit must fire before inflating.
    fake = ("archive/data.pkl", os.urandom(12 << 20), 8, 0, 2 << 30)
    yield ("zip_member_size", "torch-zip",
           zip_archive([fake, stored("archive/version", b"3\n")]),
           "data.pkl declaring 2 GiB inflated (ratio 170)", {"ERROR"}, "max_member_bytes")

    # 300 central-directory entries sharing one 6 MiB deflated member that declares 1 GiB:
    # 300 GiB to inflate in all (an overlapping "better zip bomb").
    share = ("archive/data.pkl", os.urandom(6 << 20), 8, 0, 1 << 30)
    entries = [("archive/data.pkl", 0, 1 << 30)]
    entries += [("archive/data/%d" % i, 0, 1 << 30) for i in range(299)]
    yield ("zip_overlapping_entries", "torch-zip", zip_archive([share], entries),
           "300 entries sharing one member, 1 GiB each declared", {"ERROR"},
           "max_total_uncompressed")


# ---- running ---------------------------------------------------------------------------------

def scan(cli, peak_rss, path, worker_memory, timeout):
    rss_path = path + ".rss"
    with open(path + ".json", "wb") as out, open(path + ".err", "wb") as err:
        start = time.monotonic()
        rc = subprocess.call([peak_rss, rss_path, "--", cli, "scan", "--format", "json",
                              "--digest", "none", "--worker-memory", worker_memory,
                              "--timeout", str(timeout), path], stdout=out, stderr=err)
        seconds = time.monotonic() - start
    with open(path + ".json", "rb") as f:
        raw = f.read()
    with open(path + ".err", "rb") as f:
        stderr = f.read().decode(errors="replace")
    try:
        with open(rss_path) as f:
            peak = int(f.read()) * 1024
    except (OSError, ValueError):
        peak = -1
    for leftover in (path + ".json", path + ".err", rss_path):
        if os.path.exists(leftover):
            os.unlink(leftover)
    return rc, raw, stderr, seconds, peak


def check(report_raw, rc, verdicts, expect):
    """None when the answer is right, else what is wrong."""
    try:
        report = json.loads(report_raw)
        f = report["files"][0]
    except (ValueError, KeyError, IndexError) as e:
        return "no JSON report (%s)" % e
    if f["verdict"] not in verdicts:
        return "verdict %s, expected %s" % (f["verdict"], "/".join(sorted(verdicts)))
    want_rc = 2 if f["verdict"] == "ERROR" else 1
    if rc != want_rc:
        return "exit %d, expected %d" % (rc, want_rc)
    errors = f.get("errors", [])
    if expect.startswith("code:"):
        ok = any(e.get("code") == expect[5:] for e in errors)
    else:
        ok = any(e.get("code") == "limit" and e.get("limit_name") == expect for e in errors)
    if not ok:
        return "expected %s; errors: %s" % (
            expect, "; ".join("%s %s %s" % (e.get("code"), e.get("limit_name", ""),
                                            e.get("message", "")[:120]) for e in errors))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--peak-rss", required=True, help="tests/tools/peak_rss")
    ap.add_argument("--worker-memory", default="1G")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--keep", help="write the files here and keep them")
    ap.add_argument("--only", nargs="*", default=[])
    args = ap.parse_args()

    workdir = args.keep or tempfile.mkdtemp(prefix="ckpt-attacks-")
    os.makedirs(workdir, exist_ok=True)
    failures = 0
    print("%-26s %10s  %-9s %-24s %8s %9s" % ("attack", "bytes", "verdict", "answered by",
                                             "seconds", "peak MiB"))
    try:
        for gen in (pickle_attacks, zip_attacks):
            for name, fmt, data, what, verdicts, expect in gen():
                if args.only and name not in args.only:
                    continue
                path = os.path.join(workdir, name + (".pkl" if fmt == "pickle" else ".pt"))
                with open(path, "wb") as f:
                    f.write(data)
                rc, raw, stderr, seconds, peak = scan(args.cli, args.peak_rss, path,
                                                      args.worker_memory, args.timeout)
                problem = check(raw, rc, verdicts, expect)
                try:
                    got = json.loads(raw)["files"][0]["verdict"]
                except (ValueError, KeyError, IndexError):
                    got = "-"
                print("%-26s %10d  %-9s %-24s %8.2f %9.1f  %s" % (
                    name, len(data), got, expect.replace("code:", ""), seconds,
                    peak / (1 << 20), "ok" if problem is None else "FAIL"))
                if problem is not None:
                    failures += 1
                    print("  FAIL %s (%s): %s\n  stderr: %s" % (name, what, problem,
                                                               stderr.strip()[:300]))
                if not args.keep:
                    os.unlink(path)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("%d attack(s) failed" % failures if failures else "every attack answered as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
