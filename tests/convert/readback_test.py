#!/usr/bin/python3
"""What the real safetensors library read from our outputs still holds for this build.

    readback_test.py --ckptscan build/clients/ckptscan --repo . [--record FILE]

Stdlib only (CI has neither the Debian 13 root nor safetensors). tests/convert/readback.json
was recorded by gen_readback.py: every input of some fixture folders converted by ckptscan, each
output read by `safetensors.safe_open(..., framework="pt")` in Debian 13 (safetensors 0.4.5,
torch 2.6). This test checks, for every recorded conversion:

  * the record covers every input of each recorded folder, --dtype keep and bf16 (a fixture
    added without re-recording fails);
  * ckptscan converts it again with the same exit code and the same per-dtype report, writes
    the same output files, byte for byte the ones the library read: the same SHA-256, or, when
    the provenance differs (a new version or rules version), the same normalized SHA-256
    (gen_readback.py: those two metadata values emptied);
  * a second conversion writes the same bytes (the output is deterministic);
  * the library read every output (an output of the default policy that safetensors cannot read
    is a failure), and what it returned equals what torch holds (the folder's expectations.json
    and roundtrip_expectations.json, recorded from torch): every tensor under its name, or its
    alias's kept name, with torch's dtype, shape and element SHA-256; bf16 outputs with torch's
    own bf16 rounding; a complex64 tensor listed in __metadata__ "ckptscan.complex64_as_real"
    as float32 with a trailing dimension of 2 and the same bytes, and torch.view_as_complex of
    what the library read (run by gen_readback.py) is torch's complex64 tensor.
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_readback  # noqa: E402  (stdlib only: inputs, normalized_sha256, convert)

failures = []
unrecorded_bf16 = []  # bf16 tensors whose elements have no recorded torch digest


# torch-quantized dtypes: written as their integer data, the parameters beside them
# (docs/safetensors.md, "Quantized weights").
QDATA = {"qint8": "int8", "quint8": "uint8", "qint32": "int32"}


def digest(b):
    return hashlib.sha256(b).hexdigest()


def quantized_params(t, got):
    """suffix -> (torch dtype, shape, SHA-256) of a quantized tensor's parameter tensors, from
    what torch recorded: the quantized corpus (scale_hex / scales), the modern corpus
    ("quantized"), or nothing (None: only their presence is checked)."""
    name = t["name"]
    if "scale_hex" in t:
        return {".scale": ("torch.float64", [], digest(bytes.fromhex(t["scale_hex"]))),
                ".zero_point": ("torch.int64", [], digest(struct.pack("<q", t["zero_point"])))}
    if "scales" in t:
        return {".scale": ("torch." + t["scales"]["dtype"], t["scales"]["shape"],
                           t["scales"]["sha256"]),
                ".zero_point": ("torch." + t["zero_points"]["dtype"], t["zero_points"]["shape"],
                                t["zero_points"]["sha256"]),
                ".axis": ("torch.int64", [], digest(struct.pack("<q", t["axis"])))}
    q = t.get("quantized", {})
    if "scale" in q:
        return {".scale": ("torch.float64", [], digest(struct.pack("<d", q["scale"]))),
                ".zero_point": ("torch.int64", [], digest(struct.pack("<q", q["zero_point"])))}
    if "scales" in q:
        n = len(q["scales"])
        return {".scale": ("torch.float64", [n], digest(struct.pack(f"<{n}d", *q["scales"]))),
                ".zero_point": ("torch.int64", [n],
                                digest(struct.pack(f"<{n}q", *q["zero_points"]))),
                ".axis": ("torch.int64", [], digest(struct.pack("<q", q["axis"])))}
    out = {".scale": None, ".zero_point": None}
    if name + ".axis" in got:
        out[".axis"] = None
    return out


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def torch_expectations(folder):
    """rel -> torch's tensors, and rel -> roundtrip entry (bf16 digests), of a fixture folder."""
    files, rts = {}, {}
    for name in ("expectations.json", "tar_expectations.json"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            files.update(json.load(open(path))["files"])
    path = os.path.join(folder, "roundtrip_expectations.json")
    if os.path.exists(path):
        rts = json.load(open(path))["files"]
    return files, rts


def sources_of(folder, rel):
    """The fixture files whose tensors an input's outputs hold: itself, or a set's shards."""
    if not rel.endswith(".index.json"):
        return [rel]
    index = json.load(open(os.path.join(folder, rel)))
    sub = os.path.dirname(rel)
    return [os.path.join(sub, f) for f in sorted(set(index["weight_map"].values()))]


def compare_with_torch(label, entry, folder, files, rts):
    """True when compared; False (with the reason printed) when torch recorded nothing."""
    sources = sources_of(folder, entry["input"])
    if any(s not in files for s in sources):
        print("note: %s: no torch expectations for %s; its library read is not compared" %
              (label, ", ".join(s for s in sources if s not in files)))
        return False
    got, meta, restored = {}, {}, {}
    for name, o in entry["outputs"].items():
        read = o["safe_open_pt"]
        for t in read["tensors"]:
            check(t["name"] not in got, "%s: tensor %r in two outputs" % (label, t["name"]))
            got[t["name"]] = t
        meta.update(read.get("metadata") or {})
        restored.update({t["name"]: t for t in read.get("restored", [])})
    as_real = set(json.loads(meta.get("ckptscan.complex64_as_real", "[]")))
    names = set()
    for src in sources:
        bf16 = rts.get(src, {}).get("bf16", {})
        # torch files list "tensors"; numpy and joblib files (the modern corpus) "arrays", whose
        # object arrays are values, not tensors, and are never written.
        kept = files[src].get("tensors", files[src].get("arrays", []))
        # Layers that GPTQ/AWQ/bitsandbytes quantized (the quantized corpus): their float
        # tensors keep their dtype under bf16.
        layers = files[src].get("layers", {})
        for t in (t for t in kept if t.get("dtype") != "object"):
            name = t["name"] or "tensor"  # a bare tensor is written under this name
            names.add(name)
            stored = name if name in got else meta.get(name)
            if not check(stored in got, "%s: %r missing from what the library read" %
                         (label, name)):
                continue
            lib = got[stored]
            want_dtype, want_shape = "torch." + t["dtype"], t["shape"]
            want_sha = t.get("sha256")
            in_layer = any(p == "" or name.startswith(p + ".") for p in layers)
            if t["dtype"] in QDATA:
                want_dtype = "torch." + QDATA[t["dtype"]]
                want_sha = t.get("int_repr_sha256", want_sha)
                for suffix, spec in quantized_params(t, got).items():
                    names.add(name + suffix)
                    p = got.get(name + suffix)
                    if check(p is not None, "%s: %r missing from what the library read" %
                             (label, name + suffix)) and spec is not None:
                        check((p["dtype"], p["shape"], p["sha256"]) == spec,
                              "%s: %r read as %s %s, torch's is %s %s" %
                              (label, name + suffix, p["dtype"], p["shape"], spec[0], spec[1]))
            elif (entry["dtype"] == "bf16" and t["dtype"] in ("float32", "float16") and
                  not in_layer):
                want_dtype, want_sha = "torch.bfloat16", bf16.get(t["name"])
            elif stored in as_real:
                check(t["dtype"] == "complex64",
                      "%s: %r listed as complex64 written as real, torch says %s" %
                      (label, name, t["dtype"]))
                want_dtype, want_shape = "torch.float32", t["shape"] + [2]
                back = restored.get(stored)
                check(back is not None and back["dtype"] == "torch.complex64" and
                      back["shape"] == t["shape"] and back["sha256"] == t["sha256"],
                      "%s: torch.view_as_complex(%r) is not torch's tensor: %s" %
                      (label, stored, back))
            check(lib["dtype"] == want_dtype,
                  "%s: %r read as %s, torch has %s" % (label, name, lib["dtype"], want_dtype))
            check(lib["shape"] == want_shape,
                  "%s: %r read with shape %s, want %s" % (label, name, lib["shape"], want_shape))
            if want_sha is None:
                # No bf16 digest recorded for this folder (the modern corpus records torch's
                # tensors only): dtype and shape are compared; the rounding itself is checked
                # on every fp32 value by core/bf16's exhaustive tests.
                unrecorded_bf16.append("%s: %r" % (label, name))
                continue
            check(lib["sha256"] == want_sha,
                  "%s: %r read with elements that differ from torch's" % (label, name))
    for name in got:
        check(name in names, "%s: the library read %r, which torch did not return" %
              (label, name))
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--repo", required=True, help="the source tree")
    ap.add_argument("--record", default=os.path.join(HERE, "readback.json"))
    a = ap.parse_args()
    record = json.load(open(a.record))
    entries = record["entries"]
    by_key = {(e["folder"], e["input"], e["dtype"]): e for e in entries}
    for folder in sorted({e["folder"] for e in entries}):
        for rel in gen_readback.inputs(os.path.join(a.repo, folder)):
            for dtype in ("keep", "bf16"):
                check((folder, rel, dtype) in by_key,
                      "%s/%s --dtype %s is not recorded: run gen_readback.py" %
                      (folder, rel, dtype))
    compared = identical = normalized_only = library_reads = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, e in enumerate(entries):
            label = "%s/%s --dtype %s" % (e["folder"], e["input"], e["dtype"])
            src = os.path.join(a.repo, e["folder"], e["input"])
            runs = []
            for attempt in (0, 1):
                here = os.path.join(tmp, "%d-%d" % (n, attempt))
                os.mkdir(here)
                out = os.path.join(here, "set" if e["input"].endswith(".json")
                                   else gen_readback.OUT_NAME)
                code, dtypes, paths = gen_readback.convert(a.ckptscan, src, out, e["dtype"])
                runs.append({os.path.relpath(p, here): open(p, "rb").read() for p in paths})
                if attempt == 0:
                    check(code == e["exit"], "%s: exit %d, recorded %d" % (label, code, e["exit"]))
                    check(dtypes == e["dtypes"], "%s: dtypes %s, recorded %s" %
                          (label, dtypes, e["dtypes"]))
            check(runs[0] == runs[1], "%s: two conversions wrote different bytes" % label)
            check(sorted(runs[0]) == sorted(e["outputs"]), "%s: outputs %s, recorded %s" %
                  (label, sorted(runs[0]), sorted(e["outputs"])))
            for name, o in e["outputs"].items():
                data = runs[0].get(name)
                if data is None:
                    continue
                if gen_readback.provenance(data) == o["provenance"]:
                    check(hashlib.sha256(data).hexdigest() == o["sha256"],
                          "%s: %s is not the file the library read" % (label, name))
                    identical += 1
                else:
                    check(gen_readback.normalized_sha256(data) == o["sha256_normalized"],
                          "%s: %s differs from the file the library read (beyond provenance)" %
                          (label, name))
                    normalized_only += 1
                read = o["safe_open_pt"]
                if check("error" not in read, "%s: %s: safetensors %s could not read it: %s" %
                         (label, name, record["library"]["safetensors"], read.get("error"))):
                    library_reads += 1
            if e["outputs"] and all("error" not in o["safe_open_pt"]
                                    for o in e["outputs"].values()):
                files, rts = torch_expectations(os.path.join(a.repo, e["folder"]))
                if compare_with_torch(label, e, os.path.join(a.repo, e["folder"]), files, rts):
                    compared += 1
    for f in failures:
        print("FAIL", f)
    if unrecorded_bf16:
        print("note: %d bf16 tensors compared by dtype and shape only (no bf16 digest recorded "
              "for their folder), e.g. %s" % (len(unrecorded_bf16), unrecorded_bf16[0]))
    print("%d conversions re-run; outputs: %d byte-identical to what safetensors %s read, %d "
          "identical but for provenance; %d library reads; %d conversions compared with torch; "
          "%d failures" % (len(entries), identical, record["library"]["safetensors"],
                           normalized_only, library_reads, compared, len(failures)))
    return 1 if failures or compared == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
