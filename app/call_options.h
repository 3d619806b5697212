// What one call of a surface adds to the engine's settings (app/engine.h): its deadline and
// cancellation, whether to hash, what to list, and the observers a daemon counts with. Every
// scan and conversion of either surface runs with JailFor(engine, call).
//
// Thread-compatible: plain data; the observers are called from the threads that run jobs.
#ifndef CKPTSCAN_APP_CALL_OPTIONS_H_
#define CKPTSCAN_APP_CALL_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "absl/time/time.h"
#include "app/engine.h"
#include "ckptscan/v1/report.pb.h"
#include "sandbox/result.h"
#include "sandbox/run.h"

namespace ckptscan::app {

struct CallOptions {
  bool sha256 = true;         // the report carries the input's digest (and the input is pinned)
  bool list_tensors = false;  // FileReport.tensor_list
  // The caller's deadline: a job's timeout is the engine's, cut to what is left of it.
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;  // may be empty: true kills the job's worker
  // Overrides the engine's spawn mode (a single file: a spawn costs less than a helper).
  std::optional<sandbox::SpawnMode> spawn_mode;
  std::atomic<uint64_t>* bytes_read = nullptr;  // the bytes hashed, as they are read
  // A conversion's output allowance per file, asked before its output exists
  // (sandbox::JailOptions::output_allowance; may be empty).
  std::function<absl::StatusOr<sandbox::OutputAllowance>(uint64_t input_bytes)> output_allowance;
  // Observers (each may be empty): every worker's fate, each phase's time, how each input was
  // pinned, each file's report as it is judged.
  std::function<void(const sandbox::Result&)> on_worker_exit;
  std::function<void(std::string_view phase, absl::Duration)> on_phase;
  std::function<void(std::string_view how)> on_pin;
  std::function<void(const v1::FileReport&)> on_judged;
};

// The engine's jail options for one call.
sandbox::JailOptions JailFor(const Engine& engine, const CallOptions& call);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_CALL_OPTIONS_H_
