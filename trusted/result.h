// The fate of one worker, typed (after sandbox2's Result): how it ended and, when it ended
// well, the frame it wrote. Only kOk carries facts; docs/sandbox.md maps each outcome to a
// verdict (kViolation: DANGEROUS; everything else but kOk: ERROR).
#ifndef CKPTSCAN_TRUSTED_RESULT_H_
#define CKPTSCAN_TRUSTED_RESULT_H_

#include <string>

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

struct Result {
  Outcome outcome = Outcome::kFailed;
  int signal = 0;          // the terminating signal, when it was killed
  int exit_code = -1;      // the exit code, when it exited
  std::string limit_name;  // kLimit: "worker_memory", "max_frame_bytes" or "file_size"
  std::string message;     // one line for people
  std::string payload;     // kOk: the frame payload
  absl::Duration elapsed;

  bool ok() const { return outcome == Outcome::kOk; }
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_TRUSTED_RESULT_H_
