// Zip record signatures, sizes and flag bits (PKWARE APPNOTE.TXT), shared by the two directory
// readers: zip_reader.cc (torch's miniz) and zipfile_view.cc (Python's zipfile). Internal to
// core/zip.
#ifndef CKPTSCAN_CORE_ZIP_RECORDS_H_
#define CKPTSCAN_CORE_ZIP_RECORDS_H_

#include <cstdint>
#include <string_view>

namespace ckptscan::zip::records {

inline constexpr std::string_view kLocalSig("PK\x03\x04", 4);
inline constexpr std::string_view kCdSig("PK\x01\x02", 4);
inline constexpr std::string_view kEocdSig("PK\x05\x06", 4);
inline constexpr std::string_view kZip64EocdSig("PK\x06\x06", 4);
inline constexpr std::string_view kZip64LocatorSig("PK\x06\x07", 4);
inline constexpr std::string_view kDescriptorSig("PK\x07\x08", 4);
inline constexpr uint64_t kLocalHeaderSize = 30;
inline constexpr uint64_t kCdHeaderSize = 46;
inline constexpr uint64_t kEocdSize = 22;
inline constexpr uint64_t kZip64EocdSize = 56;
inline constexpr uint64_t kZip64LocatorSize = 20;
inline constexpr uint16_t kFlagUtf8 = 0x0800;

}  // namespace ckptscan::zip::records

#endif  // CKPTSCAN_CORE_ZIP_RECORDS_H_
