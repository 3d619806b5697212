#include "app/scan_targets.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

using Kind = ScanTarget::Kind;

class ScanTargetsTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/scan_targets_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    ::chmod((root_ + "/locked").c_str(), 0755);
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  void Touch(const std::string& rel) {
    const int fd = ::open((root_ + "/" + rel).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << rel;
    ::close(fd);
  }
  void Mkdir(const std::string& rel) { ASSERT_EQ(::mkdir((root_ + "/" + rel).c_str(), 0755), 0); }
  void Symlink(const std::string& target, const std::string& rel) {
    ASSERT_EQ(::symlink(target.c_str(), (root_ + "/" + rel).c_str()), 0);
  }
  std::string P(const std::string& rel) const { return root_ + "/" + rel; }

  std::string root_;
};

TEST_F(ScanTargetsTest, FolderIsWalkedRecursivelyInSortedOrder) {
  Mkdir("b");
  Mkdir("b/deep");
  Touch("z.pkl");
  Touch("a.pkl");
  Touch("b/deep/m.bin");
  Touch("b/c.pt");
  const std::vector<ScanTarget> t = ExpandScanPaths({root_});
  std::vector<std::string> paths;
  for (const ScanTarget& x : t) {
    EXPECT_EQ(x.kind, Kind::kFile) << x.path;
    paths.push_back(x.path);
  }
  EXPECT_THAT(paths, testing::ElementsAre(P("a.pkl"), P("b/c.pt"), P("b/deep/m.bin"), P("z.pkl")));
}

TEST_F(ScanTargetsTest, TrailingSlashDoesNotDoubleTheSeparator) {
  Touch("a.pkl");
  const std::vector<ScanTarget> t = ExpandScanPaths({root_ + "/"});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].path, P("a.pkl"));
}

TEST_F(ScanTargetsTest, FolderLinkToAWalkedFolderIsListedOnceAndLoopsEnd) {
  Mkdir("real");
  Touch("real/x.pkl");
  Symlink(root_ + "/real", "link");
  Symlink(".", "real/loop");  // would loop forever if walked again
  const std::vector<ScanTarget> t = ExpandScanPaths({root_});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].path, P("link"));
  EXPECT_EQ(t[0].kind, Kind::kSkipped);
  EXPECT_THAT(t[0].reason, testing::HasSubstr("walked as " + P("real")));
  EXPECT_EQ(t[1].path, P("real/loop"));
  EXPECT_EQ(t[1].kind, Kind::kSkipped);
  EXPECT_EQ(t[2].path, P("real/x.pkl"));
  EXPECT_EQ(t[2].kind, Kind::kFile);
  EXPECT_EQ(t[2].via, "");
}

// A checkpoint behind a folder link: torch.load("repo/checkpoint-500/pytorch_model.bin")
// reads through it, wherever it points.
TEST_F(ScanTargetsTest, FolderLinkIsFollowedOutsideTheFolderAndIntoSkippedFolders) {
  Mkdir("repo");
  Mkdir("repo/.git");
  Mkdir("repo/.git/objects");
  Touch("repo/.git/objects/pytorch_model.bin");
  Mkdir("vendor");
  Touch("vendor/model.pt");
  Symlink(".git/objects", "repo/checkpoint-500");
  Symlink("../vendor", "repo/models");
  const std::vector<ScanTarget> t = ExpandScanPaths({P("repo")});
  std::vector<std::string> files;
  for (const ScanTarget& x : t) {
    if (x.kind == Kind::kFile) {
      files.push_back(x.path);
      EXPECT_THAT(x.via, testing::StartsWith(P(x.path.find("models") != std::string::npos
                                                    ? "repo/models -> ../vendor"
                                                    : "repo/checkpoint-500 -> .git/objects")));
    }
  }
  EXPECT_THAT(files, testing::ElementsAre(P("repo/checkpoint-500/pytorch_model.bin"),
                                          P("repo/models/model.pt")));
}

// A file link into .git (skipped by name) and a dangling one: the first is scanned through the
// link, the second is an ERROR entry, whatever the selection makes of the link's name.
TEST_F(ScanTargetsTest, FileLinkIntoGitIsScannedAndADanglingOneIsAnError) {
  Mkdir(".git");
  Touch(".git/w.bin");
  Symlink(".git/w.bin", "pytorch_model.bin");
  Symlink(".git/gone", "model.safetensors");
  const std::vector<ScanTarget> t = ExpandScanPaths({root_});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].kind, Kind::kSkipped);  // .git
  EXPECT_EQ(t[1].path, P("model.safetensors"));
  EXPECT_EQ(t[1].kind, Kind::kUnreadable);
  EXPECT_EQ(t[2].path, P("pytorch_model.bin"));
  EXPECT_EQ(t[2].kind, Kind::kFile);
}

TEST_F(ScanTargetsTest, TwoLinksToOneFolderWalkItOnce) {
  Mkdir("repo");
  Mkdir("outside");
  Touch("outside/w.bin");
  Symlink("../outside", "repo/a");
  Symlink("../outside", "repo/b");
  Symlink("..", "repo/outside-parent");  // the repository's parent, "outside" included
  const std::vector<ScanTarget> t = ExpandScanPaths({P("repo")});
  int files = 0;
  for (const ScanTarget& x : t) files += x.kind == Kind::kFile;
  EXPECT_EQ(files, 1);
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t[0].path, P("repo/a/w.bin"));
  EXPECT_EQ(t[1].path, P("repo/b"));
  EXPECT_THAT(t[1].reason, testing::HasSubstr("walked as " + P("repo/a")));
}

// A snapshot that is itself a link into the cache's blobs (which the walk skips by name).
TEST_F(ScanTargetsTest, HfCacheSnapshotFolderLinkIntoBlobsIsWalked) {
  Mkdir("models--org--name");
  Mkdir("models--org--name/blobs");
  Mkdir("models--org--name/blobs/rev");
  Touch("models--org--name/blobs/rev/pytorch_model.bin");
  Mkdir("models--org--name/snapshots");
  Symlink("../blobs/rev", "models--org--name/snapshots/abc");
  const std::vector<ScanTarget> t = ExpandScanPaths({P("models--org--name")});
  std::vector<std::string> files;
  for (const ScanTarget& x : t) {
    if (x.kind == Kind::kFile) files.push_back(x.path);
  }
  EXPECT_THAT(files,
              testing::ElementsAre(P("models--org--name/snapshots/abc/pytorch_model.bin")));
}

TEST_F(ScanTargetsTest, WalkPastMaxEntriesStopsWithAnErrorNamingTheLimit) {
  Mkdir("d");
  for (int i = 0; i < 5; ++i) Touch("d/f" + std::to_string(i));
  Symlink("/", "d/root");  // a link can reach the whole filesystem
  WalkOptions options;
  options.max_entries = 4;
  const absl::StatusOr<Expansion> e = ExpandScanPaths({root_}, options);
  ASSERT_TRUE(e.ok());
  int errors = 0;
  for (const ScanTarget& x : e->targets) {
    if (x.kind != Kind::kUnreadable) continue;
    ++errors;
    EXPECT_THAT(std::string(x.status.message()),
                testing::HasSubstr("scan --max-walk-entries"));
  }
  EXPECT_EQ(errors, 1);
}

TEST_F(ScanTargetsTest, SymlinkedFileInsideAFolderIsScanned) {
  Touch("real.pkl");
  Symlink(root_ + "/real.pkl", "alias.pkl");
  const std::vector<ScanTarget> t = ExpandScanPaths({root_});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].path, P("alias.pkl"));
  EXPECT_EQ(t[0].kind, Kind::kFile);
}

TEST_F(ScanTargetsTest, ExplicitSymlinkToAFolderIsFollowed) {
  Mkdir("real");
  Touch("real/x.pkl");
  Symlink(root_ + "/real", "link");
  const std::vector<ScanTarget> t = ExpandScanPaths({P("link")});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].path, P("link/x.pkl"));
  EXPECT_EQ(t[0].kind, Kind::kFile);
}

TEST_F(ScanTargetsTest, DanglingSymlinkIsAnUnreadableEntry) {
  Symlink(root_ + "/nowhere", "dangling.pkl");
  const std::vector<ScanTarget> t = ExpandScanPaths({root_});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].kind, Kind::kUnreadable);
  EXPECT_FALSE(t[0].status.ok());
}

// What a FIFO (or a link to /dev/stdin) gives a loader is decided when it loads: never SAFE.
TEST_F(ScanTargetsTest, FifoOrLinkToADeviceInsideAFolderIsAnError) {
  ASSERT_EQ(::mkfifo(P("pipe").c_str(), 0644), 0);
  Symlink("/dev/null", "pytorch_model.bin");
  const std::vector<ScanTarget> t = ExpandScanPaths({root_});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].kind, Kind::kUnreadable);
  EXPECT_THAT(std::string(t[0].status.message()), testing::HasSubstr("FIFO"));
  EXPECT_EQ(t[1].kind, Kind::kUnreadable);
  EXPECT_THAT(std::string(t[1].status.message()), testing::HasSubstr("symlink to a device"));
}

TEST_F(ScanTargetsTest, MissingPathIsAnUnreadableEntryInCommandLineOrder) {
  Touch("a.pkl");
  const std::vector<ScanTarget> t = ExpandScanPaths({P("missing.pkl"), P("a.pkl")});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].kind, Kind::kUnreadable);
  EXPECT_EQ(t[0].path, P("missing.pkl"));
  EXPECT_EQ(t[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t[1].kind, Kind::kFile);
}

TEST_F(ScanTargetsTest, UnreadableSubfolderIsAnUnreadableEntry) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every directory";
  Mkdir("locked");
  Touch("locked/x.pkl");
  ASSERT_EQ(::chmod(P("locked").c_str(), 0), 0);
  const std::vector<ScanTarget> t = ExpandScanPaths({root_});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].kind, Kind::kUnreadable);
  EXPECT_EQ(t[0].path, P("locked"));
  EXPECT_EQ(t[0].status.code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ScanTargetsTest, EmptyFolderGivesNoTargets) {
  EXPECT_TRUE(ExpandScanPaths({root_}).empty());
}

TEST_F(ScanTargetsTest, ExcludedFilesAndFoldersAreSkippedAndNamedNeverDropped) {
  Mkdir("docs");
  Mkdir("sub");
  Touch("docs/a.bin");
  Touch("README.md");
  Touch("sub/notes.md");
  Touch("sub/model.bin");
  Touch("model.bin");
  const std::vector<ScanTarget> t = ExpandScanPaths({root_}, {"*.md", "docs"});
  std::vector<std::string> files;
  std::vector<std::string> skipped;
  for (const ScanTarget& x : t) {
    if (x.kind == Kind::kFile) files.push_back(x.path);
    if (x.kind == Kind::kSkipped) {
      skipped.push_back(x.path);
      EXPECT_THAT(x.reason, testing::StartsWith("excluded by --exclude ")) << x.path;
    }
  }
  EXPECT_THAT(files, testing::ElementsAre(P("model.bin"), P("sub/model.bin")));
  EXPECT_THAT(skipped, testing::ElementsAre(P("README.md"), P("docs"), P("sub/notes.md")));
}

TEST_F(ScanTargetsTest, ExcludeIsRelativeToTheScannedFolderNotTheCommandLinePath) {
  Mkdir("sub");
  Touch("sub/model.bin");
  // "sub/model.bin" relative to root_ ...
  std::vector<ScanTarget> t = ExpandScanPaths({root_}, {"sub/*"});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].kind, Kind::kSkipped);
  // ... but "model.bin" relative to root_/sub; a file named on the command line is never
  // excluded.
  t = ExpandScanPaths({P("sub"), P("sub/model.bin")}, {"sub/*"});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].kind, Kind::kFile);
  EXPECT_EQ(t[1].kind, Kind::kFile);
}

}  // namespace
}  // namespace ckptscan::app
