// A sharded set's staging directory swapped by someone who can write OUT's parent, at every step
// of its life: for a directory of their own and for a symbolic link to a directory outside.
// Either the conversion fails with nothing published and nothing of theirs touched, or what it
// published is exactly what it converted, signed.
#include "app/shard_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/rule_set.h"
#include "signing/bundle.h"
#include "signing/keys.h"
#include "tests/inprocess/local_scan.h"

namespace ckptscan::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const rules::RuleSet& DefaultRules() {
  static const std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();
  return *rules;
}

const std::string& FixtureIndex() {
  static const std::string path =
      std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/torch/sharded/pytorch_model.bin.index.json";
  return path;
}

const signing::PrivateKey& Key() {
  static const signing::PrivateKey* key = new signing::PrivateKey(*signing::PrivateKey::Generate());
  return *key;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, std::string_view bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// What a directory holds, without following symbolic links: name -> bytes ("-> target" for a
// link, "<dir>" for a directory).
std::map<std::string, std::string> Contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink()) {
      out[name] = "-> " + fs::read_symlink(e.path()).string();
    } else if (e.is_directory()) {
      out[name] = "<dir>";
    } else {
      out[name] = ReadFile(e.path());
    }
  }
  return out;
}

struct Inode {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const Inode&) const = default;
};

Inode InodeOf(const fs::path& p) {
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino};
}

enum class Swap { kNone, kOwnDirectory, kOwnDirectoryWithIndex, kSymlinkOutside };

const char* SwapName(Swap s) {
  switch (s) {
    case Swap::kNone:
      return "none";
    case Swap::kOwnDirectory:
      return "a directory of the attacker's own";
    case Swap::kOwnDirectoryWithIndex:
      return "a directory of the attacker's own holding files named like the outputs";
    case Swap::kSymlinkOutside:
      return "a symbolic link to a directory outside";
  }
  return "?";
}

// A scratch tree: parent/ (OUT's directory, where the attacker may write), outside/ (a directory
// beyond every root, holding a planted file named like the new index), moved/ (where the
// attacker puts the staging directory they took away).
class ShardSetSwapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shard_set_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    parent_ = root_ / "parent";
    outside_ = root_ / "outside";
    moved_ = root_ / "moved";
    out_ = parent_ / "out";
    fs::create_directory(parent_);
    fs::create_directory(outside_);
    fs::create_directory(moved_);
    WriteFile(outside_ / kOutputIndexName, kPlantedOutside);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // The one ".out.ckptscan-XXXXXXXX" entry in parent/.
  std::string StagingName() const {
    std::string found;
    for (const fs::directory_entry& e : fs::directory_iterator(parent_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(".out.ckptscan-", 0) == 0) {
        EXPECT_TRUE(found.empty()) << "two staging entries: " << found << ", " << name;
        found = name;
      }
    }
    return found;
  }

  // Converts the fixture set into parent/out, signed, playing `swap` when the conversion
  // reaches `at`. Records the steps seen.
  absl::StatusOr<ConvertResult> Convert(Swap swap, std::string_view at) {
    ConvertRequest request;
    request.input = FixtureIndex();
    request.output = out_.string();
    request.allow_index = true;
    request.sign.key = &Key();
    request.staging_hook_for_test = [&](std::string_view step) {
      steps_.emplace_back(step);
      if (swap == Swap::kNone || step != at) return;
      staging_name_ = StagingName();
      ASSERT_FALSE(staging_name_.empty()) << "no staging directory at step " << step;
      const fs::path staging = parent_ / staging_name_;
      fs::rename(staging, moved_ / "ours");
      if (swap == Swap::kOwnDirectory || swap == Swap::kOwnDirectoryWithIndex) {
        fs::create_directory(staging);
        // A file the job must neither sign nor remove; with the second kind also files named
        // like the index and a shard, which the job must not remove either.
        WriteFile(staging / "attacker.bin", kPlantedOwn);
        if (swap == Swap::kOwnDirectoryWithIndex) {
          WriteFile(staging / kOutputIndexName, kPlantedOwn);
          WriteFile(staging / "model-00001-of-00002.safetensors", kPlantedOwn);
        }
        attacker_ = Contents(staging);
      } else {
        fs::create_directory_symlink(outside_, staging);
      }
    };
    return inprocess::ConvertFileInProcess(request, DefaultRules(), pickle::Limits{});
  }

  static constexpr std::string_view kPlantedOutside = "planted outside every root\n";
  static constexpr std::string_view kPlantedOwn = "the attacker's own file\n";

  fs::path root_, parent_, outside_, moved_, out_;
  std::vector<std::string> steps_;
  std::string staging_name_;
  std::map<std::string, std::string> attacker_;
};

// Everything under OUT is signed by Key() and nothing else is there.
void ExpectVerifies(const fs::path& out) {
  absl::StatusOr<signing::PublicKey> pub = signing::PublicKey::FromPem(Key().public_key().pem());
  ASSERT_TRUE(pub.ok()) << pub.status();
  signing::VerifyOptions options;
  options.ignore_paths = {kSignatureName};
  absl::StatusOr<signing::VerifiedBundle> v = signing::VerifyModel(
      ReadFile(out / kSignatureName), signing::Trust::Key(*std::move(pub)), out.string(), options);
  EXPECT_TRUE(v.ok()) << v.status();
}

std::map<std::string, std::string> WithoutSignature(std::map<std::string, std::string> m) {
  m.erase(kSignatureName);
  return m;
}

TEST_F(ShardSetSwapTest, UnswappedSetIsPublishedAndSigned) {
  absl::StatusOr<ConvertResult> r = Convert(Swap::kNone, "");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.ok()) << r->status;
  EXPECT_THAT(steps_, ::testing::ElementsAre("mkdir", "shard 1", "shard 2", "index", "signed",
                                             "rename", "renaming"));
  const std::map<std::string, std::string> got = Contents(out_);
  EXPECT_EQ(got.size(), 4u);
  EXPECT_TRUE(got.count(kOutputIndexName) && got.count(kSignatureName));
  ExpectVerifies(out_);
  // Nothing else beside OUT: the staging directory became OUT.
  EXPECT_EQ(Contents(parent_).size(), 1u);
  EXPECT_EQ(Contents(outside_),
            (std::map<std::string, std::string>{{kOutputIndexName, std::string(kPlantedOutside)}}));
}

TEST_F(ShardSetSwapTest, SwappedStagingDirectoryNeverPublishesOrTouchesForeignFiles) {
  // What an undisturbed conversion publishes (the signature differs run to run: ECDSA).
  ASSERT_TRUE(Convert(Swap::kNone, "").ok());
  const std::map<std::string, std::string> expected = WithoutSignature(Contents(out_));
  const std::vector<std::string> steps = steps_;
  ASSERT_GE(steps.size(), 7u);

  for (Swap swap : {Swap::kOwnDirectory, Swap::kOwnDirectoryWithIndex, Swap::kSymlinkOutside}) {
    for (const std::string& at : steps) {
      SCOPED_TRACE(absl::StrCat("swap for ", SwapName(swap), " at step \"", at, "\""));
      TearDown();
      SetUp();
      steps_.clear();
      staging_name_.clear();
      attacker_.clear();
      absl::StatusOr<ConvertResult> r = Convert(swap, at);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_FALSE(staging_name_.empty()) << "the hook never reached the step";
      // The outside directory holds exactly what was planted there, whatever the outcome.
      EXPECT_EQ(
          Contents(outside_),
          (std::map<std::string, std::string>{{kOutputIndexName, std::string(kPlantedOutside)}}));
      if (r->status.ok()) {
        // Published: it must be exactly the converted set, signed; nothing of the attacker's.
        EXPECT_EQ(WithoutSignature(Contents(out_)), expected);
        ExpectVerifies(out_);
        continue;
      }
      EXPECT_THAT(std::string(r->status.message()), HasSubstr("staging directory"));
      // Nothing published under OUT.
      EXPECT_FALSE(fs::exists(fs::symlink_status(out_))) << "OUT was published";
      // The attacker's entry under the staging name is as they left it.
      const fs::path planted = parent_ / staging_name_;
      if (swap == Swap::kSymlinkOutside) {
        EXPECT_TRUE(fs::is_symlink(fs::symlink_status(planted)) &&
                    fs::read_symlink(planted) == outside_)
            << "the attacker's symbolic link was removed or changed";
      } else if (fs::is_directory(fs::symlink_status(planted))) {
        EXPECT_EQ(Contents(planted), attacker_);
      } else {
        ADD_FAILURE() << "the attacker's directory was removed";
      }
      EXPECT_EQ(Contents(parent_).size(), 1u) << "something else was left beside OUT";
      // The real staging directory, moved away, was emptied of what the job created in it.
      if (fs::is_directory(moved_ / "ours")) {
        EXPECT_TRUE(Contents(moved_ / "ours").empty());
      }
    }
  }
}

// OUT an existing empty directory: it is exchanged for the set, then removed (it is the one
// checked). Replaced by the attacker after the check, it is exchanged back and kept intact.
TEST_F(ShardSetSwapTest, ExistingEmptyOutIsReplacedOnlyIfStillTheOneChecked) {
  fs::create_directory(out_);
  absl::StatusOr<ConvertResult> r = Convert(Swap::kNone, "");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.ok()) << r->status;
  ExpectVerifies(out_);
  EXPECT_EQ(Contents(parent_).size(), 1u);

  for (const char* at : {"index", "rename", "renaming"}) {
    SCOPED_TRACE(at);
    TearDown();
    SetUp();
    fs::create_directory(out_);
    ConvertRequest request;
    request.input = FixtureIndex();
    request.output = out_.string();
    request.allow_index = true;
    request.sign.key = &Key();
    Inode theirs;
    request.staging_hook_for_test = [&](std::string_view step) {
      if (step != at) return;
      fs::remove(out_);
      fs::create_directory(out_);
      WriteFile(out_ / "theirs", kPlantedOwn);
      theirs = InodeOf(out_);
    };
    absl::StatusOr<ConvertResult> swapped =
        inprocess::ConvertFileInProcess(request, DefaultRules(), pickle::Limits{});
    ASSERT_TRUE(swapped.ok()) << swapped.status();
    EXPECT_FALSE(swapped->status.ok());
    EXPECT_EQ(InodeOf(out_), theirs);
    EXPECT_EQ(Contents(out_),
              (std::map<std::string, std::string>{{"theirs", std::string(kPlantedOwn)}}));
    EXPECT_EQ(Contents(parent_).size(), 1u) << "the staging directory was left behind";
  }
}

// A single file's output is created in the directory the request's descriptor names; the path's
// directory is never resolved again.
TEST(ConvertOutputDirTest, SingleFileIsCreatedThroughTheDirectoryDescriptor) {
  char tmpl[] = "/tmp/shard_set_test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  const int dir_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  ConvertRequest request;
  request.input = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/torch/tied.pt";
  request.output = (root / "no-such-directory" / "tied.safetensors").string();
  request.output_dir_fd = dir_fd;
  request.sign.key = &Key();
  absl::StatusOr<ConvertResult> r = inprocess::ConvertFileInProcess(request, DefaultRules(), {});
  ::close(dir_fd);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_TRUE(fs::is_regular_file(root / "tied.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(root / "tied.safetensors.sig"));
  EXPECT_FALSE(fs::exists(root / "no-such-directory"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace ckptscan::app
