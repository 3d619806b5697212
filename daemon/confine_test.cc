#include "daemon/confine.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ckptscan::daemon {
namespace {

class ConfineTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string templ = testing::TempDir() + "/confine_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    base_ = templ;
    root_ = base_ + "/root";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root_ + "/models").c_str(), 0755), 0);
    std::ofstream(root_ + "/models/model.bin") << "weights";
    std::ofstream(base_ + "/secret") << "secret";
    ASSERT_EQ(::symlink("../../secret", (root_ + "/models/up_link").c_str()), 0);
    ASSERT_EQ(::symlink((base_ + "/secret").c_str(), (root_ + "/abs_link").c_str()), 0);
    ASSERT_EQ(::symlink("models/model.bin", (root_ + "/in_link").c_str()), 0);
    ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
    absl::StatusOr<ConfinedRoots> roots = ConfinedRoots::Open({root_});
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_.emplace(*std::move(roots));
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }

  std::string base_, root_;
  std::optional<ConfinedRoots> roots_;
};

std::string ReadAll(int fd) {
  char buf[64];
  const ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

TEST_F(ConfineTest, FilesBeneathTheRootOpenByRelativeOrAbsolutePath) {
  absl::StatusOr<base::UniqueFd> rel = roots_->OpenForRead("models/model.bin");
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_EQ(ReadAll(rel->get()), "weights");
  absl::StatusOr<base::UniqueFd> abs = roots_->OpenForRead(roots_->roots()[0] + "/models/model.bin");
  ASSERT_TRUE(abs.ok()) << abs.status();
  absl::StatusOr<base::UniqueFd> in_link = roots_->OpenForRead("in_link");
  ASSERT_TRUE(in_link.ok()) << in_link.status();  // a relative symlink that stays inside
  EXPECT_EQ(ReadAll(in_link->get()), "weights");
}

TEST_F(ConfineTest, DotDotEscapesArePermissionDenied) {
  for (const std::string& p : {std::string("../secret"), std::string("models/../../secret"),
                               roots_->roots()[0] + "/../secret"}) {
    absl::StatusOr<base::UniqueFd> fd = roots_->OpenForRead(p);
    EXPECT_TRUE(absl::IsPermissionDenied(fd.status())) << p << ": " << fd.status();
  }
}

TEST_F(ConfineTest, SymlinksOutOfTheRootArePermissionDenied) {
  EXPECT_TRUE(absl::IsPermissionDenied(roots_->OpenForRead("models/up_link").status()));
  // An absolute symlink is refused even where it points.
  EXPECT_TRUE(absl::IsPermissionDenied(roots_->OpenForRead("abs_link").status()));
}

TEST_F(ConfineTest, AbsolutePathsOutsideEveryRootArePermissionDenied) {
  EXPECT_TRUE(absl::IsPermissionDenied(roots_->OpenForRead(base_ + "/secret").status()));
  EXPECT_TRUE(absl::IsPermissionDenied(roots_->OpenForRead("/etc/passwd").status()));
  // A sibling whose name starts with the root's is not under it.
  ASSERT_EQ(::mkdir((root_ + "x").c_str(), 0755), 0);
  std::ofstream(root_ + "x/f") << "x";
  EXPECT_TRUE(
      absl::IsPermissionDenied(roots_->OpenForRead(roots_->roots()[0] + "x/f").status()));
}

TEST_F(ConfineTest, OnlyRegularFilesAreOpenedForReadingAndAFifoNeverBlocks) {
  EXPECT_TRUE(absl::IsFailedPrecondition(roots_->OpenForRead("fifo").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(roots_->OpenForRead("models").status()));
  EXPECT_TRUE(absl::IsNotFound(roots_->OpenForRead("models/none.bin").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(roots_->OpenForRead(std::string("a\0b", 3)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(roots_->OpenForRead("").status()));
}

TEST_F(ConfineTest, DirectoriesBeneathTheRootOpenForOutputs) {
  EXPECT_TRUE(roots_->OpenDirectory("models").ok());
  EXPECT_TRUE(roots_->OpenDirectory(roots_->roots()[0]).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(roots_->OpenDirectory("..").status()));
}

// A socket that does not exist yet beside a root (both in one directory) is judged by that
// directory as its parent: the root is its sibling, not inside it.
TEST_F(ConfineTest, APathNotCreatedYetBesideARootIsApart) {
  EXPECT_TRUE(roots_->CheckApart("the socket", base_ + "/s.sock").ok());
  EXPECT_TRUE(roots_->CheckApart("the state directory", base_ + "/state/spool").ok());
}

TEST_F(ConfineTest, APathNotCreatedYetInsideARootIsRefusedNamingTheRootThatContainsIt) {
  const absl::Status s = roots_->CheckApart("the socket", root_ + "/models/s.sock");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("contains the socket"), std::string::npos) << s;
  EXPECT_NE(s.message().find("to be created in"), std::string::npos) << s;
}

TEST_F(ConfineTest, AnExistingDirectoryThatHoldsARootIsRefusedAsTheRootLyingInsideIt) {
  const absl::Status s = roots_->CheckApart("the state directory", base_);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("lies inside the state directory"), std::string::npos) << s;
}

TEST(ConfineRootsTest, AMissingRootIsAnErrorAtStart) {
  EXPECT_FALSE(ConfinedRoots::Open({"/nonexistent/ckptscan-root"}).ok());
  EXPECT_FALSE(ConfinedRoots::Open({}).ok());
}

}  // namespace
}  // namespace ckptscan::daemon
