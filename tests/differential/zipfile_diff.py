#!/usr/bin/python3
"""Python's zipfile as an oracle for our model of it (core/zip/zipfile_view.h).

    zipfile_diff.py --listing-tool PATH [--seed N] [--count N] [--fixtures DIR]... [--keep-failures DIR]

numpy.load opens an .npz with zipfile, so the members numpy would load are zipfile's answer, not
miniz's. This generates archives with Python's zipfile (stored and deflated members, comments,
duplicate names, names with NUL bytes), reshapes them the ways the two readers disagree on
(bytes prepended or appended, a ZIP64 end record and locator inserted with the locator pointing
anywhere, entry counts changed) and mutates their structural bytes, then compares, per archive,
what CPython's zipfile.ZipFile lists (whether it opens, each entry's name, header offset, sizes
and method, which entry open(name) uses, and whether open(name) gets past the local header)
with what `zip_listing` prints. Stdlib only; nothing is extracted but bytes.
"""
import argparse
import io
import json
import os
import random
import struct
import subprocess
import sys
import zipfile

from input_files import InputFiles


UNOPENABLE = 2**64 - 1


def oracle(data):
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, NotImplementedError, ValueError, OSError, UnicodeDecodeError,
            EOFError, struct.error, OverflowError):
        return {"ok": False}
    entries = []
    for info in zf.filelist:
        raw = info.filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
        # A header offset that the shift makes negative cannot be opened; ours marks it so.
        offset = info.header_offset if info.header_offset >= 0 else UNOPENABLE
        entries.append([raw.hex(), offset, info.compress_size, info.file_size,
                        info.compress_type])
    opened = []
    seen = {}
    for info in zf.filelist:
        if info.filename not in seen:
            seen[info.filename] = len(opened)
            opened.append(None)
        opened[seen[info.filename]] = zf.filelist.index(zf.NameToInfo[info.filename])
    local = []
    for info in zf.filelist:
        # Whether ZipFile.open of this very entry gets past its local header (its signature
        # and the name it repeats).
        if info.header_offset < 0:  # the seek fails
            local.append(False)
            continue
        if info.flag_bits & 0x60:  # patch data or strong encryption: refused before the name check
            local.append(None)
            continue
        try:
            zf.open(info).close()
            local.append(True)
        except zipfile.BadZipFile as e:
            local.append(not ("header" in str(e) or "Truncated file header" in str(e)))
        except Exception:  # unsupported method, encryption, overlap: past the header
            local.append(True)
    return {"ok": True, "concat": None, "entries": entries, "opened": opened, "local": local}


def make_archive(rng):
    buf = io.BytesIO()
    method = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
    with zipfile.ZipFile(buf, "w", method) as zf:
        if rng.random() < 0.3:
            zf.comment = b"c" * rng.randint(1, 40)
        names = []
        for i in range(rng.randint(1, 4)):
            name = rng.choice(["a.npy", "b.npy", "arr_%d.npy" % i, "x/y.npy", "A.npy"])
            names.append(name)
            with __import__("warnings").catch_warnings():
                __import__("warnings").simplefilter("ignore")  # duplicate names
                zf.writestr(name, bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 40))))
    return bytearray(buf.getvalue())


def eocd_of(b):
    return bytes(b).rfind(b"PK\x05\x06")


def reshape(rng, b):
    r = rng.random()
    if r < 0.2:
        b[0:0] = b"J" * rng.randint(1, 64)  # prepended: zipfile shifts, miniz does not
    elif r < 0.3:
        b += b"\0" * rng.randint(1, 30)      # appended after the end record
    elif r < 0.55:
        # A ZIP64 end record + locator before the end record; the locator points anywhere.
        e = eocd_of(b)
        if e >= 0:
            count = struct.unpack_from("<H", b, e + 10)[0]
            cd_size, cd_off = struct.unpack_from("<II", b, e + 12)
            if rng.random() < 0.5:
                cd_off += rng.choice([-1, 1, 46])  # a ZIP64 record that disagrees
            z64 = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count,
                              cd_size, cd_off)
            loc_target = rng.choice([e, 0, e + 1000, len(b) // 2])
            loc = struct.pack("<4sIQI", b"PK\x06\x07", 0, loc_target, 1)
            b[e:e] = z64 + loc
    elif r < 0.7:
        e = eocd_of(b)
        if e >= 0:
            struct.pack_into("<H", b, e + 10, rng.randint(0, 5))  # entry count
            struct.pack_into("<H", b, e + 8, rng.randint(0, 5))
    elif r < 0.8:
        # A NUL in the first name, in the central directory only.
        c = bytes(b).find(b"PK\x01\x02")
        if c >= 0:
            n = struct.unpack_from("<H", b, c + 28)[0]
            if n > 1:
                b[c + 46 + rng.randrange(n)] = 0
    return b


def mutate(rng, b):
    e = eocd_of(b)
    c = bytes(b).find(b"PK\x01\x02")
    for _ in range(rng.randint(1, 3)):
        zones = [x for x in (e, c) if x >= 0]
        if not zones or rng.random() < 0.3:
            pos = rng.randrange(len(b)) if b else 0
        else:
            pos = min(len(b) - 1, rng.choice(zones) + rng.randrange(48))
        if b:
            b[pos] = rng.randint(0, 255)
    return b


def compare(args, inputs, paths):
    """The mismatches [(path, why)] between zipfile and our listing of each input."""
    proc = subprocess.run([args.listing_tool, "--stdin"], input="".join(p + "\n" for p in paths),
                          capture_output=True, text=True, check=True)
    # Not splitlines(): it also splits at U+0085, U+2028 and U+2029, which a member name may hold.
    ours = [json.loads(line) for line in proc.stdout.split("\n") if line]
    mismatches = []
    opened = 0
    limited = 0
    for i, data in enumerate(inputs):
        want = oracle(data)
        got = ours[i]
        opened += want["ok"]
        why = None
        if not got["ok"] and "over the limit" in got.get("error", ""):
            limited += 1  # one of our named limits: the file is ERROR, never read another way
            continue
        if want["ok"] != got["ok"]:
            why = "zipfile %s, ours %s" % ("opens it" if want["ok"] else "refuses it",
                                           "opens it" if got["ok"] else got.get("error"))
        elif want["ok"]:
            got_entries = [e[:5] for e in got["entries"]]
            if got_entries != want["entries"]:
                why = "entries: zipfile %s, ours %s" % (want["entries"][:4], got_entries[:4])
            elif got["opened"] != want["opened"]:
                why = "opened: zipfile %s, ours %s" % (want["opened"], got["opened"])
            else:
                for k, e in enumerate(got["entries"]):
                    if want["local"][k] is None:
                        continue
                    # Ours past the header where zipfile is not: a member we would not read.
                    if e[5] and not want["local"][k]:
                        why = "entry %d: zipfile fails at its local header, ours reads it" % k
                    if not e[5] and want["local"][k]:
                        why = "entry %d: zipfile reads past its local header, ours does not" % k
        if why:
            mismatches.append((paths[i], why))
    print("zipfile differential, seed %d: %d archives (%d that zipfile opens, %d over a limit of "
          "ours), %d mismatches" % (args.seed, len(inputs), opened, limited, len(mismatches)))
    for p, why in mismatches[:20]:
        print("MISMATCH %s: %s" % (os.path.basename(p), why))
    return mismatches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listing-tool", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--fixtures", action="append", default=[])
    ap.add_argument("--keep-failures")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    inputs = []
    for d in args.fixtures:
        for root, _, names in os.walk(d):
            for n in sorted(names):
                if n.endswith((".npz", ".pt", ".zip")):
                    with open(os.path.join(root, n), "rb") as f:
                        inputs.append(f.read())
    for _ in range(args.count):
        b = reshape(rng, make_archive(rng))
        inputs.append(bytes(b))
        inputs.append(bytes(mutate(rng, bytearray(b))))
    with InputFiles(inputs, "zipfile_diff.", ".zip") as files:
        mismatches = compare(args, inputs, files.paths)
        files.keep([p for p, _ in mismatches], args.keep_failures)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
