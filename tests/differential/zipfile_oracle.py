#!/usr/bin/python3
"""One release of Python's zipfile as an oracle, run in a process of its own.

    zipfile_oracle.py [--zipfile-dir DIR] < paths

DIR holds a zipfile.py (or a zipfile/ package) that is imported instead of the interpreter's
own: a copy extracted from another Debian package of the same Python (tests/differential/
fetch_zipfiles.sh), so that one machine can check the model against several releases. Without
it, the interpreter's own zipfile is used.

Prints one JSON line describing the release (where the module is, the interpreter, and what
three probes show it does where releases differ), then one JSON line per input path (one path
per line on stdin): whether zipfile opens it and, if so, its entries, which entry each name
opens, and whether ZipFile.open of each entry gets past the local header. Stdlib only; nothing
is extracted but bytes.
"""
import argparse
import io
import json
import os
import struct
import sys
import zlib


def load_zipfile(directory):
    if directory:
        sys.path.insert(0, os.path.abspath(directory))
    import zipfile
    if directory:
        here = os.path.realpath(zipfile.__file__)
        if not here.startswith(os.path.realpath(directory) + os.sep):
            raise SystemExit("zipfile_oracle: %s has no zipfile module (imported %s)"
                             % (directory, here))
    return zipfile


UNOPENABLE = 2**64 - 1


def oracle(zipfile, data):
    refused = (zipfile.BadZipFile, NotImplementedError, ValueError, OSError, UnicodeDecodeError,
               EOFError, struct.error, OverflowError)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except refused as e:
        return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
    entries = []
    for info in zf.filelist:
        # A header offset that the shift makes negative cannot be opened; ours marks it so.
        offset = info.header_offset if 0 <= info.header_offset < 2**64 else UNOPENABLE
        entries.append([info.filename.encode("utf-8").hex(), offset, info.compress_size,
                        info.file_size, info.compress_type])
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
        if not 0 <= info.header_offset < 2**64:  # the seek fails
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
        except UnicodeDecodeError:  # the local name, decoded by the local flags
            local.append(False)
        except Exception:  # unsupported method, encryption, overlap: past the header
            local.append(True)
    return {"ok": True, "entries": entries, "opened": opened, "local": local}


# --- Probes: what this release does where the releases we model differ ---------------------

def _plain_zip(zipfile, name="a.txt", data=b"probe", extra=b""):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.extra = extra
        zf.writestr(info, data)
    return bytearray(buf.getvalue())


def probe_zip64_checked(zipfile):
    """True when a ZIP64 locator that points away from its record is refused (CPython
    gh-139700); False when the record right before the locator is used anyway."""
    b = _plain_zip(zipfile)
    e = bytes(b).rfind(b"PK\x05\x06")
    count = struct.unpack_from("<H", b, e + 10)[0]
    cd_size, cd_off = struct.unpack_from("<II", b, e + 12)
    record = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count,
                         cd_size, cd_off)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, 0, 1)  # points at offset 0
    b[e:e] = record + locator
    try:
        zipfile.ZipFile(io.BytesIO(bytes(b))).namelist()
        return False
    except zipfile.BadZipFile:
        return True


def probe_unicode_path(zipfile):
    """True when the Info-ZIP Unicode Path extra field (0x7075) renames the entry (3.12+)."""
    body = struct.pack("<BI", 1, zlib.crc32(b"a.txt")) + b"b.txt"
    extra = struct.pack("<HH", 0x7075, len(body)) + body
    names = zipfile.ZipFile(io.BytesIO(bytes(_plain_zip(zipfile, extra=extra)))).namelist()
    return names == ["b.txt"]


def probe_comment_window(zipfile):
    """How many bytes after the end record the search still finds it: 65536 or 65535."""
    b = bytes(_plain_zip(zipfile))
    try:
        zipfile.ZipFile(io.BytesIO(b + b"c" * 65536)).namelist()
        return 65536
    except zipfile.BadZipFile:
        return 65535


def identity(zipfile):
    return {"zipfile": os.path.realpath(zipfile.__file__),
            "python": sys.version.split()[0],
            "zip64_checked": probe_zip64_checked(zipfile),
            "unicode_path": probe_unicode_path(zipfile),
            "comment_window": probe_comment_window(zipfile)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zipfile-dir")
    args = ap.parse_args()
    zipfile = load_zipfile(args.zipfile_dir)
    out = sys.stdout
    out.write(json.dumps({"identity": identity(zipfile)}) + "\n")
    for line in sys.stdin.read().split("\n"):
        if not line:
            continue
        with open(line, "rb") as f:
            data = f.read()
        out.write(json.dumps(oracle(zipfile, data)) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
