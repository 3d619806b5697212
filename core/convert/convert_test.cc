// Conversion against what torch.load reported for the same files
// (tests/fixtures/torch/expectations.json, recorded with Debian's torch 1.13): every tensor of
// every real checkpoint comes out of our safetensors with torch's dtype, shape and the SHA-256
// of its elements in row-major order, tied weights stored once; the output passes the strict
// validator; tensors safetensors cannot hold are refused by name.
#include "core/convert/convert.h"

#include <cstring>

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "core/bf16/bf16.h"
#include "core/pickle/vm.h"
#include "core/safetensors/validator.h"
#include "core/torch/detect.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ckptscan::convert {
namespace {

const std::filesystem::path kDir = std::filesystem::path(CKPT_SOURCE_DIR) / "tests/fixtures/torch";

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string Sha256(std::string_view s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), md, &len, EVP_sha256(), nullptr);
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(k[md[i] >> 4]);
    out.push_back(k[md[i] & 15]);
  }
  return out;
}

std::string DtypeName(const std::string& torch_name) {
  static const std::map<std::string, std::string> m = {
      {"float32", "F32"}, {"float64", "F64"}, {"float16", "F16"}, {"bfloat16", "BF16"},
      {"int8", "I8"},     {"int16", "I16"},   {"int32", "I32"},   {"int64", "I64"},
      {"uint8", "U8"},    {"bool", "BOOL"},   {"complex64", "C64"}};
  auto it = m.find(torch_name);
  return it == m.end() ? "" : it->second;
}

TEST(ConvertTest, EveryConvertibleFixtureMatchesTorchBitForBit) {
  nlohmann::json ex = nlohmann::json::parse(Read(kDir / "expectations.json"));
  size_t converted = 0, refused = 0;
  for (auto& [rel, expected] : ex["files"].items()) {
    const std::string format = expected["format"];
    if (format != "torch-zip" && format != "torch-legacy") continue;
    SCOPED_TRACE(rel);
    const std::string file = Read(kDir / rel);
    torch::FileFacts facts = torch::ReadFile(file, pickle::Vm());
    ASSERT_TRUE(facts.errors.empty()) << facts.errors[0].message();
    bool convertible = true;
    for (const auto& t : expected["tensors"]) {
      if (t.contains("layout") || DtypeName(t["dtype"]).empty()) convertible = false;
    }
    absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
    if (!convertible) {
      ASSERT_FALSE(plan.ok());
      EXPECT_NE(plan.status().message().find("tensor '"), std::string::npos) << plan.status();
      ++refused;
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    StringSink sink;
    ASSERT_TRUE(WriteSafetensors(file, facts, *plan, sink, 256).ok());
    absl::StatusOr<safetensors::Layout> layout =
        safetensors::Validate(sink.str(), safetensors::ValidatorLimits{});
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->file_size, sink.str().size());
    EXPECT_EQ(layout->metadata.at("format"), "pt");
    std::map<std::string, const safetensors::TensorLayout*> by_name;
    for (const safetensors::TensorLayout& t : layout->tensors) by_name[t.name] = &t;
    for (const auto& t : expected["tensors"]) {
      std::string name = t["name"];
      SCOPED_TRACE(name);
      if (layout->metadata.count(name) > 0) name = layout->metadata.at(name);  // tied: alias
      ASSERT_EQ(by_name.count(name), 1u);
      const safetensors::TensorLayout& l = *by_name[name];
      EXPECT_EQ(std::string(safetensors::DtypeName(l.dtype)), DtypeName(t["dtype"]));
      std::vector<uint64_t> shape;
      for (int64_t d : t["shape"].get<std::vector<int64_t>>()) shape.push_back(d);
      EXPECT_EQ(l.shape, shape);
      std::string_view bytes = std::string_view(sink.str()).substr(l.begin, l.end - l.begin);
      EXPECT_EQ(Sha256(bytes), t["sha256"].get<std::string>());
    }
    // Same input, same bytes.
    StringSink again;
    ASSERT_TRUE(WriteSafetensors(file, facts, *PlanConversion(facts, Options{}), again).ok());
    EXPECT_EQ(again.str(), sink.str());
    ++converted;
  }
  EXPECT_GE(converted, 12u);
  EXPECT_GE(refused, 3u);  // complex128, quantized, sparse
}

TEST(ConvertTest, TiedWeightsAreStoredOnceWithAnAlias) {
  const std::string file = Read(kDir / "tied.pt");
  torch::FileFacts facts = torch::ReadFile(file, pickle::Vm());
  absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->entries.size(), 3u);  // the Parameter once, two disjoint views
  ASSERT_EQ(plan->aliases.size(), 1u);
  EXPECT_EQ(plan->aliases.begin()->first, "encoder.embed.weight");
  EXPECT_EQ(plan->aliases.begin()->second, "decoder.lm_head.weight");
}

TEST(ConvertTest, SelectWritesOneSubtreeWithItsPrefixDropped) {
  const std::string file = Read(kDir / "train_checkpoint.pt");
  torch::FileFacts facts = torch::ReadFile(file, pickle::Vm());
  Options options;
  options.select = "model";
  absl::StatusOr<Plan> plan = PlanConversion(facts, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Plan::Entry& e : plan->entries) {
    EXPECT_EQ(e.name.find("model."), std::string::npos) << e.name;
    EXPECT_EQ(e.name.find("optimizer"), std::string::npos) << e.name;
  }
  EXPECT_EQ(plan->entries.size(), 9u);  // the state dict, num_batches_tracked included
}

TEST(ConvertTest, ProvenanceIsRecordedInTheMetadata) {
  const std::string file = Read(kDir / "sequential.pt");
  torch::FileFacts facts = torch::ReadFile(file, pickle::Vm());
  Options options;
  options.source_sha256 = std::string(64, 'a');
  options.source_format = "torch-zip";
  options.scanner_version = "0.1.0";
  absl::StatusOr<Plan> plan = PlanConversion(facts, options);
  ASSERT_TRUE(plan.ok());
  StringSink sink;
  ASSERT_TRUE(WriteSafetensors(file, facts, *plan, sink).ok());
  absl::StatusOr<safetensors::Layout> layout =
      safetensors::Validate(sink.str(), safetensors::ValidatorLimits{});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->metadata.at("ckptscan.source_sha256"), std::string(64, 'a'));
  EXPECT_EQ(layout->metadata.at("ckptscan.source_format"), "torch-zip");
  EXPECT_EQ(layout->metadata.at("ckptscan.dtype_policy"), "keep");
}

TEST(ConvertTest, Bf16PolicyRoundsFloatTensorsToNearestEvenAndKeepsTheRest) {
  for (const char* rel :
       {"sequential.pt", "views.pt", "shapes.pt", "legacy_views.pt", "train_checkpoint.pt"}) {
    SCOPED_TRACE(rel);
    const std::string file = Read(kDir / rel);
    torch::FileFacts facts = torch::ReadFile(file, pickle::Vm());
    absl::StatusOr<Plan> keep_plan = PlanConversion(facts, Options{});
    ASSERT_TRUE(keep_plan.ok()) << keep_plan.status();
    StringSink keep;
    ASSERT_TRUE(WriteSafetensors(file, facts, *keep_plan, keep).ok());
    Options bf16_options;
    bf16_options.to_bf16 = true;
    absl::StatusOr<Plan> bf16_plan = PlanConversion(facts, bf16_options);
    ASSERT_TRUE(bf16_plan.ok()) << bf16_plan.status();
    StringSink bf;
    ASSERT_TRUE(WriteSafetensors(file, facts, *bf16_plan, bf, 100).ok());
    absl::StatusOr<safetensors::Layout> kl = safetensors::Validate(keep.str(), {});
    absl::StatusOr<safetensors::Layout> bl = safetensors::Validate(bf.str(), {});
    ASSERT_TRUE(kl.ok() && bl.ok());
    EXPECT_EQ(bl->metadata.at("ckptscan.dtype_policy"), "bf16");
    std::map<std::string, const safetensors::TensorLayout*> bf_by_name;
    for (const auto& t : bl->tensors) bf_by_name[t.name] = &t;
    for (const safetensors::TensorLayout& k : kl->tensors) {
      SCOPED_TRACE(k.name);
      const safetensors::TensorLayout& b = *bf_by_name.at(k.name);
      std::string_view kb = std::string_view(keep.str()).substr(k.begin, k.end - k.begin);
      std::string_view bb = std::string_view(bf.str()).substr(b.begin, b.end - b.begin);
      EXPECT_EQ(b.shape, k.shape);
      if (k.dtype == safetensors::Dtype::kF32 || k.dtype == safetensors::Dtype::kF16) {
        ASSERT_EQ(b.dtype, safetensors::Dtype::kBF16);
        const size_t es = k.dtype == safetensors::Dtype::kF32 ? 4 : 2;
        ASSERT_EQ(bb.size() * es, kb.size() * 2);
        for (size_t i = 0; i < bb.size() / 2; ++i) {
          float x;
          if (es == 4) {
            std::memcpy(&x, kb.data() + 4 * i, 4);
          } else {
            uint16_t h;
            std::memcpy(&h, kb.data() + 2 * i, 2);
            x = bf16::Fp16ToFp32Scalar(h);
          }
          uint16_t want = bf16::Fp32ToBf16Scalar(x);
          uint16_t got = static_cast<uint16_t>(static_cast<unsigned char>(bb[2 * i]) |
                                               static_cast<unsigned char>(bb[2 * i + 1]) << 8);
          ASSERT_EQ(got, want) << "element " << i;
        }
      } else {
        EXPECT_EQ(b.dtype, k.dtype);
        EXPECT_EQ(bb, kb);
      }
    }
  }
}

}  // namespace
}  // namespace ckptscan::convert
