// The local header's ZIP64 record: Python's zipfile (3.12+) writes every member of numpy's
// np.savez with 0xFFFFFFFF sizes in the local header and the real sizes in the local ZIP64
// extended-information record (APPNOTE.TXT 4.5.3). That agrees with the central directory; a
// record that is missing, cut short, doubled or gives other sizes does not.
#include <zlib.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/zip/zip_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::zip {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kSentinel = 0xFFFFFFFF;

void Le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// A ZIP64 extended-information record: id 1, then the sizes, uncompressed first.
std::string Zip64Record(uint64_t uncompressed, uint64_t compressed) {
  std::string r;
  Le(r, 1, 2);
  Le(r, 16, 2);
  Le(r, uncompressed, 8);
  Le(r, compressed, 8);
  return r;
}

uint32_t Crc(const std::string& b) {
  return static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(b.data()), b.size()));
}

// How the one local header departs from what Python's zipfile writes for np.savez.
struct Local {
  uint32_t compressed32 = kSentinel;
  uint32_t uncompressed32 = kSentinel;
  std::string extra;            // the local extra field, whole
  bool streamed = false;        // flag 0x08, CRC 0, a 24-byte data descriptor
  int64_t descriptor_skew = 0;  // added to both sizes the data descriptor gives
};

// A one-member STORED archive laid out as Python's zipfile writes it: plain sizes in the
// central directory, no ZIP64 end record.
std::string PythonZip(const std::string& name, const std::string& data, const Local& local) {
  const uint16_t flags = local.streamed ? 0x0008 : 0;
  const uint32_t crc = Crc(data);
  std::string f;
  f += std::string("PK\x03\x04", 4);
  Le(f, 45, 2);
  Le(f, flags, 2);
  Le(f, 0, 2);  // STORED
  Le(f, 0, 4);  // DOS time and date
  Le(f, local.streamed ? 0 : crc, 4);
  Le(f, local.compressed32, 4);
  Le(f, local.uncompressed32, 4);
  Le(f, name.size(), 2);
  Le(f, local.extra.size(), 2);
  f += name + local.extra + data;
  if (local.streamed) {
    f += std::string("PK\x07\x08", 4);
    Le(f, crc, 4);
    Le(f, data.size() + local.descriptor_skew, 8);
    Le(f, data.size() + local.descriptor_skew, 8);
  }
  const uint64_t cd_at = f.size();
  f += std::string("PK\x01\x02", 4);
  Le(f, 45, 2);
  Le(f, 45, 2);
  Le(f, flags, 2);
  Le(f, 0, 2);
  Le(f, 0, 4);
  Le(f, crc, 4);
  Le(f, data.size(), 4);
  Le(f, data.size(), 4);
  Le(f, name.size(), 2);
  Le(f, 0, 2);  // extra
  Le(f, 0, 2);  // comment
  Le(f, 0, 2);  // disk
  Le(f, 0, 2);  // internal attributes
  Le(f, 0x81800000u, 4);
  Le(f, 0, 4);  // local header offset
  f += name;
  const uint64_t cd_size = f.size() - cd_at;
  f += std::string("PK\x05\x06", 4);
  Le(f, 0, 4);
  Le(f, 1, 2);
  Le(f, 1, 2);
  Le(f, cd_size, 4);
  Le(f, cd_at, 4);
  Le(f, 0, 2);
  return f;
}

const std::string kNpy = std::string("\x93NUMPY\x01\x00", 8) + std::string(40, 'x');

std::vector<Anomaly> AnomaliesOf(const std::string& file) {
  absl::StatusOr<Archive> ar = Archive::Open(file, Limits(), Mode::kZipfile);
  EXPECT_TRUE(ar.ok()) << ar.status();
  if (!ar.ok()) return {};
  std::vector<Anomaly> out = ar->anomalies();
  for (const Entry& e : ar->entries()) {
    absl::StatusOr<Member> m = ar->Read(e);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) out.insert(out.end(), m->anomalies().begin(), m->anomalies().end());
  }
  return out;
}

std::string Describe(const std::vector<Anomaly>& all) {
  std::string s;
  for (const Anomaly& a : all) s += std::string(AnomalyKindName(a.kind)) + ": " + a.message + "\n";
  return s;
}

// The one kLocalHeaderMismatch message, or "" when there is none.
std::string Mismatch(const std::vector<Anomaly>& all) {
  std::string out;
  for (const Anomaly& a : all) {
    if (a.kind != AnomalyKind::kLocalHeaderMismatch) continue;
    EXPECT_TRUE(a.must_flag);
    EXPECT_TRUE(out.empty()) << "two mismatches";
    out = a.message;
  }
  return out;
}

TEST(ZipLocalZip64Test, SentinelSizesWithTheRightRecordAreConsistent) {
  const std::vector<Anomaly> all =
      AnomaliesOf(PythonZip("a.npy", kNpy, {.extra = Zip64Record(kNpy.size(), kNpy.size())}));
  EXPECT_TRUE(all.empty()) << Describe(all);
}

TEST(ZipLocalZip64Test, OneSentinelAndOnePlainRightSizeAreConsistent) {
  const std::vector<Anomaly> all =
      AnomaliesOf(PythonZip("a.npy", kNpy,
                            {.compressed32 = static_cast<uint32_t>(kNpy.size()),
                             .extra = Zip64Record(kNpy.size(), kNpy.size())}));
  EXPECT_TRUE(all.empty()) << Describe(all);
}

TEST(ZipLocalZip64Test, ARecordAmongOthersIsFound) {
  std::string extra = std::string("\x55\x54\x05\x00\x01\x00\x00\x00\x00", 9) +
                      Zip64Record(kNpy.size(), kNpy.size());
  const std::vector<Anomaly> all = AnomaliesOf(PythonZip("a.npy", kNpy, {.extra = extra}));
  EXPECT_TRUE(all.empty()) << Describe(all);
}

TEST(ZipLocalZip64Test, StreamedWithZeroRecordAndWideDescriptorIsConsistent) {
  // zipfile writing to an unseekable file: CRC 0, 0xFFFFFFFF sizes, a ZIP64 record of zeros,
  // and CRC and 8-byte sizes in the data descriptor.
  const std::vector<Anomaly> all =
      AnomaliesOf(PythonZip("a.npy", kNpy, {.extra = Zip64Record(0, 0), .streamed = true}));
  EXPECT_TRUE(all.empty()) << Describe(all);
}

TEST(ZipLocalZip64Test, StreamedWithAWideDescriptorOfOtherSizesIsFlagged) {
  // The streamed form is consistent only when the wide descriptor agrees with the central
  // directory: one byte more in it is flagged, as a narrow descriptor's would be.
  const std::vector<Anomaly> all = AnomaliesOf(PythonZip(
      "a.npy", kNpy, {.extra = Zip64Record(0, 0), .streamed = true, .descriptor_skew = 1}));
  bool flagged = false;
  for (const Anomaly& a : all) {
    flagged |= a.kind == AnomalyKind::kDataDescriptorMismatch && a.must_flag;
  }
  EXPECT_TRUE(flagged) << Describe(all);
}

TEST(ZipLocalZip64Test, RecordWithOtherSizesIsAMismatch) {
  const std::string msg = Mismatch(
      AnomaliesOf(PythonZip("a.npy", kNpy, {.extra = Zip64Record(kNpy.size() + 1, kNpy.size())})));
  EXPECT_THAT(msg, HasSubstr("CRC/sizes"));
  EXPECT_THAT(msg, HasSubstr("the local ZIP64 record gives sizes 48/49"));
}

TEST(ZipLocalZip64Test, RecordRightButPlainFieldWrongIsAMismatch) {
  const std::string msg = Mismatch(AnomaliesOf(PythonZip(
      "a.npy", kNpy, {.uncompressed32 = 7, .extra = Zip64Record(kNpy.size(), kNpy.size())})));
  EXPECT_THAT(msg, HasSubstr("CRC/sizes"));
}

TEST(ZipLocalZip64Test, SentinelWithoutRecordIsAMismatch) {
  const std::string msg = Mismatch(AnomaliesOf(PythonZip("a.npy", kNpy, {})));
  EXPECT_THAT(msg, HasSubstr("0xFFFFFFFF but no ZIP64 record in the local extra field"));
}

TEST(ZipLocalZip64Test, ShortRecordIsAMismatch) {
  std::string extra = Zip64Record(kNpy.size(), kNpy.size()).substr(0, 12);
  extra[2] = 8;  // a well-formed list, but a record with only the uncompressed size
  const std::string msg = Mismatch(AnomaliesOf(PythonZip("a.npy", kNpy, {.extra = extra})));
  EXPECT_THAT(msg, HasSubstr("the local ZIP64 record has 8 data bytes, not the 16"));
}

TEST(ZipLocalZip64Test, TruncatedRecordIsAMismatchAndAMalformedExtra) {
  // The record says 16 bytes; the extra field ends after 8 of them.
  const std::string extra = Zip64Record(kNpy.size(), kNpy.size()).substr(0, 12);
  const std::vector<Anomaly> all = AnomaliesOf(PythonZip("a.npy", kNpy, {.extra = extra}));
  EXPECT_THAT(Mismatch(all), HasSubstr("a record of 16 bytes runs past its end"));
  std::set<AnomalyKind> kinds;
  for (const Anomaly& a : all) kinds.insert(a.kind);
  EXPECT_TRUE(kinds.count(AnomalyKind::kMalformedExtraField)) << Describe(all);
}

TEST(ZipLocalZip64Test, TwoRecordsAreAMismatchEvenWhenTheFirstIsRight) {
  const std::string extra =
      Zip64Record(kNpy.size(), kNpy.size()) + Zip64Record(kNpy.size() + 100, kNpy.size() + 100);
  const std::string msg = Mismatch(AnomaliesOf(PythonZip("a.npy", kNpy, {.extra = extra})));
  EXPECT_THAT(msg, HasSubstr("two ZIP64 records"));
}

TEST(ZipLocalZip64Test, NumpyTwoFilesFromTheFixtureCorpusHaveNoAnomalies) {
  // Written by numpy 2.2 on Python 3.13 (tests/fixtures/containers/gen_numpy2.py).
  for (const char* name : {"numpy2_savez.npz", "numpy2_savez_compressed.npz"}) {
    const std::string path =
        std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/containers/benign/" + name;
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string file = ss.str();
    // What makes them numpy-2 files: 0xFFFFFFFF sizes in the first local header.
    ASSERT_EQ(file.substr(18, 8), std::string(8, '\xFF')) << name;
    std::vector<Anomaly> all = AnomaliesOf(file);
    // The compressed one is DEFLATE: that is reported, and is not a must-flag anomaly.
    std::erase_if(all, [](const Anomaly& a) { return a.kind == AnomalyKind::kDeflated; });
    EXPECT_TRUE(all.empty()) << name << "\n" << Describe(all);
  }
}

}  // namespace
}  // namespace ckptscan::zip
