#!/usr/bin/python3
"""Polyglots and mutations for the loader matrix: files whose bytes are read differently by
different real loaders. Deterministic for a seed; stdlib only (no torch/numpy needed to
generate), so it runs under any Python 3.

    polyglots.py --out DIR [--seed 1] [--count 10000] [--bases-only] [--list]

Writes DIR/NNNNN_<base>[_<mutation>].<ext> (and with --index FILE, {name: {"base", "mutation",
"sha256"}}); the corpus digest printed at the end changes only when the bytes do. Bases (each a few variants: payload, protocol, member names):

  tar_in_npy       an .npy whose 512-byte header block is also a valid tar header (checksum in
                   a Python comment of the header dict) and whose uint8 data is a torch legacy
                   tar ('storages', 'tensors', 'pickle'): torch.load takes the tar path
  tar_in_gguf      a GGUF whose first metadata string holds block 0's tar fields and the tar
  npy_in_torchzip  a torch zip whose storage member is an object .npy (numpy.load: PK -> npz)
  text_inst        protocol 0 with INST before any MARK (pickle._Unpickler imports first)
  text_float       FLOAT 'F 1' (leading space: the C unpickler refuses, Python reads on)
  text_misc        other text-opcode spellings (I/L/S/P quirks)
  pickle_zip       a pickle followed by a torch zip (pickle.load: the pickle; torch: the zip)
  zip_in_pickle    a pickle whose BINBYTES holds a torch zip
  pickle_in_zip    a plain zip with a pickle member / a torch zip with a payload data.pkl
  onnx_lead        ONNX starting with an unknown field: BININT 'J' + pickle in field 9
  onnx_plain       ONNX with ir_version first (control)
  safetensors_*    safetensors whose data holds a pickle / a zip; GGUF/ONNX prefixes
  json_*           JSON with a BOM, UTF-16, NaN, duplicate keys, an HF index naming shards
  joblib_like      a joblib-style pickle (NumpyArrayWrapper) + payload
  ...

Every payload is harmless: `os.getcwd()` or a global of the module `ckpt_harmless`, which does
not exist. Mutations of each base: byte flips, truncations, splices with another base,
insertions, duplicated chunks.
"""
import argparse
import hashlib
import io
import json
import os
import random
import struct
import sys
import tarfile
import time
import zipfile

ZIP_DATE = (2020, 1, 1, 0, 0, 0)

# --- Payload pickles (harmless) --------------------------------------------------------------

P_GETCWD0 = b"cos\ngetcwd\n(tR."                     # protocol 0: os.getcwd()
P_HARMLESS0 = b"cckpt_harmless\npayload\n(tR."       # a module that does not exist
P_GETCWD2 = b"\x80\x02cos\ngetcwd\n)R."
_H4 = b"\x8c\x0dckpt_harmless\x94\x8c\x07payload\x94\x93\x94)R\x94."
P_HARMLESS4 = b"\x80\x04\x95" + struct.pack("<Q", len(_H4)) + _H4  # protocol 4, framed
PAYLOADS = [P_GETCWD0, P_HARMLESS0, P_GETCWD2, P_HARMLESS4]
BENIGN2 = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."   # {'a': 1}


def _global(module, name, proto=0):
    if proto >= 4:
        m, n = module.encode(), name.encode()
        return b"\x8c" + bytes([len(m)]) + m + b"\x8c" + bytes([len(n)]) + n + b"\x93"
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


# --- torch zip / legacy tar ------------------------------------------------------------------

def torch_data_pkl(storage_key="0", payload=None, proto=2):
    """A protocol-2 data.pkl: {'w': _rebuild_tensor_v2(('storage', FloatStorage, key, 'cpu',
    2), 0, (2,), (1,), False, OrderedDict())}, or the payload's pickle."""
    if payload is not None:
        return payload
    k = storage_key.encode()
    return (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01"
            b"ctorch._utils\n_rebuild_tensor_v2\nq\x02"
            b"((X\x07\x00\x00\x00storageq\x03ctorch\nFloatStorage\nq\x04X" +
            struct.pack("<I", len(k)) + k + b"q\x05X\x03\x00\x00\x00cpuq\x06K\x02tq\x07Q"
            b"K\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)Rq\x08tq\tRq\ns.")


def make_zip(members, comment=b"", compress=False):
    bio = io.BytesIO()
    with zipfile.ZipFile(bio, "w") as z:
        for name, data in members:
            zi = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            zi.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)
        z.comment = comment
    return bio.getvalue()


def torch_zip(prefix="archive", data_pkl=None, storages=None, extra=()):
    storages = storages if storages is not None else {"0": struct.pack("<2f", 1.0, 2.0)}
    members = [(prefix + "/data.pkl", data_pkl if data_pkl is not None else torch_data_pkl())]
    for k, v in storages.items():
        members.append((prefix + "/data/" + k, v))
    members.append((prefix + "/version", b"3\n"))
    members.extend(extra)
    return make_zip(members)


def make_tar(members):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 0
            ti.mode = 0o644
            ti.uname = ti.gname = ""
            t.addfile(ti, io.BytesIO(data))
    return bio.getvalue()


def torch_legacy_tar(storages_pickle):
    return make_tar([("storages", storages_pickle), ("tensors", b"\x80\x02K\x00."),
                     ("pickle", BENIGN2)])


def tar_checksum_fix(block, style="comment"):
    """Writes a valid v7 tar checksum into bytes 148..155 of the 512-byte block."""
    assert len(block) == 512
    b = bytearray(block)
    b[148:156] = b" " * 8
    s = sum(b)
    b[148:156] = b"%07o " % s if style == "space" else b"%06o\x00 " % s
    return bytes(b)


# --- npy -------------------------------------------------------------------------------------

def npy(descr, shape, data, fortran=False, version=(1, 0), header_pad=None, comment=b""):
    d = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (
        repr(descr), fortran, repr(tuple(shape)))
    h = d.encode("latin1") + comment
    pre = 8 + (2 if version[0] == 1 else 4)
    total = header_pad or ((pre + len(h) + 1 + 63) // 64 * 64)
    h = h + b" " * (total - pre - len(h) - 1) + b"\n"
    lenf = struct.pack("<H", len(h)) if version[0] == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + lenf + h + data


def tar_in_npy(payload):
    """Block 0: the .npy header (name field: magic and dict; a '#' comment from byte 98 on,
    so that the tar fields past 100 are spaces, the checksum octal digits and type '0').
    Data from 512: a torch legacy tar whose 'storages' member is the payload pickle."""
    tar = torch_legacy_tar(payload)
    d = "{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }" % len(tar)
    h = bytearray(b"\x93NUMPY\x01\x00" + struct.pack("<H", 502) + d.encode())
    h += b" " * (98 - len(h)) + b"#"
    h += b" " * (512 - len(h))
    h[156:157] = b"0"
    h[511:512] = b"\n"
    block = bytearray(h)
    block[148:156] = b" " * 8
    s = sum(block)
    block[148:156] = b"%07o " % s
    return bytes(block) + tar


def tar_in_gguf(payload):
    """GGUF v3 with one string metadata value that starts inside block 0 and holds the tar
    fields of block 0 (size 0, type '0') and then a torch legacy tar at 512."""
    tar = torch_legacy_tar(payload)
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    key = b"general.description"
    kv_head = struct.pack("<Q", len(key)) + key + struct.pack("<I", 8)
    start_len = len(head) + len(kv_head)
    string_start = start_len + 8
    assert string_start <= 100
    block = bytearray(512)
    block[100:108] = b"0000644\x00"
    block[108:116] = b"0000000\x00"
    block[116:124] = b"0000000\x00"
    block[124:136] = b"00000000000\x00"
    block[136:148] = b"00000000000\x00"
    block[156:157] = b"0"
    strlen = 512 - string_start + len(tar)
    block[0:string_start] = head + kv_head + struct.pack("<Q", strlen)
    block = tar_checksum_fix(bytes(block))
    return block + tar


def gguf_plain(text=b"hello"):
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    key = b"general.name"
    return head + struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(text)) + text


# --- ONNX ------------------------------------------------------------------------------------

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field, data):
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def onnx_model(with_initializer=True, external=None):
    """A ModelProto: ir_version 7, a graph y = Identity(w) with the float initializer w (raw
    data, or external data at `external`), opset 13. onnxruntime runs it."""
    g = b""
    if with_initializer:
        g += _ld(1, _ld(1, b"w") + _ld(2, b"y") + _ld(4, b"Identity"))  # NodeProto
    g += _ld(2, b"g")  # GraphProto.name
    if with_initializer:
        # TensorProto: dims 2 (field 1), data_type 1 FLOAT (field 2), name (field 8),
        # raw_data (field 9) or external data (data_location 14 = 1, external_data 13).
        t = _varint(1 << 3) + _varint(2) + _varint(2 << 3) + _varint(1) + _ld(8, b"w")
        if external:
            t += _ld(13, _ld(1, b"location") + _ld(2, external.encode()))
            t += _varint(14 << 3) + _varint(1)
        else:
            t += _ld(9, struct.pack("<2f", 1.0, 2.0))
        g += _ld(5, t)  # GraphProto.initializer
        tensor_type = _ld(1, _varint(1 << 3) + _varint(1))  # TypeProto.tensor_type elem FLOAT
        g += _ld(12, _ld(1, b"y") + _ld(2, tensor_type))  # GraphProto.output
    opset = _ld(1, b"") + _varint(2 << 3) + _varint(13)
    return _varint(1 << 3) + _varint(7) + _ld(7, g) + _ld(8, opset)


def onnx_lead_pickle(payload_body):
    """Field 9 (unused by ModelProto, kept as unknown) first: tag 0x4a is BININT 'J' for
    pickle.load, which eats the length byte and 3 bytes; the rest of the field is a pickle
    that POPs the int, runs the payload and STOPs. Then a normal model."""
    body = b"\x00\x00\x00" + b"0" + payload_body
    return b"\x4a" + _varint(len(body)) + body + onnx_model()


def onnx_lead_unknown(field=100, data=b"junk"):
    return _ld(field, data) + onnx_model()


# --- safetensors ------------------------------------------------------------------------------

def safetensors(tensors, metadata=None, header_pad=0, prefix_header=b""):
    hdr = {}
    off = 0
    data = b""
    for name, dtype, shape, raw in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    if metadata is not None:
        hdr["__metadata__"] = metadata
    h = prefix_header + json.dumps(hdr, separators=(",", ":")).encode() + b" " * header_pad
    return struct.pack("<Q", len(h)) + h + data


# --- Bases -----------------------------------------------------------------------------------

def bases():
    """[(name, ext, bytes)], in a fixed order."""
    out = []
    add = out.append
    for i, p in enumerate(PAYLOADS):
        add(("tar_in_npy%d" % i, "npy", tar_in_npy(p)))
        add(("tar_in_gguf%d" % i, "gguf", tar_in_gguf(p)))
        # torch zip whose storage member is an object .npy holding the payload.
        obj_npy = npy("|O", (1,), p if p.startswith(b"\x80") else b"\x80\x02" + p)
        add(("npy_in_torchzip%d" % i, "pt", torch_zip(storages={"0": obj_npy})))
        add(("npy_in_torchzip_named%d" % i, "pt",
             torch_zip(storages={"0": struct.pack("<2f", 1, 2)},
                       extra=[("archive/extra.npy", obj_npy)])))
        add(("pickle_zip%d" % i, "pt", p + torch_zip()))
        zb = torch_zip()
        add(("zip_in_pickle%d" % i, "pkl",
             b"\x80\x03B" + struct.pack("<I", len(zb)) + zb + b"0" + p[2:]
             if p.startswith(b"\x80") else
             b"\x80\x03B" + struct.pack("<I", len(zb)) + zb + b"0" + p))
        add(("payload_datapkl%d" % i, "pt", torch_zip(data_pkl=p)))
        add(("pickle_in_zip%d" % i, "zip", make_zip([("model.pkl", p), ("README", b"hi")])))
        add(("npz_object%d" % i, "npz", make_zip([("a.npy", obj_npy)])))
        add(("joblib_like%d" % i, "joblib", joblib_like(p)))
        add(("safetensors_pickle%d" % i, "safetensors",
             safetensors([("w", "U8", [len(p)], p)])))
        add(("safetensors_zip%d" % i, "safetensors",
             safetensors([("w", "U8", [len(zb)], zb)])))
        add(("legacy_tar%d" % i, "pt", torch_legacy_tar(p)))
    pl = P_GETCWD0
    # Text pickles where pickle._Unpickler (joblib) reads on and the C unpickler stops.
    add(("text_inst_nomark", "pkl", b"ios\ngetcwd\n."))
    add(("text_inst_nomark_harmless", "pkl", b"ickpt_harmless\npayload\n."))
    add(("text_inst_mark", "pkl", b"(ios\ngetcwd\n."))
    add(("text_float_space", "pkl", b"F 1\n0" + pl))
    add(("text_float_space2", "pkl", b"(F 1.5\ntR" + pl))
    add(("text_float_underscore", "pkl", b"F1_0\n0" + pl))
    add(("text_int_space", "pkl", b"I 1\n0" + pl))
    add(("text_int_plus", "pkl", b"I+1\n0" + pl))
    add(("text_int_underscore", "pkl", b"I1_000\n0" + pl))
    add(("text_long_suffix", "pkl", b"L1\n0" + pl))
    add(("text_long_space", "pkl", b"L 1L\n0" + pl))
    add(("text_string_dq", "pkl", b'S"x"\n0' + pl))
    add(("text_string_noquote", "pkl", b"Sx\n0" + pl))
    add(("text_unicode_esc", "pkl", b"V\\u0041\n0" + pl))
    add(("text_persid", "pkl", b"Pabc\n0" + pl))
    add(("text_get_space", "pkl", b"I1\np 0\n0g 0\n0" + pl))
    add(("text_dup_mark", "pkl", b"((I1\nl0" + pl))
    add(("text_two_pickles", "pkl", BENIGN2 + pl))
    add(("text_obj", "pkl", b"(cos\ngetcwd\no."))
    add(("text_ext", "pkl", b"\x82\x01."))
    # ONNX.
    add(("onnx_plain", "onnx", onnx_model()))
    add(("onnx_lead_pickle", "onnx", onnx_lead_pickle(b"cos\ngetcwd\n)R.")))
    add(("onnx_lead_pickle_harmless", "onnx", onnx_lead_pickle(b"cckpt_harmless\npayload\n)R.")))
    add(("onnx_lead_unknown", "onnx", onnx_lead_unknown()))
    add(("onnx_lead_producer", "onnx", _ld(2, b"ckpt") + onnx_model()))
    add(("onnx_external", "onnx", onnx_model(external="w.bin")))
    add(("onnx_external_traversal", "onnx", onnx_model(external="../../etc/hostname")))
    add(("onnx_external_abs", "onnx", onnx_model(external="/etc/hostname")))
    # GGUF plain and with a pickle string.
    add(("gguf_plain", "gguf", gguf_plain()))
    add(("gguf_pickle_value", "gguf", gguf_plain(P_GETCWD2)))
    # safetensors prefixes.
    st = safetensors([("w", "F32", [2], struct.pack("<2f", 1, 2))])
    add(("safetensors_plain", "safetensors", st))
    add(("safetensors_gguf_prefix", "safetensors", gguf_plain() + st))
    add(("safetensors_metadata", "safetensors",
         safetensors([("w", "F32", [2], struct.pack("<2f", 1, 2))], metadata={"k": "v"})))
    add(("safetensors_pad", "safetensors",
         safetensors([("w", "F32", [2], struct.pack("<2f", 1, 2))], header_pad=7)))
    add(("safetensors_bom", "safetensors", safetensors(
        [("w", "F32", [2], struct.pack("<2f", 1, 2))], prefix_header=b"\xef\xbb\xbf")))
    # JSON.
    j = b'{"weight_map": {"w": "model-00001-of-00001.bin"}, "metadata": {}}'
    add(("json_plain", "json", j))
    add(("json_bom", "json", b"\xef\xbb\xbf" + j))
    add(("json_utf16", "json", j.decode().encode("utf-16")))
    add(("json_utf16le", "json", j.decode().encode("utf-16-le")))
    add(("json_utf32", "json", j.decode().encode("utf-32")))
    add(("json_nan", "json", b'{"a": NaN, "b": Infinity}'))
    add(("json_dupkeys", "json", b'{"a": 1, "a": 2}'))
    add(("json_pickle_tail", "json", b'{"a": 1}' + P_GETCWD2))
    add(("json_index_shard", "json",
         b'{"metadata": {}, "weight_map": {"w": "../evil.bin"}}'))
    # Plain containers as controls.
    add(("torch_zip_plain", "pt", torch_zip()))
    add(("torch_zip_prefix", "pt", torch_zip(prefix="my.model-1")))
    add(("npy_f32", "npy", npy("<f4", (2,), struct.pack("<2f", 1, 2))))
    add(("npy_v2", "npy", npy("<f4", (2,), struct.pack("<2f", 1, 2), version=(2, 0))))
    add(("npy_v3_unicode", "npy", npy("<f4", (2,), struct.pack("<2f", 1, 2), version=(3, 0))))
    add(("npy_comment", "npy", npy("<f4", (2,), struct.pack("<2f", 1, 2), comment=b" # x")))
    add(("npz_plain", "npz", make_zip([("a.npy", npy("<f4", (2,), struct.pack("<2f", 1, 2)))])))
    add(("npz_deflated", "npz", make_zip([("a.npy", npy("<i8", (3,), bytes(24)))],
                                         compress=True)))
    add(("npz_pickle_member", "npz", make_zip([("a", P_GETCWD2)])))
    add(("zip_comment_pickle", "zip", make_zip([("a.txt", b"x")], comment=P_GETCWD2)))
    add(("tar_plain_pickle", "tar", make_tar([("data.pkl", P_GETCWD2)])))
    add(("hdf5_sig_pickle", "h5", b"\x89HDF\r\n\x1a\n" + P_GETCWD2))
    return out


def joblib_like(payload):
    """A joblib.dump-style stream: a NumpyArrayWrapper for a float64 array of 2, its raw
    bytes, then the payload pickle (joblib.load reads only the first)."""
    p = (b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00"
         b"\x8c\x13joblib.numpy_pickle\x94\x8c\x11NumpyArrayWrapper\x94\x93\x94)\x81\x94}\x94("
         b"\x8c\x08subclass\x94\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94"
         b"\x8c\x05shape\x94K\x02\x85\x94\x8c\x05order\x94\x8c\x01C\x94"
         b"\x8c\x05dtype\x94h\x06\x8c\x05dtype\x94\x93\x94\x8c\x02f8\x94\x89\x88\x87\x94R\x94"
         b"(K\x03\x8c\x01<\x94NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t\x94b"
         b"\x8c\nallow_mmap\x94\x88ub")
    # The frame length is not used by the unpicklers past FRAME's own check: drop the frame.
    p = b"\x80\x04" + p[11:]
    return p + struct.pack("<2d", 1.0, 2.0) + b"." + payload


# --- Mutations -------------------------------------------------------------------------------

def mutate(rng, data, others):
    kind = rng.choice(["flip", "flip", "trunc", "splice", "insert", "dup", "zero", "tail"])
    b = bytearray(data)
    if not b:
        return "empty", bytes(b)
    if kind == "flip":
        n = rng.randint(1, 4)
        for _ in range(n):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256) if rng.random() < 0.5 else b[i] ^ (1 << rng.randrange(8))
        return "flip%d" % n, bytes(b)
    if kind == "trunc":
        n = rng.randrange(len(b))
        return "trunc%d" % n, bytes(b[:n])
    if kind == "splice":
        o = rng.choice(others)
        i, j = rng.randrange(len(b) + 1), rng.randrange(len(o) + 1)
        return "splice", bytes(b[:i]) + o[j:]
    if kind == "insert":
        i = rng.randrange(len(b) + 1)
        ins = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        return "insert", bytes(b[:i]) + ins + bytes(b[i:])
    if kind == "dup":
        i = rng.randrange(len(b))
        j = min(len(b), i + rng.randint(1, 64))
        return "dup", bytes(b[:j]) + bytes(b[i:j]) + bytes(b[j:])
    if kind == "zero":
        i = rng.randrange(len(b))
        j = min(len(b), i + rng.randint(1, 16))
        b[i:j] = bytes(j - i)
        return "zero", bytes(b)
    o = rng.choice(others)
    return "tail", bytes(b) + o


def generate(seed, count, bases_only=False):
    """[(name, bytes, base, mutation)]: the bases, then mutations up to `count` files."""
    bs = bases()
    out = [("%05d_%s.%s" % (i, n, e), d, n, "") for i, (n, e, d) in enumerate(bs)]
    if bases_only:
        return out
    rng = random.Random(seed)
    others = [d for _, _, d in bs]
    i = len(out)
    while i < count:
        n, e, d = bs[(i - len(bs)) % len(bs)]
        m, data = mutate(rng, d, others)
        if rng.random() < 0.2:
            m2, data = mutate(rng, data, others)
            m = m + "+" + m2
        out.append(("%05d_%s_%s.%s" % (i, n, m, e), data, n, m))
        i += 1
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--bases-only", action="store_true")
    ap.add_argument("--index", help="also write {name: {base, mutation, sha256}} here")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    items = generate(args.seed, args.count, args.bases_only)
    os.makedirs(args.out, exist_ok=True)
    index = {}
    for name, data, base, m in items:
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
        index[name] = {"base": base, "mutation": m, "sha256": hashlib.sha256(data).hexdigest()}
    if args.index:
        with open(args.index, "w") as f:
            json.dump(index, f, indent=0, sort_keys=True)
    digest = hashlib.sha256(json.dumps(index, sort_keys=True).encode()).hexdigest()
    print("polyglots: %d files in %s, %.1fs, corpus digest %s" % (
        len(items), args.out, time.monotonic() - t0, digest[:16]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
