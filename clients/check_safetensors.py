#!/usr/bin/python3
"""Stdlib-only check of a .safetensors file written by `ckptscan convert`.

  check_safetensors.py FILE SOURCE [--tensors N] [--alias REMOVED=KEPT]...

Parses the 8-byte little-endian header length and the JSON header, and checks: the header is
padded to 8 bytes with spaces, every tensor's dtype/shape/data_offsets are consistent and the
offsets tile the data buffer exactly (no gap, no overlap, up to the end of the file), and
__metadata__ has "format": "pt" and the SHA-256 of SOURCE as provenance. Exit 0 when valid.
"""
import argparse
import hashlib
import json
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
         "C64": 8}


def fail(msg):
    print(f"check_safetensors: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("source")
    ap.add_argument("--tensors", type=int)
    ap.add_argument("--alias", action="append", default=[])
    a = ap.parse_args()
    data = open(a.file, "rb").read()
    if len(data) < 8:
        fail("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n % 8 != 0 or 8 + n > len(data):
        fail(f"bad header length {n}")
    raw = data[8:8 + n]
    text = raw.decode("utf-8")
    if not text.startswith("{") or not text.rstrip(" ").endswith("}"):
        fail("header is not a JSON object padded with spaces")
    def hook(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            fail("duplicate key")
        return dict(pairs)

    header = json.loads(text.rstrip(" "), object_pairs_hook=hook)
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or meta.get("format") != "pt":
        fail(f"__metadata__ lacks format pt: {meta!r}")
    sha = hashlib.sha256(open(a.source, "rb").read()).hexdigest()
    if meta.get("ckptscan.source_sha256") != sha:
        fail(f"source sha256 {meta.get('ckptscan.source_sha256')!r} != {sha}")
    for pair in a.alias:
        removed, kept = pair.split("=", 1)
        if meta.get(removed) != kept or removed in header or kept not in header:
            fail(f"alias {removed} -> {kept} not recorded")
    buffer = len(data) - 8 - n
    spans = []
    for name, t in header.items():
        if set(t) != {"dtype", "shape", "data_offsets"}:
            fail(f"{name}: fields {sorted(t)}")
        if t["dtype"] not in SIZES:
            fail(f"{name}: dtype {t['dtype']}")
        count = 1
        for d in t["shape"]:
            if not isinstance(d, int) or d < 0:
                fail(f"{name}: shape {t['shape']}")
            count *= d
        begin, end = t["data_offsets"]
        if end - begin != count * SIZES[t["dtype"]]:
            fail(f"{name}: {end - begin} bytes for {count} x {t['dtype']}")
        spans.append((begin, end, name))
    spans.sort()
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            fail(f"{name}: starts at {begin}, expected {pos}")
        pos = end
    if pos != buffer:
        fail(f"tensors cover {pos} of {buffer} data bytes")
    if a.tensors is not None and len(header) != a.tensors:
        fail(f"{len(header)} tensors, expected {a.tensors}")
    print(f"ok {a.file}: {len(header)} tensors, {buffer} data bytes")


if __name__ == "__main__":
    main()
