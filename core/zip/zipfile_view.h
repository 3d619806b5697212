// The directory of a zip archive as Python's zipfile reads it (Lib/zipfile.py: _EndRecData,
// _EndRecData64, ZipFile._RealGetContents, ZipInfo._decodeExtra, the local-header checks of
// ZipFile.open), for the loaders that open archives with zipfile rather than with torch's
// miniz: numpy.load of an .npz, and zipfile-based tools. The two readers disagree on
// purpose-built archives, and a scanner that reads only miniz's view can be shown one set of
// members while numpy loads another:
//   - every offset is shifted by "concat", the distance between where the central directory
//     ends and where the end records say it should end (bytes prepended to an archive);
//   - the entry counts are ignored: entries are read until the directory's size is used up;
//   - a name is text (UTF-8 when flag 0x800 is set, else cp437) and ends at its first NUL; a
//     later entry of the same name replaces an earlier one (ZipFile.NameToInfo), case-sensitively.
//
// zipfile is versioned in the wild: Debian ships several releases of it at once (a machine
// without the latest security update is still a machine that loads models), and they disagree
// on the same bytes. ZipfileRelease names each reading; the scanner reads what ANY of them
// opens (kZipfileReleases), so a release that refuses an archive never hides the members
// another one loads.
//
// Entries carry miniz's Entry fields (offsets after the shift; `name` is zipfile's text as
// UTF-8) so that Archive::ReadEntry can read them; `local_header_ok` says whether ZipFile.open
// gets past the local header (its signature, and its name equal to the directory's as text).
//
// Untrusted bytes are read through bounds-checked slices, with the counts bounded by Limits (the
// same ones as Archive::Open). No recursion. Thread-compatible: a pure function.
#ifndef CKPTSCAN_CORE_ZIP_ZIPFILE_VIEW_H_
#define CKPTSCAN_CORE_ZIP_ZIPFILE_VIEW_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/zip/zip_reader.h"

namespace ckptscan::zip {

// The readings of zipfile that Debian 12 and 13 ship or have shipped (docs/zip.md has the
// table). They differ in three places:
//   - the ZIP64 end records. Before CPython gh-139700 (CVE-2025-8291) zipfile takes the ZIP64
//     end record from the 56 bytes right before its locator, whatever the locator says, and
//     ignores a missing one. With it, the locator's offset must hold the record (or, when bytes
//     are prepended, the record must sit right before the locator), and the record must say
//     that the directory ends where the locator points; otherwise the archive is refused. A
//     record with "extensible data" is read where the locator points.
//   - the Info-ZIP Unicode Path extra field (0x7075): Python 3.12+ takes the entry's name from
//     it (version 1, CRC-32 of the raw name), and refuses an archive where it is malformed.
//   - how far back the end record is searched: 2^16 bytes of comment in 3.11 (and upstream
//     3.13.0), 2^16 - 1 in Debian's python3.13 with the ZIP64 check (read in 3.13.5-2+deb13u5).
enum class ZipfileRelease {
  kPython311,              // python3.11 3.11.2-6+deb12u6 and earlier (Debian 12)
  kPython311Zip64Checked,  // python3.11 3.11.2-6+deb12u7 and later
  kPython313,              // python3.13 3.13.5-2 (Debian 13.0)
  kPython313Zip64Checked,  // python3.13 3.13.5-2+deb13u1 and later
};
inline constexpr std::array<ZipfileRelease, 4> kZipfileReleases = {
    ZipfileRelease::kPython311, ZipfileRelease::kPython311Zip64Checked, ZipfileRelease::kPython313,
    ZipfileRelease::kPython313Zip64Checked};

// "3.11", "3.11+zip64check", "3.13", "3.13+zip64check": stable, for tests and tools.
std::string_view ZipfileReleaseName(ZipfileRelease release);

struct ZipfileDirectory {
  // In directory order, every entry (ZipFile.filelist). `name` is the name zipfile keys it by
  // (its text as UTF-8, cut at the first NUL, or the Unicode Path field's); `local_header_ok`/
  // `data_offset` come from the local header when ZipFile.open would get past it.
  std::vector<Entry> entries;
  int64_t concat = 0;  // the shift applied to every offset
  bool zip64 = false;
  // The entry ZipFile.open(name) uses for each distinct name: indexes into `entries`, in the
  // order the names first appear.
  std::vector<size_t> opened;
};

// Fails (InvalidArgument with the byte offset) where that release of zipfile raises
// BadZipFile, NotImplementedError or UnicodeDecodeError while opening; ResourceExhausted past a
// limit.
absl::StatusOr<ZipfileDirectory> ReadZipfileDirectory(std::string_view data, ZipfileRelease release,
                                                      const Limits& limits = Limits());

}  // namespace ckptscan::zip

#endif  // CKPTSCAN_CORE_ZIP_ZIPFILE_VIEW_H_
