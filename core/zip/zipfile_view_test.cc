// ReadZipfileDirectory against what each release of Python's zipfile does with the same
// archives (tests/differential/zipfile_diff.py compares the model with the real zipfile on
// generated archives; tests/fixtures/zipfile_releases holds one archive of each difference,
// with what every release did with it).
#include "core/zip/zipfile_view.h"

#include <zlib.h>

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

constexpr ZipfileRelease kBefore311 = ZipfileRelease::kPython311;
constexpr ZipfileRelease kChecked311 = ZipfileRelease::kPython311Zip64Checked;
constexpr ZipfileRelease kBefore313 = ZipfileRelease::kPython313;
constexpr ZipfileRelease kChecked313 = ZipfileRelease::kPython313Zip64Checked;

void PutU16(std::string* s, size_t at, uint16_t v) {
  (*s)[at] = static_cast<char>(v & 0xff);
  (*s)[at + 1] = static_cast<char>(v >> 8);
}
void PutU64(std::string* s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::string U16(uint16_t v) { return {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; }
std::string U32(uint32_t v) { return U16(v & 0xffff) + U16(v >> 16); }

BuildOptions NoZip64() {
  BuildOptions o;
  o.zip64_end = false;
  return o;
}

// Where BuildZip puts the ZIP64 locator and record (no comment).
size_t LocatorAt(const std::string& zip) { return zip.size() - 22 - 20; }

std::vector<std::string> Names(const ZipfileDirectory& d) {
  std::vector<std::string> out;
  for (const Entry& e : d.entries) out.push_back(e.name);
  return out;
}

// An Info-ZIP Unicode Path extra field (0x7075) naming `name`, for an entry whose raw name is
// `raw` (the CRC-32 is the raw name's unless `crc` is given).
std::string UnicodePath(const std::string& raw, const std::string& name, int64_t crc = -1,
                        uint8_t version = 1) {
  const uint32_t c =
      crc >= 0 ? static_cast<uint32_t>(crc)
               : static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(raw.data()),
                                             static_cast<uInt>(raw.size())));
  std::string body = std::string(1, static_cast<char>(version)) + U32(c) + name;
  return U16(0x7075) + U16(static_cast<uint16_t>(body.size())) + body;
}

// --- What every release reads the same way --------------------------------------------------

class EveryReleaseTest : public ::testing::TestWithParam<ZipfileRelease> {};

INSTANTIATE_TEST_SUITE_P(Releases, EveryReleaseTest, ::testing::ValuesIn(kZipfileReleases),
                         [](const ::testing::TestParamInfo<ZipfileRelease>& info) {
                           std::string n(ZipfileReleaseName(info.param));
                           for (char& c : n) {
                             if (c == '.' || c == '+') c = '_';
                           }
                           return "Python" + n;
                         });

TEST_P(EveryReleaseTest, CleanArchiveReadsAsMinizReadsIt) {
  const std::string zip = BuildZip({{"a.npy", "AAAA"}, {"b.npy", "BBBBBB"}});
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, GetParam());
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

TEST_P(EveryReleaseTest, PrependedBytesShiftEveryOffset) {
  // zipfile's "concat": an archive after other bytes is read where its records really are.
  const std::string zip = "JUNK" + BuildZip({{"a.npy", "AAAA"}}, NoZip64());
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, GetParam());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->concat, 4);
  ASSERT_EQ(d->entries.size(), 1u);
  EXPECT_EQ(d->entries[0].local_header_offset, 4u);
  EXPECT_TRUE(d->entries[0].local_header_ok);
}

TEST_P(EveryReleaseTest, PrependedBytesBeforeAZip64ArchiveShiftEveryOffset) {
  // With the check, the locator's offset holds no record (it is 4 bytes off): the record right
  // before the locator is used, and its directory ends where the locator says.
  const std::string zip = "JUNK" + BuildZip({{"a.npy", "AAAA"}});
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, GetParam());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->zip64);
  EXPECT_EQ(d->concat, 4);
  ASSERT_EQ(d->entries.size(), 1u);
  EXPECT_TRUE(d->entries[0].local_header_ok);
}

TEST_P(EveryReleaseTest, EntryCountIsIgnored) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}, {"b.npy", "BBBB"}}, NoZip64());
  const size_t eocd = zip.size() - 22;
  PutU16(&zip, eocd + 8, 1);   // entries on this disk
  PutU16(&zip, eocd + 10, 1);  // entries in total
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, GetParam());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy", "b.npy"}));
}

TEST_P(EveryReleaseTest, NameEndsAtItsFirstNulAndTheLastDuplicateIsOpened) {
  const std::string zip =
      BuildZip({{std::string("a.npy\0.txt", 10), "FIRST"}, {"a.npy", "LAST"}, {"b.npy", "B"}});
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, GetParam());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy", "a.npy", "b.npy"}));
  EXPECT_EQ(d->opened, (std::vector<size_t>{1, 2}));
}

TEST_P(EveryReleaseTest, NamesAreTextCp437OrUtf8NotBytes) {
  // The same two bytes are "├╝" in cp437 and "ü" in UTF-8 (flag 0x800): two names, both opened.
  // (BuildZip writes torch's flags, 0x0808: 0x0800 is the UTF-8 flag.)
  TestMember cp437{"\xC3\xBC.npy", "CP437"};
  cp437.cd_flags = cp437.local_flags = 0x0008;
  TestMember utf8{"\xC3\xBC.npy", "UTF8"};
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(BuildZip({cp437, utf8}), GetParam());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"\xE2\x94\x9C\xE2\x95\x9D.npy", "\xC3\xBC.npy"}));
  EXPECT_EQ(d->opened, (std::vector<size_t>{0, 1}));
}

TEST_P(EveryReleaseTest, LocalNameIsComparedAsText) {
  // The directory says "ü.npy" in UTF-8, the local header "\x81.npy" in cp437: the same text.
  TestMember m{"\xC3\xBC.npy", "DATA"};
  m.local_flags = 0x0008;
  m.local_name = "\x81.npy";
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(BuildZip({m}), GetParam());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->entries[0].local_header_ok);
}

TEST_P(EveryReleaseTest, LocalNameThatDiffersCannotBeOpened) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}});
  zip[30] = 'x';  // the local header's copy of the name
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, GetParam());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->entries[0].local_header_ok);
}

TEST_P(EveryReleaseTest, Utf8FlaggedNameThatIsNotUtf8IsRefused) {
  TestMember m{"\xFF.npy", "DATA"};  // flag 0x0800 set
  EXPECT_FALSE(ReadZipfileDirectory(BuildZip({m}), GetParam()).ok());
}

TEST_P(EveryReleaseTest, TruncatedCentralDirectoryIsAnErrorWithItsOffset) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}}, NoZip64());
  const size_t eocd = zip.size() - 22;
  // Declare a directory 100 bytes longer than it is.
  const uint32_t cd_size =
      static_cast<uint8_t>(zip[eocd + 12]) | (static_cast<uint8_t>(zip[eocd + 13]) << 8);
  PutU16(&zip, eocd + 12, static_cast<uint16_t>(cd_size + 100));
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, GetParam());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("byte offset"), std::string::npos) << d.status();
}

TEST_P(EveryReleaseTest, NotAZipIsAnError) {
  EXPECT_FALSE(ReadZipfileDirectory("", GetParam()).ok());
  EXPECT_FALSE(ReadZipfileDirectory(std::string(100, 'x'), GetParam()).ok());
}

TEST_P(EveryReleaseTest, LocatorOnAnotherDiskIsRefused) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}});
  PutU16(&zip, LocatorAt(zip) + 16, 2);  // total disks
  EXPECT_FALSE(ReadZipfileDirectory(zip, GetParam()).ok());
}

// --- The ZIP64 end records: before and after CPython gh-139700 (CVE-2025-8291) --------------

TEST(ZipfileZip64Test, LocatorPointingAwayFromTheRecordOpensOnlyBeforeTheCheck) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}});
  PutU64(&zip, LocatorAt(zip) + 8, 0);  // points at the first local header
  for (ZipfileRelease r : {kBefore311, kBefore313}) {
    absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, r);
    ASSERT_TRUE(d.ok()) << ZipfileReleaseName(r) << ": " << d.status();
    EXPECT_TRUE(d->zip64);
    EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy"}));
  }
  for (ZipfileRelease r : {kChecked311, kChecked313}) {
    absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, r);
    ASSERT_FALSE(d.ok()) << ZipfileReleaseName(r);
    EXPECT_NE(d.status().message().find("corrupt zip64 end of central directory record"),
              std::string::npos)
        << d.status();
  }
}

TEST(ZipfileZip64Test, LocatorPointingPastTheRecordIsRefusedByTheCheck) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}});
  PutU64(&zip, LocatorAt(zip) + 8, zip.size());
  EXPECT_TRUE(ReadZipfileDirectory(zip, kBefore311).ok());
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, kChecked311);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("corrupt zip64 end of central directory locator"),
            std::string::npos)
      << d.status();
}

TEST(ZipfileZip64Test, LocatorWithoutARecordIsIgnoredBeforeAndRefusedAfter) {
  // A 32-bit archive whose last directory entry has a 20-byte comment that is a ZIP64 locator
  // (pointing at offset 0) right before the end record: no ZIP64 record anywhere.
  std::string zip = BuildZip({{"a.npy", "AAAA"}}, NoZip64());
  const size_t eocd = zip.size() - 22;
  const size_t cd_start =
      static_cast<uint8_t>(zip[eocd + 16]) | (static_cast<uint8_t>(zip[eocd + 17]) << 8);
  const uint16_t cd_size =
      static_cast<uint8_t>(zip[eocd + 12]) | (static_cast<uint8_t>(zip[eocd + 13]) << 8);
  PutU16(&zip, cd_start + 32, 20);  // the entry's comment length
  PutU16(&zip, eocd + 12, static_cast<uint16_t>(cd_size + 20));
  zip.insert(eocd, "PK\x06\x07" + U32(0) + std::string(8, '\0') + U32(1));
  absl::StatusOr<ZipfileDirectory> before = ReadZipfileDirectory(zip, kBefore311);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_FALSE(before->zip64);
  EXPECT_EQ(Names(*before), (std::vector<std::string>{"a.npy"}));
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, kChecked311);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("record not found"), std::string::npos) << d.status();
}

TEST(ZipfileZip64Test, RecordSizeThatDoesNotReachTheLocatorIsRefusedByTheCheck) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}});
  PutU64(&zip, LocatorAt(zip) - 56 + 4, 52);  // the record's size field: 44 is right
  EXPECT_TRUE(ReadZipfileDirectory(zip, kBefore311).ok());
  EXPECT_FALSE(ReadZipfileDirectory(zip, kChecked311).ok());
}

TEST(ZipfileZip64Test, RecordWithExtensibleDataOpensOnlyWithTheCheck) {
  // 8 bytes of "zip64 extensible data" after the record (size 52), the locator pointing at it:
  // the check reads the record where the locator points. Before it, the 56 bytes before the
  // locator are no record, so the 32-bit values are used with a wrong shift.
  std::string zip = BuildZip({{"a.npy", "AAAA"}, {"b.npy", "BBBB"}});
  const size_t record = LocatorAt(zip) - 56;
  PutU64(&zip, record + 4, 52);
  zip.insert(record + 56, "EXTENDED");
  for (ZipfileRelease r : {kChecked311, kChecked313}) {
    absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, r);
    ASSERT_TRUE(d.ok()) << ZipfileReleaseName(r) << ": " << d.status();
    EXPECT_EQ(d->concat, 0);
    EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy", "b.npy"}));
    EXPECT_TRUE(d->entries[0].local_header_ok);
  }
  for (ZipfileRelease r : {kBefore311, kBefore313}) {
    absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, r);
    EXPECT_TRUE(!d.ok() || d->concat != 0) << ZipfileReleaseName(r);
  }
}

TEST(ZipfileZip64Test, LocatorTooCloseToTheStartIsRefusedByTheCheck) {
  // A locator right before an end record at offset 20: no room for a record before it.
  std::string zip = "PK\x06\x07" + std::string(4, '\0') + std::string(8, '\0') + U32(1);
  zip += "PK\x05\x06" + std::string(18, '\0');
  EXPECT_TRUE(ReadZipfileDirectory(zip, kBefore311).ok());
  EXPECT_FALSE(ReadZipfileDirectory(zip, kChecked311).ok());
}

// --- The Unicode Path extra field (Python 3.12+) --------------------------------------------

TEST(ZipfileUnicodePathTest, RenamesTheEntryIn313Only) {
  // Two entries named "a.npy": 3.11 opens only the second; 3.13 calls the first "b.npy" and
  // opens both.
  TestMember first{"a.npy", "FIRST"};
  first.cd_extra = UnicodePath("a.npy", "b.npy");
  const std::string zip = BuildZip({first, {"a.npy", "SECOND"}});
  for (ZipfileRelease r : {kBefore311, kChecked311}) {
    absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, r);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy", "a.npy"}));
    EXPECT_EQ(d->opened, (std::vector<size_t>{1}));
  }
  for (ZipfileRelease r : {kBefore313, kChecked313}) {
    absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(zip, r);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(Names(*d), (std::vector<std::string>{"b.npy", "a.npy"}));
    EXPECT_EQ(d->opened, (std::vector<size_t>{0, 1}));
    // ZipFile.open still compares the local header with the name the directory spells.
    EXPECT_TRUE(d->entries[0].local_header_ok);
  }
}

TEST(ZipfileUnicodePathTest, WrongCrcOrVersionIsIgnored) {
  TestMember bad_crc{"a.npy", "A"};
  bad_crc.cd_extra = UnicodePath("a.npy", "b.npy", /*crc=*/1234);
  TestMember bad_version{"c.npy", "C"};
  bad_version.cd_extra = UnicodePath("c.npy", "d.npy", -1, /*version=*/2);
  absl::StatusOr<ZipfileDirectory> d =
      ReadZipfileDirectory(BuildZip({bad_crc, bad_version}), kChecked313);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"a.npy", "c.npy"}));
}

TEST(ZipfileUnicodePathTest, NulEndsTheUnicodeName) {
  TestMember m{"a.npy", "A"};
  m.cd_extra = UnicodePath("a.npy", std::string("b.npy\0tail", 10));
  absl::StatusOr<ZipfileDirectory> d = ReadZipfileDirectory(BuildZip({m}), kBefore313);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Names(*d), (std::vector<std::string>{"b.npy"}));
}

TEST(ZipfileUnicodePathTest, MalformedFieldIsRefusedBy313Only) {
  TestMember short_field{"a.npy", "A"};
  short_field.cd_extra = U16(0x7075) + U16(3) + std::string("\x01\x00\x00", 3);
  TestMember not_utf8{"a.npy", "A"};
  not_utf8.cd_extra = UnicodePath("a.npy", "\xFF");
  for (const TestMember& m : {short_field, not_utf8}) {
    const std::string zip = BuildZip({m});
    EXPECT_TRUE(ReadZipfileDirectory(zip, kBefore311).ok());
    EXPECT_TRUE(ReadZipfileDirectory(zip, kChecked311).ok());
    EXPECT_FALSE(ReadZipfileDirectory(zip, kBefore313).ok());
    EXPECT_FALSE(ReadZipfileDirectory(zip, kChecked313).ok());
  }
}

// --- How far back the end record is searched ------------------------------------------------

TEST(ZipfileEndRecordTest, EndRecordExactly65558BytesFromTheEndIsFoundOnlyWithTheWiderWindow) {
  std::string zip = BuildZip({{"a.npy", "AAAA"}}, NoZip64());
  zip += std::string(65536, 'c');  // 2^16 bytes after the end record (its comment says 0)
  for (ZipfileRelease r : {kBefore311, kChecked311, kBefore313}) {
    EXPECT_TRUE(ReadZipfileDirectory(zip, r).ok()) << ZipfileReleaseName(r);
  }
  EXPECT_FALSE(ReadZipfileDirectory(zip, kChecked313).ok());
}

}  // namespace
}  // namespace ckptscan::zip
