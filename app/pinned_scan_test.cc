// The jailed scan and conversion hash the bytes the worker parsed, or fail closed. The attack: a
// file rewritten through a shared writable mapping whose pages are already dirty (so neither mtime
// nor ctime moves) after the worker parsed it and before the trusted side hashed it. With the real
// ckptscan-worker, on both pins:
//   sealed copy  the attacker's mapping exists before the job, so no lease can be had: SAFE
//                with the digest of the benign bytes (the copy the worker parsed)
//   lease        nobody writes the file when the job starts; a writer that opens it during
//                the job breaks the lease: ERROR, "opened for writing during the scan"
// tests/attacks/shared_mapping_rewrite_test.py runs the same attack on the CLI at several
// delays (and fails on the code before the fix).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "app/convert.h"
#include "app/scan_file.h"
#include "base/sha256.h"
#include "gtest/gtest.h"
#include "rules/rule_set.h"
#include "sandbox/pinned_input.h"
#include "sandbox/run.h"
#include "sandbox/testcases/sanitizers.h"

namespace ckptscan::app {
namespace {

using base::Sha256Hex;
using sandbox::JailOptions;
using sandbox::PinnedInput;

#define SKIP_UNDER_SANITIZERS() \
  if (sandbox::kUnderSanitizer) GTEST_SKIP() << sandbox::kSanitizerSkipReason

// posix.system('id'), leaving one value on the stack.
constexpr std::string_view kCall = "cposix\nsystem\nX\x02\x00\x00\x00id\x85R";

// A pickle string op of exactly `n` bytes.
std::string StringOp(size_t n) {
  std::string op = "X";
  const uint32_t len = static_cast<uint32_t>(n - 5);
  op.append(reinterpret_cast<const char*>(&len), 4);
  op.append(n - 5, 'a');
  return op;
}

// Benign and malicious pickles of the same size: a BINBYTES of `payload` zeros (popped), then
// a string, or the call. The worker skips the payload in no time, the hash reads all of it:
// the hash is still running when the worker is done.
struct Pair {
  std::string benign_tail, malicious_tail;
  uint64_t tail_offset = 0, size = 0;
  std::string good, bad;  // their digests
};

Pair ScanPair(uint32_t payload) {
  Pair p;
  std::string head =
      "\x80\x03"
      "B";
  head.append(reinterpret_cast<const char*>(&payload), 4);
  p.tail_offset = head.size() + payload + 1;  // the POP after the payload is common
  p.benign_tail = StringOp(kCall.size()) + ".";
  p.malicious_tail = std::string(kCall) + ".";
  p.size = p.tail_offset + p.benign_tail.size();
  std::string whole = head + std::string(payload, '\0') + "0";
  p.good = *Sha256Hex(whole + p.benign_tail);
  p.bad = *Sha256Hex(whole + p.malicious_tail);
  return p;
}

// Writes the benign file (sparse: the payload is a hole) and returns its path.
std::string WriteBenign(const Pair& p, const std::string& name) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name);
  ::unlink(path.c_str());
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  EXPECT_TRUE(fd.valid());
  const uint32_t payload = static_cast<uint32_t>(p.tail_offset - 8);
  std::string head =
      "\x80\x03"
      "B";
  head.append(reinterpret_cast<const char*>(&payload), 4);
  EXPECT_TRUE(base::PwriteAll(fd.get(), 0, head).ok());
  EXPECT_TRUE(base::PwriteAll(fd.get(), p.tail_offset - 1, "0" + p.benign_tail).ok());
  EXPECT_EQ(::fsync(fd.get()), 0);  // clean pages: only the attacker's writes dirty them
  return path;
}

// The attacker's writable shared mapping of the whole file, its descriptor closed (the
// mapping keeps the file open for writing). Dirty() writes the benign tail again (the fault
// moves the times now); Rewrite() then puts the malicious tail in without a fault.
class Attacker {
 public:
  Attacker(const std::string& path, const Pair& p) : p_(p) {
    base::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    addr_ = static_cast<char*>(
        ::mmap(nullptr, p.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
    EXPECT_NE(addr_, MAP_FAILED);
  }
  ~Attacker() { ::munmap(addr_, p_.size); }
  void Dirty() {
    std::memcpy(addr_ + p_.tail_offset, p_.benign_tail.data(), p_.benign_tail.size());
  }
  void Rewrite() {
    std::memcpy(addr_ + p_.tail_offset, p_.malicious_tail.data(), p_.malicious_tail.size());
  }

 private:
  const Pair& p_;
  char* addr_;
};

struct Times {
  int64_t mtime_ns, ctime_ns;
  bool operator==(const Times&) const = default;
};

Times TimesOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return {st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
          st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec};
}

JailOptions Options(std::string* pin) {
  JailOptions o;
  o.worker_path = CKPT_WORKER;
  o.timeout = absl::Seconds(30);
  o.on_pin = [pin](std::string_view how) { *pin = std::string(how); };
  return o;
}

// Options whose after-parse hook runs `rewrite` (through a mapping whose page is dirty
// already) and records the file's times then; `before` gets them now.
JailOptions RewriteAfterParse(const std::string& path, std::function<void()> rewrite,
                              std::string* pin, Times* before, Times* after) {
  absl::SleepFor(absl::Milliseconds(20));  // the dirtying fault's times are in the past
  *before = TimesOf(path);
  JailOptions o = Options(pin);
  o.after_worker_for_test = [path, rewrite = std::move(rewrite), after] {
    rewrite();
    *after = TimesOf(path);
  };
  return o;
}

const rules::RuleSet& Rules() { return *rules::RuleSet::Default(); }

bool HasError(const v1::FileReport& r, v1::ErrorCode code, std::string_view text) {
  for (const v1::ScanError& e : r.errors()) {
    if (e.code() == code && e.message().find(text) != std::string::npos) return true;
  }
  return false;
}

constexpr uint32_t kPayload = 32u << 20;

// The faithful attack, at the worst moment: after the worker parsed, before the hash is done.
TEST(PinnedScanTest, ARewriteThroughADirtySharedMappingAfterTheParseIsNotHashed) {
  SKIP_UNDER_SANITIZERS();
  const Pair p = ScanPair(kPayload);
  const std::string path = WriteBenign(p, "pinned_copy.pkl");
  Attacker attacker(path, p);
  attacker.Dirty();
  std::string pin;
  Times before, after;
  const JailOptions o = RewriteAfterParse(
      path, [&] { attacker.Rewrite(); }, &pin, &before, &after);
  absl::StatusOr<v1::FileReport> r = ScanFile(path, Rules(), {}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // The attack as it is: the rewrite moved neither time (else the test proves nothing).
  ASSERT_EQ(before, after) << "the rewrite moved mtime or ctime: the attack was not reproduced";
  EXPECT_EQ(pin.rfind("sealed copy", 0), 0u) << pin;
  EXPECT_EQ(r->verdict(), v1::VERDICT_SAFE) << r->DebugString();
  EXPECT_EQ(r->sha256(), p.good);  // the digest of the bytes parsed, not of the file now
  EXPECT_NE(r->sha256(), p.bad);
  ::unlink(path.c_str());
}

// The same rewrite at several moments after the job started (a thread): never SAFE with the
// malicious digest; SAFE only with the benign one.
class RewriteDelayTest : public testing::TestWithParam<int> {};

TEST_P(RewriteDelayTest, NeverSafeWithTheDigestOfOtherBytes) {
  SKIP_UNDER_SANITIZERS();
  const Pair p = ScanPair(kPayload);
  const std::string path = WriteBenign(p, absl::StrCat("pinned_delay_", GetParam(), ".pkl"));
  Attacker attacker(path, p);
  attacker.Dirty();
  absl::SleepFor(absl::Milliseconds(20));
  const Times before = TimesOf(path);
  std::string pin;
  std::thread rewrite([&] {
    absl::SleepFor(absl::Milliseconds(GetParam()));
    attacker.Rewrite();
  });
  absl::StatusOr<v1::FileReport> r = ScanFile(path, Rules(), {}, Options(&pin));
  rewrite.join();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(before, TimesOf(path)) << "the rewrite moved mtime or ctime";
  EXPECT_EQ(pin.rfind("sealed copy", 0), 0u) << pin;
  // SAFE only with the benign digest; the malicious digest only with the call found (the
  // copy was made after the rewrite: the worker parsed the call, and that is hashed).
  if (r->verdict() == v1::VERDICT_SAFE) {
    EXPECT_EQ(r->sha256(), p.good);
  }
  if (r->sha256() == p.bad) {
    EXPECT_EQ(r->verdict(), v1::VERDICT_DANGEROUS) << r->DebugString();
  }
  ::unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Delays, RewriteDelayTest, testing::Values(0, 1, 5, 20, 100));

// Nobody writes the file when the job starts: it is leased. A writer that opens it after the
// parse breaks the lease: ERROR, the findings kept (none here), the writer not blocked for long.
TEST(PinnedScanTest, AWriterOpeningALeasedFileAfterTheParseMakesTheScanError) {
  SKIP_UNDER_SANITIZERS();
  const Pair p = ScanPair(kPayload);
  const std::string path = WriteBenign(p, "pinned_lease.pkl");
  std::string pin;
  JailOptions o = Options(&pin);
  std::thread writer;
  std::atomic<bool> hook_done{false};
  std::atomic<bool> opened_before_hook_done{false};
  o.after_worker_for_test = [&] {
    writer = std::thread([&] {
      // Blocks in open(2) while the lease is held, then rewrites through a new mapping.
      base::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
      opened_before_hook_done = !hook_done.load();
      ASSERT_TRUE(fd.valid());
      ASSERT_EQ(::pwrite(fd.get(), p.malicious_tail.data(), p.malicious_tail.size(),
                         static_cast<off_t>(p.tail_offset)),
                static_cast<ssize_t>(p.malicious_tail.size()));
    });
    absl::SleepFor(absl::Milliseconds(100));  // the writer is waiting in open(2)
    hook_done = true;
  };
  absl::StatusOr<v1::FileReport> r = ScanFile(path, Rules(), {}, o);
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(pin, "lease");
  EXPECT_FALSE(opened_before_hook_done) << "the lease did not hold the writer";
  EXPECT_EQ(r->verdict(), v1::VERDICT_ERROR) << r->DebugString();
  EXPECT_TRUE(HasError(*r, v1::ERROR_CODE_IO, "opened for writing during the scan"))
      << r->DebugString();
  EXPECT_TRUE(r->sha256().empty()) << "a digest of bytes that may have changed";
  ::unlink(path.c_str());
}

// Without a writer the lease holds: SAFE with the digest, and the lease is given back.
TEST(PinnedScanTest, ALeasedFileNobodyWritesIsSafeAndReleased) {
  SKIP_UNDER_SANITIZERS();
  const Pair p = ScanPair(1 << 20);
  const std::string path = WriteBenign(p, "pinned_quiet.pkl");
  std::string pin;
  absl::StatusOr<v1::FileReport> r = ScanFile(path, Rules(), {}, Options(&pin));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(pin, "lease");
  EXPECT_EQ(r->verdict(), v1::VERDICT_SAFE) << r->DebugString();
  EXPECT_EQ(r->sha256(), p.good);
  base::UniqueFd writer(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  EXPECT_TRUE(writer.valid()) << "a lease is still held: " << std::strerror(errno);
  ::unlink(path.c_str());
}

// A writer that opens the file while the worker still runs stops the job early (the writer
// waits less), and it is ERROR with the io error, not "cancelled".
// Waits (up to 30 s) until /proc/locks shows a lease on `path`'s inode.
void WaitForLease(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;
  const std::string inode = absl::StrCat(":", st.st_ino, " ");
  for (int i = 0; i < 30000; ++i) {
    std::ifstream locks("/proc/locks");
    for (std::string line; std::getline(locks, line);) {
      if (line.find("LEASE") != std::string::npos && line.find(inode) != std::string::npos) {
        return;
      }
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

TEST(PinnedScanTest, ALeaseBrokenWhileTheWorkerRunsStopsItAsAnIoError) {
  SKIP_UNDER_SANITIZERS();
  // A pickle the worker needs a while for: None memoized many times.
  std::string slow = "\x80\x04N";
  slow.append(3000000, '\x94');
  slow += ".";
  const std::string path = absl::StrCat(testing::TempDir(), "/pinned_slow.pkl");
  {
    base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(base::WriteAll(fd.get(), slow).ok());
  }
  std::string pin;
  std::thread writer([&] {
    // Only once the scan holds its lease: opened earlier (a loaded machine sets a scan up
    // slowly), the file is pinned by a copy and no lease is broken.
    WaitForLease(path);
    base::UniqueFd fd(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));  // breaks it
  });
  absl::StatusOr<v1::FileReport> r = ScanFile(path, Rules(), {}, Options(&pin));
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(pin, "lease");
  EXPECT_EQ(r->verdict(), v1::VERDICT_ERROR) << r->DebugString();
  EXPECT_TRUE(HasError(*r, v1::ERROR_CODE_IO, "opened for writing during the scan"))
      << r->DebugString();
  for (const v1::ScanError& e : r->errors())
    EXPECT_NE(e.code(), v1::ERROR_CODE_CANCELLED) << e.message();
  ::unlink(path.c_str());
}

TEST(PinnedScanTest, AFileOverTheCopyLimitThatCannotBeLeasedIsALimitError) {
  SKIP_UNDER_SANITIZERS();
  const Pair p = ScanPair(1 << 20);
  const std::string path = WriteBenign(p, "pinned_limit.pkl");
  Attacker attacker(path, p);  // open for writing: no lease
  std::string pin;
  JailOptions o = Options(&pin);
  o.max_sealed_copy_bytes = 4096;
  absl::StatusOr<v1::FileReport> r = ScanFile(path, Rules(), {}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(r->errors_size(), 1) << r->DebugString();
  EXPECT_EQ(r->errors(0).code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(r->errors(0).limit_name(), "max_sealed_copy_bytes");
  EXPECT_EQ(r->errors(0).limit_value(), 4096u);
  EXPECT_NE(r->errors(0).message().find("--max-sealed-copy-bytes"), std::string::npos);
  EXPECT_EQ(r->size(), p.size);
  EXPECT_TRUE(r->sha256().empty());

  ConvertRequest request;
  request.input = path;
  request.output = absl::StrCat(testing::TempDir(), "/pinned_limit.safetensors");
  request.scanner_version = "test";
  ::unlink(request.output.c_str());
  absl::StatusOr<ConvertResult> c = ConvertFile(request, Rules(), {}, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->status.ok());
  EXPECT_EQ(c->report.verdict(), v1::VERDICT_ERROR);
  EXPECT_EQ(c->report.errors(0).limit_name(), "max_sealed_copy_bytes");
  EXPECT_NE(::access(request.output.c_str(), F_OK), 0);
  ::unlink(path.c_str());
}

// ------------------------------------------------------------ conversions

// A copy of the real torch.save fixture, and a byte of it to change after the parse.
std::string CopyFixture(const std::string& name, std::string* bytes) {
  const std::string src = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/torch/sequential.pt";
  base::UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  EXPECT_EQ(::fstat(in.get(), &st), 0);
  bytes->assign(static_cast<size_t>(st.st_size), '\0');
  EXPECT_EQ(::pread(in.get(), bytes->data(), bytes->size(), 0), st.st_size);
  const std::string path = absl::StrCat(testing::TempDir(), "/", name);
  ::unlink(path.c_str());
  base::UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  EXPECT_TRUE(base::WriteAll(out.get(), *bytes).ok());
  EXPECT_EQ(::fsync(out.get()), 0);
  return path;
}

ConvertRequest ConvertOf(const std::string& path, const std::string& name) {
  ConvertRequest request;
  request.input = path;
  request.output = absl::StrCat(testing::TempDir(), "/", name);
  request.scanner_version = "test";
  ::unlink(request.output.c_str());
  return request;
}

// The output's provenance names the bytes converted, though the file changed (without its
// times moving) after the worker converted it.
TEST(PinnedConvertTest, TheProvenanceDigestIsOfTheBytesConverted) {
  SKIP_UNDER_SANITIZERS();
  std::string bytes;
  const std::string path = CopyFixture("pinned_convert_copy.pt", &bytes);
  const std::string good = *Sha256Hex(bytes);
  base::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  char* map = static_cast<char*>(
      ::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  ASSERT_NE(map, MAP_FAILED);
  fd.reset();
  const size_t at = bytes.size() / 2;
  map[at] = bytes[at];  // dirty the page now
  std::string pin;
  Times before, after;
  const JailOptions o = RewriteAfterParse(
      path, [&] { map[at] = static_cast<char>(bytes[at] ^ 0x5a); }, &pin, &before, &after);
  const ConvertRequest request = ConvertOf(path, "pinned_convert_copy.safetensors");
  absl::StatusOr<ConvertResult> c = ConvertFile(request, Rules(), {}, o);
  ::munmap(map, bytes.size());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(before, after) << "the rewrite moved mtime or ctime: the attack was not reproduced";
  EXPECT_EQ(pin.rfind("sealed copy", 0), 0u) << pin;
  EXPECT_TRUE(c->status.ok()) << c->status;
  EXPECT_EQ(c->report.verdict(), v1::VERDICT_SAFE);
  EXPECT_EQ(c->report.sha256(), good);
  // The published header carries the same digest.
  base::UniqueFd out(::open(request.output.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(out.valid());
  std::string head(4096, '\0');
  const ssize_t n = ::pread(out.get(), head.data(), head.size(), 0);
  ASSERT_GT(n, 8);
  head.resize(static_cast<size_t>(n));
  EXPECT_NE(head.find(absl::StrCat("\"ckptscan.source_sha256\":\"", good, "\"")), std::string::npos)
      << head;
  ::unlink(request.output.c_str());
  ::unlink(path.c_str());
}

// Leased: a writer that opens the input after the parse breaks the lease, and nothing is
// published.
TEST(PinnedConvertTest, AWriterOpeningALeasedInputAfterTheParseMeansNoOutput) {
  SKIP_UNDER_SANITIZERS();
  std::string bytes;
  const std::string path = CopyFixture("pinned_convert_lease.pt", &bytes);
  std::string pin;
  JailOptions o = Options(&pin);
  int open_errno = 0;
  o.after_worker_for_test = [&] {
    base::UniqueFd w(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    open_errno = w.valid() ? 0 : errno;
  };
  const ConvertRequest request = ConvertOf(path, "pinned_convert_lease.safetensors");
  absl::StatusOr<ConvertResult> c = ConvertFile(request, Rules(), {}, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(pin, "lease");
  EXPECT_EQ(open_errno, EWOULDBLOCK);
  EXPECT_FALSE(c->status.ok());
  EXPECT_EQ(c->report.verdict(), v1::VERDICT_ERROR);
  EXPECT_TRUE(HasError(c->report, v1::ERROR_CODE_IO, "opened for writing during the scan"));
  EXPECT_FALSE(c->report.has_conversion());
  EXPECT_NE(::access(request.output.c_str(), F_OK), 0);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace ckptscan::app
