// The fork server: one ckptscan-worker process that sets up the jail's shared part once and
// forks a fresh child per job (docs/sandbox.md, "The fork server").
//
//   ckptscan-worker --fork-server=PID   (started once by sandbox/fork_client.h ForkClient; never by
//                                        hand; its only descriptor is kForkServerFd)
//
// Once, at start: close every descriptor but kForkServerFd; die with the parent PID (checked);
// non-dumpable; no_new_privs; enter the namespaces it can, and when that includes a new pid
// namespace, fork once so that the serving process is its pid 1 (the outer process waits and
// exits with it); compile the scan and the convert seccomp filters. It never reads a byte of
// input, nor of a request: per request (sandbox/protocol.h) it forks a child FIRST, and the
// child reads the request and its descriptors off the channel and hands back only the status
// pipe, so no job inherits an earlier caller's request from the server's buffers or heap. The
// server answers with the child's pidfd, and when the child is reaped writes its wait status
// to the job's status pipe. Under a root daemon the server keeps the init user namespace and
// only CAP_SETUID, CAP_SETGID and CAP_KILL, and each child takes a uid and gid of its own
// (kJobUidBase, sandbox/protocol.h) before anything else; every child then enters a user (root
// helper), net and ipc namespace of its own, puts the job's descriptors in place (0, 1, 3) and
// runs the job's main, whose jail entry is EnterForkedJail (sandbox/worker/jail.h): the same
// seven steps as a per-job worker, with the precompiled filter. Jobs share the helper's pid,
// mount and uts namespaces (the helper is the pid namespace's pid 1) and nothing else.
//
// Single-threaded; the process does nothing else.
#ifndef CKPTSCAN_SANDBOX_WORKER_FORK_SERVER_H_
#define CKPTSCAN_SANDBOX_WORKER_FORK_SERVER_H_

#include <functional>

#include "absl/status/statusor.h"
#include "sandbox/jail_types.h"

namespace ckptscan::sandbox {

// How a job enters its jail: EnterJail in a per-job worker, EnterForkedJail in a forked child.
using JailEntry = std::function<absl::StatusOr<JailLayers>(const JailConfig&)>;
// A job's main: argv[1..] are the job's arguments (argv[0] a name); returns the exit code.
using JobMain = int (*)(int argc, char** argv, const JailEntry& enter);

// The helper's end of the channel (the trusted side's is ForkClient, sandbox/fork_client.h).
class ForkServer final {
 public:
  ForkServer() = delete;
  // The helper's main (`argv[1]` is --fork-server=PID): returns only when the trusted side has
  // gone (0) or setup failed (kExitJailSetup, kExitParentGone, kExitUsage).
  static int Serve(int argc, char** argv, JobMain job_main);
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_WORKER_FORK_SERVER_H_
