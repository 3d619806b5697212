#include "sandbox/pinned_input.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/limit_status.h"

namespace ckptscan::sandbox {
namespace {

// Lease-break notifications (F_SETSIG). Its default action is "ignore": the kernel discards it.
constexpr int kLeaseSignal = SIGURG;

#ifndef F2FS_SUPER_MAGIC
#define F2FS_SUPER_MAGIC 0xF2F52010
#endif

// Local filesystems whose leases no one can bypass: every open for writing and every truncate
// of the file goes through this kernel's VFS, which breaks the lease. Not network or FUSE
// filesystems (the server can change the bytes without any local open) and not overlayfs (the
// upper layer's file can be written directly, which does not break the overlay inode's lease).
bool LeaseGuardsFilesystem(int fd, std::string* why) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) {
    *why = absl::StrCat("fstatfs: ", std::strerror(errno));
    return false;
  }
  switch (static_cast<uint64_t>(fs.f_type)) {
    case EXT4_SUPER_MAGIC:  // ext2, ext3 and ext4 share it
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case F2FS_SUPER_MAGIC:
      return true;
    default:
      *why = absl::StrFormat("a lease cannot guard a file on this filesystem (type 0x%x)",
                             static_cast<uint64_t>(fs.f_type));
      return false;
  }
}

// Whether a lease-break notification is harmless: SIGURG left at its default (ignore) or
// ignored. A handler someone installed would run on every break: no lease then.
bool LeaseSignalHarmless() {
  struct sigaction sa;
  if (::sigaction(kLeaseSignal, nullptr, &sa) != 0) return false;
  if ((sa.sa_flags & SA_SIGINFO) != 0) return false;
  return sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN;
}

// Takes a read lease on `fd`, or says why not.
bool TakeLease(int fd, std::string* why) {
  if (!LeaseGuardsFilesystem(fd, why)) return false;
  if (!LeaseSignalHarmless()) {
    *why = "the process handles SIGURG, the lease-break signal";
    return false;
  }
  if (::fcntl(fd, F_SETSIG, kLeaseSignal) != 0) {
    *why = absl::StrCat("F_SETSIG: ", std::strerror(errno));
    return false;
  }
  if (::fcntl(fd, F_SETLEASE, F_RDLCK) == 0) return true;
  switch (errno) {
    case EAGAIN:
      *why = "the file is open for writing (or mapped writable) elsewhere";
      break;
    case EACCES:
      *why = "not the file's owner and no CAP_LEASE";
      break;
    case EINVAL:
      *why = "the filesystem does not support leases";
      break;
    default:
      *why = absl::StrCat("F_SETLEASE: ", std::strerror(errno));
      break;
  }
  return false;
}

// Copies the first `size` bytes of `in` to the memfd `out` (at its file offset, from 0).
absl::Status CopyInto(int in, int out, uint64_t size) {
  uint64_t done = 0;
  bool use_sendfile = true;
  std::vector<char> buf;
  while (done < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size - done, 1ull << 30));
    ssize_t n;
    if (use_sendfile) {
      off_t off = static_cast<off_t>(done);
      n = ::sendfile(out, in, &off, want);
      if (n < 0 && (errno == EINVAL || errno == ENOSYS) && done == 0) {
        use_sendfile = false;  // a filesystem without splice support: read and write
        continue;
      }
    } else {
      if (buf.empty()) buf.resize(1 << 20);
      n = ::pread(in, buf.data(), std::min(want, buf.size()), static_cast<off_t>(done));
      if (n > 0) {
        if (absl::Status s = base::WriteAll(out, std::string_view(buf.data(), n), "copy");
            !s.ok()) {
          return s;
        }
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "copy the input into a sealed memfd");
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("the file shrank to ", done,
                                              " bytes while being copied (expected ", size, ")"));
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PinnedInput> PinnedInput::Pin(base::UniqueFd fd, uint64_t size,
                                             uint64_t max_copy_bytes) {
  std::string why;
  if (TakeLease(fd.get(), &why)) return PinnedInput(std::move(fd), Kind::kLease, "");
  if (size > max_copy_bytes) {
    return base::LimitError(
        absl::StrCat(
            "the file (", size, " bytes) could not be pinned with a read lease (", why,
            ") and is over the limit for a private sealed copy, ", max_copy_bytes, " bytes (",
            kMaxSealedCopyBytesName,
            "; raise it with --max-sealed-copy-bytes, or let the scanner lease the file: run it as "
            "the file's owner or with CAP_LEASE, and close the file's writers)"),
        kMaxSealedCopyBytesName, max_copy_bytes);
  }
  base::UniqueFd mem(::memfd_create("ckptscan-input", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mem.valid()) return absl::ErrnoToStatus(errno, "memfd_create for a sealed copy");
  if (absl::Status s = CopyInto(fd.get(), mem.get(), size); !s.ok()) return s;
  if (::fcntl(mem.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
      0) {
    return absl::ErrnoToStatus(errno, "seal the copy of the input");
  }
  return PinnedInput(std::move(mem), Kind::kSealedCopy, std::move(why));
}

PinnedInput::PinnedInput(PinnedInput&& other) noexcept
    : fd_(std::move(other.fd_)),
      kind_(other.kind_),
      reason_(std::move(other.reason_)),
      released_(std::exchange(other.released_, true)) {}

PinnedInput& PinnedInput::operator=(PinnedInput&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::move(other.fd_);
    kind_ = other.kind_;
    reason_ = std::move(other.reason_);
    released_ = std::exchange(other.released_, true);
  }
  return *this;
}

PinnedInput::~PinnedInput() { Release(); }

absl::StatusOr<base::UniqueFd> PinnedInput::DupForWorker() const {
  base::UniqueFd dup(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) return absl::ErrnoToStatus(errno, "dup the pinned input");
  return dup;
}

std::string PinnedInput::Describe() const {
  if (kind_ == Kind::kLease) return "lease";
  return absl::StrCat("sealed copy (no lease: ", reason_, ")");
}

absl::Status PinnedInput::Check() const {
  if (kind_ == Kind::kSealedCopy) return absl::OkStatus();
  // During a break F_GETLEASE returns the type the lease is being broken to (F_UNLCK for a
  // writer), after lease-break-time the lease is gone (F_UNLCK): either way not F_RDLCK.
  if (released_ || ::fcntl(fd_.get(), F_GETLEASE) != F_RDLCK) {
    return absl::FailedPreconditionError(
        "the file changed while it was being scanned: it was opened for writing during the "
        "scan (its read lease was broken); the verdict and the digest may be of different "
        "contents");
  }
  return absl::OkStatus();
}

void PinnedInput::Release() {
  if (released_) return;
  released_ = true;
  if (kind_ == Kind::kLease && fd_.valid()) (void)::fcntl(fd_.get(), F_SETLEASE, F_UNLCK);
}

}  // namespace ckptscan::sandbox
