#include "core/torch/hf_index.h"

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/strings.h"
#include "gtest/gtest.h"

namespace ckptscan::torch {
namespace {

FileFacts Read(std::string_view json, const IndexLimits& limits = {}) {
  FileFacts f;
  ReadShardIndex(json, limits, &f);
  return f;
}

// The only error, its code, and whether its message mentions `text`.
void ExpectError(const FileFacts& f, v1::ErrorCode code, std::string_view text) {
  ASSERT_EQ(f.errors.size(), 1u) << f.format;
  EXPECT_EQ(f.errors[0].code(), code) << f.errors[0].message();
  EXPECT_TRUE(absl::StrContains(f.errors[0].message(), base::AbslView(text)))
      << f.errors[0].message();
  EXPECT_FALSE(f.shard_index.present);
}

TEST(HfIndexTest, TheTransformersFixtureIsRead) {
  std::ifstream in(std::string(CKPT_SOURCE_DIR) +
                   "/tests/fixtures/torch/sharded/pytorch_model.bin.index.json");
  std::stringstream ss;
  ss << in.rdbuf();
  ASSERT_TRUE(LooksLikeJson(ss.str()));
  const FileFacts f = Read(ss.str());
  EXPECT_TRUE(f.errors.empty());
  EXPECT_EQ(f.format, "hf-index");
  ASSERT_TRUE(f.shard_index.present);
  EXPECT_TRUE(f.shard_index.has_total_size);
  EXPECT_EQ(f.shard_index.total_size, 132u);
  ASSERT_EQ(f.shard_index.weight_map.size(), 9u);
  EXPECT_EQ(f.shard_index.weight_map[0],
            std::make_pair(std::string("0.bias"), std::string("pytorch_model-00001-of-00002.bin")));
}

TEST(HfIndexTest, ExtraMembersAreSkippedWhateverTheirShape) {
  const FileFacts f =
      Read(R"( {"metadata": {"total_size": 8, "format": ["pt", {"x": null}]}, "extra": [1, [2]],)"
           R"( "weight_map": {"a": "s.bin"}} )"
           "\n");
  EXPECT_TRUE(f.errors.empty()) << f.errors[0].message();
  EXPECT_EQ(f.shard_index.weight_map.size(), 1u);
}

TEST(HfIndexTest, AConfigsQuantizationMethodIsReadAsAPlainNameOnly) {
  // transformers' config.json: not an index but a JSON document (no error), and its declared
  // method is kept for convert.
  FileFacts f = Read(R"({"architectures": ["LlamaForCausalLM"], "quantization_config":)"
                     R"( {"bits": 4, "group_size": 128, "quant_method": "gptq",)"
                     R"( "meta": {"quant_method": "not this one"}}, "torch_dtype": "float16"})");
  EXPECT_EQ(f.format, "json");
  EXPECT_EQ(f.quant_method, "gptq");
  EXPECT_TRUE(f.errors.empty());
  EXPECT_FALSE(f.shard_index.present);
  EXPECT_EQ(
      Read(R"({"quantization_config": {"quant_method": "fp8"}, "weight_map": {}})").quant_method,
      "fp8");
  // Not a plain name, not a string, not an object, too long: nothing is declared.
  for (const char* json :
       {R"({"quantization_config": {"quant_method": "gptq\u001b[31m"}})",
        R"({"quantization_config": {"quant_method": ["gptq"]}})",
        R"({"quantization_config": {"quant_method": 4}})", R"({"quantization_config": null})",
        R"({"quantization_config": ["quant_method", "gptq"]})",
        R"({"config": {"quantization_config": {"quant_method": "gptq"}}})"}) {
    SCOPED_TRACE(json);
    EXPECT_EQ(Read(json).quant_method, "");
  }
  EXPECT_EQ(Read(absl::StrCat(R"({"quantization_config": {"quant_method": ")",
                              std::string(kMaxQuantMethodBytes + 1, 'a'), R"("}})"))
                .quant_method,
            "");
  // A repeated key: the last value wins (Python's dict), and invalid JSON keeps nothing.
  f = Read(R"({"quantization_config": {"quant_method": "awq", "quant_method": "gptq"}})");
  EXPECT_TRUE(f.errors.empty());
  EXPECT_EQ(f.quant_method, "gptq");
  EXPECT_EQ(
      Read(R"({"quantization_config": {"quant_method": "awq", "quant_method": 4}})").quant_method,
      "");
  EXPECT_EQ(Read(R"({"quantization_config": {"quant_method": "awq"}, "quantization_config": {}})")
                .quant_method,
            "");
  EXPECT_EQ(Read(R"({"quantization_config": {"quant_method": "awq"}, )").quant_method, "");
}

TEST(HfIndexTest, ATotalSizeThatIsNotACountIsNotRead) {
  const FileFacts f = Read(R"({"metadata": {"total_size": 1.5e3}, "weight_map": {}})");
  EXPECT_TRUE(f.errors.empty());
  EXPECT_FALSE(f.shard_index.has_total_size);
}

// transformers reads the index with json.load: a repeated key is no error, its last value
// wins and keeps the first one's place.
TEST(HfIndexTest, RepeatedKeysTakeTheLastValueAsPythonDoes) {
  FileFacts f = Read(R"({"weight_map": {"a": "s.bin"}, "weight_map": {"b": "t.bin"}})");
  ASSERT_TRUE(f.errors.empty());
  EXPECT_EQ(f.shard_index.weight_map,
            (std::vector<std::pair<std::string, std::string>>{{"b", "t.bin"}}));
  f = Read(R"({"weight_map": {"a": "s.bin", "b": "u.bin", "a": "t.bin"}})");
  ASSERT_TRUE(f.errors.empty());
  EXPECT_EQ(f.shard_index.weight_map,
            (std::vector<std::pair<std::string, std::string>>{{"a", "t.bin"}, {"b", "u.bin"}}));
  f = Read(R"({"metadata": {"total_size": 8, "total_size": "x"}, "weight_map": {}})");
  EXPECT_TRUE(f.errors.empty());
  EXPECT_FALSE(f.shard_index.has_total_size);
  f = Read(R"({"metadata": {"total_size": 8}, "metadata": {}, "weight_map": {}})");
  EXPECT_FALSE(f.shard_index.has_total_size);
  EXPECT_TRUE(Read(R"({"x": [{"k": 1, "k": 2}], "weight_map": {}})").errors.empty());
  // A repeated name counts once towards max_entries.
  IndexLimits small;
  small.max_entries = 1;
  EXPECT_TRUE(Read(R"({"weight_map": {"a": "s", "a": "t"}})", small).errors.empty());
}

// json.loads(bytes): a UTF-8 BOM, UTF-16 and UTF-32 are decoded; NaN and Infinity are numbers.
TEST(HfIndexTest, TheIndexIsReadAsPythonsJsonReadsBytes) {
  const std::string utf8 = R"({"metadata": {"total_size": 4}, "weight_map": {"w": "s.bin"}})";
  std::string utf16;
  for (char c : utf8) {
    utf16.push_back(c);
    utf16.push_back('\0');
  }
  for (const std::string& json : {"\xEF\xBB\xBF" + utf8, utf16, "\xFF\xFE" + utf16}) {
    ASSERT_TRUE(LooksLikeJson(json));
    const FileFacts f = Read(json);
    ASSERT_TRUE(f.errors.empty()) << f.errors[0].message();
    EXPECT_EQ(f.format, "hf-index");
    EXPECT_EQ(f.shard_index.total_size, 4u);
    EXPECT_EQ(f.shard_index.weight_map.size(), 1u);
  }
  const FileFacts f =
      Read(R"({"metadata": {"total_size": NaN, "x": -Infinity}, "weight_map": {}})");
  EXPECT_TRUE(f.errors.empty());
  EXPECT_FALSE(f.shard_index.has_total_size);
}

TEST(HfIndexTest, ShardFileNamesMustStayInTheIndexDirectory) {
  for (const char* bad : {"../x.bin", "/etc/passwd", "sub/x.bin", "..", "."}) {
    ExpectError(Read(absl::StrCat(R"({"weight_map": {"w": ")", bad, R"("}})")),
                v1::ERROR_CODE_MALFORMED, "not a plain file name");
  }
  ExpectError(Read(R"({"weight_map": {"w": "a\u0000b"}})"), v1::ERROR_CODE_MALFORMED,
              "not a plain file");
}

TEST(HfIndexTest, WrongTypesAreErrors) {
  ExpectError(Read(R"({"weight_map": {"w": 3}})"), v1::ERROR_CODE_MALFORMED, "must be a file name");
  ExpectError(Read(R"({"weight_map": {"w": ["a"]}})"), v1::ERROR_CODE_MALFORMED,
              "must be a file name");
  ExpectError(Read(R"({"weight_map": ["a"]})"), v1::ERROR_CODE_MALFORMED,
              "weight_map must be an object");
  ExpectError(Read(R"({"metadata": 3, "weight_map": {}})"), v1::ERROR_CODE_MALFORMED,
              "metadata must be an object");
}

TEST(HfIndexTest, OnlyWhatPythonReadsIsAccepted) {
  const FileFacts trailing = Read(R"({"weight_map": {}} x)");
  ExpectError(trailing, v1::ERROR_CODE_MALFORMED, "not valid JSON");
  EXPECT_EQ(trailing.errors[0].location().offset(), 19u);
  ExpectError(Read(R"({"weight_map": {}, /* c */ })"), v1::ERROR_CODE_MALFORMED, "not valid JSON");
  ExpectError(Read(R"({"weight_map": {},})"), v1::ERROR_CODE_MALFORMED, "not valid JSON");
  ExpectError(Read("{\"weight_map\": {\"\xff\": \"a\"}}"), v1::ERROR_CODE_MALFORMED,
              "not valid JSON");
  ExpectError(Read(R"({"weight_map": {})"), v1::ERROR_CODE_MALFORMED, "not valid JSON");
}

TEST(HfIndexTest, JsonWithoutAWeightMapIsUnsupported) {
  const FileFacts f = Read(R"({"architectures": ["Bert"]})");
  EXPECT_EQ(f.format, "json");
  EXPECT_TRUE(f.errors.empty());
  EXPECT_FALSE(f.shard_index.present);
}

// The only error is a limit error naming `name` = `value` (limit_name / limit_value).
void ExpectLimit(const FileFacts& f, std::string_view text, std::string_view name, uint64_t value) {
  ExpectError(f, v1::ERROR_CODE_LIMIT, text);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].limit_name(), name);
  EXPECT_EQ(f.errors[0].limit_value(), value);
}

TEST(HfIndexTest, LimitsAreNamed) {
  IndexLimits small;
  small.max_entries = 2;
  ExpectLimit(Read(R"({"weight_map": {"a": "s", "b": "s", "c": "s"}})", small),
              "max_index_entries", "max_index_entries", 2);
  small = IndexLimits{};
  small.max_name_bytes = 3;
  ExpectLimit(Read(R"({"weight_map": {"abcd": "s"}})", small), "max_index_name_bytes", "max_index_name_bytes",
              3);
  small = IndexLimits{};
  small.max_depth = 3;
  ExpectLimit(Read(R"({"x": [[[[1]]]], "weight_map": {}})", small), "max_json_depth", "max_json_depth", 3);
  small = IndexLimits{};
  small.max_bytes = 10;
  ExpectLimit(Read(R"({"weight_map": {}})", small), "max_bytes", "max_index_bytes", 10);
}

TEST(HfIndexTest, DeepNestingCostsNoStack) {
  std::string deep =
      R"({"x": )" + std::string(100000, '[') + std::string(100000, ']') + R"(, "weight_map": {}})";
  IndexLimits unlimited;
  unlimited.max_depth = 200000;
  EXPECT_TRUE(Read(deep, unlimited).errors.empty());
  ExpectError(Read(deep), v1::ERROR_CODE_LIMIT, "max_json_depth");
}

TEST(HfIndexTest, OnlyAnObjectLooksLikeJson) {
  EXPECT_TRUE(LooksLikeJson(" \n\t{"));
  EXPECT_FALSE(LooksLikeJson("[1]"));
  EXPECT_FALSE(LooksLikeJson("\x80\x02}q\x00."));
  EXPECT_FALSE(LooksLikeJson("   "));
  EXPECT_TRUE(LooksLikeJson("\xEF\xBB\xBF\n{"));
  EXPECT_TRUE(LooksLikeJson(std::string("\0\0\0{", 4)));
}

}  // namespace
}  // namespace ckptscan::torch
