// The jailed scan of one file: the default of `ckptscan scan` and `ckptscan disasm`.
//
// The trusted side opens the file (regular files only), hashes it, and hands the descriptor
// to a fresh ckptscan-worker (worker/worker.h) that extracts the facts inside its jail. The
// facts come back in a size-capped frame, are decoded and checked (trusted/facts_decoder.h), and
// only then judged here with the rules (JudgeFacts). The worker's fate maps to the report:
//   kOk         the facts, judged
//   kViolation  DANGEROUS: a finding `sandbox.violation` (the worker was killed by SIGSYS)
//   kTimeout    ERROR, error code "timeout"
//   kLimit      ERROR, error code "limit" (limit_name worker_memory / max_frame_bytes /
//               max_frame_values / facts_memory / ...)
//   otherwise   ERROR, error code "sandbox" (a crash, a failed start, a bad frame)
// Nothing is SAFE unless the worker exited cleanly with a whole, consistent frame.
//
// Thread-safe: concurrent calls run concurrent workers (see trusted/spawner.h on threads).
//
//   pipeline::JailOptions jail{.worker_path = "/usr/libexec/ckptscan-worker"};
//   absl::StatusOr<v1::FileReport> r = pipeline::ScanFileJailed(path, *rules, {}, jail);
#ifndef CKPTSCAN_TRUSTED_JAILED_SCAN_H_
#define CKPTSCAN_TRUSTED_JAILED_SCAN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "ckptscan/v1/report.pb.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "core/pickle/limits.h"
#include "protocol/file_facts.h"
#include "protocol/protocol.h"
#include "rules/rule_set.h"
#include "trusted/facts_budget.h"
#include "trusted/output_file.h"
#include "trusted/pinned_input.h"
#include "trusted/result.h"
#include "trusted/shard_set.h"
#include "trusted/spawner.h"

namespace ckptscan::pipeline {

inline constexpr uint64_t kDefaultWorkerMemory = 8ull << 30;

struct JailOptions {
  std::string worker_path;  // the ckptscan-worker binary (required)
  // ckptscan --no-sandbox (debugging only; the daemon never sets it): the worker still runs in
  // a child of its own, under the timeout, but enters no jail layer (no seccomp filter,
  // namespaces or rlimits); its report shows none in force.
  bool unjailed = false;
  // How each jailed job's process is made (--jail-spawn): forked by this process's fork server
  // for `worker_path` (started on first use, restarted if it dies), or spawned per job. An
  // unjailed job is always spawned.
  sandbox::SpawnMode spawn_mode = sandbox::SpawnMode::kForkServer;
  absl::Duration timeout = absl::Seconds(60);  // per file, wall clock (--timeout)
  // RLIMIT_AS for the worker's own allocations (--worker-memory); the read-only mapping of the
  // input is added on top, so any file size can be mapped.
  uint64_t worker_memory = kDefaultWorkerMemory;
  // RLIMIT_CPU in seconds; 0 = the timeout rounded up, plus one (a backstop behind it).
  uint64_t cpu_seconds = 0;
  uint64_t max_frame_bytes = sandbox::kMaxFrameBytes;
  // Most values (graph nodes, globals, ...; kListItemsPerValue list items count as one) a result
  // may hold (at most sandbox::kMaxFrameValues; each costs ~400 bytes here once decoded): past it
  // ERROR, limit "max_frame_values".
  uint64_t max_frame_values = sandbox::kMaxFrameValues;
  // May be null. The daemon's memory for decoded results across jobs (trusted/facts_budget.h):
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
  // Polled while a worker runs (may be empty): true kills it, and the file's report is ERROR
  // with code "cancelled" (the daemon: the caller's deadline passed or it cancelled).
  std::function<bool()> cancelled;
  // Observers for the daemon's metrics (each may be empty): every worker's fate, and the time
  // of each phase: "spawn" (posix_spawn of the worker, or the fork server's request and
  // reply), "parse" (the worker's run after it started, to reaped), "convert" (the trusted side
  // after the worker: validation, header, signing, publishing).
  std::function<void(const sandbox::Result&)> on_worker_exit;
  std::function<void(std::string_view phase, absl::Duration)> on_phase;
  // The input is pinned for the job so that the bytes hashed are the bytes parsed
  // (trusted/pinned_input.h): by a read lease, else by a sealed private copy in memory of at
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
  sandbox::Result result;         // the worker's fate (kBadFrame also for a frame that decodes
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
JailedRun RunJailedJob(base::UniqueFd input, uint64_t input_size, worker::v1::Job::Mode mode,
                       const pickle::Limits& limits, const JailOptions& options,
                       std::string_view file_name = "");

// A MODE_CONVERT job: as RunJailedJob, the worker also writes the safetensors bytes to
// `output` (its descriptor 3). The bytes are untrusted: the caller validates them.
JailedRun RunJailedConvertJob(base::UniqueFd input, uint64_t input_size, base::UniqueFd output,
                              const worker::v1::ConvertSpec& spec, const pickle::Limits& limits,
                              const JailOptions& options, std::string_view file_name = "");

// The report for a run (format, findings, errors, verdict); path, sha256 and size are the
// caller's to fill.
v1::FileReport ReportForRun(const JailedRun& run, const JailOptions& options,
                            const rules::RuleSet& rules);

// Hashes and scans the open regular file `fd` in a worker; the report names it `path`. The
// input is pinned for the job (JailOptions::max_sealed_copy_bytes): if a writer could have
// changed it between the parse and the hash, the report is ERROR (code "io").
absl::StatusOr<v1::FileReport> ScanFdJailed(base::UniqueFd fd, const std::string& path,
                                            const rules::RuleSet& rules,
                                            const pickle::Limits& limits,
                                            const JailOptions& options);

// Opens, hashes and scans `path` in a worker. A non-OK status means the file could not be
// read at all (see UnreadableFileReport); every worker failure is a report, not a status.
absl::StatusOr<v1::FileReport> ScanFileJailed(const std::string& path, const rules::RuleSet& rules,
                                              const pickle::Limits& limits,
                                              const JailOptions& options);

// `ckptscan convert` (the default, jailed): hashes the input, then a worker scans it and writes
// the conversion to an unlinked file next to `request.output`. The trusted side judges the facts
// (only SAFE keeps the output), plans the conversion from the facts itself and requires the
// output to carry exactly that header and size and to pass the strict validator, then links it.
// A non-OK status means the input could not be read at all.
// An input that is a sharded checkpoint's index converts as a set (trusted/shard_set.h),
// each shard in its own worker. `check` (may be empty) runs on the plan before publishing.
absl::StatusOr<ConvertResult> ConvertFileJailed(const ConvertRequest& request,
                                                const rules::RuleSet& rules,
                                                const pickle::Limits& limits,
                                                const JailOptions& options,
                                                const PlanCheck& check = nullptr);

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_TRUSTED_JAILED_SCAN_H_
