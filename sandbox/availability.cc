#include "sandbox/availability.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace ckptscan::sandbox {

absl::Status CheckSeccompAvailable() {
  uint32_t action = SECCOMP_RET_KILL_PROCESS;
  if (::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0) {
    return absl::OkStatus();
  }
  const int err = errno;
  switch (err) {
    case ENOSYS:
    case EINVAL:
      return absl::UnavailableError(
          absl::StrCat("seccomp is not available in this kernel (", ::strerror(err), ")"));
    case EOPNOTSUPP:
      return absl::UnavailableError(
          "this kernel's seccomp has no KILL_PROCESS action (Linux 4.14 or later is needed)");
    default:
      return absl::UnavailableError(
          absl::StrCat("the seccomp availability check failed: ", ::strerror(err)));
  }
}

absl::StatusOr<std::string> FindWorkerBinary(const std::string& flag) {
  std::string path = flag;
  if (path.empty()) {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return absl::ErrnoToStatus(errno, "readlink /proc/self/exe");
    std::string exe(self, static_cast<size_t>(n));
    const size_t slash = exe.rfind('/');
    path = absl::StrCat(slash == std::string::npos ? "." : exe.substr(0, slash), "/",
                        kWorkerBinaryName);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the sandbox worker ", path, " is missing or not executable"));
  }
  return path;
}

}  // namespace ckptscan::sandbox
