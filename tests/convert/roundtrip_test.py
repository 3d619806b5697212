#!/usr/bin/python3
"""Round trip against torch: every benign torch/numpy fixture through `ckptscan convert`.

    roundtrip_test.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures/torch

Stdlib only (CI has no torch). For every file in expectations.json / tar_expectations.json
(what torch.load and numpy returned, recorded by gen_torch_fixtures.py / gen_tar_fixtures.py)
and roundtrip_expectations.json (torch's own bf16 conversion and the non-tensor values,
recorded by gen_roundtrip.py):

  --dtype keep  every tensor torch returned is in the output under its name (or, for a tied
                weight, under the kept name its alias points to), with the same shape, the
                safetensors dtype of its torch dtype, and the same SHA-256 of its row-major
                bytes;
  --dtype bf16  the same, except float32/float16 tensors are BF16 with the SHA-256 of torch's
                `.to(torch.bfloat16)` (NaN sign kept, docs/bf16.md);
  both          the report's conversion.not_written lists exactly the values torch returned
                beside the tensors.

A torch-quantized tensor (qint8, quint8, qint32) is its int_repr() plus NAME.scale,
NAME.zero_point (and NAME.axis), checked against the values torch recorded where it recorded
them (tests/convert/quantized_test.py checks quantized conversions in depth).
A file holding a tensor safetensors cannot represent (complex128, quint4x2, sparse) must
instead fail with exit 2, name that tensor, and write nothing. The sharded set converts
through its index and each output shard is checked against its source shard the same way.
The safetensors files are read here by an independent parser (header, offsets tiling the
data exactly), never by ckptscan.
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

ST = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int8": "I8",
      "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8", "bool": "BOOL",
      "complex64": "C64", "uint16": "U16", "uint32": "U32", "uint64": "U64",
      "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4,
         "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8, "F8_E4M3": 1,
         "F8_E5M2": 1}

# torch-quantized dtypes written as their integer data (docs/safetensors.md, "Quantized
# weights"); quint4x2 and quint2x4 are refused.
QDATA = {"qint8": "I8", "quint8": "U8", "qint32": "I32"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def read_safetensors(path):
    """Independent reader: returns (metadata, {name: (dtype, shape, bytes)})."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    spans = []
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        assert end - begin == count * SIZES[t["dtype"]], (name, t)
        spans.append((begin, end))
        out[name] = (t["dtype"], t["shape"], data[base + begin:base + end])
    pos = 0
    for begin, end in sorted(spans):
        assert begin == pos, ("gap or overlap at", begin)
        pos = end
    assert base + pos == len(data), "data does not end the file"
    return meta, out


def convert(ckptscan, src, out, dtype):
    r = subprocess.run([ckptscan, "convert", "-f", "json", "--dtype", dtype, src, "-o", out],
                       capture_output=True, text=True)
    report = json.loads(r.stdout) if r.stdout.strip() else None
    return r.returncode, report, r.stderr


def unconvertible(tensors):
    for t in tensors:
        if t.get("layout") == "sparse_coo" or (t["dtype"] not in ST and t["dtype"] not in QDATA):
            return t["name"]
    return None


def check_file(label, src, out, expected, rt, dtype, not_written):
    meta, got = read_safetensors(out)
    # complex64 is written as F32 with a trailing dimension of 2 (torch.view_as_real: the same
    # bytes), its names listed in __metadata__ (docs/safetensors.md).
    as_real = set(json.loads(meta.get("ckptscan.complex64_as_real", "[]")))
    qnames = set()  # a quantized tensor's parameters, written beside it
    for t in expected:
        name = t["name"] or "tensor"  # a bare tensor is written under this name
        stored = name if name in got else meta.get(name)
        if not check(stored in got, f"{label}: tensor {name!r} missing"):
            continue
        st_dtype, shape, raw = got[stored]
        if t["dtype"] in QDATA:
            qnames.update(check_quantized(label, t, got, meta))
            continue
        if stored in as_real:
            check(t["dtype"] == "complex64", f"{label}: {name} written as real but is {t['dtype']}")
            check(shape == t["shape"] + [2] and st_dtype == "F32",
                  f"{label}: {name} as real is {st_dtype} {shape}, want F32 {t['shape'] + [2]}")
            check(hashlib.sha256(raw).hexdigest() == t["sha256"],
                  f"{label}: {name} bytes differ from torch")
            continue
        check(shape == t["shape"], f"{label}: {name} shape {shape} != {t['shape']}")
        if dtype == "bf16" and t["dtype"] in ("float32", "float16"):
            check(st_dtype == "BF16", f"{label}: {name} is {st_dtype}, want BF16")
            want = rt["bf16"][t["name"]]
        else:
            check(st_dtype == ST[t["dtype"]], f"{label}: {name} is {st_dtype}")
            want = t["sha256"]
        check(hashlib.sha256(raw).hexdigest() == want, f"{label}: {name} bytes differ from torch")
    names = {t["name"] or "tensor" for t in expected} | qnames
    for name in got:
        check(name in names, f"{label}: output holds {name!r}, which torch did not return")
    if not_written is not None:
        check(sorted(not_written) == sorted(rt["other_values"]),
              f"{label}: not written {sorted(not_written)} != torch's {sorted(rt['other_values'])}")


def check_quantized(label, t, got, meta):
    """A torch-quantized tensor: its integer data under its name, with torch's bytes, and its
    scale and zero point (and axis) beside it, with the values torch recorded where it did."""
    name = t["name"]
    st_dtype, shape, raw = got[name]
    check(st_dtype == QDATA[t["dtype"]] and shape == t["shape"] and
          hashlib.sha256(raw).hexdigest() == t["sha256"],
          f"{label}: {name} is {st_dtype} {shape}, want torch's int_repr {QDATA[t['dtype']]}")
    q = t.get("quantized", {})
    per_channel = "axis" in q or name + ".axis" in got
    names = [name + ".scale", name + ".zero_point"] + ([name + ".axis"] if per_channel else [])
    if not check(all(n in got for n in names), f"{label}: {name}: {names} not all written"):
        return names
    listed = json.loads(meta.get("ckptscan.quantized", "{}")).get(name, {})
    check(listed.get("dtype") == t["dtype"], f"{label}: ckptscan.quantized[{name!r}] = {listed}")
    if "scale" in q:
        check(got[name + ".scale"] == ("F64", [], struct.pack("<d", q["scale"])),
              f"{label}: {name}.scale is not F64 {q['scale']}")
        check(got[name + ".zero_point"] == ("I64", [], struct.pack("<q", q["zero_point"])),
              f"{label}: {name}.zero_point is not I64 {q['zero_point']}")
    if "scales" in q:
        n = len(q["scales"])
        check(got[name + ".scale"] == ("F64", [n], struct.pack(f"<{n}d", *q["scales"])),
              f"{label}: {name}.scale is not F64 {q['scales']}")
        check(got[name + ".zero_point"] == ("I64", [n], struct.pack(f"<{n}q", *q["zero_points"])),
              f"{label}: {name}.zero_point is not I64 {q['zero_points']}")
        check(got[name + ".axis"] == ("I64", [], struct.pack("<q", q["axis"])),
              f"{label}: {name}.axis is not {q['axis']}")
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/torch")
    a = ap.parse_args()
    fx = a.fixtures
    files = {}
    for exp in ("expectations.json", "tar_expectations.json"):
        files.update(json.load(open(os.path.join(fx, exp)))["files"])
    rts = json.load(open(os.path.join(fx, "roundtrip_expectations.json")))["files"]
    converted = refused = 0
    with tempfile.TemporaryDirectory() as tmp:
        for rel in sorted(rts):
            if rel.startswith("sharded/"):
                continue
            expected = files[rel]["tensors"]
            bad = unconvertible(expected)
            for dtype in ("keep", "bf16"):
                label = f"{rel} --dtype {dtype}"
                out = os.path.join(tmp, "out.safetensors")
                rc, report, err = convert(a.ckptscan, os.path.join(fx, rel), out, dtype)
                if files[rel].get("format") == "torch-tar" or rel.startswith("tar_"):
                    # torch <= 0.3 checkpoints are never SAFE (docs/formats.md): refused.
                    check(rc == 1 and not os.path.exists(out),
                          f"{label}: a torch-tar file must be refused (exit 1), got {rc}")
                    refused += 1
                    continue
                if bad is not None:
                    check(rc == 2 and bad in err and not os.path.exists(out),
                          f"{label}: want exit 2 naming {bad!r}, got {rc}: {err.strip()}")
                    refused += 1
                    continue
                if not check(rc == 0, f"{label}: exit {rc}: {err.strip()}"):
                    continue
                conv = report["files"][0]["conversion"]
                check_file(label, rel, out, expected, rts[rel], dtype,
                           [n["path"] for n in conv["not_written"]])
                os.unlink(out)
                converted += 1
        index = os.path.join(fx, "sharded", "pytorch_model.bin.index.json")
        for dtype in ("keep", "bf16"):
            outdir = os.path.join(tmp, "set-" + dtype)
            rc, report, err = convert(a.ckptscan, index, outdir, dtype)
            if not check(rc == 0, f"sharded --dtype {dtype}: exit {rc}: {err.strip()}"):
                continue
            new_index = json.load(open(os.path.join(outdir, "model.safetensors.index.json")))
            for i in (1, 2):
                rel = "sharded/pytorch_model-%05d-of-00002.bin" % i
                out = os.path.join(outdir, "model-%05d-of-00002.safetensors" % i)
                check_file(f"sharded shard {i} --dtype {dtype}", rel, out, files[rel]["tensors"],
                           rts[rel], dtype, None)
                for t in files[rel]["tensors"]:
                    check(new_index["weight_map"].get(t["name"]) == os.path.basename(out),
                          f"sharded: index maps {t['name']} elsewhere")
            converted += 2
    for f in failures:
        print("FAIL", f)
    print(f"{converted} conversions compared with torch tensor by tensor, {refused} refusals "
          f"checked, {len(failures)} failures")
    return 1 if failures or converted == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
