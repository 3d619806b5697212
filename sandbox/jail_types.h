// The jail's plain data, which both sides name (sandbox/worker/jail.h sets the jail up, in the
// worker only): JailConfig, what the job asks of it, and JailLayers, what is in force, which the
// worker reports and the trusted side logs and shows.
#ifndef CKPTSCAN_SANDBOX_JAIL_TYPES_H_
#define CKPTSCAN_SANDBOX_JAIL_TYPES_H_

#include <sys/types.h>

#include <cstdint>

namespace ckptscan::sandbox {

struct JailConfig {
  uint64_t address_space_bytes = 8ull << 30;  // RLIMIT_AS, the input mapping included
  uint64_t cpu_seconds = 61;                  // RLIMIT_CPU soft limit (SIGXCPU); hard = soft + 1
  pid_t parent_pid = 0;       // the spawner's pid; 0 skips the parent check (tests only)
  bool output = false;        // kOutputFd is handed and writable (conversion)
  uint64_t output_bytes = 0;  // RLIMIT_FSIZE when `output` (0 otherwise: no file may grow)
  // ckptscan --no-sandbox only (debugging): the worker enters no layer and reports none.
  bool unjailed = false;
};

// Which layers are in force. Namespaces may be unavailable (containers, hardened sysctls).
struct JailLayers {
  bool closed_fds = false;
  bool die_with_parent = false;
  bool non_dumpable = false;
  bool no_new_privs = false;
  bool user_ns = false;
  bool net_ns = false;
  bool ipc_ns = false;
  bool uts_ns = false;
  bool mount_ns = false;
  bool pid_ns = false;
  bool rlimits = false;
  bool seccomp = false;
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_JAIL_TYPES_H_
