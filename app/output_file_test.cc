#include "app/output_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

namespace fs = std::filesystem;

// One U8 tensor "a" = {7}, header padded with spaces to a multiple of 8.
std::string ValidSafetensors() {
  std::string json = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  while (json.size() % 8 != 0) json.push_back(' ');
  std::string out;
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(json);
  out.push_back('\x07');
  return out;
}

void WriteFd(int fd, std::string_view bytes) {
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "output_file_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(OutputFileTest, ValidatedOutputIsLinkedAndNothingElseIsLeft) {
  const fs::path out = dir_ / "m.safetensors";
  {
    absl::StatusOr<OutputFile> f = OutputFile::Create(out.string());
    ASSERT_TRUE(f.ok()) << f.status();
    WriteFd(f->fd(), ValidSafetensors());
    if (f->is_tmpfile()) {
      EXPECT_TRUE(Entries(dir_).empty());  // no name before Publish
    }
    absl::StatusOr<safetensors::Layout> layout = f->Validate();
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->tensors.size(), 1u);
    ASSERT_TRUE(f->Publish(false).ok());
  }
  EXPECT_EQ(ReadFile(out), ValidSafetensors());
  EXPECT_THAT(Entries(dir_), ::testing::ElementsAre("m.safetensors"));
}

TEST_F(OutputFileTest, ExistingOutputIsKeptWithoutReplaceAndReplacedWithIt) {
  const fs::path out = dir_ / "m.safetensors";
  { std::ofstream(out) << "keep"; }
  {
    absl::StatusOr<OutputFile> f = OutputFile::Create(out.string());
    ASSERT_TRUE(f.ok());
    WriteFd(f->fd(), ValidSafetensors());
    const absl::Status s = f->Publish(false);
    EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  }
  EXPECT_EQ(ReadFile(out), "keep");
  EXPECT_THAT(Entries(dir_), ::testing::ElementsAre("m.safetensors"));
  {
    absl::StatusOr<OutputFile> f = OutputFile::Create(out.string());
    ASSERT_TRUE(f.ok());
    WriteFd(f->fd(), ValidSafetensors());
    ASSERT_TRUE(f->Publish(true).ok());
  }
  EXPECT_EQ(ReadFile(out), ValidSafetensors());
  EXPECT_THAT(Entries(dir_), ::testing::ElementsAre("m.safetensors"));
}

TEST_F(OutputFileTest, InvalidOrUnexpectedBytesFailValidationAndLeaveNothing) {
  const fs::path out = dir_ / "m.safetensors";
  {
    absl::StatusOr<OutputFile> f = OutputFile::Create(out.string());
    ASSERT_TRUE(f.ok());
    WriteFd(f->fd(), "not a safetensors file at all");
    EXPECT_FALSE(f->Validate().ok());
  }
  {
    absl::StatusOr<OutputFile> f = OutputFile::Create(out.string());
    ASSERT_TRUE(f.ok());
    EXPECT_FALSE(f->Validate().ok());  // empty
    const std::string valid = ValidSafetensors();
    WriteFd(f->fd(), valid);
    std::string other = valid.substr(0, valid.size() - 1);
    other[10] = 'b';  // a header that differs from the planned one
    EXPECT_FALSE(f->Validate(other).ok());
    EXPECT_TRUE(f->Validate(valid.substr(0, valid.size() - 1)).ok());
  }
  EXPECT_TRUE(Entries(dir_).empty());
}

TEST_F(OutputFileTest, MissingDirectoryFails) {
  EXPECT_FALSE(OutputFile::Create((dir_ / "no" / "m.safetensors").string()).ok());
}

// Read without being set: another thread creating a file meanwhile never sees a zero umask.
TEST(CurrentUmaskTest, ReadsTheUmaskWithoutChangingIt) {
  const mode_t saved = ::umask(027);
  EXPECT_EQ(CurrentUmask(), 027u);
  EXPECT_EQ(::umask(0), 027u);  // still what was set
  ::umask(saved);
  EXPECT_EQ(CurrentUmask(), saved);
}

}  // namespace
}  // namespace ckptscan::app
