#include "base/escape.h"

#include <string>

#include "gtest/gtest.h"

namespace ckptscan::base {
namespace {

using std::string_literals::operator""s;

TEST(EscapeTest, ControlCharactersAndNewlinesCannotBreakALine) {
  EXPECT_EQ(Escaped("a\nb\rc\td\x1b[31m\x7f"), "a\\nb\\rc\\td\\x1b[31m\\x7f");
  EXPECT_EQ(Escaped("nul\0x"s), "nul\\x00x");
}

TEST(EscapeTest, MalformedUtf8BecomesByteEscapesAndValidUtf8IsKept) {
  EXPECT_EQ(Escaped("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(Escaped("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a lone surrogate
  EXPECT_EQ(Escaped("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(Escaped("\xe2\x82"), "\\xe2\\x82");           // truncated
}

TEST(EscapeTest, BackslashesAndInvisibleCharactersFollowTheOptions) {
  EXPECT_EQ(Escaped("a\\b"), "a\\\\b");
  EXPECT_EQ(Escaped("a\\b", {.escape_backslash = false}), "a\\b");
  // U+202E RIGHT-TO-LEFT OVERRIDE would reorder what a terminal shows.
  EXPECT_EQ(Escaped("x\xe2\x80\xaey", {.escape_invisible = true}), "x\\u{202e}y");
  EXPECT_EQ(Escaped("x\xe2\x80\xaey"), "x\xe2\x80\xaey");
}

}  // namespace
}  // namespace ckptscan::base
