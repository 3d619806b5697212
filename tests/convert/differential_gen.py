#!/usr/bin/python3
"""Generated checkpoints for the conversion differential (differential_test.py).

    differential_gen.py --out DIR [--seed 39] [--count 5000]

Stdlib only, and deterministic: the same seed and count give the same bytes on every Python 3
(the Debian 13 recording and the Debian 12 CI run compare file digests). The pickles are
written by a small pickle writer of our own rather than by torch.save, because the shapes that
make a conversion go wrong are ones torch.save never writes but torch.load reads all the same:
dict keys that Python merges (True, 1 and 1.0; -0.0, 0 and False; 'w' and TorchVersion('w')),
OrderedDicts built from lists of lists, Counters and defaultdicts holding tensors, keys longer
than 64 KiB, legacy storage views whose view key is reused, tensor state set through
setattr ('real' writes every element), 'meta' storage locations, containers shared by two
paths or holding themselves, containers changed after a call copied them, .npz members
named like another member plus '.npy'. Around them: nested dicts, lists, tuples and
OrderedDicts, views, shared storages, tied weights, every dtype torch.save writes (bfloat16,
float16, complex, bool, quantized), legacy and zip formats, pickle protocols 2 and 4.

Each file is NNNNN.pt (torch zip or legacy) or NNNNN.npz; files.json lists them with the tricks
each holds.
"""
import argparse
import hashlib
import io
import json
import os
import random
import struct
import sys
import zipfile

SEED = 39
COUNT = 5000

# ---- a pickle writer ---------------------------------------------------------------------------


class Glob:
    def __init__(self, module, name):
        self.module, self.name = module, name


class Obj:
    """The result of REDUCE (or NEWOBJ) of `callee` with `args`, then SETITEMS and BUILD."""

    def __init__(self, callee, args, op="reduce", setitems=None, build=None):
        self.callee, self.args, self.op = callee, tuple(args), op
        self.setitems = setitems or []
        self.build = build


class Pid:
    """persistent_load(pid): written as the pid, then BINPERSID (never memoized)."""

    def __init__(self, pid):
        self.pid = pid


class L:
    def __init__(self, items=()):
        self.items = list(items)


class T:
    def __init__(self, items=()):
        self.items = list(items)


class D:
    """A dict written as EMPTY_DICT + SETITEMS of `items` in order (repeated keys kept)."""

    def __init__(self, items=()):
        self.items = list(items)


class F:
    """A float object with an identity (memoized: the same object wherever it is reused)."""

    def __init__(self, value):
        self.value = value


class Bytes:
    def __init__(self, value):
        self.value = value


MARK, STOP, POP, BINPERSID, REDUCE, BUILD, NEWOBJ = b"(", b".", b"0", b"Q", b"R", b"b", b"\x81"
EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, APPENDS, SETITEMS = b"}", b"]", b")", b"e", b"u"
TUPLE, TUPLE1, TUPLE2, TUPLE3 = b"t", b"\x85", b"\x86", b"\x87"
NONE, NEWTRUE, NEWFALSE = b"N", b"\x88", b"\x89"


class Writer:
    def __init__(self, proto):
        self.proto = proto
        self.b = bytearray()
        self.memo = {}
        self.keep = []  # objects memoized by id() stay alive

    def dump(self, root, late=()):
        self.b += b"\x80" + bytes([self.proto])
        self.save(root)
        # Mutations after everything was built: a list or dict changed after a call used it.
        for kind, target, items in late:
            if id(target) not in self.memo:
                continue  # built but never written
            self.get(target)
            self.b += MARK
            for x in items:
                if kind == "setitems":
                    self.save(x[0])
                    self.save(x[1])
                else:
                    self.save(x)
            self.b += SETITEMS if kind == "setitems" else APPENDS
            self.b += POP
        self.b += STOP
        return bytes(self.b)

    def get(self, v):
        i = self.memo[id(v)]
        self.b += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)

    def put(self, v):
        i = len(self.memo)
        self.memo[id(v)] = i
        self.keep.append(v)
        self.b += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)

    def save_str(self, s):
        raw = s.encode("utf-8", "surrogatepass")
        if self.proto >= 4 and len(raw) < 256:
            self.b += b"\x8c" + bytes([len(raw)]) + raw
        else:
            self.b += b"X" + struct.pack("<I", len(raw)) + raw

    def save_int(self, i):
        if 0 <= i < 256:
            self.b += b"K" + bytes([i])
        elif 0 <= i < 65536:
            self.b += b"M" + struct.pack("<H", i)
        elif -(2 ** 31) <= i < 2 ** 31:
            self.b += b"J" + struct.pack("<i", i)
        else:
            n = (i.bit_length() + 8) // 8
            data = i.to_bytes(n, "little", signed=True)
            while len(data) > 1 and ((data[-1] == 0 and data[-2] < 0x80) or
                                     (data[-1] == 0xFF and data[-2] >= 0x80)):
                data = data[:-1]
            self.b += b"\x8a" + bytes([len(data)]) + data

    def save(self, v):
        if id(v) in self.memo:
            return self.get(v)
        if v is None:
            self.b += NONE
        elif v is True:
            self.b += NEWTRUE
        elif v is False:
            self.b += NEWFALSE
        elif isinstance(v, int):
            self.save_int(v)
        elif isinstance(v, float):
            self.b += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            self.save_str(v)
        elif isinstance(v, F):
            self.b += b"G" + struct.pack(">d", v.value)
            self.put(v)
        elif isinstance(v, Bytes):
            assert self.proto >= 3
            n = len(v.value)
            self.b += (b"C" + bytes([n]) if n < 256 else b"B" + struct.pack("<I", n)) + v.value
        elif isinstance(v, T):
            if not v.items:
                self.b += EMPTY_TUPLE
                return
            if len(v.items) > 3:
                self.b += MARK
            for x in v.items:
                self.save(x)
            if id(v) in self.memo:  # a tuple that holds itself: what pickle does
                self.b += POP * len(v.items) + (POP if len(v.items) > 3 else b"")
                return self.get(v)
            self.b += {1: TUPLE1, 2: TUPLE2, 3: TUPLE3}.get(len(v.items), TUPLE)
            self.put(v)
        elif isinstance(v, L):
            self.b += EMPTY_LIST
            self.put(v)
            if v.items:
                self.b += MARK
                for x in v.items:
                    self.save(x)
                self.b += APPENDS
        elif isinstance(v, D):
            self.b += EMPTY_DICT
            self.put(v)
            if v.items:
                self.b += MARK
                for k, x in v.items:
                    self.save(k)
                    self.save(x)
                self.b += SETITEMS
        elif isinstance(v, Glob):
            if self.proto >= 4:
                self.save_str(v.module)
                self.save_str(v.name)
                self.b += b"\x93"
            else:
                self.b += b"c" + v.module.encode() + b"\n" + v.name.encode() + b"\n"
            self.put(v)
        elif isinstance(v, Obj):
            self.save(v.callee)
            self.save(T(v.args))
            self.b += REDUCE if v.op == "reduce" else NEWOBJ
            self.put(v)
            if v.setitems:
                self.b += MARK
                for k, x in v.setitems:
                    self.save(k)
                    self.save(x)
                self.b += SETITEMS
            if v.build is not None:
                self.save(v.build)
                self.b += BUILD
        elif isinstance(v, Pid):
            self.save(v.pid)
            self.b += BINPERSID
        else:
            raise TypeError(type(v))


# ---- torch objects -----------------------------------------------------------------------------

# dtype -> (storage class, element size, struct code of one element or None for raw bytes)
DTYPES = {
    "float32": ("FloatStorage", 4), "float64": ("DoubleStorage", 8),
    "float16": ("HalfStorage", 2), "bfloat16": ("BFloat16Storage", 2),
    "int64": ("LongStorage", 8), "int32": ("IntStorage", 4), "int16": ("ShortStorage", 2),
    "int8": ("CharStorage", 1), "uint8": ("ByteStorage", 1), "bool": ("BoolStorage", 1),
    "complex64": ("ComplexFloatStorage", 8), "complex128": ("ComplexDoubleStorage", 16),
    "qint8": ("QInt8Storage", 1), "quint8": ("QUInt8Storage", 1), "qint32": ("QInt32Storage", 4),
}
# Dtypes only _rebuild_tensor_v3 carries (an UntypedStorage plus the dtype): torch 2.x only.
V3_DTYPES = {"uint16": 2, "uint32": 4, "uint64": 8, "float8_e5m2": 1, "float8_e4m3fn": 1}
PLAIN = ["float32"] * 6 + ["float64", "float16", "float16", "bfloat16", "bfloat16", "int64",
                           "int32", "int16", "int8", "uint8", "bool", "complex64", "complex128"]


def element_bytes(rng, dtype, n):
    """n elements of finite, exactly representable values (no NaN whose payload a copy could
    change)."""
    if dtype == "bool":
        return bytes(rng.randrange(2) for _ in range(n))
    if dtype in ("float32", "float64", "complex64", "complex128"):
        code, count = {"float32": ("f", 1), "float64": ("d", 1), "complex64": ("f", 2),
                       "complex128": ("d", 2)}[dtype]
        vals = [rng.randrange(-4096, 4096) / 64 for _ in range(n * count)]
        return struct.pack("<%d%s" % (n * count, code), *vals)
    if dtype == "float16":
        return struct.pack("<%de" % n, *[rng.randrange(-2048, 2048) / 16 for _ in range(n)])
    if dtype == "bfloat16":
        words = [struct.unpack("<I", struct.pack("<f", rng.randrange(-2048, 2048) / 16))[0] >> 16
                 for _ in range(n)]
        return struct.pack("<%dH" % n, *words)
    if dtype in ("float8_e5m2", "float8_e4m3fn"):
        return bytes(rng.choice([0x00, 0x38, 0x3c, 0x40, 0xb8, 0xbc, 0x44]) for _ in range(n))
    size = DTYPES[dtype][1] if dtype in DTYPES else V3_DTYPES[dtype]
    return bytes(rng.getrandbits(8) for _ in range(n * size))


class Storage:
    def __init__(self, key, dtype, numel, data, location="cpu", untyped=False):
        self.key, self.dtype, self.numel, self.data = key, dtype, numel, data
        self.location, self.untyped = location, untyped


def OD(setitems=None):
    return Obj(Glob("collections", "OrderedDict"), (), setitems=setitems)


class Case:
    """One generated checkpoint: a root value, its storages, the mutations written last."""

    def __init__(self, rng, fmt, proto):
        self.rng, self.fmt, self.proto = rng, fmt, proto
        self.storages = []
        self.late = []
        self.tensors = []  # tensor objects made so far (tied weights reuse them)
        self.views = []  # legacy view keys made so far: (key, storage)
        self.tricks = set()

    def trick(self, name, p):
        if self.rng.random() < p:
            self.tricks.add(name)
            return True
        return False

    # -- storages and tensors --

    def storage(self, dtype, numel, untyped=False):
        rng = self.rng
        if self.fmt == "legacy":
            key = str(rng.randrange(10 ** 8, 10 ** 9))
            while any(s.key == key for s in self.storages):
                key = str(rng.randrange(10 ** 8, 10 ** 9))
        else:
            key = str(len(self.storages))
        location = "cpu"
        if rng.random() < 0.05:
            location = "cuda:0"
        if self.trick("meta_location", 0.003):
            location = "meta"
        n = numel * (V3_DTYPES.get(dtype, 1) if untyped else 1)
        data = element_bytes(rng, dtype, numel)
        s = Storage(key, dtype, n, data, location, untyped)
        self.storages.append(s)
        return s

    def pid(self, s, view=None):
        cls = "UntypedStorage" if s.untyped else DTYPES[s.dtype][0]
        items = ["storage", Glob("torch", cls), s.key, s.location, s.numel]
        if self.fmt == "legacy":
            items.append(view)
        return Pid(T(items))

    def geometry(self, numel):
        """(offset, shape, stride) of a view inside numel elements."""
        rng = self.rng
        ndim = rng.choice([0, 1, 1, 2, 2, 2, 3, 4])
        if numel == 0:
            return 0, [0] * max(ndim, 1), [1] * max(ndim, 1)
        for _ in range(20):
            shape = [rng.randrange(1, 5) for _ in range(ndim)]
            if rng.random() < 0.05 and ndim:
                shape[rng.randrange(ndim)] = 0
            stride, acc = [], 1
            for d in reversed(shape):
                stride.insert(0, acc)
                acc *= max(d, 1)
            if rng.random() < 0.3 and ndim >= 2:  # a transposed or strided view
                i, j = rng.sample(range(ndim), 2)
                shape[i], shape[j] = shape[j], shape[i]
                stride[i], stride[j] = stride[j], stride[i]
            if rng.random() < 0.1 and ndim:
                stride[rng.randrange(ndim)] *= 2
            if rng.random() < 0.05 and ndim:
                stride[rng.randrange(ndim)] = 0  # expanded
            extent = 1 + sum((d - 1) * s for d, s in zip(shape, stride)) if 0 not in shape else 0
            if extent <= numel:
                offset = rng.randrange(numel - extent + 1) if rng.random() < 0.4 else 0
                return offset, shape, stride
        return 0, [numel], [1]

    def plain_tensor(self, dtype=None, storage=None):
        """A _rebuild_tensor_v2 (or v1, v3) call."""
        rng = self.rng
        if dtype is None and self.fmt == "zip" and rng.random() < 0.04:
            dtype = rng.choice(sorted(V3_DTYPES))
            s = self.storage(dtype, rng.randrange(1, 24), untyped=True)
            n = s.numel // V3_DTYPES[dtype]
            off, shape, stride = self.geometry(n)
            self.tricks.add("v3_" + dtype)
            return Obj(Glob("torch._utils", "_rebuild_tensor_v3"),
                       (self.pid(s), off, T(shape), T(stride), False, OD(), Glob("torch", dtype)))
        dtype = dtype or rng.choice(PLAIN)
        shared = [x for x in self.storages if x.dtype == dtype and not x.untyped]
        if storage is None and shared and rng.random() < 0.3:
            storage = rng.choice(shared)
            self.tricks.add("shared_storage")
        s = storage or self.storage(dtype, rng.randrange(0, 40) if rng.random() < 0.97 else 0)
        view = None
        numel = s.numel
        if self.fmt == "legacy" and rng.random() < 0.35 and s.numel > 0:
            view, numel = self.legacy_view(s)
        off, shape, stride = self.geometry(numel)
        sizes = T(shape)
        strides = T(stride)
        if self.trick("size_list_appended_late", 0.004) and shape:
            sizes, strides = L(shape), L(stride)
            self.late.append(("appends", sizes, [1]))
            self.late.append(("appends", strides, [1]))
        rg = dtype.startswith("float") and rng.random() < 0.1
        if rng.random() < 0.03:
            return Obj(Glob("torch._utils", "_rebuild_tensor"), (self.pid(s, view), off, sizes, strides))
        return Obj(Glob("torch._utils", "_rebuild_tensor_v2"),
                   (self.pid(s, view), off, sizes, strides, rg, OD()))

    def legacy_view(self, s):
        """(view_metadata, view numel): a view of s; sometimes a view key used before, which
        torch's legacy loader answers from its cache whatever offset and size follow it."""
        rng = self.rng
        same = [v for v in self.views if v[1].dtype == s.dtype]
        if same and rng.random() < 0.5:
            key, prev, prev_off, prev_size = rng.choice(same)
            if prev is not s:
                self.tricks.add("legacy_view_key_reused_across_storages")
            off = rng.randrange(s.numel)
            size = rng.randrange(1, s.numel - off + 1)
            if (off, size) != (prev_off, prev_size):
                self.tricks.add("legacy_view_key_reused")
            return T((key, off, size)), size
        if self.trick("legacy_view_key_is_root_key", 0.03):
            key = s.key
        else:
            key = str(rng.randrange(10 ** 9, 10 ** 10))
        off = rng.randrange(s.numel)
        size = rng.randrange(1, s.numel - off + 1)
        self.views.append((key, s, off, size))
        if key == s.key:
            return T((key, off, size)), s.numel
        return T((key, off, size)), size

    def quantized_tensor(self):
        rng = self.rng
        dtype = rng.choice(["qint8", "quint8", "qint32"])
        s = self.storage(dtype, rng.randrange(1, 24))
        off, shape, stride = self.geometry(s.numel)
        if shape and 0 not in shape and rng.random() < 0.4:
            axis = rng.randrange(len(shape))
            c = shape[axis]
            scales = self.vector(self.storage_with("float64", [rng.randrange(1, 64) / 64
                                                               for _ in range(c)]))
            zps = self.vector(self.storage_with("int64", [rng.randrange(0, 4) for _ in range(c)]))
            params = T((Glob("torch", "per_channel_affine"), scales, zps, axis))
            self.tricks.add("quantized_per_channel")
        else:
            params = T((Glob("torch", "per_tensor_affine"), rng.randrange(1, 256) / 128,
                        rng.randrange(0, 8)))
            self.tricks.add("quantized_per_tensor")
        return Obj(Glob("torch._utils", "_rebuild_qtensor"),
                   (self.pid(s), off, T(shape), T(stride), params, False, OD()))

    def vector(self, s):
        """The whole of storage s as a 1-d tensor."""
        return Obj(Glob("torch._utils", "_rebuild_tensor_v2"),
                   (self.pid(s), 0, T([s.numel]), T([1]), False, OD()))

    def storage_with(self, dtype, values):
        code = {"float64": "d", "int64": "q"}[dtype]
        data = struct.pack("<%d%s" % (len(values), code), *values)
        key = str(len(self.storages)) if self.fmt != "legacy" else str(
            self.rng.randrange(10 ** 8, 10 ** 9))
        s = Storage(key, dtype, len(values), data)
        self.storages.append(s)
        return s

    def state(self):
        """A Python attribute state for setattr: inert names, or a data setter."""
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            return D([])
        if r < 0.45:
            return None
        names = ["foo", "_is_hf_initialized", "tensor_model_parallel", "partition_dim"]
        items = [(rng.choice(names), rng.choice([True, 1, 2.5, "x", None]))]
        if self.trick("state_data_setter", 0.35):
            items.append((rng.choice(["real", "requires_grad", "grad", "data", "imag", "T"]),
                          rng.choice([1.0, 0, True, None])))
        if rng.random() < 0.2:
            return T((D(items), None if rng.random() < 0.5 else D([("slot_x", 1)])))
        return D(items)

    def tensor(self):
        rng = self.rng
        if self.tensors and self.trick("tied_object", 0.08):
            return rng.choice(self.tensors)
        r = rng.random()
        if r < 0.04:
            t = self.quantized_tensor()
        elif r < 0.10:
            t = Obj(Glob("torch._utils", "_rebuild_parameter"),
                    (self.plain_tensor(), rng.random() < 0.5, OD()))
            self.tricks.add("parameter")
        elif r < 0.13:
            t = Obj(Glob("torch._utils", "_rebuild_parameter_with_state"),
                    (self.plain_tensor(), False, OD(), self.state()))
            self.tricks.add("parameter_with_state")
        elif r < 0.16:
            inner = self.plain_tensor()
            if inner.callee.name != "_rebuild_tensor_v2":
                inner = self.plain_tensor("float32")
            new_type = rng.choice([Glob("torch", "Tensor"), Glob("torch.nn.parameter", "Parameter")])
            t = Obj(Glob("torch._tensor", "_rebuild_from_type_v2"),
                    (inner.callee, new_type, T(inner.args), self.state()))
            self.tricks.add("from_type_v2")
        elif r < 0.17 and self.proto == 2:
            t = Obj(Glob("torch.nn.parameter", "Parameter"), (self.plain_tensor("float32"), True),
                    op="newobj", build=T((False, None, OD())))
            self.tricks.add("parameter_newobj")
        else:
            t = self.plain_tensor()
        if self.trick("tensor_setitem_late", 0.003):
            self.late.append(("setitems", t, [(0, 1.0)]))
        self.tensors.append(t)
        return t

    # -- keys, values, containers --

    def key(self):
        rng = self.rng
        r = rng.random()
        if r < 0.55:
            return rng.choice(["weight", "bias", "layer", "w", "running_mean", "conv1", "fc",
                               "embed", "x", "a.b", "0", "1", "True", "1.0", "None", "-0.0",
                               "é", "\u2603"]) + (str(rng.randrange(4)) if rng.random() < 0.5 else "")
        if r < 0.70:
            return rng.choice([0, 1, 2, -1, 7, 255, 256, 65536, -(2 ** 31), 2 ** 31, 2 ** 63 - 1,
                               2 ** 63, -(2 ** 63) - 1, 2 ** 100, 10 ** 30])
        if r < 0.76:
            return rng.choice([True, False])
        if r < 0.90:
            self.tricks.add("float_key")
            return rng.choice([0.0, -0.0, 1.0, 0.5, 2.0, 1e16, 1e15, 1e-4, 1e-5, 123456789.125,
                               float("inf"), float("-inf"), 1 / 3, 2.5e-300, 1.7976931348623157e308,
                               9007199254740993.0, 2.0 ** 64, 2.0 ** 127, 2.0 ** 130, 0.1 + 0.2,
                               struct.unpack("<d", struct.pack("<Q", rng.getrandbits(62)))[0],
                               float(rng.randrange(-1000, 1000))])
        if r < 0.93:
            self.tricks.add("nan_key")
            return F(float("nan"))
        if r < 0.95:
            return None
        if r < 0.98:
            return self.torch_version(rng.choice(["w", "weight", "1.13.1", "2.6.0", "0"]))
        if self.proto >= 3:
            self.tricks.add("bytes_key")
            return Bytes(rng.choice([b"w", b"\x00\xff", b"it's"]))
        return "plain"

    def torch_version(self, s):
        self.tricks.add("torch_version_key")
        tv = Glob("torch.torch_version", "TorchVersion")
        form = self.rng.choice(["reduce", "newobj", "reconstructor"])
        if form == "reduce":
            return Obj(tv, (s,))
        if form == "newobj" and self.proto >= 2:
            return Obj(tv, (s,), op="newobj")
        return Obj(Glob("copyreg", "_reconstructor"), (tv, Glob("builtins", "str"), s))

    def twin(self, k):
        """A key Python finds equal to k (hash and ==) but of another type or object."""
        rng = self.rng
        if isinstance(k, bool):
            return rng.choice([int(k), float(k)] + ([-0.0] if not k else []))
        if isinstance(k, int):
            c = [float(k)] if float(k) == k else []
            if k in (0, 1):
                c += [bool(k)]
            if k == 0:
                c.append(-0.0)
            return rng.choice(c) if c else k
        if isinstance(k, float):
            if k != k or k in (float("inf"), float("-inf")) or k != int(k):
                return k
            return rng.choice([int(k)] + ([bool(k)] if k in (0.0, 1.0) else []))
        if isinstance(k, str):
            return self.torch_version(k)
        if isinstance(k, Obj):  # a TorchVersion: its str
            return k.args[-1]
        if isinstance(k, F):
            return k  # the same NaN object: identical, so merged
        return k

    def scalar(self):
        rng = self.rng
        return rng.choice([1, 0.5, "text", None, True, T((1, 2)), L([1, 2]), D([]),
                           Obj(Glob("torch", "Size"), (T((2, 3)),))])

    def dict_items(self, depth, n):
        rng = self.rng
        items = []
        for _ in range(n):
            k = self.key()
            if items and self.trick("key_merge", 0.25):
                k = self.twin(rng.choice(items)[0])
            elif items and self.trick("key_repeat", 0.05):
                k = rng.choice(items)[0]
            items.append((k, self.value(depth + 1)))
        if self.trick("long_key", 0.002):
            prefix = "k" * 65536
            items.append((prefix + "a", self.tensor()))
            items.append((prefix + rng.choice(["b", "a"]), self.tensor()))
        return items

    def container(self, depth):
        rng = self.rng
        n = rng.randrange(0, 5)
        r = rng.random()
        if r < 0.40:
            return D(self.dict_items(depth, n))
        if r < 0.55:
            items = self.dict_items(depth, n)
            form = rng.choice(["setitems", "setitems", "list_of_tuples", "list_of_lists",
                               "tuple_of_pairs"])
            self.tricks.add("ordered_dict_" + form)
            if form == "setitems":
                return OD(items)
            pairs = [(T if form != "list_of_lists" else L)((k, v)) for k, v in items]
            arg = L(pairs) if form != "tuple_of_pairs" else T(pairs)
            if form != "tuple_of_pairs" and self.trick("ordered_dict_list_appended_late", 0.05):
                self.late.append(("appends", arg, [T((self.key(), self.tensor()))]))
            return Obj(Glob("collections", "OrderedDict"), (arg,) if pairs or rng.random() < 0.5 else ())
        if r < 0.62:
            self.tricks.add("counter")
            d = D(self.dict_items(depth, n))
            if self.trick("counter_dict_set_late", 0.05):
                self.late.append(("setitems", d, [(self.key(), self.tensor())]))
            return Obj(Glob("collections", "Counter"), (d,) if d.items or rng.random() < 0.5 else ())
        if r < 0.68:
            self.tricks.add("defaultdict")
            return Obj(Glob("collections", "defaultdict"),
                       (rng.choice([Glob("builtins", "dict"), Glob("builtins", "list"), None]),),
                       setitems=self.dict_items(depth, n))
        if r < 0.85:
            return L([self.value(depth + 1) for _ in range(n)])
        return T([self.value(depth + 1) for _ in range(n)])

    def value(self, depth):
        rng = self.rng
        r = rng.random()
        if r < 0.55:
            return self.tensor()
        if r < 0.80 and depth < 4:
            c = self.container(depth)
            self.containers.append(c)
            return c
        if r < 0.84 and self.containers and self.trick("shared_container", 0.5):
            return rng.choice(self.containers)
        return self.scalar()

    def root(self):
        rng = self.rng
        self.containers = []
        r = rng.random()
        if r < 0.05:
            root = self.tensor()
        elif r < 0.75:
            root = D(self.dict_items(0, rng.randrange(1, 9)))
        elif r < 0.88:
            root = OD(self.dict_items(0, rng.randrange(1, 9)))
        elif r < 0.94:
            root = L([self.value(1) for _ in range(rng.randrange(1, 6))])
        else:
            root = T([self.value(1) for _ in range(rng.randrange(1, 6))])
        lists = [c for c in self.containers if isinstance(c, (L, D))]
        if lists and self.trick("cycle", 0.01):
            c = rng.choice(lists)
            self.late.append(("appends", c, [c]) if isinstance(c, L) else
                             ("setitems", c, [("self", c)]))
        return root


def write_zip(case, data_pkl):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        def put(name, data):
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
        put("archive/data.pkl", data_pkl)
        for s in case.storages:
            put("archive/data/" + s.key, s.data)
        put("archive/version", b"3\n")
    return buf.getvalue()


def write_legacy(case, obj_pkl):
    out = bytearray()
    for v in (0x1950a86a20f9469cfc6c, 1001,
              D([("protocol_version", 1001), ("little_endian", True),
                 ("type_sizes", D([("short", 2), ("int", 4), ("long", 4)]))])):
        out += Writer(2).dump(v)
    out += obj_pkl
    keys = sorted(s.key for s in case.storages)
    out += Writer(2).dump(L(keys))
    by_key = {s.key: s for s in case.storages}
    for k in keys:
        s = by_key[k]
        out += struct.pack("<q", s.numel) + s.data
    return bytes(out)


def npy(rng, dtype, shape):
    code = {"float32": "<f4", "int64": "<i8", "float64": "<f8", "uint8": "|u1"}[dtype]
    n = 1
    for d in shape:
        n *= d
    data = element_bytes(rng, dtype, n)
    shape_text = "(%s)" % (", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (code, shape_text)
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def make_npz(rng):
    """An .npz, sometimes with a member named like another one plus '.npy': numpy's NpzFile
    returns the member of the exact name first."""
    tricks = set()
    names = [rng.choice(["a", "b", "weight", "x.y"]) + str(i) for i in range(rng.randrange(1, 4))]
    members = [n + ".npy" for n in names]
    if rng.random() < 0.5:
        m = rng.choice(members)
        members.append(m + ".npy")
        tricks.add("npz_exact_name_first")
    rng.shuffle(members)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for m in members:
            shape = [rng.randrange(1, 4) for _ in range(rng.randrange(1, 3))]
            data = npy(rng, rng.choice(["float32", "int64", "float64", "uint8"]), shape)
            z.writestr(zipfile.ZipInfo(m, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue(), tricks


def make(seed, index):
    """(file name, bytes, sorted tricks) of generated case `index`."""
    rng = random.Random("%d/%d" % (seed, index))
    if rng.random() < 0.03:
        data, tricks = make_npz(rng)
        return "%05d.npz" % index, data, sorted(tricks)
    fmt = "legacy" if rng.random() < 0.3 else "zip"
    proto = 2 if rng.random() < 0.85 else 4
    case = Case(rng, fmt, proto)
    root = case.root()
    pkl = Writer(proto).dump(root, case.late)
    data = write_legacy(case, pkl) if fmt == "legacy" else write_zip(case, pkl)
    case.tricks.add(fmt)
    return "%05d.pt" % index, data, sorted(case.tricks)


def generate(out, seed=SEED, count=COUNT):
    """Writes the files and files.json into `out`; returns {name: {"sha256", "tricks"}}."""
    os.makedirs(out, exist_ok=True)
    files = {}
    for i in range(count):
        name, data, tricks = make(seed, i)
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "tricks": tricks}
    with open(os.path.join(out, "files.json"), "w") as f:
        json.dump({"seed": seed, "count": count, "files": files}, f, indent=0, sort_keys=True)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--count", type=int, default=COUNT)
    a = ap.parse_args()
    files = generate(a.out, a.seed, a.count)
    counts = {}
    for f in files.values():
        for t in f["tricks"]:
            counts[t] = counts.get(t, 0) + 1
    for t in sorted(counts):
        print("%6d %s" % (counts[t], t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
