// Text-opcode argument grammars. Every expectation below was recorded by running the same
// bytes through CPython 3.11.2's C unpickler (pickle.loads), including the cases where
// pickletools disagrees.
#include "core/pickle/literals.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace ckptscan::pickle {
namespace {

using std::string_literals::operator""s;

struct IntCase {
  std::string line;
  bool ok;
  std::string text;  // decimal, or "True"/"False" for bools
};

TEST(ParseIntLineTest, MatchesCPythonIncludingBaseZeroAndNulTruncation) {
  const IntCase cases[] = {
      {"0x10\n", true, "16"},         {"010\n", true, "8"},
      {"1\0junk\n"s, true, "1"},      {"\0\n"s, true, "0"},
      {"\0" "1\n"s, true, "False"},   {"00\n", true, "False"},
      {"01\n", true, "True"},         {" 1\n", true, "True"},
      {"1 \n", true, "1"},            {"1_000\n", true, "1000"},
      {"08\n", false, ""},            {"0o17\n", true, "15"},
      {"0b101\n", true, "5"},         {"-0x10\n", true, "-16"},
      {"0x\n", false, ""},            {"99999999999999999999\n", true, "99999999999999999999"},
      {"+1\n", true, "True"},         {" 0\n", true, "False"},
      {"\n", false, ""},              {"1__0\n", false, ""},
      {"_1\n", false, ""},
  };
  for (const IntCase& c : cases) {
    auto v = ParseIntLine(c.line);
    ASSERT_EQ(v.ok(), c.ok) << "line " << testing::PrintToString(c.line) << ": " << v.status();
    if (!c.ok) continue;
    std::string got = v->is_bool ? (v->value != 0 ? "True" : "False") : v->text;
    EXPECT_EQ(got, c.text) << testing::PrintToString(c.line);
  }
}

TEST(ParseLongLineTest, MatchesCPython) {
  EXPECT_EQ(ParseLongLine("10L\n")->text, "10");
  EXPECT_EQ(ParseLongLine("0x10\n")->text, "16");
  EXPECT_FALSE(ParseLongLine("010\n").ok());  // leading zero, unlike INT's strtol path
  EXPECT_EQ(ParseLongLine("1_0L\n")->text, "10");
  EXPECT_FALSE(ParseLongLine("L\n").ok());
  EXPECT_EQ(ParseLongLine(" 5 \n")->text, "5");
}

TEST(ParseLongLineTest, HugeValuesDoNotFitButParse) {
  std::string digits(200, '7');
  auto v = ParseLongLine(digits + "\n");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->fits);
  EXPECT_FALSE(ParseLongLine(std::string(4301, '1') + "\n").ok());  // int_max_str_digits
  EXPECT_TRUE(ParseLongLine("0x" + std::string(5000, 'f') + "\n").ok());  // no limit in hex
}

TEST(ParseFloatLineTest, MatchesCPython) {
  EXPECT_EQ(*ParseFloatLine("1.5\n"), 1.5);
  EXPECT_FALSE(ParseFloatLine(" 1.5\n").ok());
  EXPECT_FALSE(ParseFloatLine("1e\n").ok());
  EXPECT_EQ(*ParseFloatLine("1e5\n"), 100000.0);
  EXPECT_TRUE(std::isinf(*ParseFloatLine("inf\n")));
  EXPECT_LT(*ParseFloatLine("-Infinity\n"), 0);
  EXPECT_TRUE(std::isnan(*ParseFloatLine("nan\n")));
  EXPECT_FALSE(ParseFloatLine("1e400\n").ok());  // OverflowError
  EXPECT_EQ(*ParseFloatLine("1e-400\n"), 0.0);
  EXPECT_EQ(*ParseFloatLine(".5\n"), 0.5);
  EXPECT_EQ(*ParseFloatLine("5.\n"), 5.0);
  EXPECT_FALSE(ParseFloatLine(".\n").ok());
  EXPECT_FALSE(ParseFloatLine("1_0\n").ok());
  EXPECT_FALSE(ParseFloatLine("0x10\n").ok());
  EXPECT_EQ(*ParseFloatLine("1.5\0zz\n"s), 1.5);
}

TEST(ParseMemoIndexLineTest, BaseTenWithWhitespaceAndUnderscores) {
  EXPECT_EQ(*ParseMemoIndexLine("0\n"), 0);
  EXPECT_EQ(*ParseMemoIndexLine(" 1\n"), 1);
  EXPECT_EQ(*ParseMemoIndexLine("1_0\n"), 10);
  EXPECT_EQ(*ParseMemoIndexLine("-1\n"), -1);
  EXPECT_EQ(*ParseMemoIndexLine("007\n"), 7);  // explicit base 10 allows leading zeros
  EXPECT_FALSE(ParseMemoIndexLine("0x1\n").ok());
  EXPECT_FALSE(ParseMemoIndexLine("99999999999999999999\n").ok());
}

// int(bytes, 16), as joblib reads a "ZF" file's length field (checked against CPython 3.11).
TEST(PyIntFromBytesTest, BaseSixteenMatchesCPython) {
  struct Case {
    std::string bytes;
    bool ok;
    std::string text;
  } cases[] = {
      {"0x337              ", true, "823"},
      {" 0x10 ", true, "16"},
      {"0X1f", true, "31"},
      {"1f", true, "31"},
      {"0x_1f", true, "31"},
      {"0x1_f", true, "31"},
      {"+0x5", true, "5"},
      {"-0x5", true, "-5"},
      {"\t0x10\v", true, "16"},
      {"0xffffffffffffffff", true, "18446744073709551615"},
      {"0x10000000000000000", true, "18446744073709551616"},
      {"0x1__f", false, ""},
      {"0x1f_", false, ""},
      {"_1f", false, ""},
      {"0x", false, ""},
      {"", false, ""},
      {"   ", false, ""},
      {"1 2", false, ""},
      {"0_x1", false, ""},
      {"\x1c" "10", false, ""},
      {"0x\0" "1"s, false, ""},
      {"0x10\n\x78\x9c", false, ""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<IntValue> v = PyIntFromBytes(c.bytes, 16);
    EXPECT_EQ(v.ok(), c.ok) << c.bytes;
    if (v.ok() && c.ok) {
      EXPECT_EQ(v->text, c.text) << c.bytes;
    }
  }
}

TEST(DecodeEscapedBytesTest, MatchesCPython) {
  EXPECT_EQ(*DecodeEscapedBytes("a\\x41"), "aA");
  EXPECT_EQ(*DecodeEscapedBytes("a\\q"), "a\\q");
  EXPECT_FALSE(DecodeEscapedBytes("\\x4").ok());
  EXPECT_EQ(*DecodeEscapedBytes("\\101"), "A");
  EXPECT_FALSE(DecodeEscapedBytes("abc\\").ok());
  EXPECT_EQ(*DecodeEscapedBytes("o\\\ns"), "os");  // backslash-newline is dropped
}

TEST(DecodeRawUnicodeEscapeTest, MatchesCPython) {
  EXPECT_EQ(*DecodeRawUnicodeEscape("a\\u0041"), "aA");
  EXPECT_EQ(*DecodeRawUnicodeEscape("\\\\u0041"), "\\\\u0041");
  EXPECT_EQ(*DecodeRawUnicodeEscape("a\\x41"), "a\\x41");
  EXPECT_FALSE(DecodeRawUnicodeEscape("\\u004").ok());
  EXPECT_FALSE(DecodeRawUnicodeEscape("\\U00110000").ok());
  EXPECT_EQ(*DecodeRawUnicodeEscape("\\"), "\\");
  EXPECT_EQ(*DecodeRawUnicodeEscape("\\u006fs"), "os");
  EXPECT_EQ(*DecodeRawUnicodeEscape("\xe9"), "\xc3\xa9");  // Latin-1 byte → U+00E9
}

TEST(IntFromTwosComplementTest, SignAndWidth) {
  EXPECT_EQ(IntFromTwosComplement("").text, "0");
  EXPECT_EQ(IntFromTwosComplement("\xff").text, "-1");
  EXPECT_EQ(IntFromTwosComplement("\xff\x00"s).text, "255");
  EXPECT_EQ(IntFromTwosComplement("\x00\x80"s).text, "-32768");
  // torch's legacy magic number 0x1950a86a20f9469cfc6c
  EXPECT_EQ(IntFromTwosComplement("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19").text,
            "119547037146038801333356");
  EXPECT_FALSE(IntFromTwosComplement(std::string(40, '\x11')).fits);
}

TEST(IsValidUtf8Test, SurrogatePassOnlyWhenAsked) {
  EXPECT_TRUE(IsValidUtf8("posix", false));
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80", false));
  EXPECT_TRUE(IsValidUtf8("\xed\xa0\x80", true));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf", true));  // overlong
  EXPECT_FALSE(IsValidUtf8("\xe2\x82", true));  // truncated
}

}  // namespace
}  // namespace ckptscan::pickle
