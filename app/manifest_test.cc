#include "app/manifest.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

using testing::HasSubstr;

const std::string kHex(64, 'a');
const std::string kUpper(64, 'A');

TEST(ManifestTest, Sha256SumTextAndBinaryLinesJoinTheManifestsDirectory) {
  const std::string text =
      kHex + "  model.bin\n" + kUpper + " *sub/x y.pt\n\n" + kHex + "  /abs/path.bin\r\n";
  absl::StatusOr<std::vector<ManifestEntry>> m = ParseManifest(text, "models/SHA256SUMS");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].path, "models/model.bin");
  EXPECT_EQ((*m)[0].sha256, kHex);
  EXPECT_EQ((*m)[1].path, "models/sub/x y.pt");
  EXPECT_EQ((*m)[1].sha256, kHex);  // lowercased
  EXPECT_EQ((*m)[2].path, "/abs/path.bin");
}

TEST(ManifestTest, ManifestInTheCurrentDirectoryKeepsPathsAsWritten) {
  absl::StatusOr<std::vector<ManifestEntry>> m = ParseManifest(kHex + "  a.bin\n", "SUMS");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)[0].path, "a.bin");
}

TEST(ManifestTest, EscapedSha256SumLineUnescapesBackslashAndNewline) {
  absl::StatusOr<std::vector<ManifestEntry>> m =
      ParseManifest("\\" + kHex + "  a\\\\b\\nc\n", "SUMS");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)[0].path, "a\\b\nc");
}

TEST(ManifestTest, ShortDigestIsAnErrorNamingTheLine) {
  absl::StatusOr<std::vector<ManifestEntry>> m = ParseManifest(kHex + "  a\n" + "abc  b\n", "SUMS");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("SUMS:2"));
}

TEST(ManifestTest, NonHexDigestIsAnError) {
  absl::StatusOr<std::vector<ManifestEntry>> m =
      ParseManifest(std::string(63, 'a') + "g  a\n", "SUMS");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("64 hex digits"));
}

TEST(ManifestTest, JsonListIsRead) {
  absl::StatusOr<std::vector<ManifestEntry>> m = ParseManifest(
      " [{\"path\": \"a.bin\", \"sha256\": \"" + kUpper + "\", \"size\": 3}]", "d/m.json");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].path, "d/a.bin");
  EXPECT_EQ((*m)[0].sha256, kHex);
}

TEST(ManifestTest, JsonDuplicateKeyIsAnError) {
  absl::StatusOr<std::vector<ManifestEntry>> m =
      ParseManifest("[{\"path\": \"a\", \"path\": \"b\", \"sha256\": \"" + kHex + "\"}]", "m.json");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("twice"));
}

TEST(ManifestTest, JsonEntryWithoutDigestIsAnError) {
  absl::StatusOr<std::vector<ManifestEntry>> m = ParseManifest("[{\"path\": \"a\"}]", "m.json");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("entry 0"));
}

TEST(ManifestTest, BrokenJsonIsAnError) {
  EXPECT_FALSE(ParseManifest("[{\"path\": ", "m.json").ok());
}

TEST(ManifestTest, EmptyManifestIsAnErrorNotAnEmptyScan) {
  EXPECT_FALSE(ParseManifest("\n\n", "SUMS").ok());
  EXPECT_FALSE(ParseManifest("[]", "m.json").ok());
}

TEST(ManifestTest, OverTheEntryLimitIsResourceExhausted) {
  ManifestLimits limits;
  limits.max_entries = 1;
  absl::StatusOr<std::vector<ManifestEntry>> m =
      ParseManifest(kHex + "  a\n" + kHex + "  b\n", "SUMS", limits);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(m.status()));
}

}  // namespace
}  // namespace ckptscan::app
