// Parsers for the argument grammars of pickle's text opcodes, exactly as CPython 3.11's C
// unpickler applies them (Modules/_pickle.c, Objects/longobject.c PyLong_FromString,
// Python/pystrtod.c, Objects/bytesobject.c _PyBytes_DecodeEscape, Objects/unicodeobject.c
// raw-unicode-escape), and where named Py*FromBytes, as pickle.py's pure-Python unpickler
// applies Python's int() and float() to the same lines. These are where pickletools and _pickle.c disagree, which
// pickletools-based scanners get wrong: e.g. INT accepts "0x10", "010" (octal, via strtol) and "1\0junk".
//
// All functions are pure; `line` arguments are the bytes readline() returned, newline included.
#ifndef CKPTSCAN_CORE_PICKLE_LITERALS_H_
#define CKPTSCAN_CORE_PICKLE_LITERALS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/numeric/int128.h"
#include "absl/status/statusor.h"

namespace ckptscan::pickle {

struct IntValue {
  bool fits = true;    // value is exact; false when wider than 128 bits
  absl::int128 value = 0;
  bool is_bool = false;  // INT "00\n"/"01\n" style lines produce False/True
  std::string text;      // canonical decimal when fits, else the literal as written
};

// CPython's PyLong_FromString(str, NULL, base) for base 0, 10 or 16 on a C string.
absl::StatusOr<IntValue> PyLongFromString(std::string_view cstr, int base);
// The INT opcode's argument line.
absl::StatusOr<IntValue> ParseIntLine(std::string_view line);
// The LONG opcode's argument line (a trailing 'L' before the newline is dropped).
absl::StatusOr<IntValue> ParseLongLine(std::string_view line);
// GET/PUT: a base-10 Python int that must fit a Py_ssize_t. May be negative.
absl::StatusOr<int64_t> ParseMemoIndexLine(std::string_view line);
// The FLOAT opcode's argument line (PyOS_string_to_double, overflow is an error).
absl::StatusOr<double> ParseFloatLine(std::string_view line);
// Python's float(bytes) (pickle.py's FLOAT: float(readline()[:-1])): ASCII whitespace around
// the number, '_' between digits, a value out of range is inf; anything else (a NUL, junk) is
// an error.
absl::StatusOr<double> PyFloatFromBytes(std::string_view s);
// Python's int(bytes, base) for base 0 or 10 (pickle.py's INT, LONG, GET and PUT) or 16 (the
// length of joblib < 0.10's "ZF" files): as PyLongFromString, but over the whole bytes, so a
// NUL is an error rather than an end.
absl::StatusOr<IntValue> PyIntFromBytes(std::string_view s, int base);
// LONG1/LONG4 payload: little-endian two's complement.
IntValue IntFromTwosComplement(std::string_view bytes);

// STRING's argument after the quotes are stripped: Python 2 string escapes.
absl::StatusOr<std::string> DecodeEscapedBytes(std::string_view s);
// UNICODE's argument: raw-unicode-escape, returned as UTF-8 (surrogates as 3-byte sequences).
absl::StatusOr<std::string> DecodeRawUnicodeEscape(std::string_view s);
// Latin-1 bytes to UTF-8.
std::string Latin1ToUtf8(std::string_view s);
// UTF-8 validity; `surrogatepass` accepts encoded surrogates (U+D800..U+DFFF).
bool IsValidUtf8(std::string_view s, bool surrogatepass);

}  // namespace ckptscan::pickle

#endif  // CKPTSCAN_CORE_PICKLE_LITERALS_H_
