// MappedFile: a read-only view of a whole regular file.
//
// Open() follows symlinks (a user may name one explicitly), refuses anything
// that is not a regular file (directories, FIFOs, devices: it never blocks on a
// FIFO), and maps the file read-only. The descriptor is close-on-exec and is
// closed again before Open() returns; the mapping keeps the file's pages
// reachable. An empty file has an empty view and no mapping.
//
// Lifetime: bytes() is valid while the MappedFile lives. Move-only; unmaps on
// destruction. Caveat: if another process truncates the file while it is
// mapped, touching the vanished pages raises SIGBUS. The jailed worker contains
// that (the worker dies, the file is ERROR); the in-process scan does not.
#ifndef CKPTSCAN_BASE_MAPPED_FILE_H_
#define CKPTSCAN_BASE_MAPPED_FILE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace ckptscan::base {

// Opens `path` read-only, close-on-exec, following symlinks, and checks that it
// is a regular file (never waiting on a FIFO). The jailed scan hands this
// descriptor to the worker.
absl::StatusOr<base::UniqueFd> OpenRegularFile(const std::string& path);

class MappedFile final {
 public:
  // NotFound / PermissionDenied / ... from errno; FailedPrecondition for a
  // non-regular file.
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  // Maps the regular file open on `fd` (which stays open and owned by the
  // caller). `name` is for error messages.
  static absl::StatusOr<MappedFile> Map(int fd, const std::string& name);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::string_view bytes() const { return {static_cast<const char*>(addr_), size_}; }

 private:
  MappedFile(void* addr, size_t size) : addr_(addr), size_(size) {}
  void Reset();

  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_MAPPED_FILE_H_
