// The corruption suite: every benign fixture (raw pickles, real torch/numpy checkpoints in
// every container, GGUF files) truncated at every byte and bit-flipped at every byte, through the
// same facts
// + rules path as `ckptscan scan`. Each damaged file must end in a verdict (never a crash), and
// a truncated one is never SAFE as what it was: torch, numpy or pickle cannot load a file cut
// short, nor ggml a GGUF file. A cut can be data of its own (the empty file, a prefix of a
// protocol-0 pickle or of a tar header that is plain text); then it is SAFE only as that data, with
// a pickle reading that names nothing (CPython's pickle.load fails before it imports or calls
// anything).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "rules/rule_set.h"
#include "tests/inprocess/local_scan.h"

namespace ckptscan {
namespace {

std::vector<std::filesystem::path> BenignFixtures() {
  const std::filesystem::path root = std::filesystem::path(CKPT_SOURCE_DIR) / "tests/fixtures";
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(root / "pickles/benign")) {
    out.push_back(e.path());
  }
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "torch")) {
    const std::string ext = e.path().extension().string();
    if (ext == ".pt" || ext == ".npy" || ext == ".npz" || ext == ".bin") out.push_back(e.path());
  }
  // GGUF (fixtures/gguf/gen_gguf.py): a model with a template and quantized tensors, and a
  // vocabulary-only file.
  out.push_back(root / "gguf/benign/tiny_llama.gguf");
  out.push_back(root / "gguf/benign/vocab_only.gguf");
  std::sort(out.begin(), out.end());
  return out;
}

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

v1::Verdict Judge(std::string_view bytes) {
  static const std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();
  sandbox::FileFacts facts = sandbox::ExtractFacts(bytes, pickle::Limits{});
  return app::JudgeFacts(facts, *rules).verdict();
}

TEST(CorruptionTest, BenignFixturesAreSafeWhole) {
  std::vector<std::filesystem::path> files = BenignFixtures();
  ASSERT_GE(files.size(), 65u);
  for (const auto& f : files) {
    // torch <= 0.3 tar checkpoints are read whole but never SAFE: their persistent ids are
    // bare keys, which the persistent-id rule cannot check (docs/formats.md).
    const v1::Verdict want =
        f.filename().string().rfind("tar_", 0) == 0 ? v1::VERDICT_SUSPICIOUS : v1::VERDICT_SAFE;
    EXPECT_EQ(Judge(Read(f)), want) << f;
  }
}

// CKPT_EXHAUSTIVE=skip (Bazel's CI config): the exhaustive groups below are skipped there, with
// this reason, because CI's CMake step runs them on the same sources (docs/security.md, "CI").
bool SkipExhaustive() {
  const char* e = std::getenv("CKPT_EXHAUSTIVE");
  return e != nullptr && std::string_view(e) == "skip";
}

TEST(CorruptionTest, EveryTruncationOfEveryBenignFixtureIsNeverSafe) {
  if (SkipExhaustive()) {
    GTEST_SKIP() << "CKPT_EXHAUSTIVE=skip: exhaustive group, run by CI's CMake step";
  }
  static const std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();
  size_t cases = 0, as_data = 0;
  for (const auto& f : BenignFixtures()) {
    std::string data = Read(f);
    // A file of several pickles is loadable when cut right after one of its STOPs.
    bool multi = f.filename().string().find("concat") != std::string::npos;
    for (size_t cut = 0; cut < data.size(); ++cut) {
      const std::string_view bytes = std::string_view(data).substr(0, cut);
      const sandbox::FileFacts facts = sandbox::ExtractFacts(bytes, pickle::Limits{});
      const v1::Verdict v = app::JudgeFacts(facts, *rules).verdict();
      if (!multi && v == v1::VERDICT_SAFE) {
        const bool data_class = facts.format == "empty" || facts.format == "text";
        EXPECT_TRUE(data_class) << f << " cut at " << cut << ": SAFE as " << facts.format;
        for (const auto& m : facts.members) {
          for (const auto& p : m.stream.pickles) {
            EXPECT_TRUE(p.graph.globals.empty()) << f << " cut at " << cut << ": " << m.member;
          }
        }
        ++as_data;
      }
      ++cases;
    }
  }
  std::printf("%zu truncations, %zu of them SAFE as data (empty or text)\n", cases, as_data);
  RecordProperty("cases", static_cast<int>(cases));
}

TEST(CorruptionTest, EveryBitFlipOfEveryBenignFixtureEndsInAVerdict) {
  if (SkipExhaustive()) {
    GTEST_SKIP() << "CKPT_EXHAUSTIVE=skip: exhaustive group, run by CI's CMake step";
  }
  for (const auto& f : BenignFixtures()) {
    std::string data = Read(f);
    // Every byte, one flip pattern per byte (the VM's unit tests flip every bit).
    for (size_t i = 0; i < data.size(); ++i) {
      std::string m = data;
      m[i] = static_cast<char>(m[i] ^ (1 << (i % 8)));
      v1::Verdict v = Judge(m);
      EXPECT_NE(v, v1::VERDICT_UNSPECIFIED) << f << " flip at " << i;
    }
  }
}

}  // namespace
}  // namespace ckptscan
