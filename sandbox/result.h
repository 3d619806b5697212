// The fate of one worker, typed (after sandbox2's Result): how it ended and, when it ended
// well, the frame it wrote. Only kOk carries facts; docs/sandbox.md maps each outcome to a
// verdict (kViolation: DANGEROUS; everything else but kOk: ERROR).
#ifndef CKPTSCAN_SANDBOX_RESULT_H_
#define CKPTSCAN_SANDBOX_RESULT_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace ckptscan::sandbox {

enum class Outcome {
  kOk,         // exit 0 and one whole frame, nothing after it
  kViolation,  // killed by SIGSYS: a system call outside the allowlist
  kTimeout,    // wall-clock deadline (killed by the spawner) or RLIMIT_CPU (SIGXCPU)
  kSignaled,   // killed by any other signal (a crash: SIGSEGV, SIGBUS, SIGABRT, ...)
  kFailed,     // a non-zero exit that is not a limit, or the worker could not be started
  kBadFrame,   // an empty, short, oversized, trailing or malformed frame (a worker that
               // breaks the protocol; an honest one exits kExitFrameTooLarge instead)
  kLimit,      // a limit: address space (allocation failed), facts too large for a frame,
               // file size
  kCancelled,  // the caller gave up (SpawnOptions::cancelled): killed, nothing decided
};

const char* OutcomeName(Outcome outcome);

// The jail's own limits that can stop a job (Outcome::kLimit); a report names each as its flag
// or config key does (ScanError.limit_name).
enum class JailLimit {
  kNone,
  kWorkerMemory,    // worker_memory: the worker's address space (--worker-memory)
  kFileSize,        // file_size: the converting worker's output (RLIMIT_FSIZE)
  kMaxFrameBytes,   // max_frame_bytes: the result frame's size
  kMaxFrameValues,  // max_frame_values: the values one result may hold
  kFactsMemory,     // facts_memory: the daemon's memory for decoding results
};

// "worker_memory", ...; "" for kNone.
std::string_view JailLimitName(JailLimit limit);
// The limit a report's limit_name names, or nullopt when it is none of the jail's (a pickle VM
// limit, max_sealed_copy_bytes, ...).
std::optional<JailLimit> JailLimitNamed(std::string_view name);

struct Result {
  Outcome outcome = Outcome::kFailed;
  int signal = 0;                      // the terminating signal, when it was killed
  int exit_code = -1;                  // the exit code, when it exited
  JailLimit limit = JailLimit::kNone;  // kLimit: which of the jail's limits
  std::string message;                 // one line for people
  std::string payload;                 // kOk: the frame payload
  absl::Duration elapsed;

  bool ok() const { return outcome == Outcome::kOk; }
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_RESULT_H_
