// EnterJail: what ckptscan-worker does to itself before it reads a byte of input.
//
// In this order (docs/sandbox.md, "Setup order"):
//   1. close every descriptor but the handed ones (sandbox/protocol.h: 0, 1 and, when
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
//
// A fork server (sandbox/worker/fork_server.h) takes steps 2-5 and the filter's compilation once
// for itself (PrepareJail's pieces below), and each job's forked child then takes all seven steps
// through EnterForkedJail: 2-4 again against the server, 5 inherited, 7 loading the
// precompiled program. The steps are the same code either way.
#ifndef CKPTSCAN_SANDBOX_WORKER_JAIL_H_
#define CKPTSCAN_SANDBOX_WORKER_JAIL_H_

#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/jail_types.h"

namespace ckptscan::sandbox {

// Unavailable when the parent is gone (the worker exits kExitParentGone); another
// error when a layer that must hold could not be set up.
absl::StatusOr<JailLayers> EnterJail(const JailConfig& config);

// A compiled seccomp filter: the BPF program libseccomp exports, loaded with
// seccomp(SECCOMP_SET_MODE_FILTER). Compiling allocates and takes most of the jail's time;
// loading one is a single system call.
struct SeccompProgram {
  std::vector<sock_filter> insns;
};

// The filter for a job with (`output`) or without an output descriptor.
absl::StatusOr<SeccompProgram> CompileSeccomp(bool output);

// Step 2: PR_SET_PDEATHSIG SIGKILL, then Unavailable unless getppid() is `parent` (0 skips the
// check: tests only).
absl::Status DieWithParent(pid_t parent);
// Steps 3 and 4: non-dumpable and no_new_privs, both checked.
absl::Status HardenProcess();

// Whether this process may give jobs uids of their own (kJobUidBase, sandbox/protocol.h): it
// runs as root, and its user namespace maps every job uid and gid (the init namespace of a root
// daemon does). Root inside a user namespace that maps only itself (`unshare -r`, a rootless
// container) has no such uids: its jobs keep its uid and rely on their user namespace alone.
bool CanTakeJobUids();
// Step 5, best effort: unshare the user, net, ipc, uts, mount and pid namespaces, all at once,
// else one by one (user first, so that the others can use its capabilities when the process
// has none of its own). Records in `layers` which ones were entered. Note that a new pid
// namespace holds only the caller's later children, not the caller. `user` false leaves the
// user namespace out (a root fork server: its children set their own uids, which a user
// namespace without a uid map would refuse).
void EnterNamespaces(JailLayers* layers, bool user = true);

// What a fork server set up once for all its jobs.
struct PreparedJail {
  pid_t server_pid = 0;           // the fork server's pid as its children see it (their parent)
  JailLayers namespaces;          // the namespaces it entered (its children are in them)
  SeccompProgram scan_filter;     // CompileSeccomp(false)
  SeccompProgram convert_filter;  // CompileSeccomp(true)
  // A root helper (euid 0 at start): it keeps the init user namespace and only CAP_SETUID,
  // CAP_SETGID and CAP_KILL; each child takes a uid of its own from job_uid_first on
  // (sandbox/protocol.h, kJobUidBase) before its jail, then a user namespace of its own.
  bool root_helper = false;
  uid_t job_uid_first = 0;
};

// EnterJail for a child forked by a fork server: the same steps, with the die-with-parent
// check against the server, the namespaces it entered, and its precompiled filter.
absl::StatusOr<JailLayers> EnterForkedJail(const JailConfig& config, const PreparedJail& prepared);

// One allowlist entry: the system call, its argument condition ("" = any) and why.
struct AllowedSyscall {
  const char* name;
  const char* condition;
  const char* reason;
};
// The filter's allowlist, exactly as loaded (docs/sandbox.md prints the same table).
const std::vector<AllowedSyscall>& SeccompAllowlist();

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_WORKER_JAIL_H_
