#include "sandbox/run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/limit_status.h"
#include "sandbox/facts_decoder.h"
#include "sandbox/fork_client.h"
#include "sandbox/job.h"
#include "sandbox/spawner.h"

namespace ckptscan::sandbox {
namespace {

constexpr uint64_t kPage = 4096;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

uint64_t CpuSeconds(const JailOptions& o) {
  if (o.cpu_seconds != 0) return o.cpu_seconds;
  const double s = std::ceil(absl::ToDoubleSeconds(o.timeout));
  return s < 1 ? 2 : static_cast<uint64_t>(std::min(s, 1e9)) + 1;
}

// Every layer but the namespaces must be in force in a worker that wrote a frame.
bool JailComplete(const worker::v1::JailLayers& l) {
  return l.closed_fds() && l.die_with_parent() && l.non_dumpable() && l.no_new_privs() &&
         l.rlimits() && l.seccomp();
}

JailedRun RunJob(base::UniqueFd input, uint64_t input_size, base::UniqueFd output,
                 worker::v1::Job job, const pickle::Limits& limits, const JailOptions& options) {
  LimitsToProto(limits, job.mutable_vm_limits());
  FormatLimitsToProto(options.format_limits, &job);
  const uint64_t mapped = SaturatingAdd(input_size, kPage - 1) / kPage * kPage;
  job.mutable_jail()->set_address_space_bytes(SaturatingAdd(options.worker_memory, mapped));
  job.mutable_jail()->set_cpu_seconds(CpuSeconds(options));
  job.mutable_jail()->set_parent_pid(static_cast<int32_t>(::getpid()));
  job.mutable_jail()->set_unjailed(options.unjailed);
  if (output.valid()) {
    job.mutable_jail()->set_output(true);
    job.mutable_jail()->set_output_bytes(
        options.max_output_bytes != 0 ? options.max_output_bytes : DefaultOutputBytes(input_size));
  }

  SpawnOptions spawn;
  spawn.worker_path = options.worker_path;
  spawn.args.push_back(EncodeJobArg(job));
  spawn.args.insert(spawn.args.end(), options.extra_args.begin(), options.extra_args.end());
  spawn.timeout = options.timeout;
  spawn.max_frame_bytes = options.max_frame_bytes;
  spawn.cancelled = options.cancelled;
  // The helper is held until this job's worker is reaped: the next job goes to an idle one.
  ForkClient::Lease server;
  if (options.spawn_mode == SpawnMode::kForkServer && !options.unjailed) {
    server = ForkClient::Shared(options.worker_path);
    spawn.fork_server = server.get();
  }

  JailedRun run;
  const absl::Time spawn_start = absl::Now();
  absl::StatusOr<WorkerProcess> worker =
      WorkerProcess::Start(spawn, std::move(input), std::move(output));
  const absl::Time started = absl::Now();
  if (options.on_phase) options.on_phase("spawn", started - spawn_start);
  if (worker.ok()) {
    run.result = std::move(*worker).Wait();
    if (options.on_phase) options.on_phase("parse", absl::Now() - started);
  } else {
    run.result.outcome = Outcome::kFailed;
    run.result.message = std::string(worker.status().message());
  }
  server.Release();
  if (options.on_worker_exit) options.on_worker_exit(run.result);
  if (!run.result.ok()) return run;
  DecodeLimits decode_limits;
  decode_limits.max_values = options.max_frame_values;
  JailLimit refused_by = JailLimit::kMaxFrameValues;
  if (options.facts_budget != nullptr) {
    decode_limits.admit = [&](uint64_t payload_bytes, uint64_t values) -> absl::Status {
      refused_by = JailLimit::kFactsMemory;
      absl::StatusOr<FactsBudget::Reservation> r =
          options.facts_budget->Reserve(EstimateDecodeBytes(payload_bytes, values),
                                        spawn_start + options.timeout, options.cancelled);
      if (!r.ok()) return r.status();
      run.decode_memory = *std::move(r);
      return absl::OkStatus();
    };
  }
  absl::StatusOr<DecodedResult> decoded = DecodeResult(&run.result.payload, decode_limits);
  std::string().swap(run.result.payload);
  if (absl::IsResourceExhausted(decoded.status()) || absl::IsCancelled(decoded.status())) {
    const bool cancelled = absl::IsCancelled(decoded.status());
    run.result.outcome = cancelled ? Outcome::kCancelled : Outcome::kLimit;
    const std::optional<base::LimitHit> hit = base::LimitOf(decoded.status());
    run.result.limit = cancelled ? JailLimit::kNone
                       : hit     ? JailLimitNamed(hit->name).value_or(refused_by)
                                 : refused_by;
    run.result.message = std::string(decoded.status().message());
    return run;
  }
  if (!decoded.ok()) {
    run.result.outcome = Outcome::kBadFrame;
    run.result.message = absl::StrCat("bad result frame: ", decoded.status().message());
    return run;
  }
  // An unjailed worker (--no-sandbox) reports no layer; every other must report them all.
  if (!options.unjailed && !JailComplete(decoded->layers)) {
    run.result.outcome = Outcome::kBadFrame;
    run.result.message =
        absl::StrCat("the worker reports an incomplete jail: ", DescribeLayers(decoded->layers));
    return run;
  }
  run.facts = std::move(decoded->facts);
  run.layers = std::move(decoded->layers);
  run.trace = std::move(decoded->trace);
  run.trace_truncated = decoded->trace_truncated;
  run.convert_error = std::move(decoded->convert_error);
  return run;
}

}  // namespace

JailedRun Run(base::UniqueFd input, uint64_t input_size, worker::v1::Job::Mode mode,
              const pickle::Limits& limits, const JailOptions& options,
              std::string_view file_name) {
  worker::v1::Job job;
  job.set_mode(mode);
  job.set_file_name(std::string(file_name));
  return RunJob(std::move(input), input_size, base::UniqueFd(), std::move(job), limits, options);
}

JailedRun RunConvert(base::UniqueFd input, uint64_t input_size, base::UniqueFd output,
                     const worker::v1::ConvertSpec& spec, const pickle::Limits& limits,
                     const JailOptions& options, std::string_view file_name) {
  worker::v1::Job job;
  job.set_mode(worker::v1::Job::MODE_CONVERT);
  job.set_file_name(std::string(file_name));
  *job.mutable_convert() = spec;
  return RunJob(std::move(input), input_size, std::move(output), std::move(job), limits, options);
}

uint64_t DefaultOutputBytes(uint64_t input_bytes) {
  const uint64_t four = input_bytes > std::numeric_limits<uint64_t>::max() / 4
                            ? std::numeric_limits<uint64_t>::max()
                            : input_bytes * 4;
  return SaturatingAdd(four, 1ull << 30);
}

}  // namespace ckptscan::sandbox
