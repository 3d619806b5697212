// Zip record signatures, sizes, flag bits, method numbers and sentinels (PKWARE APPNOTE.TXT),
// shared by the two directory readers: zip_reader*.cc (torch's miniz) and zipfile_view.cc
// (Python's zipfile). Internal to core/zip.
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
// General-purpose flag bits.
inline constexpr uint16_t kFlagEncrypted = 0x0001;
inline constexpr uint16_t kFlagDeflateOptions = 0x0006;
inline constexpr uint16_t kFlagDescriptor = 0x0008;
inline constexpr uint16_t kFlagPatch = 0x0020;
inline constexpr uint16_t kFlagStrongEncryption = 0x0040;
inline constexpr uint16_t kFlagUtf8 = 0x0800;
inline constexpr uint16_t kFlagMaskedLocalHeader = 0x2000;
// Compression methods.
inline constexpr uint16_t kMethodStored = 0;
inline constexpr uint16_t kMethodDeflate = 8;
// A 32-bit size or offset at this value is in the ZIP64 extra field instead.
inline constexpr uint32_t kU32Sentinel = 0xFFFFFFFF;
// MS-DOS "directory" in the external attributes.
inline constexpr uint32_t kDosDirectoryAttribute = 0x10;

}  // namespace ckptscan::zip::records

#endif  // CKPTSCAN_CORE_ZIP_RECORDS_H_
