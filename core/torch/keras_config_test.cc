#include "core/torch/keras_config.h"

#include <string>
#include <string_view>
#include <vector>

#include "core/torch/repo_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::torch {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The kinds judged for a config.json text.
std::vector<std::string> Kinds(std::string_view json) {
  RepoJson repo;
  uint64_t offset = 0;
  EXPECT_TRUE(ReadRepoJson(json, IndexLimits{}, &repo, &offset, /*objects=*/true).ok()) << json;
  std::vector<std::string> out;
  for (const KerasFinding& f : JudgeKerasObjects(repo.objects)) out.push_back(f.kind);
  return out;
}

TEST(KerasConfigTest, KerasOwnObjectsPass) {
  EXPECT_THAT(Kinds(R"({"module": "keras", "class_name": "Sequential", "config": {"layers": [
      {"module": "keras.layers", "class_name": "Dense", "config": {"units": 2,
       "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                              "config": {"seed": null}, "registered_name": null}},
       "registered_name": null},
      {"module": "keras.src.layers", "class_name": "Dropout", "config": {"rate": 0.5}},
      {"class_name": "BatchNormalization", "config": {}},
      {"module": "keras.activations", "class_name": "function", "config": "relu",
       "registered_name": "relu"},
      {"class_name": "__numpy__", "config": {"value": [1], "dtype": "float32"}}]}})"),
              IsEmpty());
  // Objects elsewhere in a transformers config are not Keras's business: none here.
  EXPECT_THAT(Kinds(R"({"architectures": ["BertModel"], "hidden_size": 8})"), IsEmpty());
}

TEST(KerasConfigTest, AttackShapesAreFlagged) {
  EXPECT_THAT(Kinds(R"({"class_name": "Lambda", "config": {"function": {"class_name":
      "__lambda__", "config": {"code": "4wAA"}}}})"),
              ElementsAre("lambda", "lambda"));  // the inner function closes first
  EXPECT_THAT(Kinds(R"({"module": "os", "class_name": "function", "config": "system"})"),
              ElementsAre("function"));
  EXPECT_THAT(Kinds(R"({"module": "subprocess.run", "class_name": "Popen", "config": {}})"),
              ElementsAre("dangerous_object"));
  EXPECT_THAT(Kinds(R"({"module": "keras.src.saving.serialization_lib", "class_name":
      "function", "config": "enable_unsafe_deserialization"})"),
              ElementsAre("dangerous_object"));
  EXPECT_THAT(Kinds(R"({"module": "keras.utils", "class_name": "function", "config": "x",
      "registered_name": "get_file"})"),
              ElementsAre("dangerous_object"));
  EXPECT_THAT(Kinds(R"({"module": "keras.layers", "class_name": "TFSMLayer", "config": {}})"),
              ElementsAre("dangerous_object"));
  EXPECT_THAT(Kinds(R"({"module": "kerasx.layers", "class_name": "Dense", "config": {}})"),
              ElementsAre("foreign_object"));
  EXPECT_THAT(Kinds(R"({"module": "keras", "class_name": "__import__", "config": {}})"),
              ElementsAre("foreign_object"));
  EXPECT_THAT(Kinds(R"({"module": "keras.layers", "class_name": "Mine", "config": {},
      "registered_name": "pkg>Mine"})"),
              ElementsAre("custom_object"));
}

TEST(KerasConfigTest, FindingsPointAtTheObject) {
  const std::string json = R"({"a": [1, {"module": "os", "class_name": "X"}]})";
  RepoJson repo;
  uint64_t offset = 0;
  ASSERT_TRUE(ReadRepoJson(json, IndexLimits{}, &repo, &offset, true).ok());
  const std::vector<KerasFinding> f = JudgeKerasObjects(repo.objects);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].offset, json.find("{\"module\""));
}

// Keras reads config.json with json.loads(bytes): what Python accepts is judged, never refused.
TEST(KerasConfigTest, AConfigPythonReadsIsJudgedWhateverItsEncoding) {
  const std::string lambda = R"({"class_name": "Lambda", "config": {"x": NaN}})";
  EXPECT_THAT(Kinds("\xEF\xBB\xBF" + lambda), ElementsAre("lambda"));
  std::string utf16be;
  for (char c : lambda) {
    utf16be.push_back('\0');
    utf16be.push_back(c);
  }
  EXPECT_THAT(Kinds(utf16be), ElementsAre("lambda"));
  // An escaped name is the name; a lone surrogate elsewhere is no error.
  EXPECT_THAT(Kinds(R"({"class_name": "\u004cambda", "config": {"n": "\ud800"}})"),
              ElementsAre("lambda"));
}

// A repeated key: Keras gets the last value (a dict), so the object is judged by it.
TEST(KerasConfigTest, ARepeatedKeyIsJudgedByItsLastValue) {
  EXPECT_THAT(Kinds(R"({"class_name": "Dense", "class_name": "Lambda", "config": {}})"),
              ElementsAre("lambda"));
  EXPECT_THAT(Kinds(R"({"class_name": "Lambda", "class_name": "Dense", "config": {}})"), IsEmpty());
  EXPECT_THAT(
      Kinds(R"({"module": "keras.layers", "class_name": "Dense", "module": "os", "config": {}})"),
      ElementsAre("dangerous_object"));
  EXPECT_THAT(
      Kinds(R"({"module": "os", "class_name": "Dense", "module": "keras.layers", "config": {}})"),
      IsEmpty());
  // A class_name that ends up no string names nothing Keras builds by name.
  EXPECT_THAT(Kinds(R"({"class_name": "Lambda", "class_name": null, "config": {}})"), IsEmpty());
}

TEST(KerasConfigTest, RepeatedAutoMapAndTemplatesKeepTheLastValue) {
  RepoJson repo;
  uint64_t offset = 0;
  ASSERT_TRUE(ReadRepoJson(R"({"auto_map": {"AutoModel": "a.B", "AutoModel": "c.D"},)"
                           R"( "chat_template": "x", "chat_template": "{{ y }}"})",
                           IndexLimits{}, &repo, &offset)
                  .ok());
  ASSERT_EQ(repo.auto_map.size(), 1u);
  EXPECT_EQ(repo.auto_map[0].second, "c.D");
  EXPECT_EQ(repo.auto_map_total, 1u);
  ASSERT_EQ(repo.templates.size(), 1u);
  EXPECT_EQ(repo.templates[0].text, "{{ y }}");
  EXPECT_EQ(repo.templates[0].offset, 94u);
  repo = RepoJson{};
  ASSERT_TRUE(ReadRepoJson(R"({"auto_map": {"AutoModel": "a.B"}, "auto_map": null})", IndexLimits{},
                           &repo, &offset)
                  .ok());
  EXPECT_TRUE(repo.auto_map.empty());
}

}  // namespace
}  // namespace ckptscan::torch
