#!/usr/bin/python3
"""The loader matrix: every real loader on every file, each in a child process that lets
nothing of the file's choosing run. The real loaders are the oracle for ckptscan's readings.

    loader_matrix.py [--loaders L1,L2,...] [--timeout S] [--memory MiB] [--jobs N]
                     [--root DIR] [--out FILE.jsonl] PATH...
    loader_matrix.py --list-loaders

PATH may be files or folders (walked, sorted). Output: JSON lines; the first line is
{"meta": {...}} (Python, library versions, loaders, settings), then one record per
(file, loader), sorted by file then loader order, so two runs diff line by line:

    {"file": REL, "sha256": HEX, "loader": NAME,
     "outcome": "opened" | "refused" | "blocked" | "timeout" | "hang" | "crash",
     "error": "ExceptionType: short message" | null,
     "blocked": "module.name" | "open:/path" | "exec" | ... | null,
     "globals": [[module, name, "allowed" | "blocked" | "audit-allowed"], ...],
     "arrays": [{"key", "kind", "dtype", "shape", "sha256"} ...],
     "events": ["open:r:REL", "import:MOD", ...]}

`globals` is every global the loader asked for (find_class, both unpicklers, every subclass a
loader makes, torch's weights_only allowlist look-ups), in order, raw as the unpickler passed
it. A global outside the small data allowlist (ALLOWED below) is recorded and the load is
stopped right there with the `Blocked` exception (a BaseException, so that a loader's
`except Exception` cannot swallow it; if a loader swallows it anyway the record still says
"blocked"). A `sys.addaudithook` backs this up: a `pickle.find_class` event that did not pass
through the recording hooks, `exec`/`compile` of anything but module code, process, socket,
ctypes and file-system events, writes anywhere but the child's scratch folder, reads outside
the file's own folder and the installed libraries, are blocked the same way.

`arrays` describes what a load returned: every tensor / array / storage reachable through
dicts, lists, tuples and NpzFile members, with its key path (`.name` for string keys, `[i]`
for indexes), dtype (the library's own name), shape and the sha256 of its raw bytes in C order.

The children: one per loader (per shard with --jobs), fed paths over a pipe; results come back
on a separate pipe. The per-file timeout is a CPU-time alarm inside the child; a child that does not
answer by timeout + grace is killed ("hang"), one that dies ("crash", with the signal) is
restarted for the remaining files.
"""
import argparse
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# The loaders in their fixed order. Each is present when its library imports in the child.
LOADERS = ["pickle", "pickle_py", "joblib", "numpy", "torch", "torch_wo", "torch_mmap",
           "torch_mmap_wo", "safetensors", "onnx", "onnxruntime", "h5py", "tables", "json"]

# ---------------------------------------------------------------------------------------------
# The data allowlist: globals whose use builds data only. Anything else is blocked.
# (module, name) exact, checked on the raw name and on its fix_imports mapping.
_TORCH_REBUILD = ["_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
                  "_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor",
                  "_rebuild_sparse_tensor", "_rebuild_sparse_csr_tensor",
                  "_rebuild_device_tensor_from_numpy", "_rebuild_meta_tensor_no_storage",
                  "_rebuild_nested_tensor", "_rebuild_xla_tensor", "_rebuild_mps_tensor"]
_TORCH_STORAGES = ["DoubleStorage", "FloatStorage", "HalfStorage", "BFloat16Storage",
                   "LongStorage", "IntStorage", "ShortStorage", "CharStorage", "ByteStorage",
                   "BoolStorage", "ComplexFloatStorage", "ComplexDoubleStorage",
                   "QInt8Storage", "QUInt8Storage", "QInt32Storage", "QUInt4x2Storage",
                   "QUInt2x4Storage", "UntypedStorage", "TypedStorage"]
_TORCH_DTYPES = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                 "uint8", "bool", "complex32", "complex64", "complex128", "qint8", "quint8",
                 "qint32", "quint4x2", "quint2x4", "float8_e4m3fn", "float8_e5m2",
                 "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32", "uint64", "bits8",
                 "bits16", "bits1x8", "bits2x4", "bits4x2", "half", "float", "double", "long",
                 "int", "short", "cfloat", "cdouble", "chalf"]
ALLOWED = set()
for _n in _TORCH_REBUILD:
    ALLOWED.add(("torch._utils", _n))
for _n in _TORCH_STORAGES:
    ALLOWED.add(("torch", _n))
    ALLOWED.add(("torch.storage", _n))
for _n in _TORCH_DTYPES:
    ALLOWED.add(("torch", _n))
ALLOWED |= {
    ("torch", "Size"), ("torch", "device"), ("torch", "Tensor"), ("torch", "strided"),
    ("torch", "sparse_coo"), ("torch", "sparse_csr"), ("torch", "per_tensor_affine"),
    ("torch", "per_channel_affine"), ("torch", "per_channel_affine_float_qparams"),
    ("torch", "contiguous_format"), ("torch", "channels_last"), ("torch", "preserve_format"),
    ("torch._tensor", "_rebuild_from_type_v2"), ("torch._utils", "_set_obj_state"),
    ("torch.nn.parameter", "Parameter"),
    # The legacy tar format's tensor types (`tensors` member): data.
    ("torch", "FloatTensor"), ("torch", "DoubleTensor"), ("torch", "HalfTensor"),
    ("torch", "BFloat16Tensor"), ("torch", "LongTensor"), ("torch", "IntTensor"),
    ("torch", "ShortTensor"), ("torch", "CharTensor"), ("torch", "ByteTensor"),
    ("torch", "BoolTensor"), ("torch.serialization", "_get_layout"),
    ("torch.torch_version", "TorchVersion"),
    ("collections", "OrderedDict"), ("collections", "defaultdict"), ("collections", "deque"),
    ("collections", "Counter"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "list"), ("builtins", "dict"),
    ("builtins", "tuple"), ("builtins", "bytearray"), ("builtins", "bytes"),
    ("builtins", "complex"), ("builtins", "slice"), ("builtins", "object"), ("builtins", "int"),
    ("builtins", "float"), ("builtins", "str"), ("builtins", "bool"), ("builtins", "range"),
    ("copyreg", "_reconstructor"), ("_codecs", "encode"),
    ("datetime", "datetime"), ("datetime", "date"), ("datetime", "time"),
    ("datetime", "timedelta"), ("datetime", "timezone"), ("decimal", "Decimal"),
    ("fractions", "Fraction"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy", "bool_"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy.ma.core", "_mareconstruct"), ("numpy.ma.core", "MaskedArray"),
    ("joblib.numpy_pickle", "NumpyArrayWrapper"),
    ("joblib.numpy_pickle_compat", "NDArrayWrapper"),
    ("joblib.numpy_pickle_compat", "ZNDArrayWrapper"),
    ("sklearn.externals.joblib.numpy_pickle", "NumpyArrayWrapper"),
    ("joblib.numpy_pickle", "NDArrayWrapper"), ("joblib.numpy_pickle", "ZNDArrayWrapper"),
    ("numpy.matrixlib.defmatrix", "matrix"), ("numpy", "matrix"),
    ("torch", "per_tensor_symmetric"), ("torch", "per_channel_symmetric"),
    ("torch.tensor", "_rebuild_from_type_v2"),
    # Values that checkpoints carry beside their tensors (hyperparameters, RNG states): their
    # constructors build a value from their arguments and touch nothing else.
    ("builtins", "Ellipsis"), ("builtins", "NotImplemented"), ("argparse", "Namespace"),
    ("uuid", "UUID"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"), ("pathlib", "WindowsPath"), ("pathlib", "Path"),
    ("pathlib._local", "PosixPath"), ("pathlib._local", "PurePosixPath"),
    ("pathlib._local", "PureWindowsPath"), ("pathlib._local", "WindowsPath"),
    ("pathlib._local", "Path"),
    ("numpy.random._pickle", "__randomstate_ctor"), ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__bit_generator_ctor"), ("numpy.random", "__RandomState_ctor"),
    ("numpy.random.mtrand", "RandomState"), ("numpy.random._mt19937", "MT19937"),
    ("numpy.random._pcg64", "PCG64"), ("numpy.random._generator", "Generator"),
    ("numpy.core.records", "recarray"), ("numpy.core.records", "record"),
    ("numpy._core.records", "recarray"), ("numpy._core.records", "record"),
    ("numpy", "recarray"), ("numpy", "record"),  # the names newer numpy pickles them by
}
# Globals that are data for one loader only: PyTables 1.x files pickle their FILTERS attribute.
ALLOWED_FOR = {"tables": {("tables.filters", "Filters")}}
# numpy 2 pickles dtypes through numpy.dtypes.XDType classes.
_NP2_DTYPES = re.compile(r"^[A-Za-z0-9]+DType$")


def allowed(module, name, loader=None):
    """Is (module, name) a data global (its use builds data only)?"""
    if not isinstance(module, str) or not isinstance(name, str):
        return False
    if (module, name) in ALLOWED:
        return True
    if module == "numpy.dtypes" and _NP2_DTYPES.match(name):
        return True
    try:
        import _compat_pickle
        key = (module, name)
        if key in _compat_pickle.NAME_MAPPING:
            return tuple(_compat_pickle.NAME_MAPPING[key]) in ALLOWED
        if module in _compat_pickle.IMPORT_MAPPING:
            return (_compat_pickle.IMPORT_MAPPING[module], name) in ALLOWED
    except ImportError:
        pass
    return False


# ---------------------------------------------------------------------------------------------
# The child: everything below `child_main` runs in the child process only.

class Blocked(BaseException):
    """A global or an action outside the allowlist: the load stops here."""


class Timeout(BaseException):
    pass


class _State:
    active = False          # inside a load
    depth = 0               # inside a recording find_class
    globals = []
    blocked = None
    events = []
    target = None           # realpath of the file being loaded
    target_dir = None
    scratch = None          # the child's own temp folder (torch's legacy tar path writes there)
    lib_prefixes = ()
    loader = None


S = _State()


def _add_global(module, name, status):
    g = [_s(module), _s(name), status]
    S.globals.append(g)
    if _STREAM is not None:
        _STREAM(g)  # so that a crash or hang later still shows what was asked for


_STREAM = None


def _record_block(what):
    if S.blocked is None:
        S.blocked = what


def _guard(module, name, real):
    """Records (module, name), then resolves it (allowed) or raises Blocked."""
    if S.depth > 0 or not S.active:
        return real()
    S.depth += 1
    try:
        ok = _allowed_here(module, name)
        _add_global(module, name, "allowed" if ok else "blocked")
        if not ok:
            _record_block("%s.%s" % (_s(module), _s(name)))
            raise Blocked("blocked: %s.%s" % (_s(module), _s(name)))
        return real()
    finally:
        S.depth -= 1


def _allowed_here(module, name):
    if allowed(module, name, S.loader):
        return True
    if (module, name) in ALLOWED_FOR.get(S.loader, ()):
        return True
    # torch.load's UnpicklerWrapper answers any global whose name holds 'Storage' with a
    # StorageType built from the name alone (the module is not imported): data.
    if (S.loader or "").startswith("torch") and isinstance(name, str) and \
            name in _TORCH_STORAGES:
        return True
    return False


def _s(x):
    if isinstance(x, str):
        return x.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return repr(x)


def _install_pickle_hooks():
    import pickle
    import _pickle

    class RecordingUnpickler(_pickle.Unpickler):
        def find_class(self, module, name):
            return _guard(module, name,
                          lambda: _pickle.Unpickler.find_class(self, module, name))

        def __init_subclass__(cls, **kw):
            super().__init_subclass__(**kw)
            _wrap_subclass(cls)

    def _wrap_subclass(cls):
        inner = cls.__dict__.get("find_class")
        if inner is None or getattr(inner, "_ckpt_wrapped", False):
            return

        def find_class(self, module, name, _inner=inner):
            return _guard(module, name, lambda: _inner(self, module, name))
        find_class._ckpt_wrapped = True
        cls.find_class = find_class

    py_find_class = pickle._Unpickler.find_class

    def py_guarded(self, module, name):
        return _guard(module, name, lambda: py_find_class(self, module, name))
    py_guarded._ckpt_wrapped = True
    pickle._Unpickler.find_class = py_guarded
    pickle._Unpickler.__init_subclass__ = classmethod(
        lambda cls, **kw: _wrap_subclass(cls))
    # Subclasses that exist already and define their own find_class.
    for sub in _all_subclasses(pickle._Unpickler) + _all_subclasses(_pickle.Unpickler):
        _wrap_subclass(sub)

    def load(file, *, fix_imports=True, encoding="ASCII", errors="strict", buffers=()):
        return RecordingUnpickler(file, fix_imports=fix_imports, encoding=encoding,
                                  errors=errors, buffers=buffers).load()

    def loads(data, /, *, fix_imports=True, encoding="ASCII", errors="strict", buffers=()):
        import io
        if isinstance(data, str):
            raise TypeError("Can't load pickle from unicode string")
        return RecordingUnpickler(io.BytesIO(data), fix_imports=fix_imports,
                                  encoding=encoding, errors=errors, buffers=buffers).load()

    pickle.Unpickler = RecordingUnpickler
    pickle.load = load
    pickle.loads = loads
    return RecordingUnpickler


def _all_subclasses(cls):
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        for s in c.__subclasses__():
            out.append(s)
            todo.append(s)
    return out


_BLOCK_ALWAYS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                 "subprocess.Popen", "socket.", "ctypes.", "os.kill", "os.killpg",
                 "webbrowser.open", "urllib.Request", "http.client.", "ftplib.", "smtplib.",
                 "os.putenv", "os.unsetenv", "os.chdir", "code.__new__", "function.__new__",
                 "builtins.input", "pty.spawn", "os.symlink", "os.link", "os.truncate",
                 "os.chmod", "os.chown", "os.startfile", "shutil.", "marshal.loads",
                 "marshal.load", "sys.settrace", "sys.setprofile", "os.add_dll_directory")
_FS_UNDER_SCRATCH = ("os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.scandir",
                     "os.listdir", "tempfile.mkdtemp", "tempfile.mkstemp", "shutil.rmtree",
                     "os.chown", "os.chmod", "os.utime", "os.chflags", "os.truncate")


def _under(path, prefixes):
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _in_import():
    """True while an import runs (a module's code, under importlib's frames): the import was
    allowed by the `import` event already; what the module does while it loads (dlopen its
    extension, read its data files) is the library's, not the file's."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_globals.get("__name__") == "importlib._bootstrap":
            return True
        f = f.f_back
    return False


def _audit(event, args):
    if not S.active or S.depth > 1:
        return
    if event not in ("pickle.find_class", "import", "sys._getframe") and _in_import():
        return
    if event == "pickle.find_class":
        module, name = args
        if S.depth > 0:
            return  # came through a recording find_class, already recorded
        ok = _allowed_here(module, name)
        _add_global(module, name, "audit-allowed" if ok else "blocked")
        if not ok:
            _record_block("%s.%s" % (_s(module), _s(name)))
            raise Blocked("blocked (audit): %s.%s" % (_s(module), _s(name)))
        return
    if event == "open":
        path, mode, flags = args
        if isinstance(path, int):
            return
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        real = os.path.realpath(path)
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT |
                                                 os.O_TRUNC | os.O_APPEND))
        if _under(real, [S.scratch]):
            return
        if real == S.target:
            if writes:
                _record_block("open-write:<file>")
                raise Blocked("blocked: opens the file for writing")
            return
        if not writes and (_under(real, S.lib_prefixes) or
                           _under(real, ["/proc/self", "/sys/devices/system/cpu",
                                         "/sys/fs/cgroup"]) or
                           real in ("/dev/null", "/dev/urandom", "/etc/localtime")):
            return
        if not writes and S.target_dir and _under(real, [S.target_dir]):
            S.events.append("open:r:" + os.path.relpath(real, S.target_dir))
            return
        _record_block("open:%s:%s" % ("w" if writes else "r", _where(real)))
        raise Blocked("blocked: open %s (%s)" % (path, "write" if writes else "read"))
    if event in ("exec", "compile"):
        code = args[0]
        fn = getattr(code, "co_filename", None)
        if event == "exec" and isinstance(fn, str) and _under(fn, S.lib_prefixes):
            return  # module code of an installed library (a lazy import)
        caller = _caller_module(2)
        if caller in ("collections", "dataclasses", "typing", "enum", "functools"):
            return  # namedtuple & co. build their methods from source
        if event == "compile" and caller == "ast":
            return  # ast.parse / literal_eval (numpy's .npy header): an AST, no code object
        S.events.append("%s:%s" % (event, caller))
        _record_block(event)
        raise Blocked("blocked: %s from %s" % (event, caller))
    if event == "import":
        # Lazy imports of the standard library and of the loaders' own packages (an allowed
        # global's module, a library importing a helper on first use) go through; anything
        # else is an import the file chose some other way: blocked.
        module = args[0]
        top = module.split(".")[0] if isinstance(module, str) else None
        if top and (top in _IMPORT_OK or top in getattr(sys, "stdlib_module_names", ())):
            return
        if _in_import():
            return  # an allowed module importing its own optional dependencies (torch: opt_einsum)
        _record_block("import:%s" % (module,))
        raise Blocked("blocked: import %s" % (module,))
    if any(event.startswith(p) for p in _FS_UNDER_SCRATCH):
        p = args[0] if args else None
        if event.startswith("tempfile."):
            return
        if isinstance(p, int) and event in ("os.scandir", "os.listdir"):
            p = _fd_path(p)
        elif isinstance(p, (str, bytes)):
            p = os.fsdecode(p)
            dir_fd = args[-1] if len(args) > 1 and isinstance(args[-1], int) else None
            if dir_fd is not None and not os.path.isabs(p):
                p = os.path.join(_fd_path(dir_fd) or "/nonexistent", p)
        if isinstance(p, str):
            real = os.path.realpath(p)
            if _under(real, [S.scratch]) or (
                    event in ("os.scandir", "os.listdir") and
                    _under(real, S.lib_prefixes + (S.target_dir or "/nonexistent",))):
                return
        elif event in ("os.scandir", "os.listdir") and p is None:
            return
        _record_block("%s:%r" % (event, p))
        raise Blocked("blocked: %s %r" % (event, p))
    if event in ("marshal.loads", "marshal.load") and \
            _caller_module(2).startswith("importlib"):
        return  # a lazy import reading its .pyc
    if any(event.startswith(p) for p in _BLOCK_ALWAYS):
        _record_block(event)
        raise Blocked("blocked: " + event)


# Modules a loader may import lazily while it loads (its own code, the stdlib it uses).
_IMPORT_OK = {"numpy", "torch", "joblib", "tables", "h5py", "onnx", "onnxruntime", "safetensors",
              "json", "encodings", "zipfile", "tarfile", "gzip", "bz2", "lzma", "zlib", "_lzma",
              "_bz2", "io", "_io", "codecs", "_codecs", "struct", "_struct", "collections",
              "copyreg", "_compat_pickle", "pickle", "_pickle", "mmap", "tempfile", "shutil",
              "contextlib", "weakref", "warnings", "numbers", "decimal", "_decimal", "fractions",
              "datetime", "_datetime", "typing", "typing_extensions", "dataclasses", "enum",
              "functools", "itertools", "operator", "re", "string", "difflib", "textwrap",
              "linecache", "tokenize", "token", "inspect", "dis", "opcode", "ast", "traceback",
              "binascii", "base64", "hashlib", "_hashlib", "_blake2", "_sha256", "_md5", "math",
              "cmath", "fnmatch", "glob", "posixpath", "ntpath", "pathlib", "stat", "errno",
              "sympy", "mpmath", "google", "packaging", "lz4", "threadpoolctl", "psutil",
              "numexpr", "blosc", "blosc2", "cpuinfo", "ml_dtypes", "importlib", "sysconfig",
              "platform", "locale", "unicodedata", "_multibytecodec", "fsspec", "uuid",
              "zoneinfo", "_strptime", "calendar", "time", "_json", "array", "copy", "queue",
              "select", "signal", "threading", "_thread", "_weakrefset", "abc", "types",
              "heapq", "bisect", "random", "_random", "secrets", "_bisect", "_heapq",
              "numpy_pickle", "jinja2", "yaml", "markupsafe", "filelock", "networkx", "pkgutil",
              "zipimport", "quopri", "email", "gettext", "keyword", "reprlib", "pprint",
              "_socket", "socket", "selectors", "multiprocessing", "concurrent", "asyncio"}


def _where(real):
    """A path as records show it: relative to the file's folder when near it (so records do
    not depend on where the corpus lives), else absolute."""
    if S.target_dir:
        rel = os.path.relpath(real, S.target_dir)
        if rel.count("../") <= 3:
            return rel
    return real


def _fd_path(fd):
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return None


def _caller_module(skip):
    try:
        f = sys._getframe(skip)
    except ValueError:
        return "?"
    while f is not None:
        mod = f.f_globals.get("__name__", "?")
        if mod != __name__:
            return mod.split(".")[0] if mod.split(".")[0] in ("collections", "dataclasses",
                                                             "typing", "enum", "functools") \
                else mod
        f = f.f_back
    return "?"


# --- Describing what a load returned ----------------------------------------------------------

MAX_ITEMS = 20000


def _sha(b):
    return hashlib.sha256(b).hexdigest()


def _describe(obj, out, key="", seen=None, budget=None):
    if budget is None:
        budget = [MAX_ITEMS]
    if seen is None:
        seen = set()
    if budget[0] <= 0:
        return
    budget[0] -= 1
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        out.append(_describe_tensor(obj, key))
        return
    if torch is not None and isinstance(obj, getattr(torch.storage, "TypedStorage", ())):
        d = {"key": key, "kind": "storage", "dtype": str(obj.dtype), "shape": [obj.size()]}
        try:
            d["sha256"] = _sha(bytes(obj._untyped_storage if hasattr(obj, "_untyped_storage")
                                     else obj._storage))
        except BaseException as e:  # noqa: BLE001
            d["sha256"], d["note"] = None, type(e).__name__
        out.append(d)
        return
    if np is not None and isinstance(obj, np.ndarray):
        out.append(_describe_array(obj, key, seen, budget))
        return
    if id(obj) in seen:
        return
    if isinstance(obj, dict):
        seen.add(id(obj))
        for k, v in list(obj.items()):
            _describe(v, out, key + (".%s" % k if isinstance(k, str) else "[%s]" % _rkey(k)),
                      seen, budget)
        return
    if isinstance(obj, (list, tuple)):
        seen.add(id(obj))
        for i, v in enumerate(obj):
            _describe(v, out, "%s[%d]" % (key, i), seen, budget)
        return
    if np is not None and hasattr(np, "lib") and isinstance(obj, np.lib.npyio.NpzFile):
        for k in obj.files:
            try:
                v = obj[k]
            except Blocked:
                raise
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, Timeout):
                    raise
                out.append({"key": key + "." + k, "kind": "member-error",
                            "error": _err(e)})
                continue
            _describe(v, out, key + "." + k, seen, budget)
        return


def _rkey(k):
    try:
        return repr(k)[:60]
    except BaseException:  # noqa: BLE001
        return "?"


def _describe_array(a, key, seen, budget):
    d = {"key": key, "kind": "ndarray", "dtype": a.dtype.str if a.dtype.fields is None
         else str(a.dtype.descr), "shape": list(a.shape)}
    if a.dtype.hasobject:
        d["sha256"] = None
        sub = []
        if a.size <= 10000:
            for i, v in enumerate(a.reshape(-1).tolist() if a.dtype.fields is None else []):
                _describe(v, sub, "%s[%d]" % (key, i), seen, budget)
        if sub:
            d["items"] = sub
        return d
    import numpy as np
    d["sha256"] = _sha(np.ascontiguousarray(a).tobytes())
    return d


def _describe_tensor(t, key):
    import torch
    d = {"key": key, "kind": "tensor", "dtype": str(t.dtype).replace("torch.", ""),
         "shape": list(t.shape)}
    try:
        t = t.detach()
        if t.layout != torch.strided:
            d["sha256"], d["note"] = None, str(t.layout)
            return d
        if t.device.type == "meta":
            d["sha256"], d["note"] = None, "meta"
            return d
        if t.is_quantized:
            d["note"] = "quantized (int_repr)"
            t = t.int_repr()
        flat = t.contiguous().reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        d["sha256"] = _sha(flat.view(torch.uint8).numpy().tobytes())
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (Blocked, Timeout)):
            raise
        d["sha256"], d["note"] = None, type(e).__name__
    return d


def _err(e):
    msg = str(e)
    if S.target:
        msg = msg.replace(S.target, "<file>")
    if S.target_dir:
        msg = msg.replace(S.target_dir, "<dir>")
    if S.scratch:
        msg = msg.replace(S.scratch, "<tmp>")
    msg = re.sub(r"0x[0-9a-fA-F]{6,}", "0x?", msg)
    msg = re.sub(r"/tmp/[A-Za-z0-9_.]+", "<tmp>", msg)
    msg = " ".join(msg.split())
    if len(msg) > 300:  # keep both ends: C++ errors put the reason last
        msg = msg[:140] + " ... " + msg[-150:]
    return "%s: %s" % (type(e).__name__, msg)


# --- The loaders ------------------------------------------------------------------------------

def _load_pickle(path):
    import pickle
    with open(path, "rb") as f:
        return pickle.Unpickler(f).load()  # the recording C unpickler


def _load_pickle_py(path):
    import pickle
    with open(path, "rb") as f:
        return pickle._Unpickler(f).load()


def _load_joblib(path):
    import joblib
    return joblib.load(path)


def _load_numpy(path):
    import numpy as np
    r = np.load(path, allow_pickle=True)
    return r


def _torch_loader(weights_only, mmap):
    def load(path):
        import torch
        kw = {"map_location": "cpu"}
        import inspect
        params = inspect.signature(torch.load).parameters
        if "weights_only" in params:
            kw["weights_only"] = weights_only
        elif weights_only:
            raise _NotApplicable("this torch has no weights_only")
        if mmap:
            if "mmap" not in params:
                raise _NotApplicable("this torch has no mmap")
            kw["mmap"] = True
        return torch.load(path, **kw)
    return load


class _NotApplicable(Exception):
    pass


def _load_safetensors(path):
    import safetensors
    fw = "pt" if "torch" in sys.modules else "np"
    out = {}
    with safetensors.safe_open(path, framework=fw) as f:
        for k in f.keys():
            out[k] = f.get_tensor(k)
    return out


def _load_onnx(path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    out = {}
    for t in m.graph.initializer:
        try:
            out[t.name] = numpy_helper.to_array(t)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, (Blocked, Timeout)):
                raise
            out[t.name] = "error: " + _err(e)
    return out


def _load_onnxruntime(path):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
    return None


def _load_h5py(path):
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for k in obj.attrs.keys():
                try:
                    v = obj.attrs[k]
                except BaseException as e:  # noqa: BLE001
                    if isinstance(e, (Blocked, Timeout)):
                        raise
                    v = "error: " + _err(e)
                out["%s@%s" % (name, k)] = v if hasattr(v, "dtype") else repr(v)[:80]
            if isinstance(obj, h5py.Dataset):
                if obj.size is not None and obj.size * obj.dtype.itemsize <= (64 << 20):
                    out[name] = obj[()]
                else:
                    out[name] = "dataset %s %s (not read)" % (obj.dtype, obj.shape)
        for k in f.attrs.keys():
            v = f.attrs[k]
            out["@%s" % k] = v if hasattr(v, "dtype") else repr(v)[:80]
        f.visititems(visit)
    return out


def _load_tables(path):
    import tables
    out = {}
    with tables.open_file(path, "r") as h:
        for node in h.walk_nodes("/"):
            attrs = node._v_attrs
            for k in attrs._f_list("all"):
                v = getattr(attrs, k)  # unpickles pickled attributes (recorded, blocked)
                out["%s@%s" % (node._v_pathname, k)] = v if hasattr(v, "dtype") else \
                    repr(v)[:80]
            if isinstance(node, tables.Leaf):
                try:
                    if node.size_in_memory <= (64 << 20):
                        out[node._v_pathname] = node.read()
                except BaseException as e:  # noqa: BLE001
                    if isinstance(e, (Blocked, Timeout)):
                        raise
                    out[node._v_pathname] = "error: " + _err(e)
    return out


def _load_json(path):
    import json as _json
    with open(path, "rb") as f:
        data = f.read()
    _json.loads(data)
    return None


_LOADER_FUNCS = {
    "pickle": (_load_pickle, ["pickle"]),
    "pickle_py": (_load_pickle_py, ["pickle"]),
    "joblib": (_load_joblib, ["joblib", "numpy"]),
    "numpy": (_load_numpy, ["numpy"]),
    "torch": (_torch_loader(False, False), ["torch"]),
    "torch_wo": (_torch_loader(True, False), ["torch"]),
    "torch_mmap": (_torch_loader(False, True), ["torch"]),
    "torch_mmap_wo": (_torch_loader(True, True), ["torch"]),
    "safetensors": (_load_safetensors, ["safetensors"]),
    "onnx": (_load_onnx, ["onnx"]),
    "onnxruntime": (_load_onnxruntime, ["onnxruntime"]),
    "h5py": (_load_h5py, ["h5py"]),
    "tables": (_load_tables, ["tables"]),
    "json": (_load_json, ["json"]),
}


def _loader_available(name):
    """True when the loader applies in this Python (its libraries import, and the torch
    variants exist in this torch)."""
    func, mods = _LOADER_FUNCS[name]
    try:
        for m in mods:
            __import__(m)
    except BaseException:  # noqa: BLE001
        return False
    if name.startswith("torch"):
        import inspect
        import torch
        params = inspect.signature(torch.load).parameters
        if "wo" in name and "weights_only" not in params:
            return False
        if "mmap" in name and "mmap" not in params:
            return False
    return True


def _patch_torch():
    """torch.load hands a TorchScript archive to torch.jit.load, which compiles the file's
    code: blocked. torch 2.x's weights_only unpickler consults its allowlist per global:
    recorded through a dict that logs every look-up."""
    import torch

    def jit_load(*a, **k):
        _add_global("torch.jit", "load", "blocked")
        _record_block("torch.jit.load")
        raise Blocked("blocked: torch.jit.load (TorchScript code)")
    torch.jit.load = jit_load
    try:
        import torch._weights_only_unpickler as wo
    except ImportError:
        return

    class RecordingDict(dict):
        def __contains__(self, key):
            hit = dict.__contains__(self, key)
            if S.active and isinstance(key, str):
                mod, _, name = key.rpartition(".")
                _add_global(mod, name, "allowed" if hit else "refused")
            return hit

    for fname in ("_get_allowed_globals",):
        orig = getattr(wo, fname, None)
        if orig is None:
            continue

        def recording(*a, _orig=orig, **k):
            r = _orig(*a, **k)
            return RecordingDict(r) if isinstance(r, dict) else r
        setattr(wo, fname, recording)


def _warm_up(loaders):
    """Imports what the loaders import lazily on first use, before the audit hook arms."""
    import importlib
    for m in ("zipfile", "tarfile", "gzip", "bz2", "lzma", "zlib", "io", "tempfile", "shutil",
              "mmap", "json", "uuid", "decimal", "fractions", "datetime", "collections",
              "copyreg", "_compat_pickle", "pickle", "inspect", "difflib", "encodings.cp437",
              "encodings.latin_1", "encodings.ascii", "encodings.utf_8", "ast"):
        importlib.import_module(m)
    # Allowed globals live in numpy and joblib: importing them on first use would make the
    # records depend on which file came first.
    for m in ("numpy", "joblib.numpy_pickle", "joblib.numpy_pickle_compat"):
        try:
            importlib.import_module(m)
        except BaseException:  # noqa: BLE001
            pass
    for name in loaders:
        for m in _LOADER_FUNCS[name][1]:
            try:
                importlib.import_module(m)
            except BaseException:  # noqa: BLE001
                pass
    extra = ["numpy.lib.format", "numpy.lib.npyio", "numpy.core.multiarray", "numpy.ma",
             "joblib.numpy_pickle", "joblib.numpy_pickle_compat", "joblib.compressor",
             "torch.serialization", "torch._utils", "torch._weights_only_unpickler",
             "torch.storage", "torch.nn.parameter", "torch.torch_version", "torch._tensor",
             "onnx.numpy_helper", "onnx.external_data_helper", "tables.attributeset",
             "numpy._core.multiarray", "safetensors.torch", "safetensors.numpy"]
    tops = {m for name in loaders for m in _LOADER_FUNCS[name][1]} | {"numpy", "joblib"}
    for m in extra:
        if m.split(".")[0] not in tops:
            continue
        try:
            importlib.import_module(m)
        except BaseException:  # noqa: BLE001
            pass


# Test hooks for tests/loaders/test_harness.py (CKPT_MATRIX_SELFTEST=1): a file named
# *__crash__* kills the child with SIGSEGV, *__hang__* blocks SIGPROF and sleeps (the parent's
# deadline kills it), *__slow__* spins in Python (the CPU-time alarm stops it).
SELFTEST = os.environ.get("CKPT_MATRIX_SELFTEST") == "1"


def _selftest_hooks(path):
    base = os.path.basename(path)
    if "__crash__" in base:
        os.kill(os.getpid(), signal.SIGSEGV)
    if "__hang__" in base:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
        time.sleep(3600)
    if "__slow__" in base:
        while True:
            pass


def _versions():
    v = {"python": "%d.%d.%d" % sys.version_info[:3]}
    for m in ("numpy", "torch", "joblib", "h5py", "tables", "onnx", "onnxruntime",
              "safetensors"):
        mod = sys.modules.get(m)
        if mod is not None:
            v[m] = str(getattr(mod, "__version__", "?"))
    return v


TRACE = os.environ.get("CKPT_MATRIX_TRACE")  # the strace log of this child (onnxruntime)
_OPEN_LINE = re.compile(r'^\d+\s+(?:open|openat|openat2)\((?:[A-Z_]+|\d+), "((?:[^"\\]|\\.)*)"')


def _traced_opens(start):
    """Files the process opened (successfully) since byte `start` of the strace log, other
    than the libraries, /proc, /sys, /dev and the file itself: "open:r:REL" (relative to the
    file's folder) or "open:r:/ABS"."""
    out = []
    try:
        with open(TRACE, "rb") as f:
            f.seek(start)
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return out
    for line in lines:
        m = _OPEN_LINE.match(line)
        if not m:
            continue
        p = m.group(1).encode().decode("unicode_escape", "replace")
        real = os.path.realpath(p)
        if real == S.target or real == TRACE or _under(real, S.lib_prefixes) or \
                _under(real, ["/proc", "/sys", "/dev", S.scratch, "/etc"]):
            continue
        out.append("open:r:" + _where(real))
    return out


_PROGRESS = None  # writes a "loaded" line before describing the result (set by child_main)


def _load_one(name, path, timeout):
    func = _LOADER_FUNCS[name][0]
    trace_start = os.path.getsize(TRACE) if TRACE and os.path.exists(TRACE) else None
    S.globals, S.blocked, S.events = [], None, []
    S.target = os.path.realpath(path)
    S.target_dir = os.path.dirname(S.target)
    S.loader = name
    rec = {"outcome": None, "error": None}
    arrays = []

    def on_alarm(signum, frame):
        raise Timeout("timeout after %ss of CPU time" % timeout)
    # CPU time, not wall time: a load slowed by a busy machine is not cut short, and a file
    # made to burn CPU (a huge exponent, a deep structure) is stopped as soon (the wall-clock
    # guard, timeout + grace, still kills a child that blocks without using CPU).
    old = signal.signal(signal.SIGPROF, on_alarm)
    old_hook, sys.excepthook = sys.excepthook, lambda *a: None
    try:
        try:
            signal.setitimer(signal.ITIMER_PROF, timeout)
            if SELFTEST:
                _selftest_hooks(path)
            S.active = True
            try:
                result = func(path)
                if _PROGRESS is not None:
                    _PROGRESS()  # a crash while describing is not the loader's crash
                _describe(result, arrays)
                close = getattr(result, "close", None)
                if close is not None and callable(close):
                    close()
                del result
            finally:
                S.active = False
                signal.setitimer(signal.ITIMER_PROF, 0)
            rec["outcome"] = "opened"
        except Timeout as e:
            rec["outcome"], rec["error"] = "timeout", "Timeout: %s" % e
        except Blocked as e:
            rec["outcome"], rec["error"] = "blocked", _err(e)
        except _NotApplicable as e:
            rec["outcome"], rec["error"] = "refused", _err(e)
        except RecursionError as e:
            rec["outcome"], rec["error"] = "refused", _err(e)
        except BaseException as e:  # noqa: BLE001 - every failure is data here
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                rec["outcome"], rec["error"] = "refused", _err(e)
            else:
                rec["outcome"], rec["error"] = "refused", _err(e)
    finally:
        S.active = False
        signal.signal(signal.SIGPROF, old)
        sys.excepthook = old_hook
    if trace_start is not None:
        S.events.extend(_traced_opens(trace_start))
    if S.blocked is not None:
        rec["outcome"] = "blocked"
    rec["blocked"] = S.blocked
    rec["globals"] = S.globals
    rec["arrays"] = arrays
    rec["events"] = sorted(set(S.events))
    return rec


def child_main(name, timeout, memory_mib, result_fd):
    import gc
    import resource
    import tempfile
    import warnings
    warnings.simplefilter("ignore")
    out = os.fdopen(result_fd, "w", buffering=1)
    # Library chatter must not reach the result pipe.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    S.scratch = os.path.realpath(tempfile.mkdtemp(prefix="ckpt_matrix."))
    tempfile.tempdir = S.scratch
    os.chdir(S.scratch)
    if not _loader_available(name):
        out.write(json.dumps({"ready": False}) + "\n")
        return
    _warm_up([name])
    _install_pickle_hooks()
    if "torch" in sys.modules:
        _patch_torch()
    import sysconfig
    prefixes = {sys.prefix, sys.base_prefix, sysconfig.get_paths()["stdlib"],
                sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                "/usr/lib", "/usr/share", "/usr/local/lib", "/etc/ssl"}
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and "-packages/" in f:
            prefixes.add(f.split("-packages/")[0] + "-packages")
    S.lib_prefixes = tuple(sorted(p for p in prefixes if p and p != "/"))
    # Memory: the address space grows by at most memory_mib past what the libraries took.
    with open("/proc/self/status") as st:
        vm = next((int(line.split()[1]) * 1024 for line in st if line.startswith("VmSize:")),
                  0)
    limit = vm + (memory_mib << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.setrecursionlimit(10000)
    sys.addaudithook(_audit)
    out.write(json.dumps({"ready": True, "versions": _versions()}) + "\n")
    n = 0
    global _PROGRESS, _STREAM
    for line in sys.stdin:
        req = json.loads(line)
        _STREAM = lambda g, rid=req["id"]: out.write(json.dumps({"id": rid, "stage": "global",
                                                                 "g": g}) + "\n")
        _PROGRESS = lambda rid=req["id"]: out.write(json.dumps({"id": rid, "stage": "loaded"})
                                                     + "\n")
        rec = _load_one(name, req["path"], timeout)
        rec["id"] = req["id"]
        try:
            s = json.dumps(rec, sort_keys=True)
        except BaseException as e:  # noqa: BLE001
            s = json.dumps({"id": req["id"], "outcome": "refused", "error": _err(e),
                            "blocked": S.blocked, "globals": [], "arrays": [], "events": []})
        out.write(s + "\n")
        n += 1
        if n % 64 == 0:
            gc.collect()
        # Anything the loader left in the scratch folder goes.
        for entry in os.listdir(S.scratch):
            p = os.path.join(S.scratch, entry)
            import shutil
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)


# ---------------------------------------------------------------------------------------------
# The parent.

TRACED = {"onnxruntime"}


class _Child:
    def __init__(self, python, loader, timeout, memory_mib, env_wrap):
        r, w = os.pipe()
        cmd = [python, os.path.abspath(__file__), "--child", loader,
               "--timeout", str(timeout), "--memory", str(memory_mib), "--result-fd", str(w)]
        env = dict(os.environ)
        self.trace = None
        # onnxruntime opens external data from C++, where no audit hook sees it: strace
        # records those opens (the child reads its own log after each file).
        if loader in TRACED and shutil.which("strace"):
            import tempfile
            fd, self.trace = tempfile.mkstemp(prefix="ckpt_matrix_trace.")
            os.close(fd)
            cmd = ["strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-e",
                   "status=successful", "-o", self.trace] + cmd
            env["CKPT_MATRIX_TRACE"] = self.trace
        cmd = list(env_wrap) + cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, pass_fds=(w,),
                                     start_new_session=True, text=True, env=env)
        os.close(w)
        self.rfd = r
        self.buf = b""
        self.loader = loader

    def read_line(self, deadline):
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                return b""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait()
        os.close(self.rfd)
        self._drop_trace()

    def _drop_trace(self):
        if self.trace:
            try:
                os.unlink(self.trace)
            except OSError:
                pass

    def close(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        os.close(self.rfd)
        self._drop_trace()


def _start(args, loader):
    c = _Child(args.python, loader, args.timeout, args.memory, args.wrap)
    line = c.read_line(time.monotonic() + 300)
    if not line:
        c.kill()
        raise RuntimeError("loader %s: the child did not start" % loader)
    hello = json.loads(line)
    if not hello.get("ready"):
        c.close()
        return None
    VERSIONS.update(hello.get("versions", {}))
    return c


def _ask(child, args, i, path):
    """Sends one file; returns (record or None, what happened when None, partial globals)."""
    child.send({"id": i, "path": path})
    deadline = time.monotonic() + args.timeout + args.grace
    line = child.read_line(deadline)
    loaded, partial = False, []
    while line:
        j = json.loads(line)
        if j.get("stage") == "loaded":
            loaded = True
        elif j.get("stage") == "global":
            partial.append(j["g"])
        else:
            break
        line = child.read_line(deadline)
    if line:
        rec = json.loads(line)
        rec.pop("id", None)
        return rec
    after = " (after the loader returned, while describing its result)" if loaded else ""
    if line is None:
        rec = {"outcome": "hang", "error": "no answer within %ss%s" % (
            args.timeout + args.grace, after)}
        child.kill()
    else:
        rc = child.proc.wait()
        what = ("signal %s" % signal.Signals(-rc).name) if rc < 0 else "exit %d" % rc
        rec = {"outcome": "crash", "error": "child died: " + what + after}
        child.kill()
    blocked = [g for g in partial if g[2] == "blocked"]
    rec.update({"blocked": "%s.%s" % tuple(blocked[0][:2]) if blocked else None,
                "globals": partial, "arrays": [], "events": []})
    return rec


def run_loader(args, loader, files):
    """Runs one loader over files [(key, path)]; returns {key: record}, or None when the loader
    is not available here. A file whose child crashed or hung is tried once more in a fresh
    child, so that a crash is the file's and not the left-overs of the files before it (HDF5's
    library state, a heap a previous file damaged): the record is the fresh child's, with a
    "note" when the first child had died."""
    out = {}
    child = _start(args, loader)
    if child is None:
        return None
    for i, (key, path) in enumerate(files):
        rec = _ask(child, args, i, path)
        if rec["outcome"] in ("crash", "hang"):
            child = _start(args, loader)
            if child is None:
                raise RuntimeError("loader %s vanished on restart" % loader)
            again = _ask(child, args, i, path)
            if again["outcome"] in ("crash", "hang"):
                rec = again
                child = _start(args, loader)
                if child is None:
                    raise RuntimeError("loader %s vanished on restart" % loader)
            else:
                again["note"] = "a child that had loaded earlier files died on it (%s); " \
                    "a fresh child did not" % rec["error"]
                rec = again
        out[key] = rec
    child.close()
    return out


def list_files(paths, root):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for d, dirs, names in os.walk(p):
                dirs.sort()
                for n in sorted(names):
                    full = os.path.join(d, n)
                    if os.path.isfile(full) and not os.path.islink(full):
                        files.append(full)
        elif os.path.isfile(p):
            files.append(p)
    out = []
    for f in files:
        key = os.path.relpath(os.path.abspath(f), root)
        out.append((key, os.path.abspath(f)))
    out.sort()
    # Same file twice (a path given twice): once.
    dedup, seen = [], set()
    for k, p in out:
        if k not in seen:
            seen.add(k)
            dedup.append((k, p))
    return dedup


VERSIONS = {}


def versions(python, wrap):
    code = r"""
import json, sys, platform
v = {"python": platform.python_version()}
for m in ("numpy", "torch", "joblib", "h5py", "tables", "onnx", "onnxruntime", "safetensors"):
    try:
        mod = __import__(m)
        v[m] = getattr(mod, "__version__", "?")
    except BaseException:
        pass
print(json.dumps(v, sort_keys=True))
"""
    r = subprocess.run(list(wrap) + [python, "-c", code], capture_output=True, text=True,
                       timeout=300)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": r.stderr[-300:]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--timeout", type=float, default=10.0,
                    help="per file and loader, seconds of the child's CPU time")
    ap.add_argument("--grace", type=float, default=20.0,
                    help="seconds past --timeout before a silent child is killed")
    ap.add_argument("--memory", type=int, default=2048,
                    help="MiB of address space a child may add past its libraries")
    ap.add_argument("--jobs", type=int, default=1, help="loader children at once")
    ap.add_argument("--root", default=None, help="file keys are relative to this folder")
    ap.add_argument("--out", default="-")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--wrap", default="", help="a command prefix for the children (a chroot)")
    ap.add_argument("--path-map", default="",
                    help="OUTSIDE=INSIDE: how the children (in a chroot) see the paths")
    ap.add_argument("--list-loaders", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child_main(args.child, args.timeout, args.memory, args.result_fd)
        return 0
    args.wrap = args.wrap.split() if args.wrap else []
    if args.list_loaders:
        print("\n".join(LOADERS))
        return 0
    loaders = [x for x in args.loaders.split(",") if x]
    bad = [x for x in loaders if x not in LOADERS]
    if bad:
        ap.error("unknown loaders: %s" % ", ".join(bad))
    loaders = [x for x in LOADERS if x in loaders]
    root = os.path.abspath(args.root) if args.root else os.getcwd()
    files = list_files(args.paths, root)
    if args.path_map:
        outside, inside = args.path_map.split("=", 1)
        child_files = [(k, inside + p[len(outside):] if p.startswith(outside) else p)
                       for k, p in files]
    else:
        child_files = files
    sha = {}
    for k, p in files:
        with open(p, "rb") as f:
            sha[k] = hashlib.sha256(f.read()).hexdigest()
    results, present = {}, []
    if args.jobs <= 1:
        for loader in loaders:
            r = run_loader(args, loader, child_files)
            if r is not None:
                results[loader] = r
                present.append(loader)
    else:
        import concurrent.futures as cf
        # Shard each loader's files over the jobs; each shard its own child.
        tasks = []
        nshard = max(1, args.jobs)
        for loader in loaders:
            for s in range(nshard):
                part = child_files[s::nshard]
                if part:
                    tasks.append((loader, part))
        with cf.ThreadPoolExecutor(args.jobs) as ex:
            futs = {ex.submit(run_loader, args, lo, part): lo for lo, part in tasks}
            for fu in cf.as_completed(futs):
                lo = futs[fu]
                r = fu.result()
                if r is None:
                    continue
                results.setdefault(lo, {}).update(r)
        present = [x for x in loaders if x in results]
    meta = {"meta": {"versions": dict(sorted(VERSIONS.items())), "loaders": present,
                     "requested": loaders, "timeout": args.timeout, "memory_mib": args.memory,
                     "files": len(files)}}
    fh = sys.stdout if args.out == "-" else open(args.out, "w")
    try:
        fh.write(json.dumps(meta, sort_keys=True) + "\n")
        for k, _ in files:
            for loader in present:
                rec = dict(results[loader][k])
                rec["file"], rec["sha256"], rec["loader"] = k, sha[k], loader
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
    finally:
        if fh is not sys.stdout:
            fh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
