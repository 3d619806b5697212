// One job in a fresh jailed worker: the trusted side's end of the jail, as every scan,
// conversion and listing uses it (app/scan_file.h, app/convert.h).
//
// Run() hands the worker the input descriptor (and, for RunConvert, one output descriptor),
// waits for its result frame under the wall-clock deadline, decodes and checks the facts
// (sandbox/facts_decoder.h, within the facts budget) and returns them with the worker's fate
// (sandbox/result.h): kOk only when the worker exited cleanly with a whole, consistent frame
// from a complete jail. The rules are not applied here: the caller judges the facts.
//
// Thread-safe: concurrent calls run concurrent workers (see sandbox/spawner.h on threads).
//
//   JailOptions jail{.worker_path = "/usr/libexec/ckptscan-worker"};
//   JailedRun run = Run(std::move(fd), size, worker::v1::Job::MODE_SCAN,
//                                         limits, jail);
#ifndef CKPTSCAN_SANDBOX_RUN_H_
#define CKPTSCAN_SANDBOX_RUN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "core/formats/format_limits.h"
#include "core/pickle/limits.h"
#include "sandbox/facts_budget.h"
#include "sandbox/file_facts.h"
#include "sandbox/pinned_input.h"
#include "sandbox/protocol.h"
#include "sandbox/result.h"
#include "sandbox/spawner.h"

namespace ckptscan::sandbox {

inline constexpr uint64_t kDefaultWorkerMemory = 8ull << 30;

// What a conversion's output may hold, given before its worker starts: the bytes (the worker's
// RLIMIT_FSIZE, and a plan over them is refused before a byte is written) and the limit that
// set them, for the message ("max_output_expansion", "max_output_bytes").
struct OutputAllowance {
  uint64_t bytes = 0;
  std::string limit;
};

// What a conversion may write when nobody set an allowance: four times the input plus 1 GiB
// (views and expanded tensors may be larger than their storage), saturating.
uint64_t DefaultOutputBytes(uint64_t input_bytes);

struct JailOptions {
  std::string worker_path;  // the ckptscan-worker binary (required)
  // ckptscan --no-sandbox (debugging only; the daemon never sets it): the worker still runs in
  // a child of its own, under the timeout, but enters no jail layer (no seccomp filter,
  // namespaces or rlimits); its report shows none in force.
  bool unjailed = false;
  // How each jailed job's process is made (--jail-spawn): forked by this process's fork server
  // for `worker_path` (started on first use, restarted if it dies), or spawned per job. An
  // unjailed job is always spawned.
  SpawnMode spawn_mode = SpawnMode::kForkServer;
  absl::Duration timeout = absl::Seconds(60);  // per file, wall clock (--timeout)
  // RLIMIT_AS for the worker's own allocations (--worker-memory); the read-only mapping of the
  // input is added on top, so any file size can be mapped.
  uint64_t worker_memory = kDefaultWorkerMemory;
  // RLIMIT_CPU in seconds; 0 = the timeout rounded up, plus one (a backstop behind it).
  uint64_t cpu_seconds = 0;
  uint64_t max_frame_bytes = kMaxFrameBytes;
  // Most values (graph nodes, globals, ...; kListItemsPerValue list items count as one) a result
  // may hold (at most kMaxFrameValues; each costs ~400 bytes here once decoded): past it
  // ERROR, limit "max_frame_values".
  uint64_t max_frame_values = kMaxFrameValues;
  // The worker's format limits set away from their defaults (--limit; formats::FormatLimits()).
  formats::FormatLimitSettings format_limits;
  // May be null. The daemon's memory for decoded results across jobs (sandbox/facts_budget.h):
  // each job reserves its estimate before decoding, waiting for room up to `timeout`; one
  // that cannot get it is ERROR, limit "facts_memory".
  FactsBudget* facts_budget = nullptr;
  // Compute the file's SHA-256 for the report (--digest), on another thread while the worker
  // parses, reading with a bounded buffer. Off: the report's sha256 is empty.
  bool sha256 = true;
  // List every tensor in the report (FileReport.tensor_list: ckptscan ls, scan --tensors).
  bool list_tensors = false;
  // May be null: the bytes of input hashed are added here as they are read (a progress meter).
  std::atomic<uint64_t>* bytes_read = nullptr;
  // RLIMIT_FSIZE of a converting worker: the largest output it may write. 0 = four times the
  // input plus 1 GiB (views and expanded tensors may be larger than their storage).
  uint64_t max_output_bytes = 0;
  // May be empty. Asked once per converting job with the input's size, before its output
  // exists: the output it may write (which then replaces max_output_bytes), reserved by whoever
  // answers (the daemon: against its spool budget, until the call ends). An error refuses the
  // conversion (the input is still scanned) with that error.
  std::function<absl::StatusOr<OutputAllowance>(uint64_t input_bytes)> output_allowance;
  // Polled while a worker runs (may be empty): true kills it, and the file's report is ERROR
  // with code "cancelled" (the daemon: the caller's deadline passed or it cancelled).
  std::function<bool()> cancelled;
  // Observers for the daemon's metrics (each may be empty): every worker's fate, and the time
  // of each phase: "spawn" (posix_spawn of the worker, or the fork server's request and
  // reply), "parse" (the worker's run after it started, to reaped), "convert" (the trusted side
  // after the worker: validation, header, signing, publishing).
  std::function<void(const Result&)> on_worker_exit;
  std::function<void(std::string_view phase, absl::Duration)> on_phase;
  // The input is pinned for the job so that the bytes hashed are the bytes parsed
  // (sandbox/pinned_input.h): by a read lease, else by a sealed private copy in memory of at
  // most this many bytes (--max-sealed-copy-bytes). A larger file that cannot be leased is
  // ERROR, code "limit", limit_name max_sealed_copy_bytes. Without a digest (sha256 off) a scan
  // pins nothing.
  uint64_t max_sealed_copy_bytes = kDefaultMaxSealedCopyBytes;
  // Told how the input was pinned (PinnedInput::Describe), for the daemon's job line. May be
  // empty.
  std::function<void(std::string_view how)> on_pin;
  // Test only: arguments after the job (the probe's --probe=MODE). The real worker refuses any.
  std::vector<std::string> extra_args;
  // Test only (no flag sets it): runs once the worker is reaped, before the digest is awaited:
  // the moment at which a writer would change the bytes between the parse and the hash.
  std::function<void()> after_worker_for_test;
};

// What one jailed job produced.
struct JailedRun {
  // Held while `facts` are alive (declared first: released after they are freed).
  FactsBudget::Reservation decode_memory;
  Result result;                  // the worker's fate (kBadFrame also for a frame that decodes
                                  // to inconsistent facts)
  FileFacts facts;                // result.ok() only
  worker::v1::JailLayers layers;  // result.ok() only: the layers the worker reported
  std::string trace;              // disasm: the listing as the worker wrote it (untrusted)
  bool trace_truncated = false;
  std::string convert_error;  // MODE_CONVERT: the worker's reason for writing no output
};

// Runs one job on the open input (`input_size` bytes). The job's mode decides whether a
// listing comes back. `file_name`: the input's last path component, for what loaders read by
// name (worker.v1.Job.file_name); "" when there is none.
JailedRun Run(base::UniqueFd input, uint64_t input_size, worker::v1::Job::Mode mode,
              const pickle::Limits& limits, const JailOptions& options,
              std::string_view file_name = "");

// A MODE_CONVERT job: as Run, the worker also writes the safetensors bytes to
// `output` (its descriptor 3). The bytes are untrusted: the caller validates them.
JailedRun RunConvert(base::UniqueFd input, uint64_t input_size, base::UniqueFd output,
                     const worker::v1::ConvertSpec& spec, const pickle::Limits& limits,
                     const JailOptions& options, std::string_view file_name = "");

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_RUN_H_
