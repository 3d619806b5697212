// Conversion against what torch.load reported for the same files
// (tests/fixtures/torch/expectations.json, recorded with Debian's torch 1.13): every tensor of
// every real checkpoint comes out of our safetensors with torch's dtype, shape and the SHA-256
// of its elements in row-major order, tied weights stored once; the output passes the strict
// validator; tensors safetensors cannot hold are refused by name.
#include "core/convert/convert.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/bf16/bf16.h"
#include "core/formats/read_file.h"
#include "core/pickle/vm.h"
#include "core/safetensors/validator.h"
#include "gmock/gmock.h"
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
      {"float32", "F32"}, {"float64", "F64"}, {"float16", "F16"},  {"bfloat16", "BF16"},
      {"int8", "I8"},     {"int16", "I16"},   {"int32", "I32"},    {"int64", "I64"},
      {"uint8", "U8"},    {"bool", "BOOL"},   {"complex64", "C64"}};
  auto it = m.find(torch_name);
  return it == m.end() ? "" : it->second;
}

// torch-quantized dtypes: written as their integer data (int_repr()).
std::string QuantizedDataName(const std::string& torch_name) {
  return torch_name == "qint8"    ? "I8"
         : torch_name == "quint8" ? "U8"
         : torch_name == "qint32" ? "I32"
                                  : "";
}

TEST(ConvertTest, EveryConvertibleFixtureMatchesTorchBitForBit) {
  nlohmann::json ex = nlohmann::json::parse(Read(kDir / "expectations.json"));
  size_t converted = 0, refused = 0;
  for (auto& [rel, expected] : ex["files"].items()) {
    const std::string format = expected["format"];
    if (format != "torch-zip" && format != "torch-legacy") continue;
    SCOPED_TRACE(rel);
    const std::string file = Read(kDir / rel);
    torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
    ASSERT_TRUE(facts.errors.empty()) << facts.errors[0].message();
    bool convertible = true;
    for (const auto& t : expected["tensors"]) {
      if (t.contains("layout") ||
          (DtypeName(t["dtype"]).empty() && QuantizedDataName(t["dtype"]).empty())) {
        convertible = false;
      }
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
      const std::string quantized = QuantizedDataName(t["dtype"]);
      EXPECT_EQ(std::string(safetensors::DtypeName(l.dtype)),
                quantized.empty() ? DtypeName(t["dtype"]) : quantized);
      if (!quantized.empty()) {
        // Its scale and zero point beside it (per tensor: F64 and I64 scalars).
        EXPECT_EQ(by_name.count(name + ".scale"), 1u);
        EXPECT_EQ(by_name.count(name + ".zero_point"), 1u);
      }
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
  EXPECT_GE(refused, 2u);  // complex128, sparse
}

TEST(ConvertTest, TiedWeightsAreStoredOnceWithAnAlias) {
  const std::string file = Read(kDir / "tied.pt");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->entries.size(), 3u);  // the Parameter once, two disjoint views
  ASSERT_EQ(plan->aliases.size(), 1u);
  EXPECT_EQ(plan->aliases.begin()->first, "encoder.embed.weight");
  EXPECT_EQ(plan->aliases.begin()->second, "decoder.lm_head.weight");
}

TEST(ConvertTest, SelectWritesOneSubtreeWithItsPrefixDropped) {
  const std::string file = Read(kDir / "train_checkpoint.pt");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
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

// A --select that names no tensor says which keys exist: at the top level, or below the part
// of the key that does exist.
TEST(ConvertTest, SelectOfNoTensorListsTheKeysThatExist) {
  const std::string file = Read(kDir / "train_checkpoint.pt");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  worker::v1::ConvertSpec spec;
  spec.set_select("modle");
  absl::StatusOr<Plan> plan = PlanFromSpec(facts, spec);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              ::testing::HasSubstr("no tensor under --select modle; keys at the top level: "));
  EXPECT_THAT(std::string(plan.status().message()), ::testing::HasSubstr("model (9 tensors)"));
  spec.set_select("model.nope");
  plan = PlanFromSpec(facts, spec);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), ::testing::HasSubstr("; keys under model: "));
  EXPECT_THAT(std::string(plan.status().message()),
              ::testing::Not(::testing::HasSubstr("optimizer")));
}

TEST(ConvertTest, ProvenanceIsRecordedInTheMetadata) {
  const std::string file = Read(kDir / "sequential.pt");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
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
    torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
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
// tests/fixtures/dtypes/dtypes_torch26.pt (torch 2.6): every dtype the converter writes.
const std::filesystem::path kDtypes =
    std::filesystem::path(CKPT_SOURCE_DIR) / "tests/fixtures/dtypes/dtypes_torch26.pt";

// torch's own tensors of that file (tests/fixtures/dtypes/expectations.json): name -> entry.
std::map<std::string, nlohmann::json> TorchDtypesTensors() {
  nlohmann::json ex = nlohmann::json::parse(Read(kDtypes.parent_path() / "expectations.json"));
  std::map<std::string, nlohmann::json> out;
  for (const auto& t : ex["files"]["dtypes_torch26.pt"]["tensors"]) out[t["name"]] = t;
  return out;
}

struct Written {
  std::string bytes;
  safetensors::Layout layout;
  Plan plan;
};

Written ConvertDtypes(const Options& options) {
  const std::string file = Read(kDtypes);
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  EXPECT_TRUE(facts.errors.empty());
  absl::StatusOr<Plan> plan = PlanConversion(facts, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  StringSink sink;
  EXPECT_TRUE(WriteSafetensors(file, facts, *plan, sink, 64).ok());
  absl::StatusOr<safetensors::Layout> layout = safetensors::Validate(sink.str(), {});
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (!layout.ok()) return {};
  return Written{sink.str(), *std::move(layout), *std::move(plan)};
}

std::vector<uint64_t> Shape(const nlohmann::json& t) {
  std::vector<uint64_t> shape;
  for (int64_t d : t["shape"].get<std::vector<int64_t>>()) shape.push_back(d);
  return shape;
}

// safetensors 0.4.5 (Debian 13) cannot read a file holding C64 (InvalidHeaderDeserialization,
// tests/convert/readback.json): complex64 is written as float32 [..., 2], the same bytes, and
// listed in __metadata__; U16/U32/U64 and the float8 pair, which it reads, are written as is.
TEST(ConvertDtypesTest, Complex64IsWrittenAsFloat32PairsAndTheRestAsIs) {
  const std::map<std::string, nlohmann::json> torch_tensors = TorchDtypesTensors();
  Written w = ConvertDtypes(Options{});
  ASSERT_FALSE(w.bytes.empty());
  EXPECT_EQ(w.layout.metadata.at(kComplexAsRealKey),
            R"(["complex64","complex64_empty","complex64_scalar","complex64_transposed"])");
  EXPECT_EQ(w.layout.metadata.at("complex64_tied"), "complex64");  // a tied alias
  std::map<std::string, std::string> dtypes;
  for (const safetensors::TensorLayout& l : w.layout.tensors) {
    SCOPED_TRACE(l.name);
    ASSERT_EQ(torch_tensors.count(l.name), 1u);
    const nlohmann::json& t = torch_tensors.at(l.name);
    std::vector<uint64_t> shape = Shape(t);
    if (t["dtype"] == "complex64") {
      EXPECT_EQ(l.dtype, safetensors::Dtype::kF32);
      shape.push_back(2);
    }
    EXPECT_NE(l.dtype, safetensors::Dtype::kC64);
    EXPECT_EQ(l.shape, shape);
    std::string_view bytes = std::string_view(w.bytes).substr(l.begin, l.end - l.begin);
    EXPECT_EQ(Sha256(bytes), t["sha256"].get<std::string>());
    dtypes[t["dtype"]] = safetensors::DtypeName(l.dtype);
  }
  EXPECT_EQ(dtypes, (std::map<std::string, std::string>{
                        {"bfloat16", "BF16"},
                        {"bool", "BOOL"},
                        {"complex64", "F32"},
                        {"float16", "F16"},
                        {"float32", "F32"},
                        {"float64", "F64"},
                        {"float8_e4m3fn", "F8_E4M3"},
                        {"float8_e5m2", "F8_E5M2"},
                        {"int16", "I16"},
                        {"int32", "I32"},
                        {"int64", "I64"},
                        {"int8", "I8"},
                        {"uint16", "U16"},
                        {"uint32", "U32"},
                        {"uint64", "U64"},
                        {"uint8", "U8"},
                    }));
  // The report's per-dtype entries come from the plan.
  std::vector<std::string> uses;
  for (const Plan::DtypeUse& u : w.plan.dtypes) {
    uses.push_back(absl::StrCat(u.source, ">", u.written, ":", u.how, ":", u.tensors));
  }
  EXPECT_EQ(uses,
            (std::vector<std::string>{
                "bfloat16>BF16:as-is:1", "bool>BOOL:as-is:1", "complex64>F32:as-real:4",
                "float16>F16:as-is:1", "float32>F32:as-is:1", "float64>F64:as-is:1",
                "float8_e4m3fn>F8_E4M3:as-is:1", "float8_e5m2>F8_E5M2:as-is:1", "int16>I16:as-is:1",
                "int32>I32:as-is:1", "int64>I64:as-is:1", "int8>I8:as-is:1", "uint16>U16:as-is:1",
                "uint32>U32:as-is:1", "uint64>U64:as-is:1", "uint8>U8:as-is:1"}));
}

TEST(ConvertDtypesTest, AllowDtypeC64WritesComplex64AsIs) {
  const std::map<std::string, nlohmann::json> torch_tensors = TorchDtypesTensors();
  Options options;
  options.allow_dtypes = {"C64"};
  Written w = ConvertDtypes(options);
  ASSERT_FALSE(w.bytes.empty());
  EXPECT_EQ(w.layout.metadata.count(kComplexAsRealKey), 0u);
  size_t complex = 0;
  for (const safetensors::TensorLayout& l : w.layout.tensors) {
    const nlohmann::json& t = torch_tensors.at(l.name);
    if (t["dtype"] != "complex64") continue;
    ++complex;
    EXPECT_EQ(l.dtype, safetensors::Dtype::kC64) << l.name;
    EXPECT_EQ(l.shape, Shape(t)) << l.name;
    EXPECT_EQ(Sha256(std::string_view(w.bytes).substr(l.begin, l.end - l.begin)),
              t["sha256"].get<std::string>());
  }
  EXPECT_EQ(complex, 4u);
  ASSERT_FALSE(w.plan.dtypes.empty());
  EXPECT_TRUE(std::any_of(w.plan.dtypes.begin(), w.plan.dtypes.end(), [](const auto& u) {
    return u.source == "complex64" && u.written == "C64" && u.how == "allowed" && u.tensors == 4;
  }));
}

TEST(ConvertDtypesTest, AllowDtypeTakesOnlyTheGatedDtypes) {
  EXPECT_TRUE(CheckAllowDtype("C64").ok());
  for (const char* name : {"U16", "F32", "c64", "F8_E8M0", "", "C64 "}) {
    SCOPED_TRACE(name);
    absl::Status s = CheckAllowDtype(name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("--allow-dtype takes only C64"), std::string_view::npos) << s;
  }
  const std::string file = Read(kDtypes);
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  Options options;
  options.allow_dtypes = {"U16"};  // a spec that bypassed the surfaces' check
  EXPECT_EQ(PlanConversion(facts, options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConvertDtypesTest, AComplexTensorWithNoRoomForTheExtraDimensionIsRefusedByName) {
  const std::string file = Read(kDtypes);
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  bool found = false;
  for (torch::TensorFact& t : facts.tensors) {
    if (t.name != "complex64_scalar") continue;
    t.shape.assign(16, 1);  // rank 16, still one element
    t.stride.assign(16, 1);
    found = true;
  }
  ASSERT_TRUE(found);
  absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("tensor 'complex64_scalar'"), std::string_view::npos);
  EXPECT_NE(plan.status().message().find("--allow-dtype C64"), std::string_view::npos);
  Options options;
  options.allow_dtypes = {"C64"};
  EXPECT_TRUE(PlanConversion(facts, options).ok());
}

TEST(ConvertDtypesTest, AComplexTensorNamedInInvalidUtf8IsRefusedNotThrown) {
  const std::string file = Read(kDtypes);
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  for (torch::TensorFact& t : facts.tensors) {
    if (t.name == "complex64_scalar") t.name = "bad\xff";  // listed in __metadata__ as JSON
  }
  absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
}

TEST(ConvertDtypesTest, ATiedNameThatMetadataReservesIsRefused) {
  const std::string file = Read(kDir / "tied.pt");
  for (const char* reserved : {"format", "ckptscan.complex64_as_real", "ckptscan.version"}) {
    SCOPED_TRACE(reserved);
    torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
    for (torch::TensorFact& t : facts.tensors) {
      // The tied pair: the first name in byte order is kept, the other becomes the alias.
      if (t.name == "decoder.lm_head.weight") t.name = "a";
      if (t.name == "encoder.embed.weight") t.name = reserved;
    }
    absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
    ASSERT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(plan.status().message().find("reserves"), std::string_view::npos);
  }
}

// ---------------------------------------------------------------- quantized weights

namespace {

const std::filesystem::path kQuantized =
    std::filesystem::path(CKPT_SOURCE_DIR) / "tests/fixtures/quantized";

struct QuantizedWritten {
  Plan plan;
  std::string bytes;
  safetensors::Layout layout;
  std::map<std::string, const safetensors::TensorLayout*> by_name;
  std::string_view Bytes(const std::string& name) const {
    const safetensors::TensorLayout& l = *by_name.at(name);
    return std::string_view(bytes).substr(l.begin, l.end - l.begin);
  }
};

// Plans and writes `facts` of `file`; the output passes the strict validator.
QuantizedWritten WriteQuantized(const std::string& file, const torch::FileFacts& facts,
                                const Options& options) {
  QuantizedWritten w;
  absl::StatusOr<Plan> plan = PlanConversion(facts, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return w;
  w.plan = *plan;
  StringSink sink;
  EXPECT_TRUE(WriteSafetensors(file, facts, w.plan, sink, 64).ok());
  w.bytes = sink.str();
  absl::StatusOr<safetensors::Layout> layout =
      safetensors::Validate(w.bytes, safetensors::ValidatorLimits{});
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (layout.ok()) w.layout = *std::move(layout);
  for (const safetensors::TensorLayout& l : w.layout.tensors) w.by_name[l.name] = &l;
  return w;
}

std::vector<std::string> Uses(const Plan& plan) {
  std::vector<std::string> uses;
  for (const Plan::DtypeUse& u : plan.dtypes) {
    uses.push_back(absl::StrCat(u.source, ">", u.written, ":", u.how, ":", u.tensors));
  }
  return uses;
}

TEST(QuantizedLayersTest, EachLayoutIsRecognisedByItsTensorsAndNothingElse) {
  using Names = std::map<std::string, std::string_view>;
  auto found = [](const Names& names) {
    std::vector<std::string> out;
    for (const QuantizedLayer& l : FindQuantizedLayers(names)) {
      out.push_back(absl::StrCat(l.prefix, "=", l.layout));
    }
    return out;
  };
  EXPECT_EQ(found({{"a.qweight", "int32"},
                   {"a.qzeros", "int32"},
                   {"a.scales", "float16"},
                   {"a.g_idx", "int32"},
                   {"b.qweight", "int32"},
                   {"b.qzeros", "int32"},
                   {"b.scales", "float32"}}),
            (std::vector<std::string>{"a=gptq", "b=awq"}));
  EXPECT_EQ(found({{"x.weight", "int8"},
                   {"x.SCB", "float32"},
                   {"y.weight", "uint8"},
                   {"y.weight.quant_state.bitsandbytes__fp4", "uint8"},
                   {"qweight", "int32"},
                   {"qzeros", "int32"},
                   {"scales", "bfloat16"}}),
            (std::vector<std::string>{"=awq", "x=bitsandbytes-int8", "y=bitsandbytes-4bit"}));
  // Look-alikes: a float qweight, a qweight without qzeros, int scales, an SCB beside a float
  // weight, a quant_state beside an int8 weight, a name that only ends in "qweight".
  EXPECT_EQ(found({{"a.qweight", "float32"},
                   {"a.qzeros", "int32"},
                   {"a.scales", "float16"},
                   {"b.qweight", "int32"},
                   {"b.scales", "float16"},
                   {"c.qweight", "int32"},
                   {"c.qzeros", "int32"},
                   {"c.scales", "int32"},
                   {"d.weight", "float16"},
                   {"d.SCB", "float32"},
                   {"e.weight", "int8"},
                   {"e.weight.quant_state.bitsandbytes__nf4", "uint8"},
                   {"f.myqweight", "int32"},
                   {"f.qzeros", "int32"},
                   {"f.scales", "float16"}}),
            std::vector<std::string>{});
}

TEST(QuantizedLayersTest, AnIndexsNamesAloneRecogniseItsLayers) {
  // A sharded set's index names its tensors without dtypes.
  std::map<std::string, std::string_view> names = {
      {"a.qweight", ""}, {"a.qzeros", ""}, {"a.scales", ""},  {"a.g_idx", ""},
      {"b.SCB", ""},     {"b.weight", ""}, {"c.qweight", ""}, {"c.scales", ""}};
  std::vector<std::string> found;
  for (const QuantizedLayer& l : FindQuantizedLayers(names, /*names_only=*/true)) {
    found.push_back(absl::StrCat(l.prefix, "=", l.layout));
  }
  EXPECT_EQ(found, (std::vector<std::string>{"a=gptq", "b=bitsandbytes-int8"}));
  EXPECT_TRUE(FindQuantizedLayers(names).empty());  // with dtypes required, none
}

TEST(QuantizedTest, ExtraLayersFromTheIndexKeepAShardsPartOfASplitLayer) {
  // The second shard of the split set holds the layer's scales and bias but not its qweight.
  const std::string file = Read(kQuantized / "sharded_gptq/pytorch_model-00002-of-00002.bin");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  Options bf16;
  bf16.to_bf16 = true;
  QuantizedWritten alone = WriteQuantized(file, facts, bf16);
  EXPECT_EQ(alone.by_name.at("model.layers.0.self_attn.q_proj.scales")->dtype,
            safetensors::Dtype::kBF16);
  bf16.extra_layers = {QuantizedLayer{"model.layers.0.self_attn.q_proj", "gptq"}};
  QuantizedWritten w = WriteQuantized(file, facts, bf16);
  EXPECT_EQ(w.by_name.at("model.layers.0.self_attn.q_proj.scales")->dtype,
            safetensors::Dtype::kF16);
  EXPECT_EQ(w.by_name.at("model.layers.0.self_attn.q_proj.bias")->dtype, safetensors::Dtype::kF16);
  EXPECT_EQ(w.by_name.at("lm_head.weight")->dtype, safetensors::Dtype::kBF16);
  ASSERT_EQ(w.plan.quantized_layers.size(), 1u);
  EXPECT_EQ(w.plan.quantized_layers[0].kept, 2u);
}

TEST(QuantizedTest, PerTensorQuantizedTensorsAreTheirIntegersPlusScaleAndZeroPoint) {
  const std::string file = Read(kQuantized / "torch_q_per_tensor.pt");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  ASSERT_TRUE(facts.errors.empty());
  nlohmann::json ex = nlohmann::json::parse(Read(kQuantized / "expectations.json"));
  QuantizedWritten w = WriteQuantized(file, facts, Options{});
  ASSERT_FALSE(w.bytes.empty());
  for (const auto& t : ex["files"]["torch_q_per_tensor.pt"]["tensors"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    ASSERT_EQ(w.by_name.count(name), 1u);
    if (!t.contains("qscheme")) {
      EXPECT_EQ(Sha256(w.Bytes(name)), t["sha256"].get<std::string>());
      continue;
    }
    EXPECT_EQ(std::string(safetensors::DtypeName(w.by_name[name]->dtype)),
              QuantizedDataName(t["dtype"]));
    EXPECT_EQ(Sha256(w.Bytes(name)), t["int_repr_sha256"].get<std::string>());
    // The pickled double, bit for bit, and the zero point as a little-endian int64.
    std::string scale_hex;
    for (unsigned char c : w.Bytes(name + ".scale")) {
      absl::StrAppend(&scale_hex, absl::Hex(c, absl::kZeroPad2));
    }
    EXPECT_EQ(scale_hex, t["scale_hex"].get<std::string>());
    EXPECT_TRUE(w.by_name[name + ".scale"]->shape.empty());
    int64_t zero = 0;
    ASSERT_EQ(w.Bytes(name + ".zero_point").size(), 8u);
    std::memcpy(&zero, w.Bytes(name + ".zero_point").data(), 8);
    EXPECT_EQ(zero, t["zero_point"].get<int64_t>());
  }
  EXPECT_EQ(nlohmann::json::parse(w.layout.metadata.at(kQuantizedKey)), nlohmann::json::parse(R"({
              "w_qint32": {"dtype": "qint32", "scheme": "per_tensor_affine"},
              "w_qint8": {"dtype": "qint8", "scheme": "per_tensor_affine"},
              "w_quint8": {"dtype": "quint8", "scheme": "per_tensor_affine"},
              "w_view": {"dtype": "qint8", "scheme": "per_tensor_affine"}})"));
  EXPECT_EQ(Uses(w.plan),
            (std::vector<std::string>{"float32>F32:as-is:1", "float64>F64:quantizer:4",
                                      "int64>I64:quantizer:4", "qint32>I32:quantized:1",
                                      "qint8>I8:quantized:2", "quint8>U8:quantized:1"}));
  // bf16 casts the float32 tensor, never a quantizer's parameters.
  Options bf16;
  bf16.to_bf16 = true;
  QuantizedWritten b = WriteQuantized(file, facts, bf16);
  EXPECT_EQ(b.by_name.at("plain")->dtype, safetensors::Dtype::kBF16);
  EXPECT_EQ(b.by_name.at("w_qint8.scale")->dtype, safetensors::Dtype::kF64);
}

TEST(QuantizedTest, PerChannelParametersComeFromTheirOwnStorages) {
  const std::string file = Read(kQuantized / "torch_q_per_channel.pt");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  ASSERT_TRUE(facts.errors.empty());
  nlohmann::json ex = nlohmann::json::parse(Read(kQuantized / "expectations.json"));
  QuantizedWritten w = WriteQuantized(file, facts, Options{});
  ASSERT_FALSE(w.bytes.empty());
  for (const auto& t : ex["files"]["torch_q_per_channel.pt"]["tensors"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    EXPECT_EQ(Sha256(w.Bytes(name)), t["int_repr_sha256"].get<std::string>());
    EXPECT_EQ(Sha256(w.Bytes(name + ".scale")), t["scales"]["sha256"].get<std::string>());
    EXPECT_EQ(Sha256(w.Bytes(name + ".zero_point")), t["zero_points"]["sha256"].get<std::string>());
    EXPECT_EQ(std::string(safetensors::DtypeName(w.by_name[name + ".scale"]->dtype)),
              DtypeName(t["scales"]["dtype"]));
    int64_t axis = -1;
    std::memcpy(&axis, w.Bytes(name + ".axis").data(), 8);
    EXPECT_EQ(axis, t["axis"].get<int64_t>());
    EXPECT_EQ(nlohmann::json::parse(w.layout.metadata.at(kQuantizedKey))[name]["scheme"],
              t["qscheme"]);
  }
}

TEST(QuantizedTest, InconsistentParametersAndTakenNamesAreRefusedByName) {
  const std::string file = Read(kQuantized / "torch_q_per_channel.pt");
  const torch::FileFacts clean = formats::ReadFile(file, pickle::Vm());
  auto refusal = [&](auto mutate) {
    torch::FileFacts facts = clean;
    for (torch::TensorFact& t : facts.tensors) {
      if (t.name == "axis1") mutate(t);
    }
    absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
    return std::string(plan.status().message());
  };
  EXPECT_NE(refusal([](torch::TensorFact& t) {
              t.qchannel[0].shape = {3};
            }).find("tensor 'axis1' cannot be converted: per-channel scales must have shape [4]"),
            std::string::npos);
  EXPECT_NE(refusal([](torch::TensorFact& t) { t.q_axis = 2; }).find("axis"), std::string::npos);
  EXPECT_NE(refusal([](torch::TensorFact& t) { t.qchannel.pop_back(); }).find("incomplete"),
            std::string::npos);
  EXPECT_NE(refusal([](torch::TensorFact& t) {
              t.qchannel[1].storage_offset = 1000;
            }).find("its zero_points: "),
            std::string::npos);
  EXPECT_NE(refusal([](torch::TensorFact& t) {
              t.qscheme = "per_tensor_symmetric";
            }).find("qscheme torch.per_tensor_symmetric is not converted"),
            std::string::npos);
  // A tensor really named like a quantized tensor's parameter.
  torch::FileFacts facts = clean;
  for (torch::TensorFact& t : facts.tensors) {
    if (t.name == "axis0") t.name = "axis1.scale";
  }
  absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("'axis1.scale' would be written twice"), std::string::npos)
      << plan.status();
}

TEST(QuantizedTest, PackedQuint4x2IsRefusedByName) {
  const std::string file = Read(kQuantized / "torch_q_packed4.pt");
  torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
  absl::StatusOr<Plan> plan = PlanConversion(facts, Options{});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("tensor 'packed' cannot be converted"), std::string::npos)
      << plan.status();
  EXPECT_NE(plan.status().message().find("quint4x2"), std::string::npos);
}

TEST(QuantizedTest, Bf16KeepsTheFloatTensorsOfQuantizedLayersUnlessCastQuantized) {
  for (const char* rel :
       {"gptq_layers.pt", "awq_layers.pt", "bnb_int8_layers.pt", "bnb_4bit_layers.pt"}) {
    SCOPED_TRACE(rel);
    const std::string file = Read(kQuantized / rel);
    torch::FileFacts facts = formats::ReadFile(file, pickle::Vm());
    Options bf16;
    bf16.to_bf16 = true;
    QuantizedWritten w = WriteQuantized(file, facts, bf16);
    ASSERT_FALSE(w.bytes.empty());
    uint64_t kept = 0;
    for (const torch::TensorFact& t : facts.tensors) {
      SCOPED_TRACE(t.name);
      const bool in_layer = t.name.rfind("model.layers.0.", 0) == 0;
      const bool is_float = t.dtype->name == "float32" || t.dtype->name == "float16";
      const safetensors::Dtype written = w.by_name.at(t.name)->dtype;
      if (is_float && in_layer) {
        EXPECT_EQ(safetensors::DtypeName(written), t.dtype->safetensors);
        ++kept;
      } else if (is_float) {
        EXPECT_EQ(written, safetensors::Dtype::kBF16);
      }
    }
    ASSERT_EQ(w.plan.quantized_layers.size(), 1u);
    EXPECT_EQ(w.plan.quantized_layers[0].layers, 2u);
    EXPECT_EQ(w.plan.quantized_layers[0].kept, kept);
    EXPECT_EQ(w.plan.quantized_layers[0].example, "model.layers.0.mlp.down_proj");
    bf16.cast_quantized = true;
    QuantizedWritten c = WriteQuantized(file, facts, bf16);
    for (const torch::TensorFact& t : facts.tensors) {
      if (t.dtype->name == "float32" || t.dtype->name == "float16") {
        EXPECT_EQ(c.by_name.at(t.name)->dtype, safetensors::Dtype::kBF16) << t.name;
      }
    }
    ASSERT_EQ(c.plan.quantized_layers.size(), 1u);
    EXPECT_EQ(c.plan.quantized_layers[0].kept, 0u);
  }
}

}  // namespace

}  // namespace ckptscan::convert
