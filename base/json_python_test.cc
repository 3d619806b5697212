#include "base/json_python.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/limit_status.h"
#include "gtest/gtest.h"

namespace ckptscan::base {
namespace {

using std::string_literals::operator""s;

// Records every event as "kind:value@offset".
class Recorder final : public JsonSink {
 public:
  std::vector<std::string> events;

  absl::Status StartObject(uint64_t o) override { return Add("{", "", o); }
  absl::Status Key(std::string k, uint64_t o) override { return Add("key", k, o); }
  absl::Status EndObject(uint64_t o) override { return Add("}", "", o); }
  absl::Status StartArray(uint64_t o) override { return Add("[", "", o); }
  absl::Status EndArray(uint64_t o) override { return Add("]", "", o); }
  absl::Status String(std::string v, uint64_t o) override { return Add("str", v, o); }
  absl::Status Number(const JsonNumber& n, uint64_t o) override {
    return Add(n.kind == JsonNumber::Kind::kInt ? "int" : "num", std::string(n.text), o);
  }
  absl::Status Bool(bool v, uint64_t o) override { return Add("bool", v ? "true" : "false", o); }
  absl::Status Null(uint64_t o) override { return Add("null", "", o); }

 private:
  absl::Status Add(std::string_view kind, std::string_view v, uint64_t o) {
    events.push_back(absl::StrCat(std::string(kind), v.empty() ? "" : ":", std::string(v), "@", o));
    return absl::OkStatus();
  }
};

absl::Status Parse(std::string_view bytes, Recorder* r, uint64_t* offset = nullptr,
                   uint32_t depth = 64) {
  uint64_t ignored = 0;
  return ParsePythonJson(bytes, depth, r, offset != nullptr ? offset : &ignored);
}

std::vector<std::string> Events(std::string_view bytes) {
  Recorder r;
  const absl::Status s = Parse(bytes, &r);
  EXPECT_TRUE(s.ok()) << s;
  return r.events;
}

std::string Utf16Le(std::string_view ascii) {
  std::string out;
  for (char c : ascii) {
    out.push_back(c);
    out.push_back('\0');
  }
  return out;
}

// json.loads(bytes) decodes with 'utf-8-sig' when a UTF-8 BOM leads: the BOM is no error.
TEST(JsonPythonTest, AUtf8BomIsSkippedAndOffsetsCountIt) {
  EXPECT_EQ(Events("\xEF\xBB\xBF{\"a\": 1}"),
            (std::vector<std::string>{"{@3", "key:a@4", "int:1@9", "}@10"}));
  EXPECT_TRUE(StartsWithJsonObject("\xEF\xBB\xBF \n{"));
  Recorder r;
  EXPECT_FALSE(Parse("\xEF\xBB\xBF\xEF\xBB\xBF{}", &r).ok());  // a second BOM is a character
}

TEST(JsonPythonTest, Utf16And32AreDetectedWithAndWithoutABom) {
  const std::vector<std::string> want = {"{@0", "key:a@2", "str:\xC3\xA9@10", "}@16"};
  EXPECT_EQ(Events(Utf16Le("{\"a\":\"") + "\xE9\0"s + Utf16Le("\"}")), want);
  EXPECT_EQ(DetectJsonEncoding(Utf16Le("{}")), JsonEncoding::kUtf16Le);
  EXPECT_EQ(DetectJsonEncoding("\0{\0}"s), JsonEncoding::kUtf16Be);
  EXPECT_EQ(DetectJsonEncoding("{\0\0\0}\0\0\0"s), JsonEncoding::kUtf32Le);
  EXPECT_EQ(DetectJsonEncoding("\0\0\0{\0\0\0}"s), JsonEncoding::kUtf32Be);
  EXPECT_EQ(DetectJsonEncoding("\xFF\xFE\0\0"s), JsonEncoding::kUtf32Bom);
  EXPECT_EQ(DetectJsonEncoding("\xFE\xFF\0{"s), JsonEncoding::kUtf16Bom);
  EXPECT_EQ(DetectJsonEncoding("{\0"s), JsonEncoding::kUtf16Le);  // two bytes
  EXPECT_EQ(DetectJsonEncoding("{}\0"s), JsonEncoding::kUtf8);    // three bytes: the default
  EXPECT_EQ(Events("\xFE\xFF\0{\0}"s), (std::vector<std::string>{"{@2", "}@4"}));
  EXPECT_EQ(Events("\0\0\xFE\xFF\0\0\0{\0\0\0}"s), (std::vector<std::string>{"{@4", "}@8"}));
  EXPECT_TRUE(StartsWithJsonObject(Utf16Le(" \t{")));
  EXPECT_TRUE(StartsWithJsonObject("\0\0\0{"s));
}

TEST(JsonPythonTest, BytesThatDoNotDecodeAnywhereRefuseTheWholeDocument) {
  Recorder r;
  uint64_t offset = 0;
  // An overlong '/' at the end: Python decodes everything before it parses.
  EXPECT_FALSE(Parse("{\"a\": 1}  \xC0\xAF", &r, &offset).ok());
  EXPECT_EQ(offset, 10u);
  EXPECT_TRUE(r.events.empty());
  EXPECT_FALSE(Parse(Utf16Le("{}") + "\0"s, &r).ok());  // odd UTF-16 length: truncated
  EXPECT_FALSE(Parse("{\0\0\0\0\0\x11\0"s, &r).ok());   // UTF-32 past U+10FFFF
}

// surrogatepass: UTF-8-encoded and lone UTF-16 surrogates are text (reaching us as U+FFFD).
TEST(JsonPythonTest, EncodedAndLoneSurrogatesAreText) {
  EXPECT_EQ(Events("{\"a\":\"\xED\xA0\x80\"}"),
            (std::vector<std::string>{"{@0", "key:a@1", "str:\xEF\xBF\xBD@5", "}@10"}));
  EXPECT_EQ(Events(Utf16Le("[\"") + "\x00\xDC"s + Utf16Le("\"]"))[1], "str:\xEF\xBF\xBD@2");
  EXPECT_EQ(Events(Utf16Le("[\"") + "\x00\xD8\x00\xDC"s + Utf16Le("\"]"))[1],
            "str:\xF0\x90\x80\x80@2");  // a real pair joins
}

TEST(JsonPythonTest, EscapedLoneSurrogatesAreTextAndPairsJoin) {
  EXPECT_EQ(Events(R"(["\ud800x"])")[1], "str:\xEF\xBF\xBDx@1");
  EXPECT_EQ(Events(R"(["\udc00"])")[1], "str:\xEF\xBF\xBD@1");
  EXPECT_EQ(Events(R"(["\ud800\udc00"])")[1], "str:\xF0\x90\x80\x80@1");
  EXPECT_EQ(Events(R"(["\uD800\uD800\uDC00"])")[1], "str:\xEF\xBF\xBD\xF0\x90\x80\x80@1");
  EXPECT_EQ(Events(R"(["\u004cambda"])")[1], "str:Lambda@1");
  Recorder r;
  EXPECT_FALSE(Parse(R"(["\ud800\u12x"])", &r).ok());
  EXPECT_FALSE(Parse(R"(["\x"])", &r).ok());
}

TEST(JsonPythonTest, NanAndInfinitiesAreNumbers) {
  EXPECT_EQ(
      Events("[NaN, Infinity, -Infinity]"),
      (std::vector<std::string>{"[@0", "num:NaN@1", "num:Infinity@6", "num:-Infinity@16", "]@25"}));
  Recorder r;
  EXPECT_FALSE(Parse("[-NaN]", &r).ok());
  EXPECT_FALSE(Parse("[+1]", &r).ok());
  EXPECT_FALSE(Parse("[nan]", &r).ok());
}

// Repeated keys are no error: each reaches the sink, and the sink keeps the last (Python).
TEST(JsonPythonTest, RepeatedKeysAreNoError) {
  EXPECT_EQ(Events(R"({"a":1,"a":2})"),
            (std::vector<std::string>{"{@0", "key:a@1", "int:1@5", "key:a@7", "int:2@11", "}@12"}));
}

TEST(JsonPythonTest, IntegersStopAtIntsDigitLimitFloatsNever) {
  Recorder r;
  EXPECT_TRUE(Parse("[" + std::string(kMaxIntDigits, '7') + "]", &r).ok());
  EXPECT_FALSE(Parse("[" + std::string(kMaxIntDigits + 1, '7') + "]", &r).ok());
  EXPECT_FALSE(Parse("[-" + std::string(kMaxIntDigits + 1, '7') + "]", &r).ok());
  EXPECT_TRUE(Parse("[" + std::string(kMaxIntDigits + 1, '7') + ".5]", &r).ok());
  EXPECT_TRUE(Parse("[1e999999]", &r).ok());
}

TEST(JsonPythonTest, NumbersFollowTheScannerAndFitCheckedUnsigned) {
  class Last final : public JsonSink {
   public:
    JsonNumber n;
    std::string text;
    absl::Status StartObject(uint64_t) override { return absl::OkStatus(); }
    absl::Status Key(std::string, uint64_t) override { return absl::OkStatus(); }
    absl::Status EndObject(uint64_t) override { return absl::OkStatus(); }
    absl::Status StartArray(uint64_t) override { return absl::OkStatus(); }
    absl::Status EndArray(uint64_t) override { return absl::OkStatus(); }
    absl::Status String(std::string, uint64_t) override { return absl::OkStatus(); }
    absl::Status Number(const JsonNumber& v, uint64_t) override {
      n = v;
      text = std::string(v.text);
      return absl::OkStatus();
    }
    absl::Status Bool(bool, uint64_t) override { return absl::OkStatus(); }
    absl::Status Null(uint64_t) override { return absl::OkStatus(); }
  } last;
  uint64_t offset = 0;
  ASSERT_TRUE(ParsePythonJson("[18446744073709551615]", 8, &last, &offset).ok());
  EXPECT_EQ(last.n.unsigned_value, UINT64_MAX);
  ASSERT_TRUE(ParsePythonJson("[18446744073709551616]", 8, &last, &offset).ok());
  EXPECT_FALSE(last.n.unsigned_value.has_value());
  ASSERT_TRUE(ParsePythonJson("[-0]", 8, &last, &offset).ok());
  EXPECT_FALSE(last.n.unsigned_value.has_value());
  ASSERT_TRUE(ParsePythonJson("[1.5E+3]", 8, &last, &offset).ok());
  EXPECT_EQ(last.n.kind, JsonNumber::Kind::kFloat);
  EXPECT_EQ(last.text, "1.5E+3");
  EXPECT_FALSE(ParsePythonJson("[01]", 8, &last, &offset).ok());
  EXPECT_FALSE(ParsePythonJson("[1.]", 8, &last, &offset).ok());
  EXPECT_FALSE(ParsePythonJson("[1e]", 8, &last, &offset).ok());
  EXPECT_FALSE(ParsePythonJson("[.5]", 8, &last, &offset).ok());
}

TEST(JsonPythonTest, WhatPythonRefusesIsRefused) {
  Recorder r;
  for (std::string_view bad :
       {"", " ", "{", "{\"a\":1,}", "[1,]", "{\"a\" 1}", "{'a':1}", "{\"a\":1} x", "[\"\x01\"]",
        "\x0c{}", "\xC2\xA0{}", "{\"a\":tru}", "[1 2]", "{1:2}", "\"unterminated"}) {
    EXPECT_FALSE(Parse(bad, &r).ok()) << bad;
  }
  EXPECT_TRUE(Parse("[\"\x7f\"]", &r).ok());  // DEL is no control character to Python
  EXPECT_TRUE(Parse(" \t\r\n[] \n", &r).ok());
  EXPECT_TRUE(Parse("\"top-level string\"", &r).ok());
}

TEST(JsonPythonTest, NestingDeeperThanTheLimitIsALimitNotRecursion) {
  Recorder r;
  uint64_t offset = 0;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const absl::Status s = Parse(deep, &r, &offset, 64);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(LimitOf(s).has_value());
  EXPECT_EQ(LimitOf(s)->name, "max_json_depth");
  EXPECT_EQ(offset, 64u);
  EXPECT_TRUE(Parse(std::string(64, '[') + std::string(64, ']'), &r).ok());
  // A million levels under a limit that allows them: memory, no C stack.
  Recorder deep_ok;
  const std::string million = std::string(1000000, '[') + std::string(1000000, ']');
  EXPECT_TRUE(Parse(std::string("{\"a\": ") + million + "}", &deep_ok, nullptr, 2000000).ok());
}

TEST(JsonPythonTest, TheSinksStatusStopsTheParseAtItsOffset) {
  class Stop final : public JsonSink {
   public:
    absl::Status StartObject(uint64_t) override { return absl::OkStatus(); }
    absl::Status Key(std::string k, uint64_t) override {
      return k == "stop" ? absl::InvalidArgumentError("stopped") : absl::OkStatus();
    }
    absl::Status EndObject(uint64_t) override { return absl::OkStatus(); }
    absl::Status StartArray(uint64_t) override { return absl::OkStatus(); }
    absl::Status EndArray(uint64_t) override { return absl::OkStatus(); }
    absl::Status String(std::string, uint64_t) override { return absl::OkStatus(); }
    absl::Status Number(const JsonNumber&, uint64_t) override { return absl::OkStatus(); }
    absl::Status Bool(bool, uint64_t) override { return absl::OkStatus(); }
    absl::Status Null(uint64_t) override { return absl::OkStatus(); }
  } stop;
  uint64_t offset = 0;
  const absl::Status s = ParsePythonJson(R"({"a":1, "stop":2})", 8, &stop, &offset);
  EXPECT_EQ(s.message(), "stopped");
  EXPECT_EQ(offset, 8u);
}

TEST(JsonPythonTest, OnlyAnObjectStartsLikeAnObject) {
  EXPECT_TRUE(StartsWithJsonObject(" \n\t{"));
  EXPECT_FALSE(StartsWithJsonObject("[1]"));
  EXPECT_FALSE(StartsWithJsonObject("\x80\x02}q\x00."));
  EXPECT_FALSE(StartsWithJsonObject("   "));
  EXPECT_FALSE(StartsWithJsonObject(""));
  EXPECT_FALSE(StartsWithJsonObject("\xC0{"));
}

}  // namespace
}  // namespace ckptscan::base
