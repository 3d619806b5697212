// ReadZipfileDirectory against what CPython 3.11's zipfile does with the same archives
// (tests/differential/zipfile_diff.py compares the two on generated archives).
#include "core/zip/zipfile_view.h"

#include <string>
#include <vector>

#include "core/zip/zip_reader.h"
#include "core/zip/zip_test_builder.h"
#include "gtest/gtest.h"

namespace ckptscan::zip {
namespace {

using testing::BuildOptions;
using testing::BuildZip;
using testing::TestMember;

void PutU16(std::string* s, size_t at, uint16_t v) {
  (*s)[at] = static_cast<char>(v & 0xff);
  (*s)[at + 1] = static_cast<char>(v >> 8);
}
void PutU64(std::string* s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

BuildOptions NoZip64() {
  BuildOptions o;
  o.zip64_end = false;
  return o;
}

std::vector<std::string> Names(const ZipfileDirectory& d) {
  std::vector<std::string> out;
  for (const Entry& e : d.entries) out.push_back(e.name);
  return out;
}

TEST(ZipfileViewTest, CleanArchiveReadsAsMinizReadsIt) {
  const std::string zip = BuildZip({{"a.npy", "AAAA"}, {"b.npy", "BBBBBB"}});
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip);
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<Archive> ar = Archive::Open(zip, Limits{}, Mode::kZipfile);
  ASSERT_TRUE(ar.ok()) << ar.status();
  EXPECT_EQ(d->concat, 0);
  EXPECT_TRUE(d->zip64);
  ASSERT_EQ(d->entries.size(), ar->entries().size());
  for (size_t i = 0; i < d->entries.size(); ++i) {
    EXPECT_EQ(d->entries[i].name, ar->entries()[i].name);
    EXPECT_EQ(d->entries[i].local_header_offset, ar->entries()[i].local_header_offset);
    EXPECT_EQ(d->entries[i].data_offset, ar->entries()[i].data_offset);
    EXPECT_TRUE(d->entries[i].local_header_ok);
  }
  EXPECT_EQ(d->opened, (std::vector<size_t>{0, 1}));
}

TEST(ZipfileViewTest, PrependedBytesShiftEveryOffset) {
  // zipfile's "concat": an archive after other bytes is read where its records really are.
  const std::string inner = BuildZip({{"a.npy", "AAAA"}}, NoZip64());
  const std::string zip = "JUNK" + inner;
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->concat, 4);
  ASSERT_EQ(d->entries.size(), 1u);
  EXPECT_EQ(d->entries[0].local_header_offset, 4u);
  EXPECT_TRUE(d->entries[0].local_header_ok);
}

TEST(ZipfileViewTest, EntryCountIsIgnored) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}, {"b.npy", "BBBB"}}, NoZip64());
  const size_t eocd = zip.size() - 22;
  PutU16(&zip, eocd + 8, 1);   // entries on this disk
  PutU16(&zip, eocd + 10, 1);  // entries in total
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy", "b.npy"}));
}

TEST(ZipfileViewTest, Zip64RecordIsTakenFromBeforeItsLocatorNotWhereItPoints) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}});
  const size_t locator = zip.size() - 22 - 20;
  PutU64(&zip, locator + 8, 0);  // points at the first local header, not the ZIP64 record
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->zip64);
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy"}));
}

TEST(ZipfileViewTest, NameEndsAtItsFirstNulAndTheLastDuplicateIsOpened) {
  const std::string zip =
      BuildZip({{std::string("a.npy\0.txt", 10), "FIRST"}, {"a.npy", "LAST"}, {"b.npy", "B"}});
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy", "a.npy", "b.npy"}));
  EXPECT_EQ(d->opened, (std::vector<size_t>{1, 2}));
}

TEST(ZipfileViewTest, LocalNameThatDiffersCannotBeOpened) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}});
  zip[30] = 'x';  // the local header's copy of the name
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->entries[0].local_header_ok);
}

TEST(ZipfileViewTest, TruncatedCentralDirectoryIsAnErrorWithItsOffset) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}}, NoZip64());
  const size_t eocd = zip.size() - 22;
  // Declare a directory 100 bytes longer than it is.
  const uint32_t cd_size = static_cast<uint8_t>(zip[eocd + 12]) |
                           (static_cast<uint8_t>(zip[eocd + 13]) << 8);
  PutU16(&zip, eocd + 12, static_cast<uint16_t>(cd_size + 100));
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("byte offset"), std::string::npos) << d.status();
}

TEST(ZipfileViewTest, NotAZipIsAnError) {
  EXPECT_FALSE(ReadZipfileDirectory("").ok());
  EXPECT_FALSE(ReadZipfileDirectory(std::string(100, 'x')).ok());
}

}  // namespace
}  // namespace ckptscan::zip
