// Trusted-side checks before a jailed scan: is the jail possible here, and where is the
// worker binary. Thread-safe.
#ifndef CKPTSCAN_SANDBOX_AVAILABILITY_H_
#define CKPTSCAN_SANDBOX_AVAILABILITY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckptscan::sandbox {

inline constexpr char kWorkerBinaryName[] = "ckptscan-worker";

// OK when this kernel can load a seccomp filter with the KILL_PROCESS action; Unavailable
// (with the reason) otherwise. Without it there is no jail, and the CLI refuses to scan.
absl::Status CheckSeccompAvailable();

// The worker binary to run: `flag` when given, else ckptscan-worker in the directory of the
// running executable (/proc/self/exe). FailedPrecondition when it is not an executable
// regular file.
absl::StatusOr<std::string> FindWorkerBinary(const std::string& flag);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_AVAILABILITY_H_
