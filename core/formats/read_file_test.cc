// Our readers against what torch.load and numpy.load reported for the same files
// (tests/fixtures/torch/expectations.json, recorded by gen_torch_fixtures.py with Debian's
// torch 1.13): every tensor's name, dtype, shape, strides, storage offset, which tensors share
// a storage, the storage's size, and the SHA-256 of its elements gathered through our facts.
#include "core/formats/read_file.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/pickle/vm.h"
#include "core/torch/file_facts.h"
#include "core/torch/tensors.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ckptscan::formats {
namespace {

using torch::ContainerAnomaly;
using torch::DTypeFromName;
using torch::FileFacts;
using torch::MemberFacts;
using torch::StorageData;
using torch::StorageRef;
using torch::TensorFact;

const std::filesystem::path kDir = std::filesystem::path(CKPT_SOURCE_DIR) / "tests/fixtures/torch";

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

nlohmann::json Expectations() { return nlohmann::json::parse(Read(kDir / "expectations.json")); }

std::string Hex(const unsigned char* d, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(k[d[i] >> 4]);
    out.push_back(k[d[i] & 15]);
  }
  return out;
}

// The tensor's elements in row-major order, read from the file through its storage data.
std::string Gather(const std::string& file, const FileFacts& f, const TensorFact& t) {
  const StorageData& sd = f.storage_data.at(static_cast<size_t>(t.storage));
  const size_t es = t.dtype->size;
  std::string out;
  const uint64_t n = t.numel();
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t e = t.storage_offset;
    for (size_t d = 0; d < idx.size(); ++d) e += static_cast<uint64_t>(idx[d] * t.stride[d]);
    out.append(file, sd.offset + e * es, es);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::string Sha256(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}

void CompareWithTorch(const std::string& rel, const nlohmann::json& expected) {
  SCOPED_TRACE(rel);
  const std::string file = Read(kDir / rel);
  FileFacts f = ReadFile(file, pickle::Vm());
  EXPECT_EQ(f.format, expected["format"].get<std::string>());
  for (const v1::ScanError& e : f.errors) ADD_FAILURE() << "error: " << e.message();
  const auto& tensors = expected["tensors"];
  ASSERT_EQ(f.tensors.size(), tensors.size());
  std::map<int64_t, int32_t> group_to_storage;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& e = tensors[i];
    const TensorFact& t = f.tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, e["name"].get<std::string>());
    if (e.contains("layout")) {
      EXPECT_EQ(t.kind, TensorFact::Kind::kSparse);
      EXPECT_FALSE(t.problem.empty());
      continue;
    }
    ASSERT_NE(t.dtype, nullptr);
    EXPECT_EQ(std::string(t.dtype->name), e["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, e["shape"].get<std::vector<int64_t>>());
    if (e.contains("stride")) {
      EXPECT_EQ(t.stride, e["stride"].get<std::vector<int64_t>>());
      EXPECT_EQ(t.storage_offset, e["storage_offset"].get<uint64_t>());
      EXPECT_EQ(t.requires_grad, e["requires_grad"].get<bool>());
      EXPECT_EQ(t.parameter, e["parameter"].get<bool>());
      // Tensors torch puts on one storage are on one storage for us, and only those.
      auto [it, inserted] = group_to_storage.emplace(e["storage_group"].get<int64_t>(), t.storage);
      EXPECT_EQ(it->second, t.storage);
      const StorageRef& s = f.storages.at(static_cast<size_t>(t.storage));
      EXPECT_EQ(s.numel * t.dtype->size, e["storage_nbytes"].get<uint64_t>());
      EXPECT_EQ(f.storage_data.at(static_cast<size_t>(t.storage)).nbytes,
                e["storage_nbytes"].get<uint64_t>());
    }
    if (t.kind == TensorFact::Kind::kDense) {
      EXPECT_EQ(Sha256(Gather(file, f, t)), e["sha256"].get<std::string>());
    }
  }
  std::set<int32_t> distinct;
  for (const auto& [group, storage] : group_to_storage) distinct.insert(storage);
  EXPECT_EQ(distinct.size(), group_to_storage.size()) << "two torch storages merged into one";
}

TEST(FormatsTest, EveryFixtureMatchesWhatTorchAndNumpyReported) {
  nlohmann::json ex = Expectations();
  size_t files = 0;
  for (auto& [rel, expected] : ex["files"].items()) {
    CompareWithTorch(rel, expected);
    ++files;
  }
  EXPECT_GE(files, 20u);
}

// A checkout made without Git LFS holds pointers where the weights should be: never SAFE,
// whatever the name (git-lfs reads pointers of up to 1,024 bytes).
TEST(FormatsTest, GitLfsPointerIsNotPresentWhateverItsName) {
  const std::string pointer =
      "version https://git-lfs.github.com/spec/v1\n"
      "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
      "size 12345\n";
  for (const char* name : {"pytorch_model.bin", "model.safetensors", "tokenizer.json", ""}) {
    ReadOptions options;
    options.file_name = name;
    const FileFacts f = ReadFile(pointer, pickle::Vm(), options);
    ASSERT_EQ(f.errors.size(), 1u) << name;
    EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_NOT_PRESENT) << name;
    EXPECT_THAT(f.errors[0].message(), testing::HasSubstr("git lfs pull"));
    EXPECT_THAT(f.errors[0].message(), testing::HasSubstr("size 12345"));
  }
  // The old spec name, no oid: still a pointer to git-lfs.
  EXPECT_EQ(ReadFile("version https://hawser.github.com/spec/v1\n", pickle::Vm()).errors.size(),
            1u);
  // As git-lfs decodes one: leading white space (Go's bytes.TrimSpace: ASCII and Unicode),
  // git-media's version URL, only the first 1,024 bytes.
  for (const std::string& variant :
       {"\n" + pointer, "  " + pointer, "\t" + pointer, "\r\n" + pointer, "\x0b" + pointer,
        "\xc2\xa0" + pointer, "\xc2\x85" + pointer, "\xe3\x80\x80" + pointer,
        "\xe2\x80\xa8" + pointer, "\xe2\x80\x8a" + pointer, "\xe2\x80\x80" + pointer,
        pointer + std::string(2000, ' '),
        std::string("version http://git-media.io/v/2\noid sha256:00\nsize 1\n")}) {
    const FileFacts f = ReadFile(variant, pickle::Vm());
    ASSERT_EQ(f.errors.size(), 1u) << variant;
    EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_NOT_PRESENT) << variant;
  }
  // Text that merely mentions git-lfs is text; a BOM is no white space to git-lfs.
  EXPECT_TRUE(ReadFile("see https://git-lfs.github.com/spec/v1\n", pickle::Vm()).errors.empty());
  EXPECT_TRUE(ReadFile("\xef\xbb\xbf" + pointer, pickle::Vm()).errors.empty());
}

// sentence-transformers' modules.json: each type is imported by name and its load() called on
// the entry's folder (a torch module's load is torch.load); a folder the walk never reads
// (.git, outside, absolute) leaves the model unverified.
TEST(FormatsTest, SentenceTransformerModulesAreJudged) {
  const auto read = [](std::string_view json, const char* name = "modules.json") {
    ReadOptions options;
    options.file_name = name;
    return ReadFile(json, pickle::Vm(), options);
  };
  const auto kinds = [](const FileFacts& f) {
    std::vector<std::string> out;
    for (const auto& a : f.anomalies) out.push_back(a.kind);
    return out;
  };
  const FileFacts benign = read(
      R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
          {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
  EXPECT_TRUE(benign.errors.empty());
  EXPECT_TRUE(benign.anomalies.empty());
  const FileFacts torch_type =
      read(R"([{"path": "w", "type": "sentence_transformers.SentenceTransformer.torch"}])");
  EXPECT_EQ(kinds(torch_type), std::vector<std::string>{"config_code"});
  const FileFacts custom = read(R"([{"path": "x", "type": "my_module.Layer"}])");
  EXPECT_EQ(kinds(custom), std::vector<std::string>{"remote_code"});
  // Below sentence-transformers' own package but not one of its module classes.
  for (const char* type : {"sentence_transformers.models.Transformer.torch",
                           "sentence_transformers.models.__builtins__",
                           "sentence_transformers.models.", "sentence_transformers.util.torch"}) {
    const FileFacts f = read(absl::StrCat(R"([{"path": "x", "type": ")", type, R"("}])"));
    EXPECT_FALSE(f.anomalies.empty()) << type;
  }
  for (const char* path : {".git", ".git/w", "/abs/model", "../elsewhere", "a/../../b"}) {
    const FileFacts f = read(absl::StrCat(R"([{"type": "sentence_transformers.models.Transformer", "path": ")",
                                          path, R"("}])"));
    ASSERT_EQ(f.errors.size(), 1u) << path;
    EXPECT_THAT(f.errors[0].message(), testing::HasSubstr("not verified")) << path;
  }
  // The same list under another name is no modules.json.
  EXPECT_TRUE(read(R"([{"path": ".git", "type": "x.torch"}])", "other.json").errors.empty());
}

TEST(FormatsTest, AdapterBaseModelInGitIsNotVerified) {
  ReadOptions options;
  options.file_name = "adapter_config.json";
  for (const char* base : {".git", ".git/sub"}) {
    const FileFacts f = ReadFile(absl::StrCat(R"({"base_model_name_or_path": ")", base, R"("})"),
                                 pickle::Vm(), options);
    ASSERT_EQ(f.errors.size(), 1u) << base;
    EXPECT_THAT(f.errors[0].message(), testing::HasSubstr(".git folder"));
  }
  EXPECT_TRUE(ReadFile(R"({"base_model_name_or_path": "org/name"})", pickle::Vm(), options)
                  .errors.empty());
}

TEST(FormatsTest, EmptyFileIsNotPresentOnlyUnderAWeightsName) {
  for (const char* name : {"pytorch_model.bin", "model.SAFETENSORS", "x.gguf", "tokenizer.model"}) {
    ReadOptions options;
    options.file_name = name;
    const FileFacts f = ReadFile("", pickle::Vm(), options);
    ASSERT_EQ(f.errors.size(), 1u) << name;
    EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_NOT_PRESENT) << name;
  }
  for (const char* name : {"__init__.py", ".gitkeep", "README.md", "bin", ""}) {
    ReadOptions options;
    options.file_name = name;
    const FileFacts f = ReadFile("", pickle::Vm(), options);
    EXPECT_TRUE(f.errors.empty()) << name;
    EXPECT_EQ(f.format, "empty");
  }
}

TEST(FormatsTest, LegacyMagicMustBeALiteral) {
  // The legacy magic number computed by a call (GHSA-97f8-7cmv-76j2) is not the legacy format.
  std::string computed = "cbuiltins\nint\n(S'119547037146038801333356'\ntR.";
  FileFacts f = ReadFile(computed, pickle::Vm());
  EXPECT_EQ(f.format, "pickle");
}

TEST(FormatsTest, LegacyStorageSizeMismatchIsAnError) {
  std::string data = Read(kDir / "legacy_sequential.pt");
  FileFacts good = ReadFile(data, pickle::Vm());
  ASSERT_TRUE(good.errors.empty());
  ASSERT_FALSE(good.storage_data.empty());
  // Rewrite the first storage's recorded element count.
  std::string bad = data;
  uint64_t at = good.storage_data[0].offset - 8;
  bad[at] = static_cast<char>(bad[at] + 1);
  FileFacts f = ReadFile(bad, pickle::Vm());
  ASSERT_FALSE(f.errors.empty());
  EXPECT_NE(f.errors[0].message().find("wrong size"), std::string::npos) << f.errors[0].message();
}

TEST(FormatsTest, LegacyTrailingBytesAreAnAnomaly) {
  std::string data = Read(kDir / "legacy_views.pt") + "junk";
  FileFacts f = ReadFile(data, pickle::Vm());
  EXPECT_TRUE(f.errors.empty());
  ASSERT_EQ(f.anomalies.size(), 1u);
  EXPECT_EQ(f.anomalies[0].kind, "trailing_data");
}

TEST(FormatsTest, EveryTruncationOfALegacyFileIsAnError) {
  std::string data = Read(kDir / "legacy_tied.pt");
  // Cut at 0 is the empty file, which is data (local_scan_test: EmptyFileIsDataNotAPickle).
  for (size_t cut = 1; cut < data.size(); ++cut) {
    FileFacts f = ReadFile(std::string_view(data).substr(0, cut), pickle::Vm());
    bool failed = !f.errors.empty();
    for (const MemberFacts& m : f.members) failed = failed || !m.stream.ok();
    EXPECT_TRUE(failed) << "cut at " << cut << " of " << data.size();
  }
}

TEST(FormatsTest, NpyHeaderIsParsedStrictly) {
  std::string data = Read(kDir / "array_f32.npy");
  std::string bad = data;
  size_t at = bad.find("'shape'");
  ASSERT_NE(at, std::string::npos);
  bad[at + 1] = 'S';  // 'Shape': an unknown key
  FileFacts f = ReadFile(bad, pickle::Vm());
  ASSERT_FALSE(f.errors.empty());
  EXPECT_NE(f.errors[0].message().find("unexpected key"), std::string::npos);
  // Data shorter than the shape needs.
  FileFacts cut = ReadFile(std::string_view(data).substr(0, data.size() - 1), pickle::Vm());
  ASSERT_FALSE(cut.errors.empty());
  EXPECT_NE(cut.errors[0].message().find("needs 48 bytes"), std::string::npos);
}

TEST(FormatsTest, NpyObjectArraysGoThroughThePickleVm) {
  FileFacts f = ReadFile(Read(kDir / "array_object.npy"), pickle::Vm());
  EXPECT_EQ(f.format, "npy");
  ASSERT_EQ(f.members.size(), 1u);
  EXPECT_FALSE(f.members[0].stream.pickles.empty());
  EXPECT_FALSE(f.members[0].stream.pickles[0].graph.globals.empty());  // numpy reconstructors
}

// --- torch <= 0.3 tar checkpoints (tests/fixtures/torch/gen_tar_fixtures.py) ------------------

nlohmann::json TarExpectations() {
  return nlohmann::json::parse(Read(kDir / "tar_expectations.json"));
}

bool Failed(const FileFacts& f) {
  bool failed = !f.errors.empty();
  for (const MemberFacts& m : f.members) failed = failed || !m.stream.ok();
  return failed;
}

TEST(TarTest, EveryTarFixtureMatchesWhatTorchReported) {
  nlohmann::json ex = TarExpectations();
  size_t files = 0;
  for (auto& [rel, expected] : ex["files"].items()) {
    CompareWithTorch(rel, expected);
    FileFacts f = ReadFile(Read(kDir / rel), pickle::Vm());
    std::vector<std::string> members;
    for (const MemberFacts& m : f.members) members.push_back(m.member);
    EXPECT_EQ(members, (std::vector<std::string>{"sys_info", "storages", "tensors", "pickle"}));
    for (const MemberFacts& m : f.members) EXPECT_TRUE(m.stream.ok()) << rel << " " << m.member;
    EXPECT_TRUE(f.anomalies.empty()) << rel << ": " << f.anomalies[0].message;
    ++files;
  }
  EXPECT_EQ(files, 3u);
}

TEST(TarTest, TruncationsTorchRefusesAreErrorsAndTheOthersLoad) {
  // torch (tarfile) refuses every cut before the end of the last member's padded data and
  // loads every cut after it (a missing end-of-archive block ends the archive quietly).
  nlohmann::json ex = TarExpectations();
  for (auto& [rel, expected] : ex["files"].items()) {
    const std::string data = Read(kDir / rel);
    const size_t min = expected["min_loadable_size"].get<size_t>();
    ASSERT_EQ(data.size(), expected["size"].get<size_t>());
    for (size_t cut = 0; cut < data.size(); ++cut) {
      FileFacts f = ReadFile(std::string_view(data).substr(0, cut), pickle::Vm());
      if (cut < min) {
        // A cut inside the first member's name is plain text (no loader runs text: tarfile
        // needs a whole header, pickle.load rejects the first byte), or the empty file.
        if (f.format == "text" || f.format == "empty") {
          EXPECT_LT(cut, 100u) << rel;
          EXPECT_TRUE(f.members.empty()) << rel << " cut at " << cut;
          continue;
        }
        EXPECT_TRUE(Failed(f)) << rel << " cut at " << cut;
      } else {
        EXPECT_FALSE(Failed(f)) << rel << " cut at " << cut;
        EXPECT_EQ(f.tensors.size(), expected["tensors"].size()) << rel << " cut at " << cut;
      }
    }
  }
}

// Rewrites the 512-byte header at `at` with `fn`, then fixes its checksum.
std::string PatchHeader(std::string data, size_t at, const std::function<void(char*)>& fn) {
  char* h = data.data() + at;
  fn(h);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(h[i]);
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  return data;
}

TEST(TarTest, PaxHeaderIsRefused) {
  std::string data =
      PatchHeader(Read(kDir / "tar_state_dict.pt"), 0, [](char* h) { h[156] = 'x'; });
  FileFacts f = ReadFile(data, pickle::Vm());
  ASSERT_FALSE(f.errors.empty());
  EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_UNSUPPORTED);
}

TEST(TarTest, SymlinkMemberIsRefused) {
  std::string data =
      PatchHeader(Read(kDir / "tar_state_dict.pt"), 1024, [](char* h) { h[156] = '2'; });
  FileFacts f = ReadFile(data, pickle::Vm());
  ASSERT_FALSE(f.errors.empty());
  EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_UNSUPPORTED);
}

TEST(TarTest, BadChecksumAfterTheFirstMemberEndsTheArchive) {
  // tarfile stops at an invalid header: the members after it do not exist for torch (KeyError).
  std::string data = Read(kDir / "tar_state_dict.pt");
  data[3072 + 148] = '9';  // the storages header
  FileFacts f = ReadFile(data, pickle::Vm());
  EXPECT_EQ(f.format, "torch-tar");
  ASSERT_FALSE(f.errors.empty());
  EXPECT_NE(f.errors[0].message().find("without a"), std::string::npos) << f.errors[0].message();
  ASSERT_FALSE(f.anomalies.empty());
  EXPECT_EQ(f.anomalies[0].kind, "trailing_data");
}

TEST(TarTest, DuplicateMemberIsAnAnomalyAndTheLastCopyIsRead) {
  // Rename sys_info (the first member) to "pickle": tarfile reads the later, real one.
  std::string data = PatchHeader(Read(kDir / "tar_state_dict.pt"), 0, [](char* h) {
    std::memset(h, 0, 100);
    std::memcpy(h, "pickle", 6);
  });
  FileFacts f = ReadFile(data, pickle::Vm());
  EXPECT_TRUE(f.errors.empty());
  EXPECT_EQ(f.tensors.size(), 4u);
  bool dup = false;
  for (const ContainerAnomaly& a : f.anomalies) dup = dup || a.kind == "duplicate_member";
  EXPECT_TRUE(dup);
}

TEST(TarTest, TarWithoutTorchMembersIsRefused) {
  std::string data = PatchHeader(Read(kDir / "tar_state_dict.pt"), 0, [](char* h) {
    std::memset(h, 0, 100);
    std::memcpy(h, "readme", 6);
  });
  for (size_t at : {1024, 2048, 3072}) {
    data = PatchHeader(data, at, [](char* h) { h[0] = 'X'; });
  }
  FileFacts f = ReadFile(data, pickle::Vm());
  EXPECT_EQ(f.format, "tar");
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_UNSUPPORTED);
}

// Sub-byte quantized dtypes pack elements: torch 2.6 stores quantize_per_tensor(arange(6), 1.0,
// 0, torch.quint4x2) in a 3-byte storage (torch.quint2x4: 2 bytes), with sizes and strides in
// elements. The bound counts packed elements, and still catches one past the end.
TEST(BoundsTest, PackedQuantizedStoragesHoldSeveralElementsPerByte) {
  for (const auto& [name, bytes, per_byte] :
       {std::tuple<const char*, uint64_t, uint64_t>{"quint4x2", 3, 2}, {"quint2x4", 2, 4}}) {
    TensorFact t;
    t.name = "t";
    t.dtype = DTypeFromName(name);
    ASSERT_NE(t.dtype, nullptr) << name;
    StorageRef s;
    s.dtype = t.dtype;  // the QUInt4x2Storage's numel counts bytes
    s.numel = bytes;
    EXPECT_EQ(StorageElements(t, s), bytes * per_byte) << name;
    t.shape = {static_cast<int64_t>(bytes * per_byte)};
    t.stride = {1};
    EXPECT_TRUE(CheckBounds(t, StorageElements(t, s)).ok()) << name;
    t.shape = {static_cast<int64_t>(bytes * per_byte + 1)};
    absl::Status past = CheckBounds(t, StorageElements(t, s));
    EXPECT_FALSE(past.ok()) << name;
    EXPECT_NE(std::string(past.message()).find("past its storage"), std::string::npos) << name;
  }
  TensorFact plain;
  plain.name = "u";
  plain.dtype = DTypeFromName("uint8");
  plain.shape = {4};
  plain.stride = {1};
  EXPECT_FALSE(CheckBounds(plain, 3).ok());
}

TEST(BoundsTest, AV3TensorCountsItsStoragesBytesInItsOwnDtype) {
  // torch 2.x _rebuild_tensor_v3(ByteStorage of 64 bytes, ..., dtype=float32): set_() on the
  // untyped bytes, so 16 float32 elements, not 64 (64 read 192 bytes past the storage).
  TensorFact t;
  t.name = "x";
  t.dtype = DTypeFromName("float32");
  t.stride = {1};
  StorageRef bytes;
  bytes.dtype = DTypeFromName("uint8");
  bytes.numel = 64;
  EXPECT_EQ(StorageElements(t, bytes), 16u);
  t.shape = {16};
  EXPECT_TRUE(CheckBounds(t, StorageElements(t, bytes)).ok());
  t.shape = {17};
  EXPECT_FALSE(CheckBounds(t, StorageElements(t, bytes)).ok());
  StorageRef untyped;
  untyped.untyped = true;
  untyped.numel = 7;  // bytes: not one whole float64
  t.dtype = DTypeFromName("float64");
  t.shape = {1};
  EXPECT_EQ(StorageElements(t, untyped), 0u);
  EXPECT_FALSE(CheckBounds(t, StorageElements(t, untyped)).ok());
  StorageRef doubles;  // and the other way: float16 over a DoubleStorage of 2 elements
  doubles.dtype = DTypeFromName("float64");
  doubles.numel = 2;
  t.dtype = DTypeFromName("float16");
  EXPECT_EQ(StorageElements(t, doubles), 8u);
  doubles.numel = UINT64_MAX / 4;  // bytes overflow: saturates, never wraps
  EXPECT_EQ(StorageElements(t, doubles), UINT64_MAX);
}

TEST(TarTest, TensorPastItsStorageIsAnError) {
  // tar_protocol0.pt: storage 5 holds 4 floats; make the second tensor's offset 3 (needs 5).
  std::string data = Read(kDir / "tar_protocol0.pt");
  FileFacts good = ReadFile(data, pickle::Vm());
  ASSERT_TRUE(good.errors.empty());
  // The last 8 bytes of the tensors member are the second tensor's storage offset (2).
  const std::string two("\x02\0\0\0\0\0\0\0", 8);
  size_t at = data.rfind(two, 2048 + 512 + 200);
  ASSERT_NE(at, std::string::npos);
  data[at] = 3;
  FileFacts f = ReadFile(data, pickle::Vm());
  ASSERT_FALSE(f.errors.empty());
  EXPECT_NE(f.errors[0].message().find("past its storage"), std::string::npos)
      << f.errors[0].message();
}

// ---------------------------------------------------------------- safetensors

// An 8-byte little-endian `n`, then `header` padded with spaces to `n` bytes, then `data`.
std::string Safetensors(uint64_t n, std::string header, const std::string& data) {
  header.resize(std::max<size_t>(header.size(), n), ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

const char kOneTensor[] = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(SafetensorsDetectTest, ValidFileIsValidatedInTheReader) {
  const FileFacts f =
      ReadFile(Safetensors(56, kOneTensor, std::string(8, '\0')), pickle::Vm(pickle::Limits{}));
  EXPECT_EQ(f.format, "safetensors");
  EXPECT_TRUE(f.errors.empty()) << f.errors[0].message();
  EXPECT_TRUE(f.safetensors.valid);
  EXPECT_EQ(f.safetensors.tensors, 1u);
  EXPECT_EQ(f.safetensors.data_bytes, 8u);
  EXPECT_EQ(f.safetensors.header_length, 56u);
  EXPECT_TRUE(f.members.empty());  // no pickle reading names anything
  EXPECT_TRUE(f.anomalies.empty());
}

// A conversion plans from these facts: every tensor with its dtype, shape, row-major strides and
// the absolute extent of its bytes, each its own storage.
TEST(SafetensorsDetectTest, TensorsAreListedForConversion) {
  const std::string header = R"({"b":{"dtype":"I64","shape":[],"data_offsets":[24,32]},)"
                             R"("a":{"dtype":"F16","shape":[2,3,2],"data_offsets":[0,24]}})";
  const uint64_t n = (header.size() + 7) / 8 * 8;
  const FileFacts f =
      ReadFile(Safetensors(n, header, std::string(32, '\0')), pickle::Vm(pickle::Limits{}));
  ASSERT_TRUE(f.errors.empty()) << f.errors[0].message();
  ASSERT_EQ(f.tensors.size(), 2u);
  ASSERT_EQ(f.storage_data.size(), 2u);
  const TensorFact& a = f.tensors[0];  // data order
  EXPECT_EQ(a.name, "a");
  ASSERT_NE(a.dtype, nullptr);
  EXPECT_EQ(a.dtype->name, "float16");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(a.stride, (std::vector<int64_t>{6, 2, 1}));
  EXPECT_TRUE(a.problem.empty());
  EXPECT_EQ(f.storage_data[a.storage].offset, 8 + n);
  EXPECT_EQ(f.storage_data[a.storage].nbytes, 24u);
  EXPECT_EQ(f.storages[a.storage].numel, 12u);
  const TensorFact& b = f.tensors[1];
  EXPECT_EQ(b.name, "b");
  EXPECT_TRUE(b.shape.empty());
  EXPECT_EQ(f.storage_data[b.storage].offset, 8 + n + 24);
}

// A dtype with no torch dtype of ours is a tensor with a problem, so that a conversion refuses
// it by name instead of writing the file without it.
TEST(SafetensorsDetectTest, DtypeWithoutATorchDtypeIsATensorWithAProblem) {
  const std::string header = R"({"q":{"dtype":"F8_E8M0","shape":[4],"data_offsets":[0,4]}})";
  const uint64_t n = (header.size() + 7) / 8 * 8;
  const FileFacts f =
      ReadFile(Safetensors(n, header, std::string(4, '\0')), pickle::Vm(pickle::Limits{}));
  ASSERT_TRUE(f.errors.empty()) << f.errors[0].message();
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].name, "q");
  EXPECT_NE(f.tensors[0].problem.find("F8_E8M0"), std::string::npos) << f.tensors[0].problem;
}

TEST(SafetensorsDetectTest, DataOffsetsPastTheBufferIsMalformedWithTheOffset) {
  const FileFacts f =
      ReadFile(Safetensors(56, kOneTensor, std::string(4, '\0')), pickle::Vm(pickle::Limits{}));
  EXPECT_EQ(f.format, "safetensors");
  EXPECT_FALSE(f.safetensors.valid);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_MALFORMED);
  EXPECT_NE(f.errors[0].message().find("byte offset"), std::string::npos) << f.errors[0].message();
}

TEST(SafetensorsDetectTest, HeaderOverTheValidatorLimitIsALimitError) {
  const FileFacts f =
      ReadFile(Safetensors(200'000'000, kOneTensor, ""), pickle::Vm(pickle::Limits{}));
  EXPECT_EQ(f.format, "safetensors");
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(f.errors[0].limit_name(), "max_header_bytes");
  EXPECT_EQ(f.errors[0].limit_value(), 100'000'000u);  // ValidatorLimits::max_header_bytes
}

TEST(SafetensorsDetectTest, LengthWhoseLowByteIsABraceIsNotTakenForJson) {
  // N = 0x17b: the file starts with '{', which alone would make it an index candidate.
  const FileFacts f =
      ReadFile(Safetensors(0x17b, kOneTensor, std::string(8, '\0')), pickle::Vm(pickle::Limits{}));
  EXPECT_EQ(f.format, "safetensors");
}

TEST(SafetensorsDetectTest, PickleWithABraceAtByteEightStaysAPickle) {
  // Protocol 0: [u'ab{c'] — byte 8 is '{', but bytes 4..7 are no zero length bytes.
  const std::string p = "(lp0\nVab{c\np1\na.";
  ASSERT_EQ(p[8], '{');
  const FileFacts f = ReadFile(p, pickle::Vm(pickle::Limits{}));
  EXPECT_EQ(f.format, "pickle");
  EXPECT_TRUE(f.errors.empty());
}

// A stored zip holding one member `name`, its offsets counted from `base` (where it will sit
// in the file, as a zip after other data has them).
std::string StoredZip(const std::string& name, const std::string& payload, uint32_t base) {
  std::string zip;
  auto u16 = [&](uint32_t v) {
    zip.push_back(static_cast<char>(v & 0xff));
    zip.push_back(static_cast<char>((v >> 8) & 0xff));
  };
  auto u32 = [&](uint32_t v) {
    u16(v & 0xffff);
    u16(v >> 16);
  };
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : payload) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  crc = ~crc;
  const uint32_t size = static_cast<uint32_t>(payload.size());
  const uint32_t name_size = static_cast<uint32_t>(name.size());
  zip += "PK\x03\x04";
  u16(20), u16(0), u16(0), u16(0), u16(0), u32(crc), u32(size), u32(size), u16(name_size), u16(0);
  zip += name + payload;
  const uint32_t cd = static_cast<uint32_t>(zip.size());
  zip += "PK\x01\x02";
  u16(20), u16(20), u16(0), u16(0), u16(0), u16(0), u32(crc), u32(size), u32(size);
  u16(name_size), u16(0), u16(0), u16(0), u16(0), u32(0), u32(base);
  zip += name;
  const uint32_t cd_size = static_cast<uint32_t>(zip.size()) - cd;
  zip += "PK\x05\x06";
  u16(0), u16(0), u16(1), u16(1), u32(cd_size), u32(base + cd), u16(0);
  return zip;
}

// The one limit error of `f`: its code and the limit it names (limit_name, limit_value).
void ExpectLimitError(const FileFacts& f, std::string_view name, uint64_t value) {
  const v1::ScanError* limit = nullptr;
  for (const v1::ScanError& e : f.errors) {
    if (e.code() == v1::ERROR_CODE_LIMIT) limit = &e;
  }
  ASSERT_NE(limit, nullptr) << (f.errors.empty() ? "no error" : f.errors[0].message());
  EXPECT_EQ(limit->limit_name(), name) << limit->message();
  EXPECT_EQ(limit->limit_value(), value) << limit->message();
}

TEST(LimitErrorsTest, TarRecordsAndMembersNameTheirLimit) {
  const std::string data = Read(kDir / "tar_state_dict.pt");
  ReadOptions records;
  records.tar.max_records = 0;
  ExpectLimitError(ReadFile(data, pickle::Vm(), records), "max_records", 0);
  ReadOptions members;
  members.tar.max_members = 1;
  ExpectLimitError(ReadFile(data, pickle::Vm(), members), "max_members", 1);
}

TEST(LimitErrorsTest, NpyHeaderOverTheCapNamesItsLimit) {
  std::string npy("\x93NUMPY\x02\x00", 8);
  const uint32_t len = (1u << 20) + 1;
  for (int i = 0; i < 4; ++i) npy.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  npy += "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
  const FileFacts f = ReadFile(npy, pickle::Vm());
  EXPECT_EQ(f.format, "npy");
  ExpectLimitError(f, "max_npy_header_bytes", 1u << 20);
}

TEST(LimitErrorsTest, NestedArchiveOverTheDepthNamesItsLimit) {
  const std::string inner = StoredZip("x.pkl", "N.", 0);
  const std::string outer = StoredZip("a.zip", inner, 0);
  ReadOptions flat;
  flat.max_container_depth = 0;
  ExpectLimitError(ReadFile(outer, pickle::Vm(), flat), "max_container_depth", 0);
}

TEST(SafetensorsDetectTest, ZipInTheTensorDataIsAPolyglot) {
  // The tensor bytes are a zip whose member is a pickle payload: zipfile-based tools read it.
  const std::string payload = "cposix\nsystem\n(S'id'\ntR.";
  const size_t zip_size = StoredZip("x.pkl", payload, 0).size();
  const std::string header = R"({"w":{"dtype":"U8","shape":[)" + std::to_string(zip_size) +
                             R"(],"data_offsets":[0,)" + std::to_string(zip_size) + "]}}";
  const uint64_t n = (header.size() + 7) / 8 * 8;
  const std::string zip = StoredZip("x.pkl", payload, static_cast<uint32_t>(8 + n));
  const FileFacts f = ReadFile(Safetensors(n, header, zip), pickle::Vm(pickle::Limits{}));
  EXPECT_EQ(f.format, "safetensors");
  EXPECT_TRUE(f.safetensors.valid) << (f.errors.empty() ? "" : f.errors[0].message());
  bool polyglot = false;
  for (const ContainerAnomaly& a : f.anomalies) polyglot = polyglot || a.kind == "polyglot";
  EXPECT_TRUE(polyglot);
  bool payload_read = false;
  for (const MemberFacts& m : f.members) {
    for (const pickle::PickleFacts& p : m.stream.pickles) {
      for (const pickle::GlobalRef& g : p.graph.globals) payload_read |= g.module == "posix";
    }
  }
  EXPECT_TRUE(payload_read);
}

// --- Each loader's own dispatch (issue 39; tests/fixtures/router/gen_router.py) ---------------

const std::filesystem::path kRouter =
    std::filesystem::path(CKPT_SOURCE_DIR) / "tests/fixtures/router";

// Whether any member whose name starts with `prefix` (any, when empty) imports module.name.
bool Imports(const FileFacts& f, std::string_view prefix, std::string_view module,
             std::string_view name) {
  for (const MemberFacts& m : f.members) {
    if (m.member.rfind(prefix, 0) != 0) continue;
    for (const pickle::PickleFacts& p : m.stream.pickles) {
      for (const pickle::GlobalRef& g : p.graph.globals) {
        if (g.module == module && g.name == name) return true;
      }
    }
  }
  return false;
}

TEST(RouterTest, AnNpyOrGgufWhoseFirstBlockIsATarGetsTorchLoadsTarReading) {
  for (const char* file : {"malicious/tar_in_npy_plain_header.npy", "malicious/tar_in_gguf.gguf",
                           "malicious/tar_in_npy_comment.npy"}) {
    const FileFacts f = ReadFile(Read(kRouter / file), pickle::Vm());
    EXPECT_TRUE(f.format == "npy" || f.format == "gguf") << file << ": " << f.format;
    EXPECT_TRUE(Imports(f, "(as torch.load: tar)", "os", "getcwd")) << file;
  }
  // The npy reading itself is whole: the array is still the file's tensor.
  const FileFacts npy = ReadFile(Read(kRouter / "malicious/tar_in_npy_plain_header.npy"),
                                 pickle::Vm());
  EXPECT_EQ(npy.tensors.size(), 1u);
}

TEST(RouterTest, TextJoblibLoadReadsOnIsReadByThePurePythonUnpickler) {
  for (const char* file : {"malicious/text_inst_without_mark.pkl", "malicious/text_float_space.pkl",
                           "malicious/text_float_underscore.pkl",
                           "malicious/text_last_line_unterminated.pkl",
                           "malicious/text_short_frame.pkl"}) {
    const FileFacts f = ReadFile(Read(kRouter / file), pickle::Vm());
    EXPECT_TRUE(Imports(f, "(as joblib.load)", "os", "getcwd")) << file << ": " << f.format;
  }
}

TEST(RouterTest, ATorchDataPklIsNotFlaggedForThePurePythonReadingsPersistentIdStop) {
  // pickle._Unpickler raises at the first persistent id, having imported a prefix of what the
  // C unpickler imports: nothing to add.
  const std::filesystem::path pkl = std::filesystem::path(CKPT_SOURCE_DIR) /
                                    "tests/fixtures/pickles/benign/torch_sequential_p2.pkl";
  const FileFacts f = ReadFile(Read(pkl), pickle::Vm());
  for (const MemberFacts& m : f.members) EXPECT_NE(m.member, "(as joblib.load)");
  for (const ContainerAnomaly& a : f.anomalies) EXPECT_NE(a.kind, "polyglot") << a.message;
}

TEST(RouterTest, EveryZipMemberStartingWithNumpysMagicIsReadAsAnNpy) {
  for (const char* file : {"malicious/npy_in_torchzip_storage.pt",
                           "malicious/npy_in_torchzip_extra.pt",
                           "malicious/npy_in_torchzip_no_suffix.pt",
                           "malicious/npy_in_torchzip_deflated.pt"}) {
    const FileFacts f = ReadFile(Read(kRouter / file), pickle::Vm());
    EXPECT_EQ(f.format, "torch-zip") << file;
    EXPECT_TRUE(Imports(f, "", "os", "getcwd")) << file;
  }
}

TEST(RouterTest, NpyHeadersNumpyAcceptsAreRead) {
  for (const char* file : {"benign/npy_header_comment.npy", "benign/npy_header_python2_long.npy",
                           "benign/npy_header_duplicate_key.npy"}) {
    const FileFacts f = ReadFile(Read(kRouter / file), pickle::Vm());
    EXPECT_TRUE(f.errors.empty()) << file << ": " << f.errors[0].message();
    ASSERT_EQ(f.tensors.size(), 1u) << file;
    EXPECT_EQ(f.tensors[0].dtype, DTypeFromName("float32")) << file;
    EXPECT_EQ(f.tensors[0].shape, (std::vector<int64_t>{2})) << file;
  }
  // Python refuses a leading zero ('010'), and the 'L' of Python 2 only in versions 1 and 2.
  std::string zero = Read(kRouter / "benign/npy_header_comment.npy");
  const size_t at = zero.find("(2,), ");
  ASSERT_NE(at, std::string::npos);
  zero.replace(at, 6, "(02,),");  // the same length: the data stays where it was
  const FileFacts bad = ReadFile(zero, pickle::Vm());
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_NE(bad.errors[0].message().find("leading zero"), std::string::npos);
}

using ::testing::HasSubstr;
using ::testing::Not;

// An .npy (version 1.0) with the header dict text given as it is, then `data`.
std::string NpyOf(std::string_view header, std::string_view data) {
  std::string h(header);
  const size_t total = (10 + h.size() + 1 + 63) / 64 * 64;
  h.append(total - 10 - h.size() - 1, ' ');
  h.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(h.size() & 0xff));
  out.push_back(static_cast<char>(h.size() >> 8));
  return out + h + std::string(data);
}

std::string NpyHeader(std::string_view descr, std::string_view shape) {
  return "{'descr': " + std::string(descr) + ", 'fortran_order': False, 'shape': " +
         std::string(shape) + ", }";
}

TEST(NpyDtypesTest, DataDtypesNumpyReadsAreDataWithoutATensor) {
  struct Case {
    std::string_view descr;
    uint64_t itemsize;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"'|S3'", 3}, {"'<U2'", 8}, {"'|V5'", 5}, {"'<f16'", 16}, {"'<c32'", 32},
           {"'<M8[ns]'", 8}, {"'>m8[10s]'", 8}, {"'|S0'", 0},
           {"[('a', '<i4'), ('b', '|S2')]", 6},
           {"[('a', '<i4'), ('', '|V4')]", 8},
           {"[(('title', 'a'), '<f4', (2, 3))]", 24},
           {"[('s', [('x', '<f8'), ('y', '|u1', 3)])]", 11},
           {"[('', '|O', (2,)), ('a', '<i4')]", 20},  // padding: dropped, no object
           {"('<i4', (2,))", 8},
           {"('|S0', 3)", 3},           // numpy's "generic type tuple": S3, not a subarray
           {"('<U0', 2)", 8},           // U2
           {"[('b', '|V0', 2)]", 2},    // a field of V2
           {"(('|S0', 2), 2)", 4},      // a subarray of S2
           {"[]", 0}}) {
    const std::string data(2 * c.itemsize, '\0');
    const FileFacts f = ReadFile(NpyOf(NpyHeader(c.descr, "(2,)"), data), pickle::Vm());
    SCOPED_TRACE(c.descr);
    EXPECT_TRUE(f.errors.empty()) << f.errors[0].message();
    EXPECT_TRUE(f.members.empty());  // nothing is unpickled
    ASSERT_EQ(f.tensors.size(), 1u);
    EXPECT_EQ(f.tensors[0].dtype, nullptr);
    EXPECT_EQ(f.tensors[0].kind, TensorFact::Kind::kOther);
    EXPECT_THAT(f.tensors[0].problem, HasSubstr("no tensor dtype holds"));
    EXPECT_TRUE(f.anomalies.empty());
    if (c.itemsize == 0) continue;
    // One byte short of shape x itemsize: numpy cannot fill the array either.
    const FileFacts cut =
        ReadFile(NpyOf(NpyHeader(c.descr, "(2,)"), data.substr(1)), pickle::Vm());
    ASSERT_FALSE(cut.errors.empty());
    EXPECT_THAT(cut.errors[0].message(),
                HasSubstr(absl::StrCat("needs ", 2 * c.itemsize, " bytes")));
  }
}

TEST(NpyDtypesTest, ADescrHoldingAnObjectAnywhereIsUnpickledAsNumpyDoes) {
  // numpy.load unpickles the data when the dtype has an object in any field that is not
  // padding; ('', '|O', 1) is an object field for numpy 1.x (padding for numpy 2): unpickled.
  const std::string getcwd("\x80\x02\x63os\ngetcwd\n)R.", 16);
  for (std::string_view descr :
       {"'|O'", "'O8'", "[('a', '<i4'), ('b', '|O')]", "[('s', [('x', '|O')])]",
        "('|O', (2,))", "[(('t', 'a'), '|O')]", "[('', '|O')]", "[('', '|O', ())]",
        "[('', '|O', 1)]", "[('', '|O', [1]), ('b', '<O')]",
        // A descr this reading refuses ('(2,)i4') beside an object field numpy unpickles.
        "[(('t', 'a'), [('c', ('|O4', ()))]), ('', '(2,)i4', ())]"}) {
    const FileFacts f = ReadFile(NpyOf(NpyHeader(descr, "(1,)"), getcwd), pickle::Vm());
    SCOPED_TRACE(descr);
    EXPECT_TRUE(f.tensors.empty());
    ASSERT_EQ(f.members.size(), 1u);
    EXPECT_TRUE(Imports(f, "", "os", "getcwd"));
  }
}

TEST(NpyDtypesTest, DescrsNumpyRefusesOrTheReadingDoesNotKnowAreErrors) {
  for (std::string_view descr :
       {"'<f12'", "'|S'", "'S-1'", "'<M8[xs]'", "'<i4,<f4'", "'float64'", "5", "True",
        "{'a': '<i4'}", "['ab']", "[('a', '<i4'), ('a', '<f4')]",  // a name used twice
        "[(('a', 'a'), '<i4')]", "[('a',)]", "('<i4',)", "('<i4', (2,), 1)",
        "[('a', '<i4', 'x')]", "[(1, '<i4')]", "'|U4294967295'"}) {
    const FileFacts f = ReadFile(NpyOf(NpyHeader(descr, "(1,)"), std::string(64, '\0')),
                                 pickle::Vm());
    SCOPED_TRACE(descr);
    EXPECT_FALSE(f.errors.empty());
    EXPECT_TRUE(f.members.empty());
  }
}

TEST(NpyDtypesTest, TheHeaderLiteralIsParsedAsPythonDoesWithoutRecursion) {
  const std::string f8(8, '\0');
  // "(2)" is 2, not a tuple: numpy refuses the shape; "()" is an empty tuple (a scalar).
  EXPECT_THAT(ReadFile(NpyOf(NpyHeader("'<f8'", "(2)"), f8), pickle::Vm()).errors[0].message(),
              HasSubstr("not a tuple"));
  EXPECT_TRUE(ReadFile(NpyOf(NpyHeader("'<f8'", "()"), f8), pickle::Vm()).errors.empty());
  EXPECT_TRUE(ReadFile(NpyOf(NpyHeader("'<f8'", "((1),)"), f8), pickle::Vm()).errors.empty());
  // 200 open brackets parse (Python's limit; here the dict, the lists and the field's tuple);
  // 201 do not, and nothing recurses on them.
  for (int depth : {198, 199, 100000}) {
    std::string descr = std::string(static_cast<size_t>(depth), '[') + "('a', '<f8')" +
                        std::string(static_cast<size_t>(depth), ']');
    const std::string h = NpyHeader(descr, "(1,)");
    std::string v2("\x93NUMPY\x02\x00", 8);  // version 2.0: a 4-byte header length
    const uint32_t len = static_cast<uint32_t>(h.size() + 1);
    for (int i = 0; i < 4; ++i) v2.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
    v2 += h + "\n" + f8;
    const FileFacts f = ReadFile(v2, pickle::Vm());
    SCOPED_TRACE(depth);
    if (depth == 198) {
      // A list of one list is a field list whose field is not a tuple: refused as a descr,
      // after the whole literal parsed.
      ASSERT_FALSE(f.errors.empty());
      EXPECT_THAT(f.errors[0].message(), Not(HasSubstr("nested")));
    } else {
      ASSERT_FALSE(f.errors.empty());
      EXPECT_THAT(f.errors[0].message(), HasSubstr("too many nested brackets"));
    }
  }
}

TEST(NotCompressedTest, ATextFileStartingWithXIsTextForEveryLoaderJoblibIncluded) {
  // joblib.load takes any first byte 'x' for zlib's and fails at the header: nothing unpickled.
  for (std::string_view text : {"xray results\n", "x = 1\nprint(x)\n", "x"}) {
    const FileFacts f = ReadFile(text, pickle::Vm());
    SCOPED_TRACE(text);
    EXPECT_TRUE(f.errors.empty()) << f.errors[0].message();
    EXPECT_EQ(f.format, "text");
    ASSERT_FALSE(f.anomalies.empty());
    EXPECT_EQ(f.anomalies[0].kind, "not_compressed");
  }
}

TEST(NotCompressedTest, AFileJoblibFailsToDecompressIsStillReadAsThePickleOtherLoadersRun) {
  // "BZh" is bz2's magic to joblib (which fails on what follows) and BINBYTES to pickle.load,
  // whose length "Zh\0\0" skips 26,714 bytes to a GLOBAL os.getcwd and REDUCE.
  std::string polyglot = std::string("BZh\0\0", 5) + std::string(0x685a, 'a') +
                         "0cos\ngetcwd\n)R.";
  const FileFacts f = ReadFile(polyglot, pickle::Vm());
  EXPECT_EQ(f.format, "pickle");
  EXPECT_TRUE(Imports(f, "", "os", "getcwd"));
  // Read once: the file's own pickle reading, no second "(as pickle)" of the same bytes.
  EXPECT_EQ(f.members.size(), 1u);
}

// --- joblib < 0.10: arrays in files beside the pickle, "ZF" files (docs/formats.md) ----------

const std::filesystem::path kJoblib =
    std::filesystem::path(CKPT_SOURCE_DIR) / "tests/fixtures/joblib";

// The anomalies of `kind` (category joblib).
std::vector<ContainerAnomaly> JoblibAnomalies(const FileFacts& f, std::string_view kind) {
  std::vector<ContainerAnomaly> out;
  for (const ContainerAnomaly& a : f.anomalies) {
    if (a.category == "joblib" && a.kind == kind) out.push_back(a);
  }
  return out;
}

TEST(JoblibCompatTest, ZFileIsReadAsTheCompatibilityLoaderReadsIt) {
  const FileFacts f = ReadFile(Read(kJoblib / "benign/joblib09_zf_arrays.joblib"), pickle::Vm());
  EXPECT_EQ(f.format, "joblib-compat");
  EXPECT_TRUE(f.errors.empty()) << f.errors[0].message();
  EXPECT_TRUE(Imports(f, "(joblib.load: ZF)", "numpy", "recarray"));
}

TEST(JoblibCompatTest, ZndarrayWrapperNamesItsRawDataFile) {
  const FileFacts f = ReadFile(Read(kJoblib / "benign/joblib09_zf_companion.joblib"), pickle::Vm());
  EXPECT_TRUE(f.errors.empty()) << f.errors[0].message();
  const std::vector<ContainerAnomaly> a = JoblibAnomalies(f, "companion_data");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_FALSE(a[0].must_flag);
  EXPECT_THAT(a[0].message, ::testing::HasSubstr("joblib09_zf_companion.joblib_01.npy.z"));
}

TEST(JoblibCompatTest, NdarrayWrapperFileIsOneNumpyLoadUnpickles) {
  const FileFacts f = ReadFile(Read(kJoblib / "malicious/joblib09_ndarray.pkl"), pickle::Vm());
  EXPECT_EQ(f.format, "joblib");
  EXPECT_TRUE(f.errors.empty()) << f.errors[0].message();
  for (const MemberFacts& m : f.members) EXPECT_TRUE(m.stream.ok()) << m.member;
  const std::vector<ContainerAnomaly> a = JoblibAnomalies(f, "companion_pickle");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(a[0].must_flag);
  EXPECT_THAT(a[0].message, ::testing::HasSubstr("\"joblib09_ndarray.pkl_01.npy\""));
}

TEST(JoblibCompatTest, FileNameOutsideThePicklesFolderIsAPathFinding) {
  for (const char* file : {"malicious/joblib09_ndarray_path_parent.pkl",
                           "malicious/joblib09_ndarray_path_absolute.pkl",
                           "malicious/joblib09_ndarray_path_subfolder.pkl",
                           "malicious/joblib09_ndarray_path_empty.pkl",
                           "malicious/joblib09_zndarray_path_parent.joblib"}) {
    const FileFacts f = ReadFile(Read(kJoblib / file), pickle::Vm());
    EXPECT_EQ(JoblibAnomalies(f, "companion_path").size(), 1u) << file;
    EXPECT_TRUE(JoblibAnomalies(f, "companion_pickle").empty()) << file;
    EXPECT_TRUE(JoblibAnomalies(f, "companion_data").empty()) << file;
  }
}

TEST(JoblibCompatTest, PlaceholderInAZFileIsNoPlaceholder) {
  // joblib >= 0.10's NumpyArrayWrapper means nothing to the compatibility loader: the bytes
  // after it are opcodes there.
  const FileFacts f = ReadFile(
      Read(kJoblib / "malicious/joblib09_zf_placeholder_then_payload.joblib"), pickle::Vm());
  EXPECT_TRUE(Imports(f, "(joblib.load: ZF)", "posix", "system"));
}

TEST(JoblibCompatTest, LengthThatLiesIsAnErrorAndThePayloadIsStillRead) {
  const FileFacts f =
      ReadFile(Read(kJoblib / "malicious/joblib09_zf_length_lies_payload.joblib"), pickle::Vm());
  ASSERT_FALSE(f.errors.empty());
  EXPECT_THAT(f.errors[0].message(), ::testing::HasSubstr("the length field says 7 bytes"));
  EXPECT_TRUE(Imports(f, "(joblib.load: ZF)", "posix", "system"));
}

TEST(JoblibCompatTest, NotAZlibStreamIsAnError) {
  const FileFacts f =
      ReadFile(Read(kJoblib / "malicious/joblib09_zf_not_zlib.joblib"), pickle::Vm());
  ASSERT_FALSE(f.errors.empty());
  EXPECT_THAT(f.errors[0].message(), ::testing::HasSubstr("joblib.load fails"));
}

}  // namespace
}  // namespace ckptscan::formats
