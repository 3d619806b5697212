"""Random pickle streams for the differential test (stdlib only; deterministic per rng).

random_pickle: a protocol 0-5 stream built opcode by opcode from a small value grammar that uses
every opcode, with the odd argument forms _pickle.c accepts or rejects (base-0 and underscored
INT literals, NULs, quoted STRINGs, raw-unicode-escape, surrogates, dotted and dunder names, memo
tricks, MARK fences). About a third get one opcode-level defect (dropped, duplicated, swapped or
foreign opcode; junk or a second pickle after STOP). Frames, when present, are well-formed: they
cut the stream at opcode boundaries.

straddle_pickle: a stream whose framing is broken on purpose (argument or line across a frame
end, FRAME inside a frame, STOP before its frame ends), with a payload that 3.11's file-based C
unpickler reaches.

random_opcode: one opcode with a random argument, for splicing into mutations.
"""

import struct

INT_LITERALS = [
    b"0", b"1", b"-1", b"00", b"01", b"02", b"10", b"+7", b"-0", b"007", b"010", b"08", b"0x1f",
    b"0X1F", b"-0x10", b"0o17", b"0O17", b"0b101", b"1_000", b"0x_1f", b"1__0", b"_1", b"1_",
    b" 5", b"5 ", b"\t5", b"5\t", b"5\r", b"5\x00junk", b"\x005", b"", b"+", b"-", b"0x", b"1e3",
    b"inf", b"1.0", b"1L", b"0_0", b"00_0", b" +0x1_0 ", b"2147483647", b"2147483648",
    b"-2147483649", b"9223372036854775807", b"9223372036854775808",
    b"123456789012345678901234567890", b"-99999999999999999999", b"0b", b"\xd9\xa3", b"+-1",
]
LONG_LITERALS = [
    b"0L", b"1", b"-1L", b"123456789012345678901234567890L", b"0x10L", b"1_0L", b"L", b"",
    b"  5L", b"5 L", b"5LL", b"+3L", b"0o7L", b"08L", b"00L", b"5l", b"5\x00L", b"-0x_fL",
    b"9" * 60 + b"L",
]
FLOAT_LITERALS = [
    b"0", b"1.5", b"-2.5e-3", b"inf", b"-inf", b"nan", b"NaN", b"Infinity", b"1e400", b"-1e400",
    b"1_0.5", b"0x1p3", b" 1.5", b"1.5 ", b"1.5\x00x", b"", b".", b" ", b"1e", b"+.5", b"5.",
    b"1E5", b"infinity", b"-nan", b"1.7976931348623157e308", b"4.9e-324", b"1,5", b"\t2",
]
INDEX_LITERALS = [b"0", b"1", b"2", b"00", b"+1", b"-1", b" 1", b"1 ", b"0x1", b"1_0", b"",
                  b"99999999999", b"a", b"1\x00", b"01"]
STRING_ARGS = [
    b"'abc'", b'"abc"', b"'a\\'b'", b"'\\x41\\n\\t'", b"'\\101'", b"'abc\"", b"abc", b"'", b"''",
    b"'\\q'", b"'\\x4'", b"'\xc3\xa9'", b"'a'b'", b"' '", b"\"posix\"", b"'system'", b"'os'",
    b"'\\\\'", b"'\\'", b"'\\x00'",
]
UNICODE_ARGS = [
    b"abc", b"\\u00e9", b"\\U0001f600", b"\\ud800", b"\\u12", b"\\x41", b"\xe9", b"a\\nb", b"",
    b"posix", b"system", b"os", b"\\u0070osix", b"\\U00110000", b"\\", b"\\\\u0041",
]
UTF8_PAYLOADS = [
    b"", b"a", b"posix", b"system", b"os", b"eval", b"h\xc3\xa9llo", b"\xed\xa0\x80",
    b"\xf0\x9f\x98\x80", b"\xff", b"\xc0\x80", b"\xe2\x82", b"torch._utils", b"_rebuild_tensor_v2",
    b"builtins", b"getattr", b"a.b", b"__class__", b"x" * 300,
]
SANE_INTS = [b"0", b"1", b"-1", b"00", b"01", b"42", b"-123456", b"2147483648"]
SANE_LONGS = [b"0L", b"1L", b"-5L", b"123456789012345678901234567890L", b"7"]
SANE_FLOATS = [b"0.0", b"1.5", b"-2.25", b"1e-05", b"inf", b"nan", b"3"]
SANE_STRINGS = [b"'abc'", b'"posix"', b"'system'", b"''", b"'a\\nb'", b"'it\\'s'"]
SANE_UTF8 = [b"", b"posix", b"system", b"h\xc3\xa9llo", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80",
             b"torch._utils", b"_rebuild_tensor_v2", b"a.b", b"__class__", b"x" * 300]
SANE_ASCII = [b"", b"a", b"posix", b"system", b"os", b"eval", b"torch._utils", b"x" * 300]
NAMES = [
    ("os", "system"), ("posix", "system"), ("builtins", "eval"), ("__builtin__", "eval"),
    ("__builtin__", "set"), ("copy_reg", "_reconstructor"), ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"), ("torch", "FloatStorage"), ("numpy", "dtype"),
    ("numpy", "core._internal.sys.modules"), ("pathlib", "os.system"), ("a.b.c", "d.e"),
    ("", "x"), ("x", ""), ("m\u00e9", "n\u00f6"), ("mod with space", "n"), ("os", "__dict__"),
    ("urllib2", "urlopen"), ("UserDict", "UserDict"), ("_codecs", "encode"), ("m\r", "n"),
    ("builtins", "object.__subclasses__"), ("exceptions", "ValueError"),
]
DANGER = [("posix", "system"), ("os", "system"), ("builtins", "exec"), ("subprocess", "Popen"),
          ("pickle", "loads"), ("importlib", "import_module")]

NEEDS_MARK = {b"t", b"l", b"d", b"e", b"u", b"\x90", b"\x91", b"1", b"o"}


def u8(n):
    return bytes([n & 0xFF])


def u32(n):
    return struct.pack("<I", n & 0xFFFFFFFF)


def u64(n):
    return struct.pack("<Q", n & 0xFFFFFFFFFFFFFFFF)


def ustr_op(b):
    return (b"\x8c" + u8(len(b)) + b) if len(b) < 256 else (b"X" + u32(len(b)) + b)


class Gen:
    """Builds one stream as a list of chunks, one opcode (with its argument) per chunk."""

    def __init__(self, rng, proto):
        self.r = rng
        self.p = proto
        self.ops = []
        self.memo = {}  # index -> True (what is there does not matter here)
        self.last = None  # the index last memoized

    # -- helpers
    def emit(self, *chunks):
        self.ops.extend(chunks)

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def chance(self, p):
        return self.r.random() < p

    def some_bytes(self, n):
        return bytes(self.r.randrange(256) for _ in range(n))

    def length(self, actual, width):
        """Usually the true length; sometimes off by one or huge (subtly invalid)."""
        x = self.r.random()
        if x < 0.98:
            return actual
        if x < 0.99:
            return actual + self.pick([-1, 1, 2])
        return self.pick([(1 << (8 * width - 1)) - 1, 1 << (8 * width - 2), (1 << 8 * width) - 1])

    # -- memo
    def maybe_memoize(self):
        if not self.chance(0.2):
            return
        k = self.r.randrange(5)
        if k == 0 or self.p >= 4 and k < 3:
            self.emit(b"\x94")
            self.last = len(self.memo)
            self.memo[self.last] = True
            return
        idx = self.r.randrange(8) if self.chance(0.95) else self.pick([255, 256, 70000, 1 << 30])
        if k == 1 and idx < 256:
            self.emit(b"q" + u8(idx))
        elif k == 2:
            self.emit(b"r" + u32(idx))
        else:
            lit = str(idx).encode() if self.chance(0.9) else self.pick(INDEX_LITERALS)
            self.emit(b"p" + lit + b"\n")
            if lit != str(idx).encode():
                return
        self.memo[idx] = True
        self.last = idx

    def get(self, idx=None):
        if idx is None:
            idx = self.pick(sorted(self.memo)) if self.memo and self.chance(0.95) else \
                self.r.randrange(10)
        k = self.r.randrange(3)
        if k == 0 and idx < 256:
            self.emit(b"h" + u8(idx))
        elif k == 1:
            self.emit(b"j" + u32(idx))
        else:
            lit = str(idx).encode() if self.chance(0.85) else self.pick(INDEX_LITERALS)
            self.emit(b"g" + lit + b"\n")

    # -- scalars
    def odd(self, pool, sane):
        """An odd literal from `pool` one time in seven, else a plain one from `sane`."""
        return self.pick(pool) if self.chance(0.15) else self.pick(sane)

    def int_(self):
        k = self.r.randrange(8)
        if k == 0:
            self.emit(b"I" + self.odd(INT_LITERALS, SANE_INTS) + b"\n")
        elif k == 1:
            self.emit(b"I" + str(self.r.randint(-2**40, 2**40)).encode() + b"\n")
        elif k == 2:
            self.emit(b"J" + self.some_bytes(4))
        elif k == 3:
            self.emit(b"K" + self.some_bytes(1))
        elif k == 4:
            self.emit(b"M" + self.some_bytes(2))
        elif k == 5:
            lit = self.odd(LONG_LITERALS, SANE_LONGS) if self.chance(0.95) else (
                b"1" * self.pick([4299, 4300, 4301, 5000]) + b"L")
            self.emit(b"L" + lit + b"\n")
        elif k == 6:
            n = self.r.randrange(10)
            self.emit(b"\x8a" + u8(self.length(n, 1)) + self.some_bytes(n))
        else:
            n = self.r.randrange(13)
            size = self.length(n, 4) if self.chance(0.97) else -1
            self.emit(b"\x8b" + struct.pack("<i", max(min(size, 2**31 - 1), -2**31)) +
                      self.some_bytes(n))

    def float_(self):
        if self.chance(0.5):
            self.emit(b"F" + self.odd(FLOAT_LITERALS, SANE_FLOATS) + b"\n")
        else:
            self.emit(b"G" + (self.some_bytes(8) if self.chance(0.5) else
                              struct.pack(">d", self.r.uniform(-1e9, 1e9))))

    def str_(self):
        k = self.r.randrange(7)
        payload = self.odd(UTF8_PAYLOADS, SANE_UTF8)
        if k == 0:
            self.emit(b"S" + self.odd(STRING_ARGS, SANE_STRINGS) + b"\n")
        elif k == 1:
            b = self.odd(UTF8_PAYLOADS, SANE_ASCII)
            self.emit(b"T" + u32(self.length(len(b), 4) if self.chance(0.97) else -1) + b)
        elif k == 2:
            b = self.odd(UTF8_PAYLOADS, SANE_ASCII)[:255]
            self.emit(b"U" + u8(self.length(len(b), 1)) + b)
        elif k == 3:
            self.emit(b"V" + self.odd(UNICODE_ARGS, SANE_ASCII) + b"\n")
        elif k == 4:
            self.emit(b"X" + u32(self.length(len(payload), 4)) + payload)
        elif k == 5:
            b = payload[:255]
            self.emit(b"\x8c" + u8(self.length(len(b), 1)) + b)
        else:
            self.emit(b"\x8d" + u64(self.length(len(payload), 8)) + payload)

    def bytes_(self):
        b = self.some_bytes(self.pick([0, 1, 3, 10, 300]))
        k = self.r.randrange(4)
        if k == 0:
            self.emit(b"B" + u32(self.length(len(b), 4)) + b)
        elif k == 1:
            b = b[:255]
            self.emit(b"C" + u8(self.length(len(b), 1)) + b)
        elif k == 2:
            self.emit(b"\x8e" + u64(self.length(len(b), 8)) + b)
        else:
            self.emit(b"\x96" + u64(self.length(len(b), 8)) + b)
            if self.chance(0.3):
                self.emit(b"\x98")

    def const(self):
        self.emit(self.pick([b"N", b"\x88", b"\x89", b"I01\n", b"I00\n"]))

    # -- globals and calls
    def global_(self):
        module, name = self.pick(NAMES)
        k = self.r.randrange(3)
        if k == 0:
            m, n = module.encode(), name.encode()
            if self.chance(0.05):
                m = m + b"\xff"
            self.emit(b"c" + m + b"\n" + n + b"\n")
        else:
            for s in (module, name):
                if self.chance(0.7):
                    self.emit(ustr_op(s.encode("utf-8")))
                elif self.chance(0.5):
                    self.emit(b"V" + s.encode("raw_unicode_escape") + b"\n")
                else:
                    self.emit(b"S'" + s.encode("ascii", "replace") + b"'\n")
                self.last = None
                self.maybe_memoize()
                if self.last is not None and self.chance(0.5):  # fetch it back from the memo
                    self.emit(b"0")
                    self.get(self.last if self.chance(0.9) else None)
            if self.chance(0.05):  # a non-str operand
                self.emit(b"0")
                self.int_()
            self.emit(b"\x93")

    def callable_(self, depth):
        if depth < 2 and self.chance(0.15):
            self.call(depth + 1)
        else:
            self.global_()

    def args_tuple(self, depth, n=None):
        n = self.r.randrange(4) if n is None else n
        if n == 0:
            self.emit(b")")
        elif n <= 3 and self.chance(0.6):
            for _ in range(n):
                self.value(depth + 1)
            self.emit(bytes([0x84 + n]))
        else:
            self.emit(b"(")
            for _ in range(n):
                self.value(depth + 1)
            self.emit(b"t")

    def call(self, depth):
        k = self.r.randrange(9)
        if k <= 2:
            self.callable_(depth)
            self.args_tuple(depth)
            self.emit(b"R")
        elif k == 3:
            self.global_()
            self.args_tuple(depth)
            self.emit(b"\x81")
        elif k == 4:
            self.global_()
            self.args_tuple(depth)
            self.dict_(depth, keys_only_str=True)
            self.emit(b"\x92")
        elif k == 5:
            self.emit(b"(")
            self.callable_(depth)
            for _ in range(self.r.randrange(3)):
                self.value(depth + 1)
            self.emit(b"o")
        elif k == 6:
            self.emit(b"(")
            for _ in range(self.r.randrange(3)):
                self.value(depth + 1)
            module, name = self.pick(NAMES)
            self.emit(b"i" + module.encode() + b"\n" + name.encode() + b"\n")
        elif k == 7:
            self.emit(b"P" + self.odd([b"\xc3\xa9", b"", b"a\x00b"], [b"0", b"storage", b"a b"]) +
                      b"\n")
        else:
            if self.chance(0.7):
                self.emit(b"(", ustr_op(b"storage"))
                self.global_()
                self.emit(ustr_op(b"0"), ustr_op(b"cpu"), b"K\x04", b"t")
            else:
                self.value(depth + 1)
            self.emit(b"Q")
        self.after_call(depth)

    def after_call(self, depth):
        x = self.r.random()
        if x < 0.2:
            k = self.r.randrange(4)
            if k == 0:
                self.dict_(depth + 1)
            elif k == 1:
                self.emit(b"N")
                self.dict_(depth + 1)
                self.emit(b"\x86")
            elif k == 2:
                self.emit(b"N")
            else:
                self.value(depth + 1)
            self.emit(b"b")
        elif x < 0.27:
            self.value(depth + 1)
            self.value(depth + 1)
            self.emit(b"s")
        elif x < 0.32:
            self.value(depth + 1)
            self.emit(b"a")
        elif x < 0.36:
            self.emit(b"(")
            self.value(depth + 1)
            self.emit(self.pick([b"e", b"\x90"]))

    # -- containers
    def key(self, depth):
        k = self.r.randrange(10)
        if k < 4:
            self.str_()
        elif k < 7:
            self.int_()
        elif k == 7:
            self.const()
        elif k == 8:
            self.emit(b")")
        else:
            self.value(depth + 1)  # may be unhashable: CPython decides

    def tuple_(self, depth):
        self.args_tuple(depth, self.r.randrange(5))

    def list_(self, depth):
        if self.chance(0.3):
            self.emit(b"(")
            for _ in range(self.r.randrange(4)):
                self.value(depth + 1)
            self.emit(b"l")
            return
        self.emit(b"]")
        self.maybe_memoize()
        for _ in range(self.r.randrange(3)):
            if self.chance(0.5):
                self.value(depth + 1)
                self.emit(b"a")
            else:
                self.emit(b"(")
                for _ in range(self.r.randrange(4)):
                    self.value(depth + 1)
                self.emit(b"e")

    def dict_(self, depth, keys_only_str=False):
        n = self.r.randrange(3)
        if not keys_only_str and self.chance(0.3):
            self.emit(b"(")
            for _ in range(n):
                self.key(depth)
                self.value(depth + 1)
            if self.chance(0.05):
                self.value(depth + 1)  # odd count
            self.emit(b"d")
            return
        self.emit(b"}")
        for _ in range(n):
            several = self.chance(0.5)
            if several:
                self.emit(b"(")
            for _ in range(self.r.randrange(1, 3) if several else 1):
                if keys_only_str:
                    self.emit(ustr_op(self.pick(UTF8_PAYLOADS[1:5])))
                else:
                    self.key(depth)
                self.value(depth + 1)
            self.emit(b"u" if several else b"s")

    def set_(self, depth):
        if self.chance(0.4):
            self.emit(b"(")
            for _ in range(self.r.randrange(4)):
                self.key(depth)
            self.emit(b"\x91")
            return
        self.emit(b"\x8f")
        for _ in range(self.r.randrange(3)):
            self.emit(b"(")
            for _ in range(self.r.randrange(4)):
                self.key(depth)
            self.emit(b"\x90")

    def value(self, depth=0):
        """Emits opcodes that push one value (when the stream is valid)."""
        leaf = depth >= 3
        choices = [(self.int_, 10), (self.float_, 4), (self.str_, 10), (self.bytes_, 5),
                   (self.const, 4)]
        if self.memo:
            choices.append((self.get, 4))
        if not leaf:
            choices += [(lambda: self.tuple_(depth), 5), (lambda: self.list_(depth), 5),
                        (lambda: self.dict_(depth), 5), (lambda: self.set_(depth), 3),
                        (self.global_, 4), (lambda: self.call(depth), 8)]
        choices.append((lambda: self.emit(self.pick([b"\x82\x01", b"\x83\x01\x02",
                                                     b"\x84\x01\x00\x00\x00", b"\x97"])), 0.3))
        total = sum(w for _, w in choices)
        x = self.r.uniform(0, total)
        for fn, w in choices:
            x -= w
            if x <= 0:
                fn()
                break
        else:
            choices[0][0]()
        self.maybe_memoize()

    def noise(self):
        k = self.r.randrange(6)
        if k == 0:
            self.value(2)
            self.emit(b"2", b"0", b"0")
        elif k == 1:
            self.emit(b"(", b"1")
        elif k == 2:
            self.emit(b"(")
            self.value(2)
            self.emit(b"1")
        elif k == 3:
            self.emit(b"(", b"0")  # POP of a bare MARK pops the mark
        elif k == 4:
            self.value(2)
            self.emit(b"0")
        else:
            self.emit(b"(")
            self.value(2)
            self.emit(b"2", b"1")

    def stream(self):
        if self.p >= 2 or self.chance(0.1):
            self.emit(b"\x80" + u8(self.p if self.chance(0.97) else self.pick([6, 255, 0])))
        for _ in range(self.r.randint(1, 6)):
            if self.chance(0.3):
                self.noise()
            self.value(0)
        self.emit(b".")
        return self.ops


def random_opcode(rng):
    """One opcode with a random (plausible) argument."""
    g = Gen(rng, 5)
    k = rng.randrange(9)
    if k == 0:
        g.int_()
    elif k == 1:
        g.float_()
    elif k == 2:
        g.str_()
    elif k == 3:
        g.bytes_()
    elif k == 4:
        g.global_()
        g.ops = g.ops[-1:]
    elif k == 5:
        g.get()
    elif k == 6:
        g.memo = {}
        g.emit(rng.choice([b"q\x00", b"r\x01\x00\x00\x00", b"p0\n", b"\x94"]))
    elif k == 7:
        g.emit(b"\x95" + u64(rng.randrange(40)))
    else:
        g.emit(bytes([rng.choice(b"(.012NRabdelostu}])QQ\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92"
                                 b"\x93\x94\x97\x98\xf0")]))
    return g.ops[0]


def defect(ops, rng):
    """One opcode-level defect (the first chunk, PROTO or not, is kept)."""
    k = rng.randrange(9)
    i = rng.randrange(len(ops))
    if k == 0 and len(ops) > 1:
        del ops[i]
    elif k == 1:
        ops.insert(i, ops[i])
    elif k == 2 and i + 1 < len(ops):
        ops[i], ops[i + 1] = ops[i + 1], ops[i]
    elif k == 3:
        ops.insert(i, random_opcode(rng))
    elif k == 4:
        ops[i] = random_opcode(rng)
    elif k == 5 and ops[-1] == b".":
        ops.pop()
    elif k == 6:
        ops.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 6))))
    elif k == 7:
        for j, op in enumerate(ops):
            if op[:1] in (b"\x85", b"\x86", b"\x87", b"t"):
                ops[j] = rng.choice([b"\x85", b"\x86", b"\x87", b"t", b"l", b"d", b"\x91"])
                break
    else:
        ops.insert(i, rng.choice([b"(", b"1", b"0", b"2", b"."]))
    return ops


def frame_ops(ops, rng):
    """Well-formed framing: consecutive opcode groups, each under one FRAME."""
    head = [ops[0]] if ops and ops[0][:1] == b"\x80" else []
    body = ops[len(head):]
    out = list(head)
    i = 0
    while i < len(body):
        n = rng.randint(1, 12)
        group = b"".join(body[i:i + n])
        i += n
        if rng.random() < 0.1:
            out.append(group)  # unframed stretch between frames
        else:
            out.append(b"\x95" + u64(len(group)) + group)
    return out


def random_pickle(rng) -> bytes:
    p = rng.choice([0, 1, 2, 2, 3, 4, 4, 5, 5])
    ops = Gen(rng, p).stream()
    if rng.random() < 0.3:
        ops = defect(ops, rng)
    if rng.random() < 0.06:
        ops += Gen(rng, rng.choice([0, 2, 4])).stream()  # a second pickle
    if rng.random() < (0.6 if p >= 4 else 0.05):
        ops = frame_ops(ops, rng)
    return b"".join(ops)


def straddle_pickle(rng) -> bytes:
    """FRAME broken on purpose, hiding a payload that the file-based C unpickler reaches."""
    module, name = rng.choice(DANGER)
    pay = ustr_op(module.encode()) + ustr_op(name.encode()) + b"\x93" + ustr_op(b"true") + \
        b"\x85R."
    k = rng.randrange(5)
    if k == 0:  # BINUNICODE longer than what is left of its frame
        hidden = b"A" * 11 + b"B" + u32(len(pay))
        fr = b"X" + u32(len(hidden)) + b"xxxxx"
        return b"\x80\x04\x95" + u64(len(fr)) + fr + hidden + pay + b"."
    if k == 1:  # FRAME inside a frame, longer than what is left of it
        outer = b"\x95" + u64(len(pay)) + b"B" + u32(len(pay))
        return b"\x80\x04\x95" + u64(len(outer)) + outer + pay + b"."
    if k == 2:  # a GLOBAL line crossing the frame end
        decoy = rng.choice([b"decoy", b"collections", b"x"])
        fr = b"c" + decoy
        rest = module.encode() + b"\n" + name.encode() + b"\n" + ustr_op(b"true") + b"\x85R."
        return b"\x80\x04\x95" + u64(len(fr)) + fr + rest
    if k == 3:  # STOP before its frame ends; the C unpickler resumes after the frame
        fr = b"N." + pay
        tail = ustr_op(b"posix") + ustr_op(b"system") + b"\x93" + ustr_op(b"id") + b"\x85R."
        return b"\x80\x04\x95" + u64(len(fr)) + fr + b"\x80\x04" + tail
    # SHORT_BINUNICODE across the frame end, string read from after the frame
    hidden = module.encode()  # every DANGER module name is longer than the 1-byte pad
    fr = b"\x8c" + u8(len(hidden)) + b"p"
    return (b"\x80\x04\x95" + u64(len(fr)) + fr + hidden + ustr_op(name.encode()) + b"\x93" +
            ustr_op(b"true") + b"\x85R.")
