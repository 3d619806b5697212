#include "base/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ckptscan::base {
namespace {

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<base::UniqueFd> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it has no effect on
  // regular files.
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", FileTypeName(st.st_mode), ", not a regular file"));
  }
  return fd;
}

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  absl::StatusOr<base::UniqueFd> fd = OpenRegularFile(path);
  if (!fd.ok()) return fd.status();
  return Map(fd->get(), path);
}

absl::StatusOr<MappedFile> MappedFile::Map(int fd, const std::string& name) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", name));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is ", FileTypeName(st.st_mode), ", not a regular file"));
  }
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > std::numeric_limits<size_t>::max()) {
    return absl::OutOfRangeError(absl::StrCat(name, ": file size does not fit in memory"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return MappedFile(nullptr, 0);

  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) return absl::ErrnoToStatus(errno, absl::StrCat("mmap ", name));
  // Advisory only: a failure changes nothing but read-ahead.
  (void)::madvise(addr, size, MADV_SEQUENTIAL);
  return MappedFile(addr, size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace ckptscan::base
