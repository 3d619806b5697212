// A small zip writer for tests: lays members out as torch.save does (local header with a 'FB'
// padding extra field aligning data to 64 bytes, flags 0x0808, zero CRC and sizes in the local
// header, a 16-byte data descriptor, ZIP64 end record + locator + end record), with knobs for
// the corruptions the tests need. Test-only; never linked into the scanner.
#ifndef CKPTSCAN_CORE_ZIP_ZIP_TEST_BUILDER_H_
#define CKPTSCAN_CORE_ZIP_ZIP_TEST_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ckptscan::zip::testing {

struct TestMember {
  std::string name;
  std::string data;  // as stored (already deflated when method == 8)
  uint16_t method = 0;
  int64_t uncompressed = -1;  // -1: data.size()
  bool zip64_extra = false;   // CD sizes 0xFFFFFFFF + a ZIP64 extended-information field
  uint32_t external_attributes = 0;
  uint16_t cd_flags = 0x0808;     // general-purpose flags in the central directory
  uint16_t local_flags = 0x0808;  // and in the local header
  std::string cd_extra{};         // appended to the central directory's extra field
  std::string local_name{};       // the local header's copy of the name; empty: `name`
};

struct BuildOptions {
  bool zip64_end = true;  // write the ZIP64 end record and locator (torch always does)
  std::string comment;
  // When > 0xFFFF entries, the 32-bit end record holds 0xFFFF and only ZIP64 has the count.
};

std::string BuildZip(const std::vector<TestMember>& members, const BuildOptions& options = {});

// Raw DEFLATE (no zlib header), as zip members carry it.
std::string Deflate(const std::string& raw);

// The three records torch.save writes for a one-tensor state dict, under `prefix`.
std::vector<TestMember> TorchLikeMembers(const std::string& prefix, const std::string& pickle);

}  // namespace ckptscan::zip::testing

#endif  // CKPTSCAN_CORE_ZIP_ZIP_TEST_BUILDER_H_
