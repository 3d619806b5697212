#include "trusted/jailed_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/limit_status.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "core/convert/convert.h"
#include "protocol/job.h"
#include "trusted/facts_decoder.h"
#include "trusted/judge_facts.h"
#include "trusted/pinned_input.h"
#include "trusted/sha256.h"
#include "trusted/sign_output.h"
#include "trusted/spawner.h"

namespace ckptscan::pipeline {
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

v1::ScanError Error(v1::ErrorCode code, std::string message) {
  v1::ScanError e;
  e.set_code(code);
  e.set_message(std::move(message));
  return e;
}

// The last component of a path (what loaders that read by name see).
std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

namespace {

JailedRun RunJob(base::UniqueFd input, uint64_t input_size, base::UniqueFd output,
                 worker::v1::Job job, const pickle::Limits& limits, const JailOptions& options) {
  sandbox::LimitsToProto(limits, job.mutable_vm_limits());
  const uint64_t mapped = SaturatingAdd(input_size, kPage - 1) / kPage * kPage;
  job.mutable_jail()->set_address_space_bytes(SaturatingAdd(options.worker_memory, mapped));
  job.mutable_jail()->set_cpu_seconds(CpuSeconds(options));
  job.mutable_jail()->set_parent_pid(static_cast<int32_t>(::getpid()));
  job.mutable_jail()->set_unjailed(options.unjailed);
  if (output.valid()) {
    job.mutable_jail()->set_output(true);
    job.mutable_jail()->set_output_bytes(
        options.max_output_bytes != 0
            ? options.max_output_bytes
            : SaturatingAdd(input_size > std::numeric_limits<uint64_t>::max() / 4
                                ? std::numeric_limits<uint64_t>::max()
                                : input_size * 4,
                            1ull << 30));
  }

  sandbox::SpawnOptions spawn;
  spawn.worker_path = options.worker_path;
  spawn.args.push_back(sandbox::EncodeJobArg(job));
  spawn.args.insert(spawn.args.end(), options.extra_args.begin(), options.extra_args.end());
  spawn.timeout = options.timeout;
  spawn.max_frame_bytes = options.max_frame_bytes;
  spawn.cancelled = options.cancelled;
  // The helper is held until this job's worker is reaped: the next job goes to an idle one.
  sandbox::ForkServer::Lease server;
  if (options.spawn_mode == sandbox::SpawnMode::kForkServer && !options.unjailed) {
    server = sandbox::ForkServer::Shared(options.worker_path);
    spawn.fork_server = server.get();
  }

  JailedRun run;
  const absl::Time spawn_start = absl::Now();
  absl::StatusOr<sandbox::WorkerProcess> worker =
      sandbox::WorkerProcess::Start(spawn, std::move(input), std::move(output));
  const absl::Time started = absl::Now();
  if (options.on_phase) options.on_phase("spawn", started - spawn_start);
  if (worker.ok()) {
    run.result = std::move(*worker).Wait();
    if (options.on_phase) options.on_phase("parse", absl::Now() - started);
  } else {
    run.result.outcome = sandbox::Outcome::kFailed;
    run.result.message = std::string(worker.status().message());
  }
  server.Release();
  if (options.on_worker_exit) options.on_worker_exit(run.result);
  if (!run.result.ok()) return run;
  DecodeLimits decode_limits;
  decode_limits.max_values = options.max_frame_values;
  const char* refused_by = "max_frame_values";
  if (options.facts_budget != nullptr) {
    decode_limits.admit = [&](uint64_t payload_bytes, uint64_t values) -> absl::Status {
      refused_by = "facts_memory";
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
    run.result.outcome = cancelled ? sandbox::Outcome::kCancelled : sandbox::Outcome::kLimit;
    const std::optional<base::LimitHit> hit = base::LimitOf(decoded.status());
    run.result.limit_name = cancelled ? "" : hit ? hit->name : refused_by;
    run.result.message = std::string(decoded.status().message());
    return run;
  }
  if (!decoded.ok()) {
    run.result.outcome = sandbox::Outcome::kBadFrame;
    run.result.message = absl::StrCat("bad result frame: ", decoded.status().message());
    return run;
  }
  // An unjailed worker (--no-sandbox) reports no layer; every other must report them all.
  if (!options.unjailed && !JailComplete(decoded->layers)) {
    run.result.outcome = sandbox::Outcome::kBadFrame;
    run.result.message = absl::StrCat("the worker reports an incomplete jail: ",
                                      sandbox::DescribeLayers(decoded->layers));
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

JailedRun RunJailedJob(base::UniqueFd input, uint64_t input_size, worker::v1::Job::Mode mode,
                       const pickle::Limits& limits, const JailOptions& options,
                       std::string_view file_name) {
  worker::v1::Job job;
  job.set_mode(mode);
  job.set_file_name(std::string(file_name));
  return RunJob(std::move(input), input_size, base::UniqueFd(), std::move(job), limits, options);
}

JailedRun RunJailedConvertJob(base::UniqueFd input, uint64_t input_size, base::UniqueFd output,
                              const worker::v1::ConvertSpec& spec, const pickle::Limits& limits,
                              const JailOptions& options, std::string_view file_name) {
  worker::v1::Job job;
  job.set_mode(worker::v1::Job::MODE_CONVERT);
  job.set_file_name(std::string(file_name));
  *job.mutable_convert() = spec;
  return RunJob(std::move(input), input_size, std::move(output), std::move(job), limits, options);
}

v1::FileReport ReportForRun(const JailedRun& run, const JailOptions& options,
                            const rules::RuleSet& rules) {
  using sandbox::Outcome;
  if (run.result.ok()) {
    v1::FileReport report = JudgeFacts(run.facts, rules);
    if (options.list_tensors) AddTensorList(run.facts, &report);
    // TorchScript code files: the SHA-256 of the bytes the worker inflated (hashing parses
    // nothing; such an archive is never SAFE whatever its code holds).
    const std::vector<torch::CodeFile>& code = run.facts.code_files;
    for (size_t i = 0; i < code.size() && i < static_cast<size_t>(report.code_files_size()); ++i) {
      if (!code[i].has_content) continue;
      absl::StatusOr<std::string> hex = Sha256Hex(code[i].content);
      if (hex.ok()) report.mutable_code_files(static_cast<int>(i))->set_sha256(*std::move(hex));
    }
    return report;
  }

  v1::FileReport report;
  report.mutable_tensors()->set_count(0);
  report.mutable_tensors()->set_bytes(0);
  switch (run.result.outcome) {
    case Outcome::kViolation: {
      v1::Finding* f = report.add_findings();
      f->set_rule_id("sandbox.violation");
      f->set_severity(v1::SEVERITY_CRITICAL);
      f->set_category("sandbox");
      f->set_message(absl::StrCat(run.result.message,
                                  ". Parsing this file made the scanner attempt something it "
                                  "never does on its own: treat the file as malicious."));
      f->mutable_location();
      f->set_verdict(v1::VERDICT_DANGEROUS);
      report.set_verdict(v1::VERDICT_DANGEROUS);
      return report;
    }
    case Outcome::kTimeout:
      *report.add_errors() = Error(v1::ERROR_CODE_TIMEOUT, run.result.message);
      break;
    case Outcome::kCancelled:
      *report.add_errors() = Error(v1::ERROR_CODE_CANCELLED, run.result.message);
      break;
    case Outcome::kLimit: {
      v1::ScanError e = Error(v1::ERROR_CODE_LIMIT, run.result.message);
      e.set_limit_name(run.result.limit_name);
      if (run.result.limit_name == "worker_memory") e.set_limit_value(options.worker_memory);
      if (run.result.limit_name == "max_frame_bytes") e.set_limit_value(options.max_frame_bytes);
      if (run.result.limit_name == "max_frame_values") e.set_limit_value(options.max_frame_values);
      if (run.result.limit_name == "facts_memory" && options.facts_budget != nullptr) {
        e.set_limit_value(options.facts_budget->total());
      }
      *report.add_errors() = std::move(e);
      break;
    }
    default:
      *report.add_errors() = Error(
          v1::ERROR_CODE_SANDBOX,
          absl::StrCat(run.result.message, " [", sandbox::OutcomeName(run.result.outcome), "]"));
      break;
  }
  report.set_verdict(v1::VERDICT_ERROR);
  return report;
}

namespace {

// A second descriptor of the input, kept by the trusted side while the worker reads its own.
base::UniqueFd Watch(int fd) { return base::UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

// A further check behind the pin (trusted/pinned_input.h), which is what binds the digest to
// the parsed bytes: writes through a shared writable mapping to pages already dirty move
// neither mtime nor ctime, so this comparison alone proves nothing about them. It still
// catches what the pin lets through or what happens without one (a scan without a digest): any
// write(2), a fault on a clean page of a shared mapping (mtime and ctime; ctime cannot be set
// back by a user), a truncation (the size), a rename-over (the inode). If one differs, the
// bytes the worker parsed and the bytes hashed may be two different contents, and neither the
// verdict nor the digest can be trusted. The report keeps its findings and gets an error, so it
// blocks (ERROR, or DANGEROUS if that is worse); a conversion is then not published (the
// verdict is not SAFE). A shrink the hash sees first is reported by the hash ("the file
// shrank").
void CheckInputUnchanged(int watch, const struct stat& before, v1::FileReport* report) {
  struct stat after;
  std::string what;
  if (watch < 0 || ::fstat(watch, &after) != 0) {
    what = "it could not be examined again after the scan";
  } else if (after.st_dev != before.st_dev || after.st_ino != before.st_ino) {
    what = "it is another file now";
  } else if (after.st_size != before.st_size) {
    what = absl::StrCat("its size went from ", before.st_size, " to ", after.st_size, " bytes");
  } else if (after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
             after.st_mtim.tv_nsec != before.st_mtim.tv_nsec ||
             after.st_ctim.tv_sec != before.st_ctim.tv_sec ||
             after.st_ctim.tv_nsec != before.st_ctim.tv_nsec) {
    what = "it was written to (its modification or change time moved)";
  } else {
    return;
  }
  *report->add_errors() = Error(
      v1::ERROR_CODE_IO, absl::StrCat("the file changed while it was being scanned: ", what,
                                      "; the verdict and the digest may be of different contents"));
  report->set_verdict(rules::WorseVerdict(report->verdict(), v1::VERDICT_ERROR));
}

// The input pinned for a job, or a report for a file over max_sealed_copy_bytes that could not
// be leased (ERROR, code "limit"); any other failure is the status.
struct PinOrReport {
  std::optional<PinnedInput> pin;
  std::optional<v1::FileReport> report;
};

absl::StatusOr<PinOrReport> PinForJob(base::UniqueFd fd, uint64_t size,
                                      const JailOptions& options) {
  absl::StatusOr<PinnedInput> pin =
      PinnedInput::Pin(std::move(fd), size, options.max_sealed_copy_bytes);
  PinOrReport out;
  if (pin.ok()) {
    if (options.on_pin) options.on_pin(pin->Describe());
    out.pin.emplace(*std::move(pin));
    return out;
  }
  if (!absl::IsResourceExhausted(pin.status())) return pin.status();
  if (options.on_pin) options.on_pin("none (over max_sealed_copy_bytes)");
  v1::FileReport& report = out.report.emplace();
  report.mutable_tensors()->set_count(0);
  report.mutable_tensors()->set_bytes(0);
  v1::ScanError e = Error(v1::ERROR_CODE_LIMIT, std::string(pin.status().message()));
  const base::LimitHit hit =
      base::LimitOf(pin.status())
          .value_or(base::LimitHit{kMaxSealedCopyBytesName, options.max_sealed_copy_bytes});
  e.set_limit_name(hit.name);
  e.set_limit_value(hit.value);
  *report.add_errors() = std::move(e);
  report.set_verdict(v1::VERDICT_ERROR);
  return out;
}

// The job's options: a broken lease also stops the worker (the result is ERROR then anyway),
// so that the writer waiting in open(2) is let through soon.
JailOptions JobOptions(const JailOptions& options, const PinnedInput& pin) {
  if (pin.kind() != PinnedInput::Kind::kLease) return options;
  JailOptions job = options;
  job.cancelled = [user = options.cancelled, p = &pin] { return (user && user()) || p->Broken(); };
  return job;
}

// The hash's stop: a broken lease ends it early (the job is ERROR then, and the writer waits).
std::function<bool()> HashStop(const PinnedInput& pin) {
  if (pin.kind() != PinnedInput::Kind::kLease) return nullptr;
  return [p = &pin] { return p->Broken(); };
}

// Once the worker has finished and the digest is computed: whether the pin held. If not, the
// report gets an io error and blocks (findings kept); its digest is then of no use (it may be
// of other bytes, or stopped early) and the caller leaves it out. A worker stopped because the
// lease broke was not cancelled by the caller: that error goes. Then the lease is given back.
bool CheckPinned(PinnedInput& pin, const JailedRun& run, v1::FileReport* report) {
  const absl::Status held = pin.Check();
  pin.Release();
  if (held.ok()) return true;
  if (run.result.outcome == sandbox::Outcome::kCancelled) {
    auto* errors = report->mutable_errors();
    errors->erase(
        std::remove_if(errors->begin(), errors->end(),
                       [](const v1::ScanError& e) { return e.code() == v1::ERROR_CODE_CANCELLED; }),
        errors->end());
  }
  *report->add_errors() = Error(v1::ERROR_CODE_IO, std::string(held.message()));
  report->set_verdict(rules::WorseVerdict(report->verdict(), v1::VERDICT_ERROR));
  return false;
}

}  // namespace

absl::StatusOr<v1::FileReport> ScanFileJailed(const std::string& path, const rules::RuleSet& rules,
                                              const pickle::Limits& limits,
                                              const JailOptions& options) {
  CKPT_ASSIGN_OR_RETURN(base::UniqueFd fd, OpenRegularFile(path));
  return ScanFdJailed(std::move(fd), path, rules, limits, options);
}

absl::StatusOr<v1::FileReport> ScanFdJailed(base::UniqueFd fd, const std::string& path,
                                            const rules::RuleSet& rules,
                                            const pickle::Limits& limits,
                                            const JailOptions& options) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const base::UniqueFd watch = Watch(fd.get());
  // With a digest, the input is pinned first (a lease, else a sealed copy), and the worker and
  // the hasher both read the pinned bytes. Hashing reads the bytes but parses nothing. It runs
  // on a second descriptor (pread leaves the worker's descriptor alone) on another core while
  // the worker parses. Without a digest there is nothing to bind the verdict to: no pin.
  std::optional<PinnedInput> pin;
  std::unique_ptr<BackgroundSha256> hash;
  if (options.sha256) {
    CKPT_ASSIGN_OR_RETURN(PinOrReport pinned, PinForJob(std::move(fd), size, options));
    if (pinned.report.has_value()) {
      pinned.report->set_path(path);
      pinned.report->set_size(size);
      return *std::move(pinned.report);
    }
    pin = std::move(pinned.pin);
    CKPT_ASSIGN_OR_RETURN(
        hash, BackgroundSha256::Start(pin->fd(), size, HashStop(*pin), options.bytes_read));
    CKPT_ASSIGN_OR_RETURN(fd, pin->DupForWorker());
  }
  const JailedRun run = RunJailedJob(std::move(fd), size, worker::v1::Job::MODE_SCAN, limits,
                                     pin ? JobOptions(options, *pin) : options, BaseName(path));
  if (options.after_worker_for_test) options.after_worker_for_test();
  absl::StatusOr<std::string> sha256 = hash ? hash->Wait() : std::string();
  v1::FileReport report = ReportForRun(run, options, rules);
  JudgeName(path, &report);
  if (pin && !CheckPinned(*pin, run, &report)) {
    sha256 = std::string();
  } else if (!sha256.ok()) {
    return sha256.status();
  }
  CheckInputUnchanged(watch.get(), st, &report);
  report.set_path(path);
  report.set_sha256(*std::move(sha256));
  report.set_size(size);
  return report;
}

namespace {

// While a worker writes the output, starts writeback of what it has written so far, so that
// the fsync before publishing finds little left to do (the copy and the disk overlap).
class WritebackKicker {
 public:
  explicit WritebackKicker(int fd) : fd_(fd), thread_([this] { Run(); }) {}
  ~WritebackKicker() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;  // Run's condition: re-evaluated when mu_ is released
    }
    thread_.join();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Milliseconds(100))) {
      (void)::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
    }
  }

  const int fd_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

namespace {

// The quant_method that the config.json beside `request.input` declares (transformers' layout),
// parsed by a jailed worker like any untrusted bytes: "" when there is none, when the request's
// opener does not give it (an upload has no neighbours; the daemon's roots and the caller's
// access apply), or when it is not such JSON.
std::string DeclaredQuantization(const ConvertRequest& request, const pickle::Limits& limits,
                                 const JailOptions& options) {
  constexpr uint64_t kMaxConfigBytes = 16 << 20;  // transformers' configs are a few KiB
  const size_t slash = request.input.find_last_of('/');
  const std::string path = slash == std::string::npos
                               ? "config.json"
                               : absl::StrCat(request.input.substr(0, slash + 1), "config.json");
  if (path == request.input) return "";
  absl::StatusOr<base::UniqueFd> fd =
      request.open_input ? request.open_input(path) : OpenRegularFile(path);
  struct stat st;
  if (!fd.ok() || ::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxConfigBytes) {
    return "";
  }
  const JailedRun run = RunJailedJob(*std::move(fd), static_cast<uint64_t>(st.st_size),
                                     worker::v1::Job::MODE_SCAN, limits, options);
  return run.result.ok() ? run.facts.quant_method : "";
}

}  // namespace

absl::StatusOr<ConvertResult> ConvertFileJailed(const ConvertRequest& original,
                                                const rules::RuleSet& rules,
                                                const pickle::Limits& limits,
                                                const JailOptions& options,
                                                const PlanCheck& check) {
  // The top-level input (not a shard: its set's request already carries it) may have a
  // config.json beside it declaring a quantization (docs/safetensors.md, "Quantized weights").
  ConvertRequest request = original;
  if (request.allow_index && request.declared_quantization.empty()) {
    request.declared_quantization = DeclaredQuantization(request, limits, options);
  }
  CKPT_ASSIGN_OR_RETURN(base::UniqueFd fd, request.open_input ? request.open_input(request.input)
                                                              : OpenRegularFile(request.input));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", request.input));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(request.input, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const base::UniqueFd watch = Watch(fd.get());
  ConvertResult result;
  // The input is pinned (a lease, else a sealed copy) and the worker and the hasher both read
  // the pinned bytes: the digest in the output's provenance is of the bytes converted.
  CKPT_ASSIGN_OR_RETURN(PinOrReport pinned, PinForJob(std::move(fd), size, options));
  if (pinned.report.has_value()) {
    result.report = *std::move(pinned.report);
    result.report.set_path(request.input);
    result.report.set_size(size);
    result.status = absl::FailedPreconditionError(
        absl::StrCat("not converted: ", result.report.errors(0).message()));
    return result;
  }
  PinnedInput& pin = *pinned.pin;
  // The digest goes into the output's provenance, but the worker need not wait for it: it
  // plans with a placeholder of the same length (so the same header size), and the header
  // with the real digest is written here afterwards. Hashing runs on another core meanwhile.
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<BackgroundSha256> hash,
                        BackgroundSha256::Start(pin.fd(), size, HashStop(pin), options.bytes_read));
  CKPT_ASSIGN_OR_RETURN(fd, pin.DupForWorker());
  const worker::v1::ConvertSpec worker_spec = SpecFor(request, std::string(64, '0'));
  const JailOptions job_options = JobOptions(options, pin);

  absl::StatusOr<OutputDir> out_dir = OpenOutputDir(request);
  absl::StatusOr<OutputFile> out =
      out_dir.ok() ? OutputFile::CreateAt(out_dir->fd, out_dir->name, request.output)
                   : absl::StatusOr<OutputFile>(out_dir.status());
  absl::StatusOr<base::UniqueFd> worker_out =
      out.ok() ? out->DupForWorker() : absl::StatusOr<base::UniqueFd>(out.status());
  JailedRun run;
  if (!worker_out.ok()) {
    // No output to hand: scan only, so that the report is still the scan's.
    run = RunJailedJob(std::move(fd), size, worker::v1::Job::MODE_SCAN, limits, job_options,
                       BaseName(request.input));
  } else {
    WritebackKicker writeback(out->fd());
    run = RunJailedConvertJob(std::move(fd), size, *std::move(worker_out), worker_spec, limits,
                              job_options, BaseName(request.input));
  }
  if (options.after_worker_for_test) options.after_worker_for_test();
  // Signing with shards: every shard past the first is final once the worker has exited (it
  // can only append), so they are hashed on this core while the input's digest is finished
  // on the other; the header's shard waits for the header (trusted/sign_output.h).
  std::optional<ShardWork> early;
  std::thread early_hasher;
  struct stat out_st;
  if (request.sign.key != nullptr && request.sign.method == signing::Method::kShards &&
      run.result.ok() && run.convert_error.empty() && out.ok() &&
      ::fstat(out->fd(), &out_st) == 0) {
    const uint64_t out_size = static_cast<uint64_t>(out_st.st_size);
    early.emplace(out->fd(), out_size, request.sign.shard_size,
                  ShardStarts(out_size, request.sign.shard_size, request.sign.shard_size));
    early_hasher = std::thread([&] { early->Work(); });
  }
  absl::StatusOr<std::string> sha256 = hash->Wait();
  if (early.has_value()) early->Work();  // this thread helps once the input is hashed
  if (early_hasher.joinable()) early_hasher.join();
  result.report = ReportForRun(run, options, rules);
  JudgeName(request.input, &result.report);
  if (!CheckPinned(pin, run, &result.report)) {
    sha256 = std::string();  // ERROR: nothing is converted
  } else if (!sha256.ok()) {
    return sha256.status();
  }
  absl::StatusOr<ShardDigests> early_digests = absl::NotFoundError("none");
  if (early.has_value()) early_digests = early->Result();
  CheckInputUnchanged(watch.get(), st, &result.report);
  result.report.set_path(request.input);
  result.report.set_sha256(*sha256);
  result.report.set_size(size);
  const bool index = run.result.ok() && run.facts.shard_index.present;
  if (index && request.allow_index && result.report.verdict() == v1::VERDICT_SAFE) {
    // A sharded checkpoint: the output named the set's directory, not a file.
    ConvertShardSet(
        request, result.report, run.facts.shard_index,
        [&](const ConvertRequest& r, const PlanCheck& c) {
          return ConvertFileJailed(r, rules, limits, options, c);
        },
        &result);
    return result;
  }
  const absl::Time convert_start = absl::Now();
  result.status = [&]() -> absl::Status {
    if (result.report.verdict() != v1::VERDICT_SAFE) {
      return absl::FailedPreconditionError("not converted: the verdict is not SAFE");
    }
    if (!worker_out.ok()) return worker_out.status();
    if (index) return absl::FailedPreconditionError("a shard is itself an index");
    if (!run.convert_error.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("conversion failed in the worker: ", run.convert_error));
    }
    // Plan again here, from the judged facts: the worker's output must carry exactly the
    // placeholder plan's header; then the real header (same length) replaces it.
    CKPT_ASSIGN_OR_RETURN(convert::Plan worker_plan, convert::PlanFromSpec(run.facts, worker_spec));
    CKPT_RETURN_IF_ERROR(out->Validate(worker_plan.header.bytes).status());
    CKPT_ASSIGN_OR_RETURN(convert::Plan plan,
                          convert::PlanFromSpec(run.facts, SpecFor(request, *sha256)));
    if (plan.header.bytes.size() != worker_plan.header.bytes.size()) {
      return absl::InternalError("the header with the digest changed length");
    }
    if (check) CKPT_RETURN_IF_ERROR(check(plan));
    CKPT_RETURN_IF_ERROR(out->WriteAt(0, plan.header.bytes));
    const bool early_ok = early_digests.ok() && early->size() == plan.header.file_size;
    CKPT_ASSIGN_OR_RETURN(
        *result.report.mutable_conversion(),
        ValidateAndPublish(*out, plan, request, early_ok ? &*early_digests : nullptr));
    return absl::OkStatus();
  }();
  if (options.on_phase && result.status.ok())
    options.on_phase("convert", absl::Now() - convert_start);
  return result;
}

}  // namespace ckptscan::pipeline
