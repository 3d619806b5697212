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

// Characters that show nothing make two different tensor names look the same in a table.
TEST(EscapeTest, CharactersThatRenderAsNothingAreEscaped) {
  const EscapeOptions invisible{.escape_invisible = true};
  EXPECT_EQ(Escaped("w\xf3\xa0\x80\x81", invisible), "w\\u{e0001}");  // a tag character
  EXPECT_EQ(Escaped("w\xc2\xad", invisible), "w\\u{ad}");             // soft hyphen
  EXPECT_EQ(Escaped("w\xef\xb8\x8f", invisible), "w\\u{fe0f}");       // variation selector
  EXPECT_EQ(Escaped("w\xe3\x85\xa4", invisible), "w\\u{3164}");       // Hangul filler
  EXPECT_EQ(Escaped("w\xe1\xa0\x8e", invisible), "w\\u{180e}");       // Mongolian separator
  EXPECT_EQ(Escaped("caf\xc3\xa9", invisible), "caf\xc3\xa9");        // visible: kept
}

}  // namespace
}  // namespace ckptscan::base
