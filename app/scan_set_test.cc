#include "app/scan_set.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

// Files by name -> identity, in memory. Scanning "P" can replace what "P" names (as a rename
// over it while the scanner reads does): after the scan, "P" is the file "Q" also names. Each
// scan's report is SAFE and names the identity it read, so a test can tell which file a report
// is of.
class ReplacingSource final : public FileSource {
 public:
  ReplacingSource(std::map<std::string, uint64_t> files, std::string replaced, uint64_t with)
      : files_(std::move(files)), replaced_(std::move(replaced)), with_(with) {}

  v1::FileReport Scan(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    v1::FileReport r;
    r.set_path(path);
    r.set_verdict(v1::VERDICT_SAFE);
    r.set_format(std::to_string(files_.at(path)));  // the file read
    scanned_.push_back(path);
    if (path == replaced_) files_[path] = with_;  // replaced once the scanner has read it
    return r;
  }

  absl::StatusOr<FileId> Find(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = files_.find(path);
    if (it == files_.end()) return absl::NotFoundError(path);
    return FileId{1, it->second};
  }

  std::vector<std::string> scanned() {
    std::lock_guard<std::mutex> lock(mu_);
    return scanned_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, uint64_t> files_;
  std::string replaced_;
  uint64_t with_;
  std::vector<std::string> scanned_;
};

std::vector<ScanTarget> Targets(const std::vector<std::string>& paths) {
  std::vector<ScanTarget> targets;
  for (const std::string& p : paths) {
    ScanTarget t;
    t.path = p;
    targets.push_back(std::move(t));
  }
  return targets;
}

ScanSetOptions JobsOptions(int jobs) {
  ScanSetOptions options;
  options.jobs = jobs;
  return options;
}

// P (file 1) is replaced by file 2 while it is scanned; Q names file 2. Before the fix, P's
// report (of file 1) was remembered as file 2's, so Q was skipped as "the same file as P" and
// file 2 was never scanned: whatever it held, the set could be SAFE.
TEST(ScanSetTest, AFileReplacedDuringTheScanIsAnErrorAndItsNewContentIsStillScanned) {
  for (int jobs : {1, 2}) {
    SCOPED_TRACE(jobs);
    ReplacingSource source({{"P", 1}, {"Q", 2}}, "P", 2);
    v1::Report report;
    ScanSet(Targets({"P", "Q"}), {}, &source, &report, JobsOptions(jobs));
    ASSERT_EQ(report.files_size(), 2) << report.DebugString();
    EXPECT_EQ(report.files(0).path(), "P");
    EXPECT_EQ(report.files(0).verdict(), v1::VERDICT_ERROR);
    ASSERT_EQ(report.files(0).errors_size(), 1);
    EXPECT_NE(report.files(0).errors(0).message().find("was replaced by another file"),
              std::string::npos);
    EXPECT_EQ(report.files(1).path(), "Q");
    EXPECT_EQ(report.files(1).format(), "2");  // file 2 itself was read
    EXPECT_EQ(report.skipped_size(), 0);
    EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  }
}

// Without a replacement, two names of one file are scanned once, whatever -j.
TEST(ScanSetTest, TwoNamesOfOneFileAreScannedOnceWhateverJobs) {
  for (int jobs : {1, 2, 4}) {
    SCOPED_TRACE(jobs);
    ReplacingSource source({{"A", 1}, {"B", 1}, {"C", 3}}, "", 0);
    v1::Report report;
    ScanSet(Targets({"A", "B", "C"}), {}, &source, &report, JobsOptions(jobs));
    ASSERT_EQ(report.files_size(), 2) << report.DebugString();
    EXPECT_EQ(report.files(0).path(), "A");
    EXPECT_EQ(report.files(1).path(), "C");
    ASSERT_EQ(report.skipped_size(), 1);
    EXPECT_EQ(report.skipped(0).path(), "B");
    EXPECT_EQ(source.scanned().size(), 2u);
    EXPECT_EQ(report.verdict(), v1::VERDICT_SAFE);
  }
}

}  // namespace
}  // namespace ckptscan::app
