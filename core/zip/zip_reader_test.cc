#include "core/zip/zip_reader.h"

#include <zlib.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/zip/zip_test_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ckptscan::zip {
namespace {

using testing::BuildZip;
using testing::Deflate;
using ::testing::HasSubstr;
using testing::TestMember;
using testing::TorchLikeMembers;

const std::string kFixtureDir = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/zip/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const nlohmann::json& Expectations() {
  static const nlohmann::json* j =
      new nlohmann::json(nlohmann::json::parse(ReadFile(kFixtureDir + "expectations.json")));
  return *j;
}

std::vector<std::string> FixtureNames() {
  std::vector<std::string> out;
  for (auto it = Expectations().begin(); it != Expectations().end(); ++it) out.push_back(it.key());
  return out;
}

std::string Crc32Hex(std::string_view b) {
  char buf[9];
  snprintf(buf, sizeof buf, "%08lx",
           crc32_z(0, reinterpret_cast<const Bytef*>(b.data()), b.size()) & 0xFFFFFFFFul);
  return buf;
}

// What our reader says torch.load (zip path, 1.13) would do with `file`, step by step as
// torch.load takes them, plus every anomaly Open and Read report.
struct Emulated {
  bool open_ok = false;
  bool loads = false;
  std::string stopped_at;                    // why torch.load would fail
  std::map<std::string, std::string> bytes;  // record -> bytes read (complete reads only)
  std::set<std::string> read_errors, incomplete, limit_errors;
  bool version_error = false;
  std::set<std::string> kinds;
  bool any_must_flag = false;
  std::vector<Anomaly> all;
};

void Note(Emulated& out, const std::vector<Anomaly>& anomalies) {
  for (const Anomaly& a : anomalies) {
    out.kinds.insert(std::string(AnomalyKindName(a.kind)));
    out.any_must_flag |= a.must_flag;
    out.all.push_back(a);
  }
}

Emulated EmulateTorchLoad(std::string_view file) {
  Emulated out;
  absl::StatusOr<Archive> ar = Archive::Open(file);
  if (!ar.ok()) {
    out.stopped_at = std::string(ar.status().message());
    return out;
  }
  out.open_ok = true;
  Note(out, ar->anomalies());
  // Read every entry once, for the member-level anomalies.
  for (const Entry& e : ar->entries()) {
    absl::StatusOr<Member> m = ar->Read(e);
    if (m.ok()) Note(out, m->anomalies());
  }
  for (const char* rec : {"data.pkl", "data/0", "data/1"}) {
    if (ar->LocateRecord(rec) == nullptr) continue;
    absl::StatusOr<Member> m = ar->ReadRecord(rec);
    if (!m.ok()) {
      (absl::IsResourceExhausted(m.status()) ? out.limit_errors : out.read_errors).insert(rec);
    } else if (!m->complete()) {
      out.incomplete.insert(rec);
    } else {
      out.bytes[rec] = std::string(m->bytes());
    }
  }
  absl::StatusOr<uint64_t> version = ar->Version();
  out.version_error = !version.ok();

  // torch.load: _is_zipfile, PyTorchStreamReader (Open + version), _is_torchscript_zip
  // (get_all_records), get_record("data.pkl"), then the storages data.pkl refers to.
  if (!ar->starts_with_local_header()) {
    out.stopped_at = "not PK\\3\\4 at offset 0: legacy path";
  } else if (!version.ok()) {
    out.stopped_at = std::string(version.status().message());
  } else if (absl::StatusOr<std::vector<std::string>> recs = ar->AllRecords(); !recs.ok()) {
    out.stopped_at = std::string(recs.status().message());
  } else if (std::find(recs->begin(), recs->end(), "constants.pkl") != recs->end()) {
    out.stopped_at = "TorchScript: handed to torch.jit.load";
  } else if (!out.bytes.count("data.pkl")) {
    out.stopped_at = "data.pkl unreadable";
  } else if (out.bytes["data.pkl"].find(std::string("X\x01\0\0\0"
                                                    "0",
                                                    6)) != std::string::npos &&
             !out.bytes.count("data/0")) {
    // The fixtures' pickles name their one storage by the key '0' (BINUNICODE "0").
    out.stopped_at = "data/0 unreadable";
  } else {
    out.loads = true;
  }
  return out;
}

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param.substr(0, info.param.size() - 3);  // ".pt"
  for (char& c : s) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

// ------------------------------------------------------------------------------------------
// Every committed mutation: our reading agrees with what torch 1.13 was recorded doing, and the
// anomaly the mutation models is reported.

class ZipTorchFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZipTorchFixtureTest, ReadsTheCopyTorchReadAndReportsTheMutation) {
  const std::string& name = GetParam();
  const nlohmann::json& exp = Expectations()[name];
  const std::string file = ReadFile(kFixtureDir + name);
  ASSERT_FALSE(file.empty()) << name;
  SCOPED_TRACE(name + ": " + exp["why"].get<std::string>());
  Emulated got = EmulateTorchLoad(file);
  const nlohmann::json& ours = exp["ours"];

  // Loads or fails, as torch did.
  const bool torch_loads = exp["torch_loads"].get<bool>();
  EXPECT_EQ(got.loads, torch_loads)
      << "torch: " << (torch_loads ? "loads" : exp["torch_error"].get<std::string>())
      << "\nours: " << (got.loads ? "loads" : got.stopped_at);
  if (torch_loads) {
    // The same copy of every record torch read.
    for (auto it = exp["torch_read"].begin(); it != exp["torch_read"].end(); ++it) {
      ASSERT_TRUE(got.bytes.count(it.key())) << it.key();
      const std::string& b = got.bytes[it.key()];
      const size_t len = it.value()["len"].get<size_t>();
      ASSERT_GE(b.size(), len) << it.key();
      EXPECT_EQ(Crc32Hex(std::string_view(b).substr(0, len)),
                it.value()["crc32"].get<std::string>())
          << it.key() << ": we read a different copy than torch (torch got "
          << it.value()["copy"].dump() << ")";
    }
  }

  EXPECT_EQ(!got.open_ok, ours.value("open_error", false)) << got.stopped_at;
  if (got.open_ok) {
    EXPECT_EQ(got.version_error, ours.value("version_error", false));
  }
  auto set_of = [&](const char* key) {
    std::set<std::string> s;
    if (ours.contains(key)) {
      for (const auto& v : ours[key]) s.insert(v.get<std::string>());
    }
    return s;
  };
  EXPECT_EQ(got.read_errors, set_of("read_error"));
  EXPECT_EQ(got.incomplete, set_of("incomplete"));
  EXPECT_EQ(got.limit_errors, set_of("limit_error"));
  for (const std::string& kind : set_of("anomalies")) {
    EXPECT_TRUE(got.kinds.count(kind)) << "missing anomaly " << kind;
  }
  for (const Anomaly& a : got.all) {
    EXPECT_FALSE(a.message.empty());
    if (a.kind != AnomalyKind::kArchiveComment && a.kind != AnomalyKind::kDeflated &&
        a.kind != AnomalyKind::kDirectoryEntry) {
      EXPECT_TRUE(a.must_flag) << AnomalyKindName(a.kind);
    }
  }
  if (name == "baseline.pt" || name == "baseline_no_zip64.pt") {
    EXPECT_TRUE(got.all.empty()) << AnomalyKindName(got.all[0].kind) << ": " << got.all[0].message;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ZipTorchFixtureTest, ::testing::ValuesIn(FixtureNames()),
                         TestName);

TEST(ZipFixtureCorpusTest, CoversEveryTechniqueAndStaysSmall) {
  EXPECT_GE(FixtureNames().size(), 70u);
  for (const std::string& name : FixtureNames()) {
    EXPECT_LE(ReadFile(kFixtureDir + name).size(), 8u << 10) << name;
  }
}

// The duplicate name that wins is miniz's heap-sort answer, which is neither the first nor the
// last copy; the fixtures pin both outcomes.
TEST(ZipFixtureCorpusTest, DuplicateWinnerIsNeitherFirstNorLast) {
  EXPECT_EQ(Expectations()["dup_datapkl_AB.pt"]["torch_result"]["copy"], "B");
  EXPECT_EQ(Expectations()["dup_datapkl_BA.pt"]["torch_result"]["copy"], "A");
  EXPECT_EQ(Expectations()["dup_datapkl_ABC.pt"]["torch_result"]["copy"], "A");
}

// ------------------------------------------------------------------------------------------
// Corruption suite: truncations and bit flips of every fixture never crash, and never make a
// clean archive read silently different bytes.

const std::vector<std::string>& AllFixtureBytes() {
  static const auto* v = [] {
    auto* out = new std::vector<std::string>;
    for (const std::string& n : FixtureNames()) out->push_back(ReadFile(kFixtureDir + n));
    return out;
  }();
  return *v;
}

// If a mutated clean archive still "loads", every record whose bytes changed is covered by a
// must-flag anomaly somewhere (Open or Read).
void ExpectNoSilentDifference(const Emulated& original, const Emulated& mutated,
                              const std::string& what) {
  if (!mutated.loads) return;
  for (const auto& [rec, bytes] : mutated.bytes) {
    auto it = original.bytes.find(rec);
    if (it != original.bytes.end() && it->second == bytes) continue;
    EXPECT_TRUE(mutated.any_must_flag) << what << ": " << rec << " reads differently, unflagged";
  }
}

TEST(ZipCorruptionTest, EveryTruncationOfEveryFixtureFailsOrFlagsAndNeverCrashes) {
  for (const std::string& file : AllFixtureBytes()) {
    Emulated original = EmulateTorchLoad(file);
    for (size_t n = 0; n < file.size(); ++n) {
      Emulated e = EmulateTorchLoad(std::string_view(file).substr(0, n));
      if (original.open_ok && !original.any_must_flag) {
        ExpectNoSilentDifference(original, e, "truncated to " + std::to_string(n));
      }
    }
  }
}

TEST(ZipCorruptionTest, EveryBitFlipOfCleanArchivesIsAnErrorOrFlagged) {
  for (const char* name : {"baseline.pt", "baseline_no_zip64.pt", "deflate_datapkl.pt",
                           "proto0_datapkl.pt", "version_data_dir_only.pt"}) {
    const std::string file = ReadFile(kFixtureDir + name);
    Emulated original = EmulateTorchLoad(file);
    ASSERT_TRUE(original.loads) << name;
    for (size_t i = 0; i < file.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string m = file;
        m[i] = static_cast<char>(m[i] ^ (1 << bit));
        ExpectNoSilentDifference(
            original, EmulateTorchLoad(m),
            std::string(name) + " byte " + std::to_string(i) + " bit " + std::to_string(bit));
      }
    }
  }
}

TEST(ZipCorruptionTest, ByteFlipsAtEveryOffsetOfEveryFixtureNeverCrash) {
  for (const std::string& file : AllFixtureBytes()) {
    for (size_t i = 0; i < file.size(); ++i) {
      for (uint8_t x : {0x01, 0x80, 0xFF}) {
        std::string m = file;
        m[i] = static_cast<char>(m[i] ^ x);
        EmulateTorchLoad(m);
      }
    }
  }
}

TEST(ZipCorruptionTest, RandomMultiByteMutationsNeverCrash) {
  // Fields are 2, 4 or 8 bytes: overwrite runs with boundary values as well as noise.
  static constexpr uint8_t kValues[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0x40};
  uint64_t seed = 0x5EED;
  auto next = [&seed] {
    seed ^= seed >> 12;
    seed ^= seed << 25;
    seed ^= seed >> 27;
    return seed * 0x2545F4914F6CDD1Dull;
  };
  const std::vector<std::string>& files = AllFixtureBytes();
  for (int round = 0; round < 30000; ++round) {
    std::string m = files[next() % files.size()];
    const int edits = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t at = next() % m.size();
      const size_t run = std::min<size_t>(1 + next() % 8, m.size() - at);
      for (size_t i = 0; i < run; ++i) {
        m[at + i] = static_cast<char>(next() % 2 ? kValues[next() % 6] : next() & 0xFF);
      }
    }
    EmulateTorchLoad(m);
  }
}

// ------------------------------------------------------------------------------------------
// Differential against torch's own miniz. tests/fixtures/zip/miniz_oracle.py drives the miniz
// inside Debian's libtorch_cpu.so (ctypes) over the same archives and commits, per group, the
// count and a hash of one outcome line per archive; we build the same archives and lines.

const nlohmann::json& Oracle() {
  static const nlohmann::json* j =
      new nlohmann::json(nlohmann::json::parse(ReadFile(kFixtureDir + "miniz_oracle.json")));
  return *j;
}

// The oracle's outcome line (see miniz_oracle.py), from our reader.
std::string OutcomeLine(std::string_view data) {
  Limits limits;  // the oracle has no limits short of 64 MiB per record
  limits.max_entries = 1 << 20;
  limits.max_central_directory_bytes = 1 << 30;
  limits.max_member_bytes = 64 << 20;
  limits.max_compression_ratio = ~uint64_t{0};
  absl::StatusOr<Archive> ar = Archive::Open(data, limits);
  if (!ar.ok()) {
    return ar.status().message().find("contains a NUL byte") != absl::string_view::npos ? "refused"
                                                                                        : "fail";
  }
  std::string line = "open n=" + std::to_string(ar->entries().size());
  for (const auto& rec : Oracle()["records"]) {
    const std::string r = rec.get<std::string>();
    const Entry* e = ar->LocateRecord(r);
    line += " " + r + "=" + (e ? std::to_string(e->index) : "-1") + ":";
    absl::StatusOr<Member> m = e ? ar->Read(*e) : absl::StatusOr<Member>(absl::NotFoundError(""));
    if (!m.ok()) {
      line += "err";
    } else if (!m->complete()) {
      line += "partial";
    } else {
      line += "ok:" + Crc32Hex(m->bytes());
    }
  }
  return line;
}

// xorshift64*, as in miniz_oracle.py.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
};

std::vector<std::string> NameSet(uint64_t k) {
  static const std::vector<std::string> kPool = {
      "data.pkl", "data/0",    "data/1", "version", ".data/version", "data/10",
      "data.pk",  "data.pkl0", "a",      "z",       "Data/0"};
  Rng rng{0x9E3779B97F4A7C15ull ^ (k + 1)};
  const uint64_t count = 1 + rng.Below(24);
  std::vector<std::string> names;
  for (uint64_t i = 0; i < count; ++i) {
    std::string base = kPool[rng.Below(kPool.size())];
    for (char& c : base) {
      if (isalpha(static_cast<unsigned char>(c)) && rng.Below(4) == 0) {
        c = static_cast<char>(isupper(static_cast<unsigned char>(c)) ? tolower(c) : toupper(c));
      }
    }
    names.push_back("archive/" + base);
  }
  return names;
}

std::vector<std::string> GroupLines(const std::string& group) {
  std::vector<std::string> lines;
  const nlohmann::json& o = Oracle();
  if (group == "fixtures") {
    for (const std::string& f : FixtureNames()) {
      lines.push_back(f + " " + OutcomeLine(ReadFile(kFixtureDir + f)));
    }
  } else if (group == "truncations") {
    for (const auto& f : o["clean"]) {
      const std::string d = ReadFile(kFixtureDir + f.get<std::string>());
      for (size_t n = 0; n < d.size(); ++n) {
        lines.push_back(f.get<std::string>() + "[:" + std::to_string(n) + "] " +
                        OutcomeLine(std::string_view(d).substr(0, n)));
      }
    }
  } else if (group == "flips") {
    for (const auto& f : o["clean"]) {
      const std::string d = ReadFile(kFixtureDir + f.get<std::string>());
      for (size_t i = 0; i < d.size(); ++i) {
        for (const auto& mask : o["flip_masks"]) {
          std::string m = d;
          const int x = mask.get<int>();
          m[i] = static_cast<char>(m[i] ^ x);
          char hex[3];
          snprintf(hex, sizeof hex, "%02x", x);
          lines.push_back(f.get<std::string>() + "[" + std::to_string(i) + "]^" + hex + " " +
                          OutcomeLine(m));
        }
      }
    }
  } else if (group == "names") {
    for (uint64_t k = 0; k < o["name_archives"].get<uint64_t>(); ++k) {
      std::vector<TestMember> members;
      for (const std::string& n : NameSet(k)) members.push_back({n, "x"});
      const std::string file = BuildZip(members);
      lines.push_back("names#" + std::to_string(k) + " " + OutcomeLine(file));
    }
  }
  return lines;
}

std::string Fnv1a64(const std::vector<std::string>& lines) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const std::string& line : lines) {
    for (unsigned char c : line + "\n") {
      h ^= c;
      h *= 0x100000001B3ull;
    }
  }
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

class ZipMinizOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZipMinizOracleTest, EveryArchiveOpensLocatesAndReadsAsTorchsMinizDoes) {
  const std::string group = GetParam();
  const nlohmann::json& want = Oracle()["groups"][group];
  std::vector<std::string> lines = GroupLines(group);
  size_t opened = 0;
  for (const std::string& l : lines) opened += l.find(" open ") != std::string::npos;
  EXPECT_EQ(lines.size(), want["count"].get<size_t>());
  EXPECT_EQ(opened, want["opened"].get<size_t>());
  const std::string got = Fnv1a64(lines);
  if (got != want["fnv1a64"].get<std::string>()) {
    const std::string path = ::testing::TempDir() + "zip_oracle_" + group + ".txt";
    std::ofstream out(path);
    for (const std::string& l : lines) out << l << "\n";
    ADD_FAILURE() << group << ": our outcome lines differ from torch's miniz; diff " << path
                  << " against `miniz_oracle.py --dump " << group << "`";
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, ZipMinizOracleTest,
                         ::testing::Values("fixtures", "truncations", "flips", "names"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// ------------------------------------------------------------------------------------------
// Limits: bombs fail fast with ResourceExhausted, before allocating.

TEST(ZipLimitsTest, EntryCountBombFailsFastNamingTheLimit) {
  std::vector<TestMember> members;
  for (int i = 0; i < 100000; ++i) members.push_back({"a/" + std::to_string(i), ""});
  std::string file = BuildZip(members);
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Archive> ar = Archive::Open(file);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(absl::IsResourceExhausted(ar.status())) << ar.status();
  EXPECT_THAT(ar.status().message(), HasSubstr("max_entries"));
  EXPECT_LT(elapsed, std::chrono::milliseconds(100));
  // Raised limits admit it (the count is ZIP64-only: 0xFFFF in the 32-bit record).
  Limits big;
  big.max_entries = 200000;
  big.max_central_directory_bytes = 64 << 20;
  absl::StatusOr<Archive> ok = Archive::Open(file, big);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->entries().size(), 100000u);
  EXPECT_EQ(ok->LocateRecord("99999")->index, 99999u);
}

TEST(ZipLimitsTest, RatioBombFixtureFailsBeforeInflating) {
  // A few KiB of DEFLATE declaring 8 MiB: over 1,100:1, more than any DEFLATE stream reaches.
  const std::string file = ReadFile(kFixtureDir + "deflate_ratio_bomb.pt");
  absl::StatusOr<Archive> ar = Archive::Open(file);
  ASSERT_TRUE(ar.ok()) << ar.status();
  absl::StatusOr<Member> m = ar->ReadRecord("data/1");
  ASSERT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("max_compression_ratio"));
  EXPECT_THAT(m.status().message(), HasSubstr("archive/data/1"));
  Limits loose;
  loose.max_compression_ratio = 10000;
  loose.max_member_bytes = 1 << 20;
  ar = Archive::Open(file, loose);
  m = ar->ReadRecord("data/1");
  ASSERT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("max_member_bytes"));
  loose.max_member_bytes = 8 << 20;
  ar = Archive::Open(file, loose);
  m = ar->ReadRecord("data/1");
  EXPECT_THAT(m.status().message(), HasSubstr("the stream holds 4194304 bytes"));
  // A stream near DEFLATE's own ~1032:1 (64 KiB of zeros at 840:1), declared at its size, is
  // read with the defaults.
  const std::string max_ratio = ReadFile(kFixtureDir + "deflate_max_ratio.pt");
  ar = Archive::Open(max_ratio);
  ASSERT_TRUE(ar.ok()) << ar.status();
  m = ar->ReadRecord("data/1");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->bytes(), std::string(64 << 10, '\0'));
}

TEST(ZipLimitsTest, NameCentralDirectoryAndTotalSizeLimits) {
  std::string file = BuildZip(TorchLikeMembers("archive", "\x80\x02N."));
  Limits l;
  l.max_name_bytes = 10;
  EXPECT_THAT(Archive::Open(file, l).status().message(), HasSubstr("max_name_bytes"));
  l = Limits();
  l.max_central_directory_bytes = 100;
  EXPECT_THAT(Archive::Open(file, l).status().message(), HasSubstr("max_central_directory_bytes"));
  l = Limits();
  l.max_total_uncompressed = 10;
  EXPECT_THAT(Archive::Open(file, l).status().message(), HasSubstr("max_total_uncompressed"));
}

TEST(ZipLimitsTest, AnomaliesOfOneKindAreCappedWithASummary) {
  std::vector<TestMember> members = TorchLikeMembers("archive", "\x80\x02N.");
  for (int i = 0; i < 200; ++i) members.push_back({"archive/dup", "x"});
  const std::string file = BuildZip(members);
  absl::StatusOr<Archive> ar = Archive::Open(file);
  ASSERT_TRUE(ar.ok()) << ar.status();
  int dups = 0;
  bool summary = false;
  for (const Anomaly& a : ar->anomalies()) {
    if (a.kind != AnomalyKind::kDuplicateName) continue;
    ++dups;
    summary |= a.message.find("135 more") != std::string::npos;
  }
  EXPECT_EQ(dups, 65);
  EXPECT_TRUE(summary);
}

// ------------------------------------------------------------------------------------------
// The end record, as miniz finds it.

TEST(ZipEndRecordTest, EmptyFileIsNotAnArchive) {
  absl::StatusOr<Archive> ar = Archive::Open(std::string_view());
  ASSERT_TRUE(absl::IsInvalidArgument(ar.status()));
  EXPECT_THAT(ar.status().message(), HasSubstr("fewer than the 22-byte"));
}

TEST(ZipEndRecordTest, EndRecordAloneHasNoFiles) {
  std::string eocd("PK\x05\x06", 4);
  eocd.append(18, '\0');
  absl::StatusOr<Archive> ar = Archive::Open(eocd);
  ASSERT_TRUE(absl::IsInvalidArgument(ar.status()));
  EXPECT_THAT(ar.status().message(), HasSubstr("does not contain any files"));
  EXPECT_THAT(Archive::Open(std::string_view(eocd).substr(0, 21)).status().message(),
              HasSubstr("fewer than"));
}

TEST(ZipEndRecordTest, TrailingBytesPastMinizSearchWindowHideTheArchive) {
  std::string file = BuildZip(TorchLikeMembers("archive", "\x80\x02N."));
  // 0xFFFF + 22 bytes from the end is where miniz stops looking (in 4 KiB steps).
  const std::string near_file = file + std::string(60000, 'x');
  absl::StatusOr<Archive> near = Archive::Open(near_file);
  ASSERT_TRUE(near.ok()) << near.status();
  bool appended = false;
  for (const Anomaly& a : near->anomalies()) appended |= a.kind == AnomalyKind::kAppendedData;
  EXPECT_TRUE(appended);
  const std::string far_file = file + std::string(80000, 'x');
  absl::StatusOr<Archive> far = Archive::Open(far_file);
  EXPECT_THAT(far.status().message(), HasSubstr("no end of central directory record"));
}

TEST(ZipEndRecordTest, LastSignatureWithRoomForARecordWins) {
  // A second, complete archive appended: its end record is the one used.
  std::string a =
      BuildZip(TorchLikeMembers("first", "\x80\x02N."), {.zip64_end = false, .comment = ""});
  std::string b =
      BuildZip(TorchLikeMembers("second", "\x80\x02N."), {.zip64_end = false, .comment = ""});
  const std::string ab = a + b;
  absl::StatusOr<Archive> ar = Archive::Open(ab);
  // b's end record wins, but its offsets are relative to b's start: its CD offset lands on a's
  // directory (3 bytes shorter), so miniz reads a's entries.
  ASSERT_TRUE(ar.ok()) << ar.status();
  EXPECT_EQ(ar->prefix(), "first");
  std::set<AnomalyKind> kinds;
  for (const Anomaly& x : ar->anomalies()) kinds.insert(x.kind);
  EXPECT_TRUE(kinds.count(AnomalyKind::kMultipleEocd));
  EXPECT_TRUE(kinds.count(AnomalyKind::kGap));
  // A signature with fewer than 22 bytes after it is skipped.
  std::string tail("PK\x05\x06", 4);
  const std::string a_tail = a + tail;
  absl::StatusOr<Archive> ok = Archive::Open(a_tail);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->prefix(), "first");
}

// ------------------------------------------------------------------------------------------
// Lookup, reading, version.

TEST(ZipLocateTest, IsAsciiCaseInsensitiveAndStopsAtNul) {
  const std::string file = BuildZip(TorchLikeMembers("Arch", "\x80\x02N."));
  absl::StatusOr<Archive> ar = Archive::Open(file);
  ASSERT_TRUE(ar.ok()) << ar.status();
  EXPECT_EQ(ar->prefix(), "Arch");
  ASSERT_NE(ar->Locate("ARCH/DATA.PKL"), nullptr);
  EXPECT_EQ(ar->Locate("ARCH/DATA.PKL")->index, 0u);
  EXPECT_EQ(ar->Locate(std::string("arch/data.pkl\0junk", 18))->index, 0u);
  EXPECT_EQ(ar->Locate("arch/data.pk"), nullptr);
  EXPECT_EQ(ar->Locate("arch/data.pkl2"), nullptr);
  // Non-ASCII bytes are compared as they are.
  EXPECT_EQ(ar->Locate("arch/d\xc3\x81ta.pkl"), nullptr);
}

TEST(ZipLocateTest, ManyDuplicatesResolveToOneDeterministicEntry) {
  std::vector<TestMember> members = TorchLikeMembers("archive", "\x80\x02N.");
  for (int i = 0; i < 9; ++i)
    members.push_back({i % 2 ? "archive/DATA.pkl" : "archive/data.PKL", "x"});
  std::string file = BuildZip(members);
  absl::StatusOr<Archive> ar = Archive::Open(file);
  ASSERT_TRUE(ar.ok()) << ar.status();
  const Entry* first = ar->LocateRecord("data.pkl");
  ASSERT_NE(first, nullptr);
  for (int run = 0; run < 3; ++run) {
    absl::StatusOr<Archive> again = Archive::Open(file);
    EXPECT_EQ(again->LocateRecord("data.pkl")->index, first->index);
  }
}

TEST(ZipReadTest, StoredMembersAreViewsOfTheFile) {
  std::string file = BuildZip(TorchLikeMembers("archive", "\x80\x02N."));
  absl::StatusOr<Archive> ar = Archive::Open(file);
  absl::StatusOr<Member> m = ar->ReadRecord("data.pkl");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->bytes(), "\x80\x02N.");
  EXPECT_GE(m->bytes().data(), file.data());
  EXPECT_LT(m->bytes().data(), file.data() + file.size());
  EXPECT_EQ(ar->LocateRecord("data.pkl")->data_offset % 64, 0u);
  EXPECT_THAT(ar->ReadRecord("nope").status().message(), HasSubstr("file not found"));
}

TEST(ZipReadTest, Zip64ExtraFieldSuppliesSizes) {
  std::vector<TestMember> members = TorchLikeMembers("archive", "\x80\x02N.");
  members[0].zip64_extra = true;
  members[1].data = Deflate(std::string(1000, 'q'));
  members[1].method = 8;
  members[1].uncompressed = 1000;
  members[1].zip64_extra = true;
  const std::string file = BuildZip(members);
  absl::StatusOr<Archive> ar = Archive::Open(file);
  ASSERT_TRUE(ar.ok()) << ar.status();
  EXPECT_EQ(ar->entries()[0].uncompressed_size, 4u);
  EXPECT_EQ(ar->ReadRecord("data.pkl")->bytes(), "\x80\x02N.");
  absl::StatusOr<Member> d = ar->ReadRecord("data/0");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->bytes(), std::string(1000, 'q'));
  EXPECT_TRUE(d->anomalies().empty());
}

TEST(ZipReadTest, EmptyMemberIsCompleteAndEmpty) {
  const std::string file = BuildZip(TorchLikeMembers("archive", ""));
  absl::StatusOr<Archive> ar = Archive::Open(file);
  absl::StatusOr<Member> m = ar->ReadRecord("data.pkl");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->complete());
  EXPECT_TRUE(m->bytes().empty());
}

TEST(ZipVersionTest, ParsedLikeStdStoullWithinOneToTen) {
  auto version_of = [](const std::string& v) {
    std::vector<TestMember> m = TorchLikeMembers("archive", "\x80\x02N.");
    m[2].data = v;
    const std::string file = BuildZip(m);
    return Archive::Open(file)->Version();
  };
  EXPECT_EQ(*version_of("3\n"), 3u);
  EXPECT_EQ(*version_of("\t +10abc"), 10u);
  EXPECT_EQ(*version_of(std::string("7\0"
                                    "99",
                                    4)),
            7u);
  EXPECT_FALSE(version_of("0").ok());
  EXPECT_FALSE(version_of("11").ok());
  EXPECT_FALSE(version_of("-3").ok());
  EXPECT_FALSE(version_of("").ok());
  EXPECT_FALSE(version_of("x3").ok());
  EXPECT_FALSE(version_of("99999999999999999999999").ok());
}

TEST(ZipAllRecordsTest, StripsTheFolderAndRejectsOutsiders) {
  std::vector<TestMember> m = TorchLikeMembers("archive", "\x80\x02N.");
  const std::string file = BuildZip(m);
  absl::StatusOr<Archive> ar = Archive::Open(file);
  EXPECT_THAT(*ar->AllRecords(), ::testing::ElementsAre("data.pkl", "data/0", "version"));
  m.push_back({"archivex/data.pkl", "y"});
  const std::string outsider = BuildZip(m);
  ar = Archive::Open(outsider);
  EXPECT_THAT(ar->AllRecords().status().message(), HasSubstr("not in a subdirectory"));
}

TEST(ZipOpenTest, FolderNameWithNulIsRefused) {
  std::vector<TestMember> m = TorchLikeMembers(std::string("a\0b", 3), "\x80\x02N.");
  const std::string file = BuildZip(m);
  EXPECT_THAT(Archive::Open(file).status().message(), HasSubstr("NUL"));
}

TEST(ZipOpenTest, ErrorsNameTheOffsetAndTheMember) {
  std::string file =
      BuildZip(TorchLikeMembers("archive", "\x80\x02N."), {.zip64_end = false, .comment = ""});
  // Break the second CD entry's signature.
  size_t cd2 =
      file.rfind(std::string("PK\x01\x02", 4), file.rfind(std::string("PK\x01\x02", 4)) - 1);
  file[cd2 + 3] = 9;
  absl::StatusOr<Archive> ar = Archive::Open(file);
  EXPECT_THAT(ar.status().message(), HasSubstr("entry #1"));
  EXPECT_THAT(ar.status().message(), HasSubstr("at byte offset " + std::to_string(cd2)));
}

}  // namespace
}  // namespace ckptscan::zip
