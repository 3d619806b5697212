// PinnedInput: the bytes of one input held still for one job, so that the bytes the jailed
// worker parses are the bytes the trusted side hashes (or the job fails closed).
//
// A file can change without its modification or change time moving: writes through a shared
// writable mapping (mmap(2) MAP_SHARED, PROT_WRITE) to pages that are already dirty do not
// fault, so the kernel does not update the times. A stat comparison alone therefore cannot
// prove that the worker and the hasher read the same bytes. Pin() makes one of two guarantees:
//
//   kLease       a read lease (fcntl(2) F_SETLEASE, F_RDLCK) on the input's own open file
//                description. The kernel grants it only while nobody has the file open for
//                writing (a writable shared mapping counts as open for writing), and breaks it
//                when anyone opens it for writing or truncates it. Check() is OK only if the
//                lease is still held (F_GETLEASE == F_RDLCK): then no write was possible since
//                Pin(). Taken only on a local filesystem (ext2/3/4, xfs, btrfs, tmpfs, f2fs);
//                needs the file's owner's fsuid or CAP_LEASE.
//   kSealedCopy  otherwise: the file is copied once into a memfd (memfd_create(2)) that is
//                then sealed (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, see
//                fcntl(2) "File Sealing"): nobody, the worker included, can change it. At most
//                `max_copy_bytes` (max_sealed_copy_bytes); a larger file is ResourceExhausted.
//
// The lease-break notification is SIGURG (F_SETSIG), whose default action is to ignore it: the
// kernel then discards it, whatever the threads' masks. The lease is not taken (a copy is made)
// if the process installed a SIGURG handler. A writer that opens the file during the job waits
// in open(2) until the lease is released (at the end of the job, or early once the break is
// seen) or /proc/sys/fs/lease-break-time passes.
//
// Move-only; the destructor releases the lease. Thread-compatible: Check() and Broken() may be
// called from any thread while the owner keeps the object alive.
//
//   CKPT_ASSIGN_OR_RETURN(PinnedInput pin, PinnedInput::Pin(std::move(fd), size, limit));
//   ... hash pin.fd() and hand pin.DupForWorker() to the worker ...
//   if (absl::Status s = pin.Check(); !s.ok()) { /* the report is ERROR */ }
#ifndef CKPTSCAN_SANDBOX_PINNED_INPUT_H_
#define CKPTSCAN_SANDBOX_PINNED_INPUT_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace ckptscan::sandbox {

// The default of JailOptions::max_sealed_copy_bytes (--max-sealed-copy-bytes): 4 GiB.
inline constexpr uint64_t kDefaultMaxSealedCopyBytes = 4ull << 30;

// The name of that limit, as reports and messages give it.
inline constexpr char kMaxSealedCopyBytesName[] = "max_sealed_copy_bytes";

class PinnedInput final {
 public:
  enum class Kind { kLease, kSealedCopy };

  // `fd`: a read-only descriptor of a regular file of `size` bytes (the caller's fstat).
  // ResourceExhausted (naming max_sealed_copy_bytes and the flag that raises it) when no lease
  // can be had and the file is over `max_copy_bytes`; DataLoss if it shrinks while copied;
  // otherwise the kernel's error.
  static absl::StatusOr<PinnedInput> Pin(base::UniqueFd fd, uint64_t size, uint64_t max_copy_bytes);

  PinnedInput(PinnedInput&& other) noexcept;
  PinnedInput& operator=(PinnedInput&& other) noexcept;
  PinnedInput(const PinnedInput&) = delete;
  PinnedInput& operator=(const PinnedInput&) = delete;
  ~PinnedInput();

  // The pinned bytes: the leased file, or the sealed copy. Owned here.
  int fd() const { return fd_.get(); }
  // A descriptor for the worker (the same open file description; close-on-exec).
  absl::StatusOr<base::UniqueFd> DupForWorker() const;
  Kind kind() const { return kind_; }
  // For logs: "lease", or "sealed copy (REASON no lease could be had)".
  std::string Describe() const;

  // OK while the bytes cannot have changed since Pin(). For a lease, FailedPrecondition
  // "the file was opened for writing during the scan" once the lease was broken (or released).
  absl::Status Check() const;
  bool Broken() const { return !Check().ok(); }
  // Gives the lease back now (idempotent; the destructor does it too). Check() fails after.
  void Release();

 private:
  PinnedInput(base::UniqueFd fd, Kind kind, std::string reason)
      : fd_(std::move(fd)), kind_(kind), reason_(std::move(reason)) {}

  base::UniqueFd fd_;
  Kind kind_ = Kind::kSealedCopy;
  std::string reason_;  // why a copy
  bool released_ = false;
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_PINNED_INPUT_H_
