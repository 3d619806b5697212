// EnterJail: what ckptscan-worker does to itself before it reads a byte of input.
//
// In this order (docs/sandbox.md, "Setup order"):
//   1. close every descriptor but the handed ones (protocol/protocol.h: 0, 1 and, when
//      converting, 3), and check that those are open;
//   2. die with the parent (PR_SET_PDEATHSIG SIGKILL), then check that the parent is still the
//      spawner (it may have died before the signal was armed);
//   3. non-dumpable (no core, no ptrace attach by same-uid processes, /proc entries root-owned);
//   4. no_new_privs (no setuid/file-capability gains; required for an unprivileged filter);
//   5. new user, net, ipc, uts, mount and pid namespaces where the kernel allows: an extra layer,
//      so failure is recorded (JailLayers) and the jail goes on;
//   6. rlimits: AS, CPU, FSIZE, CORE=0, NPROC=0, NOFILE;
//   7. a libseccomp filter, default action KILL_PROCESS, that allows only SeccompAllowlist().
// Layers 1-4, 6 and 7 must hold: if one cannot be set up, EnterJail fails and the worker exits
// without reading its input. After a successful return only the allowlisted system calls work;
// any other kills the process with SIGSYS.
//
// Call it once, single-threaded, in a fresh process. Not for the trusted side.
#ifndef CKPTSCAN_WORKER_JAIL_H_
#define CKPTSCAN_WORKER_JAIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "protocol/jail_types.h"

namespace ckptscan::sandbox {

// Unavailable when the parent is gone (the worker exits kExitParentGone); another
// error when a layer that must hold could not be set up.
absl::StatusOr<JailLayers> EnterJail(const JailConfig& config);

// One allowlist entry: the system call, its argument condition ("" = any) and why.
struct AllowedSyscall {
  const char* name;
  const char* condition;
  const char* reason;
};
// The filter's allowlist, exactly as loaded (docs/sandbox.md prints the same table).
const std::vector<AllowedSyscall>& SeccompAllowlist();

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_WORKER_JAIL_H_
