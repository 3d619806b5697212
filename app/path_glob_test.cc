#include "app/path_glob.h"

#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

bool M(std::string_view pattern, std::string_view path, bool is_dir = false) {
  absl::StatusOr<PathGlob> g = PathGlob::Create(pattern);
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status();
  return g.ok() && g->Matches(path, is_dir);
}

TEST(PathGlobTest, ANameWithoutASlashMatchesAtAnyDepth) {
  EXPECT_TRUE(M("config.json", "config.json"));
  EXPECT_TRUE(M("config.json", "sub/config.json"));
  EXPECT_TRUE(M("config.json", "a/b/c/config.json"));
  EXPECT_FALSE(M("config.json", "sub/config.json.bak"));
  EXPECT_TRUE(M("*.json", "deep/x/tokenizer.json"));
}

TEST(PathGlobTest, APatternWithASlashIsAnchoredAtTheScannedFolder) {
  EXPECT_TRUE(M("sub/*.bin", "sub/model.bin"));
  EXPECT_FALSE(M("sub/*.bin", "x/sub/model.bin"));
  EXPECT_TRUE(M("/model.bin", "model.bin"));
  EXPECT_FALSE(M("/model.bin", "sub/model.bin"));
}

TEST(PathGlobTest, StarNeverCrossesASlash) {
  EXPECT_FALSE(M("sub/*", "sub/deep/model.bin"));
  EXPECT_TRUE(M("sub/*", "sub/deep", /*is_dir=*/true));
}

TEST(PathGlobTest, DoubleStarMatchesAnyNumberOfFolders) {
  EXPECT_TRUE(M("a/**/b", "a/b"));
  EXPECT_TRUE(M("a/**/b", "a/x/y/b"));
  EXPECT_TRUE(M("**/x.bin", "x.bin"));
  EXPECT_TRUE(M("a/**", "a/x/y"));
  EXPECT_FALSE(M("a/**/b", "c/a/b"));
}

TEST(PathGlobTest, TrailingSlashMatchesFoldersOnly) {
  EXPECT_TRUE(M("cache/", "cache", /*is_dir=*/true));
  EXPECT_TRUE(M("cache/", "x/cache", /*is_dir=*/true));
  EXPECT_FALSE(M("cache/", "cache", /*is_dir=*/false));
}

TEST(PathGlobTest, AFolderThatMatchesCoversWhatIsInside) {
  absl::StatusOr<PathGlob> g = PathGlob::Create("docs");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->MatchesUnder("docs/a/b.md", false));
  EXPECT_TRUE(g->MatchesUnder("x/docs/b.md", false));
  EXPECT_FALSE(g->MatchesUnder("docsx/b.md", false));
}

TEST(PathGlobTest, NegationAndEmptyPatternsAreRefusedNotMisread) {
  EXPECT_FALSE(PathGlob::Create("!keep.bin").ok());
  EXPECT_FALSE(PathGlob::Create("").ok());
  EXPECT_FALSE(PathGlob::Create("/").ok());
}

TEST(PathGlobTest, ClassesAndQuestionMarksStayInOneComponent) {
  EXPECT_TRUE(M("model-0000[12].bin", "model-00001.bin"));
  EXPECT_FALSE(M("model-0000[12].bin", "model-00003.bin"));
  EXPECT_TRUE(M("a?c", "sub/abc"));
  EXPECT_FALSE(M("a?c", "a/c"));
}

}  // namespace
}  // namespace ckptscan::app
