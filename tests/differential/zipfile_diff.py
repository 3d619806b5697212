#!/usr/bin/python3
"""Python's zipfile, every release of it at hand, as an oracle for our model of it
(core/zip/zipfile_view.h).

    zipfile_diff.py --listing-tool PATH [--seed N] [--count N] [--fixtures DIR]...
                    [--zipfile-dir DIR]... [--zipfile-cache DIR] [--oracle-root ROOT]...
                    [--oracle-python PATH]... [--record FILE] [--keep-failures DIR]

numpy.load opens an .npz with zipfile, so the members numpy would load are zipfile's answer, not
miniz's. And zipfile is versioned in the wild: Debian 12's python3.11 reads the ZIP64 end
records one way up to 3.11.2-6+deb12u6 and another from the CVE-2025-8291 fix on (CPython
gh-139700); Debian 13's python3.13 also takes names from the Unicode Path extra field. This
generates archives with Python's zipfile (stored and deflated members, comments, duplicate and
non-ASCII names, names with NUL bytes), reshapes them the ways the readers disagree on (bytes
prepended or appended, a ZIP64 end record and locator inserted with the locator pointing
anywhere and the record holding extensible data, entry counts changed, the UTF-8 flag cleared,
a Unicode Path field added) and mutates their structural bytes, then compares, per archive and
per release, what that release's zipfile.ZipFile lists (whether it opens, each entry's name,
header offset, sizes and method, which entry open(name) uses, and whether open(name) gets past
the local header) with what `zip_listing` prints for the same release.

The releases checked in one run:
  - the interpreter's own zipfile (Debian's /usr/bin/python3);
  - every copy in --zipfile-cache (default ${XDG_CACHE_HOME:-~/.cache}/ckptscan/zipfile), where
    tests/differential/fetch_zipfiles.sh puts the zipfile.py of the other Debian packages of
    the same Python (each in a folder of its own, with a VERSION file);
  - every --zipfile-dir DIR (a folder holding a zipfile.py or a zipfile/ package);
  - with --oracle-root ROOT (as root): the python3 of another Debian root (e.g. a Debian 13
    root: scripts/modern_root.sh), run by chroot;
  - with --oracle-python PATH: another interpreter with its own zipfile (a CPython build).
Each runs in a child process (tests/differential/zipfile_oracle.py), which probes what the
release does where releases differ; the probes name the model's release to compare with. A
release whose probes match none of ours is an error. Every release seen is printed (and
written to --record FILE as JSON). When no ZIP64-checked (or no unchecked) zipfile is at hand,
a note says so: tests/fixtures/zipfile_releases keeps what each real release did with one
archive of each difference. Stdlib only.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import zipfile
import zlib

from input_files import InputFiles

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(HERE, "zipfile_oracle.py")

# What a release does where the releases differ (zipfile_oracle.py's probes) -> the name of
# the model's reading of it (zip_listing's keys, core/zip/zipfile_view.h ZipfileReleaseName).
RELEASES = {
    (False, False, 65536): "3.11",
    (True, False, 65536): "3.11+zip64check",
    (False, True, 65536): "3.13",
    (True, True, 65535): "3.13+zip64check",
}


def default_cache():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ckptscan", "zipfile")


def package_of(path, root=None):
    """'PACKAGE VERSION' of the Debian package that installed `path` (in `root`), or None."""
    prefix = ["chroot", root] if root else []
    try:
        owner = subprocess.run(prefix + ["dpkg-query", "-S", path], capture_output=True,
                               text=True, check=True).stdout.split(":")[0].strip()
        version = subprocess.run(prefix + ["dpkg-query", "-W", "-f", "${Version}", owner],
                                 capture_output=True, text=True, check=True).stdout.strip()
        return "%s %s" % (owner, version)
    except (OSError, subprocess.CalledProcessError):
        return None


class Source:
    """One zipfile release: where it comes from and how its child process is started."""

    def __init__(self, label, zipfile_dir=None, root=None, python="/usr/bin/python3"):
        self.label = label
        self.zipfile_dir = zipfile_dir
        self.root = root
        self.python = python
        self.package = None
        if zipfile_dir:
            try:
                with open(os.path.join(zipfile_dir, "VERSION")) as f:
                    self.package = f.read().strip()
            except OSError:
                self.package = "the zipfile in %s" % zipfile_dir
        self.identity = None
        self.release = None

    def run(self, paths, root_paths):
        if self.root:
            inside = os.path.join(self.root, "tmp", "zipfile_oracle.py")
            with open(ORACLE, "rb") as src, open(inside, "wb") as dst:
                dst.write(src.read())
            cmd = ["chroot", self.root, "/usr/bin/python3", "/tmp/zipfile_oracle.py"]
            feed = root_paths
        else:
            cmd = [self.python, ORACLE]
            if self.zipfile_dir:
                cmd += ["--zipfile-dir", self.zipfile_dir]
            feed = paths
        proc = subprocess.run(cmd, input="".join(p + "\n" for p in feed), capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit("zipfile_diff: the oracle for %s failed: %s"
                             % (self.label, proc.stderr[-2000:]))
        lines = [json.loads(line) for line in proc.stdout.split("\n") if line]
        self.identity = lines[0]["identity"]
        if self.package is None and self.python == "/usr/bin/python3":
            self.package = package_of(self.identity["zipfile"], self.root)
        if self.package is None:
            self.package = "CPython %s, no Debian package" % self.identity["python"]
        probes = (self.identity["zip64_checked"], self.identity["unicode_path"],
                  self.identity["comment_window"])
        self.release = RELEASES.get(probes)
        return lines[1:]

    def describe(self):
        i = self.identity
        return ("%s %s (%s, Python %s): ZIP64 records %s, Unicode Path names %s, end record "
                "searched %d bytes back -> model %s" % (
                    self.label, i["zipfile"], self.package or "no Debian package", i["python"],
                    "checked" if i["zip64_checked"] else "not checked",
                    "read" if i["unicode_path"] else "not read", i["comment_window"],
                    self.release or "NONE (a release we do not model)"))


def sources(args):
    out = [Source("installed")]
    cache = args.zipfile_cache if args.zipfile_cache is not None else default_cache()
    if cache and os.path.isdir(cache):
        for name in sorted(os.listdir(cache)):
            d = os.path.join(cache, name)
            if (os.path.isfile(os.path.join(d, "zipfile.py")) or
                    os.path.isfile(os.path.join(d, "zipfile", "__init__.py"))):
                out.append(Source("cached", zipfile_dir=d))
    for d in args.zipfile_dir:
        out.append(Source("given", zipfile_dir=d))
    for root in args.oracle_root:
        out.append(Source("root " + root, root=root))
    for python in getattr(args, "oracle_python", []):
        out.append(Source("interpreter", python=python))
    return out


# --- Archives ---------------------------------------------------------------------------------

NAMES = ["a.npy", "b.npy", "x/y.npy", "A.npy", "\u00fc.npy", "\u00e9t\u00e9.npy"]


def make_archive(rng):
    buf = __import__("io").BytesIO()
    method = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
    with zipfile.ZipFile(buf, "w", method) as zf:
        if rng.random() < 0.3:
            zf.comment = b"c" * rng.randint(1, 40)
        for i in range(rng.randint(1, 4)):
            name = rng.choice(NAMES + ["arr_%d.npy" % i])
            with __import__("warnings").catch_warnings():
                __import__("warnings").simplefilter("ignore")  # duplicate names
                zf.writestr(name, bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 40))))
    return bytearray(buf.getvalue())


def eocd_of(b):
    return bytes(b).rfind(b"PK\x05\x06")


def cd_headers(b):
    """Offsets of the central-directory headers zipfile wrote (from the end record)."""
    e = eocd_of(b)
    if e < 0:
        return []
    count = struct.unpack_from("<H", b, e + 10)[0]
    pos = struct.unpack_from("<I", b, e + 16)[0]
    out = []
    for _ in range(count):
        if bytes(b[pos:pos + 4]) != b"PK\x01\x02":
            break
        out.append(pos)
        n, m, k = struct.unpack_from("<HHH", b, pos + 28)
        pos += 46 + n + m + k
    return out


def insert_zip64(rng, b):
    """A ZIP64 end record and locator before the end record; the locator points anywhere,
    the record may disagree with the directory or carry extensible data."""
    e = eocd_of(b)
    if e < 0:
        return
    count = struct.unpack_from("<H", b, e + 10)[0]
    cd_size, cd_off = struct.unpack_from("<II", b, e + 12)
    if rng.random() < 0.5:
        cd_off += rng.choice([-1, 1, 46])  # a ZIP64 record that disagrees
    extensible = b"E" * rng.choice([0, 0, 4, 12])
    size = 44 + len(extensible) + rng.choice([0, 0, 0, 8])
    z64 = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", size, 45, 45, 0, 0, count, count,
                      cd_size, cd_off) + extensible
    loc_target = rng.choice([e, e, 0, e + 1000, len(b) // 2, e + len(z64) - 56])
    loc = struct.pack("<4sIQI", b"PK\x06\x07", 0, loc_target, 1)
    b[e:e] = z64 + loc


def add_unicode_path(rng, b):
    """An Info-ZIP Unicode Path field (0x7075) in one central-directory entry: right or wrong
    CRC, version 1 or not, a name that may collide with another entry's, be empty, hold a NUL
    or not be UTF-8, or a field too short to hold a CRC."""
    heads = cd_headers(b)
    if not heads:
        return
    c = rng.choice(heads)
    n, m = struct.unpack_from("<HH", b, c + 28)
    raw = bytes(b[c + 46:c + 46 + n])
    name = rng.choice([b"a.npy", b"b.npy", b"arr_0.npy", "\u00fc.npy".encode(), b"",
                       b"z.npy\x00tail", b"\xff.npy"])
    crc = zlib.crc32(raw) if rng.random() < 0.8 else rng.randrange(2**32)
    version = 1 if rng.random() < 0.9 else 2
    body = struct.pack("<BI", version, crc) + name
    if rng.random() < 0.05:
        body = body[:rng.randrange(5)]
    field = struct.pack("<HH", 0x7075, len(body)) + body
    at = c + 46 + n + m
    b[at:at] = field
    struct.pack_into("<H", b, c + 30, m + len(field))
    e = eocd_of(b)
    struct.pack_into("<I", b, e + 12, struct.unpack_from("<I", b, e + 12)[0] + len(field))


def clear_utf8_flag(rng, b):
    """The UTF-8 flag cleared in a central-directory entry (its name is then cp437), and maybe
    in its local header too."""
    heads = cd_headers(b)
    if not heads:
        return
    c = rng.choice(heads)
    struct.pack_into("<H", b, c + 8, struct.unpack_from("<H", b, c + 8)[0] & ~0x800)
    if rng.random() < 0.5:
        lho = struct.unpack_from("<I", b, c + 42)[0]
        if bytes(b[lho:lho + 4]) == b"PK\x03\x04":
            struct.pack_into("<H", b, lho + 6, struct.unpack_from("<H", b, lho + 6)[0] & ~0x800)


def reshape(rng, b):
    r = rng.random()
    if r < 0.15:
        b[0:0] = b"J" * rng.randint(1, 64)  # prepended: zipfile shifts, miniz does not
    elif r < 0.22:
        b += b"\0" * rng.randint(1, 30)      # appended after the end record
    elif r < 0.5:
        insert_zip64(rng, b)
        if rng.random() < 0.3:
            b[0:0] = b"J" * rng.randint(1, 64)  # and prepended
    elif r < 0.6:
        e = eocd_of(b)
        if e >= 0:
            struct.pack_into("<H", b, e + 10, rng.randint(0, 5))  # entry count
            struct.pack_into("<H", b, e + 8, rng.randint(0, 5))
    elif r < 0.68:
        # A NUL in the first name, in the central directory only.
        c = bytes(b).find(b"PK\x01\x02")
        if c >= 0:
            n = struct.unpack_from("<H", b, c + 28)[0]
            if n > 1:
                b[c + 46 + rng.randrange(n)] = 0
    elif r < 0.82:
        add_unicode_path(rng, b)
    elif r < 0.9:
        clear_utf8_flag(rng, b)
    return b


def mutate(rng, b):
    zones = [x for x in (eocd_of(b), bytes(b).find(b"PK\x01\x02"), bytes(b).rfind(b"PK\x06\x06"),
                         bytes(b).rfind(b"PK\x06\x07")) if x >= 0]
    for _ in range(rng.randint(1, 3)):
        if not zones or rng.random() < 0.3:
            pos = rng.randrange(len(b)) if b else 0
        else:
            pos = min(len(b) - 1, rng.choice(zones) + rng.randrange(56))
        if b:
            b[pos] = rng.randint(0, 255)
    return b


# --- Comparison -------------------------------------------------------------------------------

def compare_one(want, got):
    """Why our listing `got` (one release's, from zip_listing) differs from what that release
    of zipfile did (`want`, from zipfile_oracle.py); None when they agree."""
    if want["ok"] != got["ok"]:
        return "zipfile %s, ours %s" % ("opens it" if want["ok"] else
                                        "refuses it (%s)" % want.get("error"),
                                        "opens it" if got["ok"] else got.get("error"))
    if not want["ok"]:
        return None
    got_entries = [e[:5] for e in got["entries"]]
    if got_entries != want["entries"]:
        return "entries: zipfile %s, ours %s" % (want["entries"][:4], got_entries[:4])
    if got["opened"] != want["opened"]:
        return "opened: zipfile %s, ours %s" % (want["opened"], got["opened"])
    for k, e in enumerate(got["entries"]):
        if want["local"][k] is None:
            continue
        # Ours past the header where zipfile is not: a member we would not read.
        if e[5] and not want["local"][k]:
            return "entry %d: zipfile fails at its local header, ours reads it" % k
        if not e[5] and want["local"][k]:
            return "entry %d: zipfile reads past its local header, ours does not" % k
    return None


def compare_release(source, want_all, ours, paths):
    """The mismatches [(path, why)] between one release of zipfile and our model of it."""
    mismatches = []
    opened = limited = 0
    for i, want in enumerate(want_all):
        got = ours[i]["releases"][source.release]
        opened += want["ok"]
        if not got["ok"] and "over the limit" in got.get("error", ""):
            limited += 1  # one of our named limits: the file is ERROR, never read another way
            continue
        why = compare_one(want, got)
        if why:
            mismatches.append((paths[i], why))
    return mismatches, opened, limited


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listing-tool", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--fixtures", action="append", default=[])
    ap.add_argument("--zipfile-dir", action="append", default=[],
                    help="a folder holding another release's zipfile.py (or zipfile/)")
    ap.add_argument("--zipfile-cache",
                    help="folders of other releases' zipfile.py, one per release (default: "
                    "%s; '' for none)" % default_cache())
    ap.add_argument("--oracle-root", action="append", default=[],
                    help="another Debian root whose /usr/bin/python3 is an oracle (chroot)")
    ap.add_argument("--oracle-python", action="append", default=[],
                    help="another interpreter whose own zipfile is an oracle")
    ap.add_argument("--record", help="write the releases seen and their results here (JSON)")
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
    parent = os.path.join(args.oracle_root[0], "tmp") if args.oracle_root else None
    record = {"seed": args.seed, "archives": len(inputs), "releases": []}
    failed = []
    with InputFiles(inputs, "zipfile_diff.", ".zip", parent=parent) as files:
        root_paths = ["/" + os.path.relpath(p, args.oracle_root[0]) for p in files.paths] \
            if args.oracle_root else None
        proc = subprocess.run([args.listing_tool, "--stdin"],
                              input="".join(p + "\n" for p in files.paths),
                              capture_output=True, text=True, check=True)
        # Not splitlines(): it also splits at U+0085, U+2028 and U+2029, which a name may hold.
        ours = [json.loads(line) for line in proc.stdout.split("\n") if line]
        zip64_seen = {}
        for source in sources(args):
            want = source.run(files.paths, root_paths)
            print("zipfile release: " + source.describe())
            entry = {"source": source.label, "package": source.package,
                     "identity": source.identity, "model": source.release}
            if source.release is None:
                print("FAIL: this zipfile reads differently from every release we model")
                failed.append(source.label)
                record["releases"].append(entry)
                continue
            zip64_seen.setdefault(source.identity["zip64_checked"], []).append(
                source.package or source.identity["zipfile"])
            mismatches, opened, limited = compare_release(source, want, ours, files.paths)
            print("zipfile differential, seed %d, zipfile %s (%s): %d archives (%d that zipfile "
                  "opens, %d over a limit of ours), %d mismatches" % (
                      args.seed, source.release, source.package or source.identity["zipfile"],
                      len(inputs), opened, limited, len(mismatches)), flush=True)
            for p, why in mismatches[:20]:
                print("MISMATCH %s: %s" % (os.path.basename(p), why))
            entry.update({"opened": opened, "over_limit": limited,
                          "mismatches": len(mismatches)})
            record["releases"].append(entry)
            if mismatches:
                failed.append(source.label)
                files.keep([p for p, _ in mismatches], args.keep_failures)
    for checked, what in ((False, "without the ZIP64 check (before CVE-2025-8291)"),
                          (True, "with the ZIP64 check (CPython gh-139700)")):
        if checked in zip64_seen:
            print("ZIP64 reading %s: checked against %s" % (what, ", ".join(zip64_seen[checked])))
        else:
            print("NOTE: no zipfile %s at hand: only tests/fixtures/zipfile_releases checks that "
                  "reading here (tests/differential/fetch_zipfiles.sh fetches the other Debian "
                  "packages of this Python that apt still has)" % what)
    if args.record:
        with open(args.record, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
