// The directory of a zip archive as Python's zipfile reads it (CPython 3.11 Lib/zipfile.py:
// _EndRecData, _EndRecData64, ZipFile._RealGetContents), for the loaders that open archives
// with zipfile rather than with torch's miniz: numpy.load of an .npz, and zipfile-based tools.
// The two readers disagree on purpose-built archives, and a scanner that reads only miniz's view
// can be shown one set of members while numpy loads another:
//   - the ZIP64 end record is taken from right before its locator (56 bytes, no extensible
//     data), not from where the locator points;
//   - every offset is shifted by "concat", the distance between where the central directory
//     ends and where the end record says it should end (bytes prepended to an archive);
//   - the entry counts are ignored: entries are read until the directory's size is used up;
//   - a name ends at its first NUL byte; a later entry of the same name replaces an earlier one
//     (ZipFile.NameToInfo), case-sensitively.
// Entries carry miniz's Entry fields (offsets after the shift) so that Archive::Read can read
// them; the local header's name must equal the directory's (ZipFile.open raises otherwise).
//
// Untrusted bytes are read through base::ByteReader, with the counts bounded by Limits (the
// same ones as Archive::Open). No recursion. Thread-compatible: a pure function.
#ifndef CKPTSCAN_CORE_ZIP_ZIPFILE_VIEW_H_
#define CKPTSCAN_CORE_ZIP_ZIPFILE_VIEW_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/zip/zip_reader.h"

namespace ckptscan::zip {

struct ZipfileDirectory {
  // In directory order, every entry (ZipFile.filelist). `name` is the name zipfile keys it by
  // (cut at the first NUL); `local_header_ok`/`data_offset` come from the local header when its
  // signature and name match, as ZipFile.open would find them.
  std::vector<Entry> entries;
  int64_t concat = 0;  // the shift applied to every offset
  bool zip64 = false;
  // The entry ZipFile.open(name) uses for each distinct name: indexes into `entries`, in the
  // order the names first appear.
  std::vector<size_t> opened;
};

// Fails (InvalidArgument with the byte offset) where zipfile raises BadZipFile or
// NotImplementedError while opening; ResourceExhausted past a limit.
absl::StatusOr<ZipfileDirectory> ReadZipfileDirectory(std::string_view data,
                                                      const Limits& limits = Limits());

}  // namespace ckptscan::zip

#endif  // CKPTSCAN_CORE_ZIP_ZIPFILE_VIEW_H_
