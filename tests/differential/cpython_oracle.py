"""CPython's C unpickler as an oracle: which globals would loading a pickle request, in order?

Stdlib only. Nothing is ever imported or called on behalf of the pickle: `find_class` records
`(module, name)` exactly as the C unpickler passes it (raw, before the fix_imports mapping) and
returns a fresh inert stub class; `persistent_load` returns an inert stub instance. The stubs
accept every call, `__setstate__`, `append`, `extend`, `add` and item assignment and do nothing,
so the oracle accepts everything *some* set of callables could make a real load accept: when it
loads a stream, a faithful VM must too.

Input is read through `io.BytesIO`, the way `torch.load` feeds `data.pkl` to its unpickler. In
3.11 that matters for framing: a FRAME whose length exceeds what is left of the enclosing frame,
or a text line / length-prefixed argument that crosses a frame end, makes the C unpickler drop the
rest of the frame and read on from the file (see `frame_violation`); `pickle.loads(bytes)` does
not. Successive `load()` calls read the pickles of a concatenated stream.

Used by tests/differential/diff_test.py and tests/fixtures/gen_pickles.py.
"""

import contextlib
import copyreg
import io
import pickle
import resource
import signal
import struct
import sys
import warnings
from typing import List, NamedTuple, Optional, Tuple

import _pickle

assert pickle.Unpickler is _pickle.Unpickler, "pickle.Unpickler must be the C implementation"

Global = Tuple[str, str]


class _StubMeta(type):
    """Metaclass so that SETITEM(S) on a stub *class* object succeeds too."""

    def __setitem__(cls, key, value):
        return None


class Stub(metaclass=_StubMeta):
    """Inert stand-in for every global and every call result. Accepts anything, does nothing."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return Stub()

    # No `self`: BUILD and APPENDS on a stub *class* call these as plain functions.
    def __setstate__(*args, **kwargs):
        return None

    def append(*args, **kwargs):
        return None

    def extend(*args, **kwargs):
        return None

    def add(*args, **kwargs):
        return None

    def __setitem__(*args, **kwargs):
        return None


class RecordingUnpickler(pickle.Unpickler):
    """The C unpickler with defaults (fix_imports=True, encoding='ASCII', errors='strict')."""

    def __init__(self, file):
        super().__init__(file)
        self.recorded: List[Global] = []

    def find_class(self, module, name):
        self.recorded.append((module, name))
        return type("Stub", (Stub,), {"__module__": "ckptscan_stub"})

    def persistent_load(self, pid):
        return Stub()


class Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise Timeout("timeout")


class LoadResult(NamedTuple):
    ok: bool
    globals: List[Global]
    error: Optional[str]  # "ExceptionType: message" when not ok
    start: int
    end: int  # file position after load() (successful loads only; else -1)


def run(data: bytes, max_pickles: int = 64, timeout_s: float = 5.0) -> List[LoadResult]:
    """Loads every pickle of `data` in turn, until the bytes end or a load fails.

    Returns one LoadResult per attempted load (at least one). Each load runs under a wall-clock
    guard (SIGALRM; it fires when the unpickler calls back into Python, or just after).
    """
    results: List[LoadResult] = []
    f = io.BytesIO(data)
    while len(results) < max_pickles:
        start = f.tell()
        if results and start >= len(data):
            break
        u = RecordingUnpickler(f)
        ok, err, end = False, None, -1
        old = signal.signal(signal.SIGALRM, _on_alarm)
        # bytearray_dealloc reports "deallocated bytearray object has exported buffers" through
        # sys.excepthook when a huge BYTEARRAY8 fails; that is noise here.
        old_hook, sys.excepthook = sys.excepthook, lambda *a: None
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, timeout_s)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    u.load()
                ok, end = True, f.tell()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except Timeout:
            ok, err = False, "Timeout: load took longer than %.1fs" % timeout_s
        except RecursionError as e:
            ok, err = False, "RecursionError: %s" % e
        except BaseException as e:  # noqa: BLE001 - every failure is data here
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            ok, err = False, "%s: %s" % (type(e).__name__, str(e)[:200])
        finally:
            signal.signal(signal.SIGALRM, old)
            sys.excepthook = old_hook
        results.append(LoadResult(ok, u.recorded, err, start, end))
        if not ok:
            break
    return results


@contextlib.contextmanager
def memory_limit(headroom_bytes: int = 512 << 20):
    """Caps the address space at current size + headroom, so that a pickle declaring a huge
    BINBYTES8 or a memo index near 2**32 fails fast with MemoryError instead of paging."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    vm = 0
    with open("/proc/self/status") as st:
        for line in st:
            if line.startswith("VmSize:"):
                vm = int(line.split()[1]) * 1024
    want = vm + headroom_bytes
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        want = soft
    resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def no_imports():
    """Fails if anything inside the block imported a module, or if the copyreg extension
    registry is not empty (EXT* must stay unresolvable)."""
    if copyreg._extension_registry or copyreg._inverted_registry:
        raise AssertionError("copyreg extension registry is not empty")
    before = set(sys.modules)
    yield
    new = sorted(set(sys.modules) - before)
    if new:
        raise AssertionError("the CPython side imported modules: %s" % ", ".join(new))


# --- A linear opcode walk, for framing checks -------------------------------------------------

# Argument grammar of every opcode: ("line", n) text lines, ("fixed", n) bytes,
# ("counted", width, signed) a length prefix then that many bytes.
_ARGS = {}
for _c in (b"(.012NQRabdelostu}])"
           b"\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98"):
    _ARGS[_c] = ("fixed", 0)
for _c, _n in ((b"I", 1), (b"L", 1), (b"F", 1), (b"S", 1), (b"V", 1), (b"P", 1), (b"g", 1),
               (b"p", 1), (b"c", 2), (b"i", 2)):
    _ARGS[_c[0]] = ("line", _n)
for _c, _n in ((b"J", 4), (b"K", 1), (b"M", 2), (b"G", 8), (b"h", 1), (b"j", 4), (b"q", 1),
               (b"r", 4), (b"\x80", 1), (b"\x82", 1), (b"\x83", 2), (b"\x84", 4),
               (b"\x95", 8)):
    _ARGS[_c[0]] = ("fixed", _n)
for _c, _w, _s in ((b"T", 4, True), (b"U", 1, False), (b"X", 4, False), (b"B", 4, False),
                   (b"C", 1, False), (b"\x8c", 1, False), (b"\x8d", 8, False),
                   (b"\x8e", 8, False), (b"\x96", 8, False), (b"\x8a", 1, False),
                   (b"\x8b", 4, True)):
    _ARGS[_c[0]] = ("counted", _w, _s)
OPCODES = frozenset(_ARGS)


def walk(data: bytes):
    """Yields (offset, opcode, arg_end) for each opcode of a linear read over every pickle of
    `data`. A last opcode whose argument runs past the data is yielded with arg_end > len(data)
    (as far as is known: a missing newline or length prefix counts as one byte past the end);
    the walk stops there, and at the first unknown opcode."""
    pos, n = 0, len(data)
    while pos < n:
        op = data[pos]
        spec = _ARGS.get(op)
        if spec is None:
            return
        p = pos + 1
        if spec[0] == "line":
            for _ in range(spec[1]):
                nl = data.find(b"\n", p)
                if nl < 0:
                    p = n + 1
                    break
                p = nl + 1
        elif spec[0] == "fixed":
            p += spec[1]
        else:
            w, signed = spec[1], spec[2]
            if p + w > n:
                p += w
            else:
                size = int.from_bytes(data[p:p + w], "little", signed=signed)
                p += w + max(size, 0)
        yield pos, op, p
        if p > n:
            return
        pos = p


def frame_violation(data: bytes) -> Optional[str]:
    """The first place where a linear reader and 3.11's file-based C unpickler can part ways
    because of FRAME, as PEP 3154 strictness defines it: an opcode or argument crossing a frame
    end, a FRAME starting inside an unfinished frame, a STOP leaving part of its frame unread,
    or a frame longer than the data. None when the framing is clean."""
    frame_end = None
    for pos, op, arg_end in walk(data):
        if frame_end is not None and pos >= frame_end:
            frame_end = None
        if frame_end is not None and arg_end > frame_end:
            return "opcode 0x%02x at %d crosses the frame end at %d" % (op, pos, frame_end)
        if arg_end > len(data):
            return None
        if op == 0x95:
            if frame_end is not None:
                return "FRAME at %d inside the frame ending at %d" % (pos, frame_end)
            (length,) = struct.unpack_from("<Q", data, pos + 1)
            if arg_end + length > len(data):
                return "FRAME at %d declares %d bytes, %d left" % (pos, length,
                                                                    len(data) - arg_end)
            frame_end = arg_end + length
        elif op == 0x2E and frame_end is not None and arg_end < frame_end:
            return "STOP at %d leaves %d bytes of its frame unread" % (pos, frame_end - arg_end)
    return None
