#include "signing/manifest.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "base/limit_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "signing/encoding.h"
#include "signing/test_util.h"

namespace ckptscan::signing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ScratchDir;
using testing::WriteFile;

std::vector<std::string> Names(const Manifest& m) {
  std::vector<std::string> out;
  for (const Resource& r : m.resources) out.push_back(r.name);
  return out;
}

std::string Hex(std::string_view s) { return *Sha256Hex(s); }

TEST(OmsHashModelTest, FilesSortedWithDigestsSkippingIgnoredAndGitPaths) {
  ScratchDir d;
  WriteFile(d / "b.bin", "bee");
  WriteFile(d / "a/x.json", "{}");
  WriteFile(d / "a/y/z", "zed");
  WriteFile(d / ".git/config", "git");
  WriteFile(d / ".gitattributes", "attr");
  WriteFile(d / "sub/.git/keep", "a nested .git is not a default exclusion");
  WriteFile(d / "cache/big", "ignored dir");
  WriteFile(d / "model.sig", "the signature");
  WriteFile(d / "empty", "");
  HashOptions opts;
  opts.serialization.ignore_paths = {"./cache/", "model.sig"};
  absl::StatusOr<Manifest> m = HashModel(d.path(), opts);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Names(*m), ElementsAre("a/x.json", "a/y/z", "b.bin", "empty", "sub/.git/keep"));
  EXPECT_EQ(m->resources[0].digest, Hex("{}"));
  EXPECT_EQ(m->resources[3].digest, Hex(""));
  EXPECT_THAT(m->serialization.ignore_paths,
              ElementsAre(".git", ".gitattributes", ".github", ".gitignore", "cache", "model.sig"));
  EXPECT_EQ(m->model_name, d.path().substr(d.path().rfind('/') + 1));
}

TEST(OmsHashModelTest, OrderIsByPathComponentsAsModelSigningSorts) {
  ScratchDir d;
  WriteFile(d / "a.b", "1");
  WriteFile(d / "a/c", "2");
  WriteFile(d / "a-b", "3");
  absl::StatusOr<Manifest> m = HashModel(d.path(), HashOptions{});
  ASSERT_TRUE(m.ok()) << m.status();
  // PurePosixPath order: ("a","c") < ("a-b",) < ("a.b",), unlike byte order of the strings.
  EXPECT_THAT(Names(*m), ElementsAre("a/c", "a-b", "a.b"));
}

TEST(OmsHashModelTest, ShardsSplitAtShardSizeInNumericOrderAndOmitEmptyFiles) {
  ScratchDir d;
  const std::string data = "0123456789abcdefghijklmnopqrstuvwxy";  // 35 bytes
  WriteFile(d / "f", data);
  WriteFile(d / "empty", "");
  HashOptions opts;
  opts.serialization.method = Method::kShards;
  opts.serialization.shard_size = 3;
  absl::StatusOr<Manifest> m = HashModel(d.path(), opts);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->resources.size(), 12u);
  EXPECT_EQ(m->resources[0].name, "f:0:3");
  EXPECT_EQ(m->resources[3].name, "f:9:12");
  EXPECT_EQ(m->resources[4].name, "f:12:15");  // numeric, not string, order
  EXPECT_EQ(m->resources[11].name, "f:33:35");
  EXPECT_EQ(m->resources[11].digest, Hex(data.substr(33)));
  EXPECT_EQ(m->resources[4].digest, Hex(data.substr(12, 3)));
}

TEST(OmsHashModelTest, TwoThreadsAndTinyBuffersGiveTheSameManifest) {
  ScratchDir d;
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + (i >> 9));
  WriteFile(d / "w1", big);
  WriteFile(d / "w2", big.substr(1000));
  for (Method method : {Method::kFiles, Method::kShards}) {
    HashOptions one;
    one.serialization.method = method;
    one.serialization.shard_size = 65536;
    one.threads = 1;
    HashOptions two = one;
    two.threads = 2;
    two.read_buffer_bytes = 4096;
    absl::StatusOr<Manifest> a = HashModel(d.path(), one);
    absl::StatusOr<Manifest> b = HashModel(d.path(), two);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->resources.size(), b->resources.size());
    for (size_t i = 0; i < a->resources.size(); ++i) {
      EXPECT_EQ(a->resources[i].name, b->resources[i].name);
      EXPECT_EQ(a->resources[i].digest, b->resources[i].digest);
    }
  }
}

TEST(OmsHashModelTest, SingleFileModelIsNamedDot) {
  ScratchDir d;
  WriteFile(d / "model.safetensors", "tensor bytes");
  absl::StatusOr<Manifest> m = HashModel(d / "model.safetensors", HashOptions{});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->model_name, "model.safetensors");
  ASSERT_THAT(Names(*m), ElementsAre("."));
  EXPECT_EQ(m->resources[0].digest, Hex("tensor bytes"));
}

TEST(OmsHashModelTest, SymlinkFifoAndNonUtf8NamesAreRefused) {
  {
    ScratchDir d;
    WriteFile(d / "real", "x");
    ASSERT_EQ(::symlink("real", (d / "link").c_str()), 0);
    absl::Status s = HashModel(d.path(), HashOptions{}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("\"link\" is a symbolic link"));
  }
  {
    ScratchDir d;
    ASSERT_EQ(::mkfifo((d / "pipe").c_str(), 0600), 0);
    EXPECT_THAT(HashModel(d.path(), HashOptions{}).status().message(),
                HasSubstr("\"pipe\" is not a regular file"));
  }
  {
    ScratchDir d;
    WriteFile(d / "bad\xff", "x");
    EXPECT_THAT(HashModel(d.path(), HashOptions{}).status().message(),
                HasSubstr("is not valid UTF-8"));
  }
}

TEST(OmsHashModelTest, LimitsStopEnumerationAndShardExplosion) {
  ScratchDir d;
  for (int i = 0; i < 5; ++i) WriteFile(d / ("f" + std::to_string(i)), "data");
  HashOptions opts;
  opts.limits.max_files = 4;
  absl::Status s = HashModel(d.path(), opts).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("Limits::max_files"));
  EXPECT_EQ(base::LimitOf(s).value_or(base::LimitHit{}).name, "max_files") << s;
  EXPECT_EQ(base::LimitOf(s).value_or(base::LimitHit{}).value, 4u) << s;

  HashOptions shards;
  shards.serialization.method = Method::kShards;
  shards.serialization.shard_size = 1;
  shards.limits.max_resources = 19;  // 5 files x 4 bytes = 20 one-byte shards
  s = HashModel(d.path(), shards).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("Limits::max_resources"));
  EXPECT_EQ(base::LimitOf(s).value_or(base::LimitHit{}).name, "max_resources") << s;

  ScratchDir deep;
  std::string rel = "d";
  for (int i = 0; i < 5; ++i) rel += "/d";
  WriteFile(deep / (rel + "/f"), "x");
  HashOptions depth;
  depth.limits.max_directory_depth = 3;
  EXPECT_THAT(HashModel(deep.path(), depth).status().message(),
              HasSubstr("Limits::max_directory_depth"));
}

TEST(OmsHashModelTest, IgnorePathThatEscapesOrCoversTheModelIsRefused) {
  ScratchDir d;
  WriteFile(d / "f", "x");
  HashOptions opts;
  opts.serialization.ignore_paths = {"../etc"};
  EXPECT_THAT(HashModel(d.path(), opts).status().message(), HasSubstr("\"..\" component"));
  opts.serialization.ignore_paths = {"./"};
  EXPECT_THAT(HashModel(d.path(), opts).status().message(),
              HasSubstr("would exclude the whole model"));
}

TEST(OmsPathTest, CanonicalRelativePaths) {
  const Limits limits;
  for (const char* ok : {".", "a", "a/b", "a b/c:d", "über/ß"}) {
    EXPECT_TRUE(CheckRelativePath(ok, "name", limits).ok()) << ok;
  }
  for (const char* bad : {"", "/a", "a/", "a//b", "./a", "a/./b", "a/../b", "..", "a\xc3"}) {
    EXPECT_FALSE(CheckRelativePath(bad, "name", limits).ok()) << bad;
  }
  Limits small;
  small.max_name_bytes = 3;
  EXPECT_EQ(CheckRelativePath("abcd", "name", small).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(base::LimitOf(CheckRelativePath("abcd", "name", small)).value_or(base::LimitHit{}).name,
            "max_name_bytes");
}

TEST(OmsPathTest, ShardNamesSplitAtTheLastTwoColons) {
  absl::StatusOr<ShardName> s = ParseShardName("dir/a:b.bin:10:20");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->path, "dir/a:b.bin");
  EXPECT_EQ(s->start, 10u);
  EXPECT_EQ(s->end, 20u);
  for (const char* bad :
       {"f", "f:1", ":1:2x", "f:01:2", "f:-1:2", "f:1:99999999999999999999999", "f:+1:2", "f::2"}) {
    EXPECT_FALSE(ParseShardName(bad).ok()) << bad;
  }
}

TEST(OmsManifestTest, ValidateRejectsDuplicatesBadDigestsAndBadRanges) {
  const Limits limits;
  Manifest m;
  m.model_name = "m";
  m.AddFile("a", Hex("a"));
  m.AddFile("a", Hex("a"));
  EXPECT_THAT(ValidateManifest(m, limits).message(), HasSubstr("\"a\" is listed twice"));
  m.resources.pop_back();
  m.AddFile("b", std::string(64, 'A'));
  EXPECT_THAT(ValidateManifest(m, limits).message(), HasSubstr("not 64 lowercase hex"));

  Manifest s;
  s.model_name = "m";
  s.serialization.method = Method::kShards;
  s.serialization.shard_size = 10;
  s.AddShard("f", 0, 10, Hex("x"));
  EXPECT_TRUE(ValidateManifest(s, limits).ok());
  s.AddShard("f", 10, 21, Hex("x"));
  EXPECT_THAT(ValidateManifest(s, limits).message(), HasSubstr("is not a shard of size 10"));
  s.resources.back() = Resource{"f:5:10", Hex("x")};
  EXPECT_THAT(ValidateManifest(s, limits).message(), HasSubstr("is not a shard of size 10"));
}

TEST(OmsManifestTest, RootDigestMatchesUpstreamVector) {
  // model-transparency v1.1.0-elliptic-key: subject digest over signme-1, signme-2.
  std::vector<Resource> r = {
      {"signme-1", "bc9a717db6064a32cbe9eae6fc40651dd6d36ef1757183f590eff2b1765d7ebc"},
      {"signme-2", "32dcb1f8e1ae52d5963e56a6ba06ab58b424c15ed2a6b70d2feca1d089370028"}};
  EXPECT_EQ(HexEncode(*RootDigest(r)),
            "92745110b1ab4368471cbe31664e10174e954b113a3df333db860317b2c6dec4");
}

TEST(OmsCompareTest, NamesEveryKindOfDifference) {
  Manifest signed_m;
  signed_m.model_name = "m";
  signed_m.AddFile("same", Hex("1"));
  signed_m.AddFile("changed", Hex("2"));
  signed_m.AddFile("gone", Hex("3"));
  Manifest actual = signed_m;
  actual.resources[1].digest = Hex("tampered");
  actual.resources.pop_back();
  actual.AddFile("new", Hex("4"));
  absl::Status s = CompareManifests(signed_m, actual, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("3 problems"));
  EXPECT_THAT(s.message(), HasSubstr("file \"changed\": digest mismatch (signed " + Hex("2") +
                                     ", found " + Hex("tampered") + ")"));
  EXPECT_THAT(s.message(), HasSubstr("file \"gone\" is signed but missing"));
  EXPECT_THAT(s.message(), HasSubstr("unsigned file \"new\" was added"));
  s = CompareManifests(signed_m, actual, /*ignore_unsigned_files=*/true);
  EXPECT_THAT(s.message(), HasSubstr("2 problems"));
  EXPECT_TRUE(CompareManifests(signed_m, signed_m, false).ok());
}

TEST(OmsCompareTest, ShardedFileThatGrewOrShrank) {
  Manifest signed_m;
  signed_m.model_name = "m";
  signed_m.serialization.method = Method::kShards;
  signed_m.serialization.shard_size = 4;
  signed_m.AddShard("f", 0, 4, Hex("a"));
  signed_m.AddShard("f", 4, 6, Hex("b"));
  Manifest grew = signed_m;
  grew.resources[1] = Resource{"f:4:8", Hex("b")};
  grew.AddShard("f", 8, 9, Hex("c"));
  absl::Status s = CompareManifests(signed_m, grew, false);
  EXPECT_THAT(s.message(), HasSubstr("shard \"f:4:6\" is signed but the file no longer has"));
  EXPECT_THAT(s.message(), HasSubstr("shard \"f:8:9\" is not signed (the file grew)"));
}

}  // namespace
}  // namespace ckptscan::signing
