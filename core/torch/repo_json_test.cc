#include "core/torch/repo_json.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::torch {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

RepoJson Read(std::string_view json) {
  RepoJson repo;
  uint64_t offset = 0;
  EXPECT_TRUE(ReadRepoJson(json, IndexLimits{}, &repo, &offset).ok()) << json;
  return repo;
}

TEST(RepoJsonTest, AutoMapObjectOfStringsAndLists) {
  const RepoJson r = Read(R"({"auto_map": {"AutoConfig": "configuration_x.XConfig",
      "AutoTokenizer": ["tokenization_x.SlowTok", null, "tokenization_x.FastTok"]}})");
  EXPECT_THAT(r.auto_map, ElementsAre(Pair("AutoConfig", "configuration_x.XConfig"),
                                      Pair("AutoTokenizer", "tokenization_x.SlowTok"),
                                      Pair("AutoTokenizer", "tokenization_x.FastTok")));
  EXPECT_EQ(r.auto_map_total, 3u);
}

TEST(RepoJsonTest, AutoMapLegacyListIsAutoTokenizers) {
  const RepoJson r = Read(R"({"auto_map": ["tok.SlowTok", null, "org/repo--tok.FastTok"]})");
  EXPECT_THAT(r.auto_map, ElementsAre(Pair("AutoTokenizer", "tok.SlowTok"),
                                      Pair("AutoTokenizer", "org/repo--tok.FastTok")));
  EXPECT_EQ(r.auto_map_offset, 1u);
}

TEST(RepoJsonTest, AutoMapPlainString) {
  EXPECT_THAT(Read(R"({"auto_map": "modeling_x.Model"})").auto_map,
              ElementsAre(Pair("", "modeling_x.Model")));
}

TEST(RepoJsonTest, AutoMapNestedListsInsideTheObject) {
  EXPECT_THAT(Read(R"({"auto_map": {"AutoTokenizer": [["a.Slow"], {"x": "b.Fast"}]}})").auto_map,
              ElementsAre(Pair("AutoTokenizer", "a.Slow"), Pair("AutoTokenizer", "b.Fast")));
}

TEST(RepoJsonTest, AutoMapRepeatedKeyKeepsTheLastValue) {
  EXPECT_THAT(Read(R"({"auto_map": {"AutoModel": "a.A", "AutoModel": "b.B"}})").auto_map,
              ElementsAre(Pair("AutoModel", "b.B")));
  EXPECT_THAT(Read(R"({"auto_map": {"AutoModel": "a.A"}, "auto_map": []})").auto_map, IsEmpty());
}

TEST(RepoJsonTest, AutoMapOverTheBoundIsCounted) {
  std::string json = R"({"auto_map": [)";
  for (size_t i = 0; i < kMaxAutoMapEntries + 5; ++i)
    absl::StrAppend(&json, i ? "," : "", "\"m.C\"");
  json += "]}";
  const RepoJson r = Read(json);
  EXPECT_EQ(r.auto_map.size(), kMaxAutoMapEntries);
  EXPECT_EQ(r.auto_map_total, kMaxAutoMapEntries + 5);
}

TEST(RepoJsonTest, AutoMapBelowTheTopLevelIsNoAutoMap) {
  EXPECT_THAT(Read(R"({"x": {"auto_map": {"AutoModel": "a.A"}}})").auto_map, IsEmpty());
}

TEST(RepoJsonTest, CustomPipelinesImpl) {
  const RepoJson r = Read(R"({"custom_pipelines": {"pair-classification": {
      "impl": "pair_pipeline.PairPipeline", "pt": ["AutoModelForSequenceClassification"],
      "tf": []}, "other": {"impl": "org/repo--p.P"}}})");
  ASSERT_EQ(r.pipelines.size(), 2u);
  EXPECT_EQ(r.pipelines[0].task, "pair-classification");
  EXPECT_EQ(r.pipelines[0].impl, "pair_pipeline.PairPipeline");
  EXPECT_EQ(r.pipelines[1].impl, "org/repo--p.P");
  EXPECT_EQ(r.pipelines_total, 2u);
}

TEST(RepoJsonTest, TargetsAtAnyDepthWithTheirPlace) {
  const RepoJson r = Read(R"({"_target_": "a.Top", "model": {"layers": [1,
      {"_target_": "torch.nn.ReLU"}, {"act": {"_target_": "os.system", "_args_": ["id"]}}]},
      "opt": {"_partial_": true, "_target_": "torch.optim.Adam"}})");
  ASSERT_EQ(r.targets.size(), 4u);
  EXPECT_EQ(r.targets[0].target, "a.Top");
  EXPECT_EQ(r.targets[0].where, "");
  EXPECT_EQ(r.targets[1].where, "model.layers[1]");
  EXPECT_EQ(r.targets[2].target, "os.system");
  EXPECT_EQ(r.targets[2].where, "model.layers[2].act");
  EXPECT_TRUE(r.targets[2].args);
  EXPECT_FALSE(r.targets[2].partial);
  EXPECT_EQ(r.targets[3].where, "opt");
  EXPECT_TRUE(r.targets[3].partial);
}

TEST(RepoJsonTest, RepeatedTargetKeepsBothValues) {
  const RepoJson r = Read(R"({"a": {"_target_": "os.system", "_target_": "torch.nn.ReLU"}})");
  ASSERT_EQ(r.targets.size(), 2u);
  EXPECT_EQ(r.targets[0].target, "os.system");
  EXPECT_EQ(r.targets[1].target, "torch.nn.ReLU");
}

TEST(RepoJsonTest, PartialFalseIsNoPartial) {
  const RepoJson r = Read(R"({"_target_": "x.Y", "_partial_": true, "_partial_": false})");
  ASSERT_EQ(r.targets.size(), 1u);
  EXPECT_FALSE(r.targets[0].partial);
}

TEST(RepoJsonTest, NonStringTargetIsNoTarget) {
  EXPECT_THAT(Read(R"({"_target_": 1, "b": {"_target_": null}})").targets, IsEmpty());
}

TEST(RepoJsonTest, TargetsOverTheBoundAreCountedAndJudged) {
  std::string json = "[";
  for (size_t i = 0; i < kMaxConfigTargets; ++i) absl::StrAppend(&json, "{\"_target_\": \"a.B\"},");
  json += R"({"_target_": "os.system"}, {"_target_": "c.D"}])";
  const RepoJson r = Read(json);
  EXPECT_EQ(r.targets.size(), kMaxConfigTargets);
  EXPECT_EQ(r.targets_total, kMaxConfigTargets + 2);
  EXPECT_EQ(r.targets_dropped_code, 1u);
}

TEST(RepoJsonTest, PlaceIsCut) {
  const std::string key(1000, 'k');
  const RepoJson r = Read(absl::StrCat(R"({")", key, R"(": {"_target_": "a.B"}})"));
  ASSERT_EQ(r.targets.size(), 1u);
  EXPECT_EQ(r.targets[0].where.size(), kMaxWhereBytes + 3);
}

TEST(RepoJsonTest, BaseModelReference) {
  const RepoJson r = Read(R"({"base_model_name_or_path": "/srv/models/base", "r": 8})");
  EXPECT_TRUE(r.has_base_model);
  EXPECT_EQ(r.base_model, "/srv/models/base");
  EXPECT_EQ(r.base_model_offset, 28u);
  EXPECT_FALSE(
      Read(R"({"base_model_name_or_path": "/x", "base_model_name_or_path": null})").has_base_model);
}

}  // namespace
}  // namespace ckptscan::torch
