#include "tests/inprocess/local_scan.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/pickle/opcodes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::inprocess {
namespace {

using app::JudgeFacts;
using app::ToScanError;
using app::UnreadableFileReport;
using sandbox::ExtractFacts;
using sandbox::FileFacts;
using sandbox::MemberFacts;

using ::testing::HasSubstr;

using std::string_view_literals::operator""sv;

constexpr std::string_view kSafe = "\x80\x02}q\x00."sv;              // {} (protocol 2)
constexpr std::string_view kEvil = "cposix\nsystem\n(S'id'\ntR."sv;  // posix.system('id')
// The same with a PROTO opcode first: binary, so a cut of it is a broken pickle, not text.
constexpr std::string_view kEvilBinary =
    "\x80\x02"
    "cposix\nsystem\n(S'id'\ntR."sv;

const rules::RuleSet& DefaultRules() {
  static const std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();
  return *rules;
}

v1::FileReport Judge(std::string_view bytes, const pickle::Limits& limits = {}) {
  return JudgeFacts(ExtractFacts(bytes, limits), DefaultRules());
}

// A 512-byte tar header block whose name field is `name` and whose checksum is
// valid.
std::string TarBlock(std::string_view name) {
  std::string b(512, '\0');
  b.replace(0, name.size(), name);
  b.replace(100, 8, "0000644");
  b.replace(124, 12, "00000000000");
  b.replace(148, 8, "        ");
  unsigned sum = 0;
  for (unsigned char c : b) sum += c;
  char field[8];
  std::snprintf(field, sizeof field, "%06o", sum);
  b.replace(148, 7, std::string(field, 6) + '\0');
  return b + std::string(1024, '\0');
}

// ---------------------------------------------------------------- format
// detection

TEST(ExtractFactsTest, EmptyFileIsDataNotAPickle) {
  // Nothing for any loader to read (pickle.load raises EOFError, torch.load fails): an empty
  // file in a repository (__init__.py, .gitkeep) is data, SAFE.
  const FileFacts f = ExtractFacts("", {});
  EXPECT_EQ(f.format, "empty");
  EXPECT_TRUE(f.errors.empty());
  EXPECT_TRUE(f.members.empty());
  const v1::FileReport r = JudgeFacts(f, DefaultRules());
  EXPECT_EQ(r.verdict(), v1::VERDICT_SAFE);
  EXPECT_EQ(r.kind(), "data");
}

// Text that pickle.load rejects before it imports or calls anything ("." is STOP on an empty
// stack, "I0x" an INT without digits, a protocol-0 pickle cut before its STOP) is data: every
// reading of it ends without running code. Text whose pickle reading names a global is judged
// by that reading; text whose reading stops at one of our limits (where CPython would read on)
// is ERROR.
TEST(ExtractFactsTest, TextThatCPythonRejectsIsData) {
  for (const std::string text : {".", "I0x\n.", "(dp0\nVa\np1\nI1\nsVb\np2\n(lp3\nI1\naI2\n"}) {
    const FileFacts f = ExtractFacts(text, {});
    EXPECT_EQ(f.format, "text") << text;
    const v1::FileReport r = JudgeFacts(f, DefaultRules());
    EXPECT_EQ(r.verdict(), v1::VERDICT_SAFE) << text;
    EXPECT_EQ(r.kind(), "data") << text;
  }
  const FileFacts evil = ExtractFacts("cposix\nsystem\n(S'id'\ntR", {});  // no STOP
  EXPECT_EQ(evil.format, "text");
  EXPECT_EQ(JudgeFacts(evil, DefaultRules()).verdict(), v1::VERDICT_DANGEROUS);
  pickle::Limits small;
  small.max_opcodes = 20;
  std::string long_pickle = "(";
  for (int i = 0; i < 50; ++i) long_pickle += "I1\n";
  long_pickle += "l0cposix\nsystem\n(S'id'\ntR.";
  const FileFacts cut = ExtractFacts(long_pickle, small);
  EXPECT_EQ(cut.format, "text");
  EXPECT_EQ(JudgeFacts(cut, DefaultRules()).verdict(), v1::VERDICT_ERROR);
}

TEST(ExtractFactsTest, ZipMagicWithoutAnArchiveIsMalformed) {
  const FileFacts f = ExtractFacts(std::string("PK\x03\x04", 4) + "rest", {});
  EXPECT_EQ(f.format, "zip");
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_MALFORMED);
  EXPECT_THAT(f.errors[0].message(), HasSubstr("zip:"));
  EXPECT_TRUE(f.members.empty());
}

TEST(ExtractFactsTest, ArchiveAndZstdContainersFailClosed) {
  const struct {
    std::string bytes;
    const char* format;
  } cases[] = {
      {std::string("\x37\x7a\xbc\xaf\x27\x1c\x00\x04", 8), "7z"},
      {std::string("Rar!\x1a\x07\x01\x00", 8), "rar"},
      {std::string("\x28\xb5\x2f\xfd\x00", 5), "zstd"},
      {std::string("\x89HDF\r\n\x1a\n\x00\x00", 10), "hdf5"},
  };
  for (const auto& c : cases) {
    const FileFacts f = ExtractFacts(c.bytes, {});
    EXPECT_EQ(f.format, c.format);
    ASSERT_EQ(f.errors.size(), 1u) << c.format;
    EXPECT_EQ(f.errors[0].code(), v1::ERROR_CODE_UNSUPPORTED) << c.format;
    EXPECT_EQ(JudgeFacts(f, DefaultRules()).verdict(), v1::VERDICT_ERROR) << c.format;
  }
  // GGUF is read (core/gguf): a header cut short is malformed, not "unsupported".
  const FileFacts gguf = ExtractFacts(std::string("GGUF\x03\x00\x00\x00\x00\x00\x00\x00", 12), {});
  EXPECT_EQ(gguf.format, "gguf");
  ASSERT_EQ(gguf.errors.size(), 1u);
  EXPECT_EQ(gguf.errors[0].code(), v1::ERROR_CODE_MALFORMED);
  EXPECT_EQ(JudgeFacts(gguf, DefaultRules()).verdict(), v1::VERDICT_ERROR);
}

// joblib < 0.10's "ZF" files are read (docs/formats.md, "joblib < 0.10"): one whose length
// field Python's int() refuses, and whose zlib stream starts inside it, fails joblib.load.
TEST(ExtractFactsTest, ZFileThatJoblibCannotReadIsAnError) {
  const FileFacts f = ExtractFacts(std::string("ZF0x10\n\x78\x9c", 8), {});
  EXPECT_EQ(f.format, "joblib-compat");
  ASSERT_FALSE(f.errors.empty());
  for (const v1::ScanError& e : f.errors) EXPECT_NE(e.code(), v1::ERROR_CODE_UNSUPPORTED);
  EXPECT_EQ(JudgeFacts(f, DefaultRules()).verdict(), v1::VERDICT_ERROR);
}

// "GGUF" is BINFLOAT and 4 bytes of its operand; the version and the tensor count's first byte
// end it, and pickle.load reads the rest of the header as opcodes. A GGUF header whose tensor
// count spells a pickle is found, not hidden behind "not verified".
TEST(ExtractFactsTest, GgufHeaderThatIsAlsoAPickleIsJudged) {
  std::string gguf = std::string("GGUF\x03\x00\x00\x00\x00", 9);
  gguf += "cposix\nsystem\n(S'id'\ntR.";
  const FileFacts f = ExtractFacts(gguf, {});
  EXPECT_EQ(f.format, "gguf");
  EXPECT_EQ(JudgeFacts(f, DefaultRules()).verdict(), v1::VERDICT_DANGEROUS);
}

TEST(ExtractFactsTest, TruncatedJoblibCompressedStreamsGetTheOtherLoadersReading) {
  // joblib's prefixes: joblib.load decompresses these, and none is a whole stream.
  const struct {
    std::string bytes;
    const char* format;
  } cases[] = {
      {std::string("\x1f\x8b\x08\x00", 4), "gzip"},
      {"BZh91AY&SY", "bzip2"},
      {std::string("\xfd\x37\x7a\x58\x5a\x00\x00", 7), "xz"},
      {std::string("\x04\x22\x4d\x18\x00", 5), "lz4"},
      {"x", "zlib"},
      {std::string("\x5d\x00\x00\x80", 4), "lzma"},
  };
  for (const auto& c : cases) {
    const FileFacts f = ExtractFacts(c.bytes, {});
    // joblib.load fails before it unpickles a byte: the file gets the other loaders' reading.
    // Text ("x", "BZh91AY&SY") is text to all of them; the other bytes are no format
    // or a cut pickle (lzma's ']' is EMPTY_LIST): ERROR.
    ASSERT_FALSE(f.anomalies.empty()) << c.format;
    EXPECT_EQ(f.anomalies[0].kind, "not_compressed") << c.format;
    const bool text = c.bytes == "x" || c.bytes == "BZh91AY&SY";
    if (text) {
      EXPECT_EQ(f.format, "text");
    }
    EXPECT_EQ(JudgeFacts(f, DefaultRules()).verdict(),
              text ? v1::VERDICT_SAFE : v1::VERDICT_ERROR)
        << c.format;
  }
}

TEST(ExtractFactsTest, TarWhoseNameFieldIsAPickleIsStillATar) {
  // torch.load tries tarfile first: a valid tar header wins even if offset 0
  // parses as a pickle.
  const FileFacts f = ExtractFacts(TarBlock("N."), {});
  EXPECT_EQ(f.format, "tar");
  EXPECT_EQ(JudgeFacts(f, DefaultRules()).verdict(), v1::VERDICT_ERROR);
}

TEST(ExtractFactsTest, BrokenTarChecksumIsNotATar) {
  std::string block = TarBlock("N.");
  block[148] = '7';
  EXPECT_NE(ExtractFacts(block, {}).format, "tar");
}

TEST(ExtractFactsTest, PlainPickleIsScannedAsOneRawMember) {
  const FileFacts f = ExtractFacts(kSafe, {});
  EXPECT_EQ(f.format, "pickle");
  EXPECT_TRUE(f.errors.empty());
  ASSERT_EQ(f.members.size(), 1u);
  EXPECT_EQ(f.members[0].member, "");
  EXPECT_EQ(f.members[0].stream.pickles.size(), 1u);
}

// ---------------------------------------------------------------- verdicts

TEST(JudgeFactsTest, CleanPickleIsSafe) {
  const v1::FileReport r = Judge(kSafe);
  EXPECT_EQ(r.verdict(), v1::VERDICT_SAFE);
  EXPECT_EQ(r.format(), "pickle");
  EXPECT_EQ(r.pickles(), 1u);
  EXPECT_EQ(r.globals(), 0u);
  EXPECT_EQ(r.errors_size(), 0);
  EXPECT_TRUE(r.has_tensors());
}

TEST(JudgeFactsTest, ShellCallIsDangerous) {
  const v1::FileReport r = Judge(kEvil);
  EXPECT_EQ(r.verdict(), v1::VERDICT_DANGEROUS);
  EXPECT_EQ(r.globals(), 1u);
  ASSERT_GT(r.findings_size(), 0);
  EXPECT_EQ(r.findings(0).global(), "posix.system");
}

TEST(JudgeFactsTest, TruncatedPickleIsError) {
  const v1::FileReport r = Judge(kSafe.substr(0, kSafe.size() - 1));
  EXPECT_EQ(r.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(r.errors_size(), 1);
  EXPECT_EQ(r.errors(0).code(), v1::ERROR_CODE_MALFORMED);
  EXPECT_EQ(r.errors(0).location().offset(), kSafe.size() - 1);
}

TEST(JudgeFactsTest, FindingsWinOverALaterParseErrorAndBothAreReported) {
  // The dangerous call, then the stream ends before STOP.
  const v1::FileReport r = Judge(kEvilBinary.substr(0, kEvilBinary.size() - 1));
  EXPECT_EQ(r.verdict(), v1::VERDICT_DANGEROUS);
  EXPECT_GT(r.findings_size(), 0);
  ASSERT_EQ(r.errors_size(), 1);
  EXPECT_EQ(r.errors(0).code(), v1::ERROR_CODE_MALFORMED);
}

TEST(JudgeFactsTest, DangerousSecondPickleIsFound) {
  const std::string bytes = std::string(kSafe) + std::string(kEvil);
  const v1::FileReport r = Judge(bytes);
  EXPECT_EQ(r.pickles(), 2u);
  EXPECT_EQ(r.verdict(), v1::VERDICT_DANGEROUS);
  ASSERT_GT(r.findings_size(), 0);
  EXPECT_EQ(r.findings(0).location().offset(), kSafe.size());
}

TEST(JudgeFactsTest, LimitErrorCarriesNameValueOffsetAndOpcodeName) {
  pickle::Limits limits;
  limits.max_opcodes = 3;
  const v1::FileReport r = Judge(kEvilBinary, limits);
  ASSERT_EQ(r.errors_size(), 1);
  const v1::ScanError& e = r.errors(0);
  EXPECT_EQ(e.code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(e.limit_name(), "max_opcodes");
  EXPECT_EQ(e.limit_value(), 3u);
  EXPECT_EQ(e.location().offset(), 17u);  // the fourth opcode, STRING
  EXPECT_EQ(e.location().opcode(), "STRING");
  EXPECT_EQ(e.location().member(), "");
  // The global seen before the limit is still judged: findings win.
  EXPECT_EQ(r.verdict(), v1::VERDICT_DANGEROUS);
}

TEST(JudgeFactsTest, StreamLevelLimitIsAnError) {
  pickle::Limits limits;
  limits.max_total_bytes = 3;
  const v1::FileReport r = Judge(kSafe, limits);
  EXPECT_EQ(r.verdict(), v1::VERDICT_ERROR);
  ASSERT_GE(r.errors_size(), 1);
  EXPECT_EQ(r.errors(0).code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(r.errors(0).limit_name(), "max_total_bytes");
}

TEST(JudgeFactsTest, FactsWithNoCompletePickleAreNeverSafe) {
  FileFacts facts;
  facts.format = "pickle";
  facts.members.emplace_back();  // a stream in which the VM found nothing at all
  const v1::FileReport r = JudgeFacts(facts, DefaultRules());
  EXPECT_EQ(r.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(r.errors_size(), 1);
  EXPECT_THAT(r.errors(0).message(), HasSubstr("no complete pickle"));
}

TEST(JudgeFactsTest, FactsThatScannedNothingAreNeverSafe) {
  FileFacts facts;
  facts.format = "pickle";
  EXPECT_EQ(JudgeFacts(facts, DefaultRules()).verdict(), v1::VERDICT_ERROR);
}

// ---------------------------------------------------------------- other loaders' readings

// A safetensors file (8-byte length, then the header padded with spaces) whose bytes, read as a
// pickle from offset 0, are BINBYTES of 25 bytes (the length's own bytes 1..4 give 25) and then
// whatever the header holds from its byte 22 on: here a run of MARKs inside a metadata string.
std::string SafetensorsWithMarks(size_t marks) {
  const uint64_t n = 0x42 + 256 * 25;  // low byte 'B' (BINBYTES), length bytes 0x19 0 0 0
  std::string header = R"({"__metadata__":{"a":")" + std::string(marks, '(') + R"("}})";
  header.resize(n, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header;
}

TEST(JudgeFactsTest, AnotherLoadersReadingThatStopsOnALimitIsNeverSafe) {
  // torch.load of a safetensors file unpickles it from offset 0; CPython has no MARK limit and
  // reads on past where ours stops, so that stop cannot end the reading cleanly.
  pickle::Limits limits;
  limits.max_mark_depth = 10;
  const v1::FileReport r = Judge(SafetensorsWithMarks(30), limits);
  EXPECT_EQ(r.format(), "safetensors");
  EXPECT_EQ(r.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(r.errors_size(), 1);
  EXPECT_EQ(r.errors(0).code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(r.errors(0).limit_name(), "max_mark_depth");
  EXPECT_EQ(r.errors(0).location().member(), "(as pickle)");
}

TEST(JudgeFactsTest, AnotherLoadersReadingThatFailsWhereCPythonFailsEndsCleanly) {
  // Under the limit the reading ends on the '"' after the MARKs, an invalid opcode to
  // _pickle.c too: torch.load fails there, having imported nothing.
  const v1::FileReport r = Judge(SafetensorsWithMarks(30));
  EXPECT_EQ(r.format(), "safetensors");
  EXPECT_EQ(r.verdict(), v1::VERDICT_SAFE) << r.DebugString();
}

// Facts of one pickle that stopped with `code` at `opcode`, as the member `alternative` says.
FileFacts OneStoppedPickle(pickle::VmError::Code code, uint8_t opcode, bool alternative) {
  FileFacts facts;
  facts.format = "safetensors";
  facts.safetensors.valid = true;
  torch::MemberFacts m;
  m.member = "(as pickle)";
  m.alternative = alternative;
  pickle::PickleFacts p;
  pickle::VmError e;
  e.code = code;
  e.message = "stopped";
  e.offset = 0;
  e.opcode = opcode;
  e.has_opcode = true;
  if (code == pickle::VmError::Code::kLimit) e.limit_name = "max_line_bytes";
  p.error = e;
  m.stream.pickles.push_back(std::move(p));
  facts.members.push_back(std::move(m));
  return facts;
}

TEST(JudgeFactsTest, OnlyStopsTheLoaderSharesEndAnAlternativeReading) {
  using Code = pickle::VmError::Code;
  struct Case {
    Code code;
    uint8_t opcode;
    bool alternative;
    v1::Verdict want;
  } cases[] = {
      {Code::kMalformed, 0x00, true, v1::VERDICT_SAFE},  // _pickle.c fails there too
      {Code::kUnsupported, pickle::NEXT_BUFFER, true, v1::VERDICT_SAFE},
      {Code::kStricter, pickle::BINUNICODE, true, v1::VERDICT_ERROR},  // CPython reads on
      {Code::kLimit, pickle::INT, true, v1::VERDICT_ERROR},
      // No persistent_load in any loader that reads these bytes as a pickle: it stops at the id.
      {Code::kLimit, pickle::PERSID, true, v1::VERDICT_SAFE},
      // The format's own reading: any stop is an error of the file.
      {Code::kMalformed, 0x00, false, v1::VERDICT_ERROR},
      {Code::kLimit, pickle::PERSID, false, v1::VERDICT_ERROR},
  };
  for (const Case& c : cases) {
    const v1::FileReport r =
        JudgeFacts(OneStoppedPickle(c.code, c.opcode, c.alternative), DefaultRules());
    EXPECT_EQ(r.verdict(), c.want)
        << "code " << static_cast<int>(c.code) << " opcode " << static_cast<int>(c.opcode)
        << " alternative " << c.alternative;
  }
}

TEST(ToScanErrorTest, MapsEveryField) {
  pickle::VmError vm;
  vm.code = pickle::VmError::Code::kUnsupported;
  vm.message = "NEXT_BUFFER without buffers";
  vm.offset = 77;
  vm.opcode = pickle::NEXT_BUFFER;
  vm.has_opcode = true;
  v1::ScanError e = ToScanError(vm, "archive/data.pkl", 3, 1);
  EXPECT_EQ(e.code(), v1::ERROR_CODE_UNSUPPORTED);
  EXPECT_EQ(e.message(), "NEXT_BUFFER without buffers");
  EXPECT_EQ(e.location().member(), "archive/data.pkl");
  EXPECT_EQ(e.location().offset(), 77u);
  EXPECT_EQ(e.location().opcode(), "NEXT_BUFFER");
  EXPECT_EQ(e.location().pickle_index(), 3u);
  EXPECT_EQ(e.location().nested_depth(), 1u);
  EXPECT_EQ(e.limit_name(), "");

  vm.code = pickle::VmError::Code::kMalformed;
  vm.opcode = 0xff;  // no opcode: no name
  EXPECT_EQ(ToScanError(vm, "", 0, 0).location().opcode(), "");
  vm.has_opcode = false;
  vm.opcode = pickle::STOP;
  EXPECT_EQ(ToScanError(vm, "", 0, 0).location().opcode(), "");
  EXPECT_EQ(ToScanError(vm, "", 0, 0).code(), v1::ERROR_CODE_MALFORMED);
}

// ---------------------------------------------------------------- files

class ScanFileTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/local_scan_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Write(const std::string& name, std::string_view bytes) {
    const std::string path = dir_ + "/" + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
    return path;
  }
  std::string dir_;
};

TEST_F(ScanFileTest, ReportsPathSizeAndSha256OfTheWholeFile) {
  const std::string path = Write("safe.bin", "N.");
  absl::StatusOr<v1::FileReport> r = ScanFileInProcess(path, DefaultRules(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path(), path);
  EXPECT_EQ(r->size(), 2u);
  EXPECT_EQ(r->sha256(), "8b1663da576e3578fd9e93e64081f24282af0bc3e08b3d3c8e288c26741faa4d");
  EXPECT_EQ(r->verdict(), v1::VERDICT_SAFE);
}

TEST_F(ScanFileTest, EmptyFileIsEmptyDataWithTheEmptyDigest) {
  absl::StatusOr<v1::FileReport> r = ScanFileInProcess(Write("empty.pt", ""), DefaultRules(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict(), v1::VERDICT_SAFE);
  EXPECT_EQ(r->format(), "empty");
  EXPECT_EQ(r->size(), 0u);
  EXPECT_EQ(r->sha256(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_F(ScanFileTest, FormatComesFromContentNotExtension) {
  absl::StatusOr<v1::FileReport> r =
      ScanFileInProcess(Write("model.zip", kSafe), DefaultRules(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->format(), "pickle");
  r = ScanFileInProcess(Write("model.pkl", std::string("PK\x03\x04", 4)), DefaultRules(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->format(), "zip");
  EXPECT_EQ(r->verdict(), v1::VERDICT_ERROR);
}

TEST_F(ScanFileTest, ExplicitSymlinkIsFollowed) {
  const std::string target = Write("real.pkl", kEvil);
  const std::string link = dir_ + "/link.pkl";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  absl::StatusOr<v1::FileReport> r = ScanFileInProcess(link, DefaultRules(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path(), link);
  EXPECT_EQ(r->verdict(), v1::VERDICT_DANGEROUS);
}

TEST_F(ScanFileTest, MissingFileIsNotFound) {
  absl::StatusOr<v1::FileReport> r = ScanFileInProcess(dir_ + "/nope", DefaultRules(), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ScanFileTest, DirectoryIsRefused) {
  absl::StatusOr<v1::FileReport> r = ScanFileInProcess(dir_, DefaultRules(), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("directory"));
}

TEST_F(ScanFileTest, FifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = dir_ + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  absl::StatusOr<v1::FileReport> r = ScanFileInProcess(fifo, DefaultRules(), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(UnreadableFileReportTest, IsAnErrorEntryWithAnIoError) {
  const v1::FileReport r =
      UnreadableFileReport("x.pkl", absl::PermissionDeniedError("open x.pkl: denied"));
  EXPECT_EQ(r.path(), "x.pkl");
  EXPECT_EQ(r.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(r.errors_size(), 1);
  EXPECT_EQ(r.errors(0).code(), v1::ERROR_CODE_IO);
  EXPECT_EQ(r.errors(0).message(), "open x.pkl: denied");
  EXPECT_EQ(UnreadableFileReport("y", absl::InternalError("boom")).errors(0).code(),
            v1::ERROR_CODE_INTERNAL);
}

TEST(ScanFileInProcessTest, TensorSummaryCountsTiedAndUnsupportedTensors) {
  const std::string dir = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/torch/";
  absl::StatusOr<v1::FileReport> tied = ScanFileInProcess(dir + "tied.pt", DefaultRules(), {});
  ASSERT_TRUE(tied.ok()) << tied.status();
  EXPECT_EQ(tied->verdict(), v1::VERDICT_SAFE);
  // encoder/decoder share one Parameter; first_half/second_half are views of one storage.
  EXPECT_EQ(tied->tensors().count(), 4u);
  EXPECT_EQ(tied->tensors().storages(), 2u);
  EXPECT_EQ(tied->tensors().shared(), 4u);
  EXPECT_EQ(tied->tensors().bytes(), 5u * 3 * 4 + 8 * 4);
  // A torch-quantized qint8 tensor is converted (its integers, scale and zero point); a packed
  // quint4x2 one is not.
  absl::StatusOr<v1::FileReport> q = ScanFileInProcess(dir + "quantized.pt", DefaultRules(), {});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->tensors().unsupported(), 0u);
  absl::StatusOr<v1::FileReport> packed = ScanFileInProcess(
      std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/quantized/torch_q_packed4.pt", DefaultRules(),
      {});
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->verdict(), v1::VERDICT_SAFE);
  EXPECT_EQ(packed->tensors().unsupported(), 1u);
}

}  // namespace
}  // namespace ckptscan::inprocess
