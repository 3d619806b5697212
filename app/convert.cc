#include "app/convert.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "app/judge.h"
#include "app/pinned_job.h"
#include "app/report.h"
#include "app/scan_file.h"
#include "base/mapped_file.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/convert/convert.h"

namespace ckptscan::app {
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
                                 const sandbox::JailOptions& options) {
  constexpr uint64_t kMaxConfigBytes = 16 << 20;  // transformers' configs are a few KiB
  const size_t slash = request.input.find_last_of('/');
  const std::string path = slash == std::string::npos
                               ? "config.json"
                               : absl::StrCat(request.input.substr(0, slash + 1), "config.json");
  if (path == request.input) return "";
  absl::StatusOr<base::UniqueFd> fd =
      request.open_input ? request.open_input(path) : base::OpenRegularFile(path);
  struct stat st;
  if (!fd.ok() || ::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxConfigBytes) {
    return "";
  }
  const sandbox::JailedRun run = sandbox::Run(*std::move(fd), static_cast<uint64_t>(st.st_size),
                                              worker::v1::Job::MODE_SCAN, limits, options);
  return run.result.ok() ? run.facts.quant_method : "";
}

}  // namespace

absl::StatusOr<ConvertResult> ConvertFile(const ConvertRequest& original,
                                          const rules::RuleSet& rules, const pickle::Limits& limits,
                                          const sandbox::JailOptions& options,
                                          const PlanCheck& check) {
  // The top-level input (not a shard: its set's request already carries it) may have a
  // config.json beside it declaring a quantization (docs/safetensors.md, "Quantized weights").
  ConvertRequest request = original;
  if (request.allow_index && request.declared_quantization.empty()) {
    request.declared_quantization = DeclaredQuantization(request, limits, options);
  }
  CKPT_ASSIGN_OR_RETURN(base::UniqueFd fd, request.open_input
                                               ? request.open_input(request.input)
                                               : base::OpenRegularFile(request.input));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", request.input));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(request.input, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const base::UniqueFd watch = WatchInput(fd.get());
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
  sandbox::PinnedInput& pin = *pinned.pin;
  // The digest goes into the output's provenance, but the worker need not wait for it: it
  // plans with a placeholder of the same length (so the same header size), and the header
  // with the real digest is written here afterwards. Hashing runs on another core meanwhile.
  CKPT_ASSIGN_OR_RETURN(
      std::unique_ptr<base::BackgroundSha256> hash,
      base::BackgroundSha256::Start(pin.fd(), size, HashStop(pin), options.bytes_read));
  CKPT_ASSIGN_OR_RETURN(fd, pin.DupForWorker());
  const worker::v1::ConvertSpec worker_spec = SpecFor(request, std::string(64, '0'));
  sandbox::JailOptions job_options = JobOptions(options, pin);
  // What the output may hold is settled (and, by the daemon, reserved) before it exists: the
  // worker's RLIMIT_FSIZE, and its plan over it is refused before a byte is written.
  absl::StatusOr<sandbox::OutputAllowance> allowance = sandbox::OutputAllowance{};
  if (options.output_allowance) {
    allowance = options.output_allowance(size);
    if (allowance.ok()) job_options.max_output_bytes = std::max<uint64_t>(allowance->bytes, 1);
  }

  absl::StatusOr<OutputDir> out_dir =
      allowance.ok() ? OpenOutputDir(request) : absl::StatusOr<OutputDir>(allowance.status());
  absl::StatusOr<OutputFile> out =
      out_dir.ok() ? OutputFile::CreateAt(out_dir->fd, out_dir->name, request.output)
                   : absl::StatusOr<OutputFile>(out_dir.status());
  absl::StatusOr<base::UniqueFd> worker_out =
      out.ok() ? out->DupForWorker() : absl::StatusOr<base::UniqueFd>(out.status());
  sandbox::JailedRun run;
  if (!worker_out.ok()) {
    // No output to hand: scan only, so that the report is still the scan's.
    run = sandbox::Run(std::move(fd), size, worker::v1::Job::MODE_SCAN, limits, job_options,
                       BaseName(request.input));
  } else {
    WritebackKicker writeback(out->fd());
    run = sandbox::RunConvert(std::move(fd), size, *std::move(worker_out), worker_spec, limits,
                              job_options, BaseName(request.input));
  }
  if (options.after_worker_for_test) options.after_worker_for_test();
  // Signing with shards: every shard past the first is final once the worker has exited (it
  // can only append), so they are hashed on this core while the input's digest is finished
  // on the other; the header's shard waits for the header (app/publish.h).
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
          return ConvertFile(r, rules, limits, options, c);
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
      // The worker refuses a plan over its allowance before writing: said here with the limit
      // that set it, from the trusted side's own plan.
      if (allowance.ok() && allowance->bytes != 0) {
        absl::StatusOr<convert::Plan> planned = convert::PlanFromSpec(run.facts, worker_spec);
        if (planned.ok() && planned->header.file_size > allowance->bytes) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "not converted: the output would be ", planned->header.file_size,
              " bytes, over the ", allowance->bytes, " this conversion may write (",
              allowance->limit, ")"));
        }
      }
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

// An output holds what the input holds: a plan with no tensor at all (a pickle of plain values,
// a safetensors file with no tensor) writes nothing rather than an empty file that looks like a
// conversion. Tensors are never dropped silently: one that cannot be written fails the plan
// (core/convert), and values beside the tensors are listed in the report.
absl::Status ConvertPolicy(const convert::Plan& plan) {
  if (plan.entries.empty() && plan.aliases.empty()) {
    return absl::FailedPreconditionError("nothing to convert: the input holds no tensor");
  }
  return absl::OkStatus();
}

ConvertOutcome Convert(const ConvertRequest& request, const ConvertOneFn& run,
                       std::string_view scanner_version, std::string_view rules_version) {
  ConvertOutcome out;
  out.report = NewReport(scanner_version, rules_version);
  absl::StatusOr<ConvertResult> result = run(request, ConvertPolicy);
  if (!result.ok()) {
    *out.report.add_files() = UnreadableFileReport(request.input, result.status());
  } else {
    *out.report.add_files() = std::move(result->report);
    for (v1::FileReport& shard : result->shard_reports) *out.report.add_files() = std::move(shard);
  }
  FoldVerdict(&out.report);
  if (out.report.verdict() == v1::VERDICT_SAFE && result.ok()) {
    out.converted = result->status.ok();
    out.error = result->status;
  }
  return out;
}

absl::Status ApplyConvertOptions(const v1::ConvertOptions& in, signing::Method default_method,
                                 ConvertRequest* request) {
  if (in.dtype() == "bf16") {
    request->to_bf16 = true;
  } else if (!in.dtype().empty() && in.dtype() != "keep") {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype \"", in.dtype(), "\": expected \"keep\" or \"bf16\""));
  }
  request->select = in.select();
  request->strict = in.strict();
  request->cast_quantized = in.cast_quantized();
  if (request->cast_quantized && !request->to_bf16) {
    return absl::InvalidArgumentError("cast_quantized: only with dtype \"bf16\"");
  }
  request->replace = in.replace();
  for (const std::string& d : in.allow_dtypes()) {
    if (absl::Status s = convert::CheckAllowDtype(d); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("allow_dtypes: ", s.message()));
    }
    request->allow_dtypes.push_back(d);
  }
  request->sign.method = default_method;
  if (in.sign_method() == "files") {
    request->sign.method = signing::Method::kFiles;
  } else if (in.sign_method() == "shards") {
    request->sign.method = signing::Method::kShards;
  } else if (!in.sign_method().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sign_method \"", in.sign_method(), "\": expected \"files\" or \"shards\""));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputAbsent(int dir_fd, const std::string& name, std::string_view shown,
                               bool replace, std::string_view replace_hint) {
  struct stat st;
  if (replace || ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      S_ISDIR(st.st_mode)) {
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError(absl::StrCat(base::AbslView(shown), ": exists; not converting (",
                                               base::AbslView(replace_hint), " replaces it)"));
}

ConvertOutcome Convert(const ConvertRequest& request, const rules::RuleSet& rules,
                       const pickle::Limits& limits, const sandbox::JailOptions& jail,
                       std::string_view scanner_version) {
  return Convert(
      request,
      [&](const ConvertRequest& r, const PlanCheck& check) {
        return ConvertFile(r, rules, limits, jail, check);
      },
      scanner_version, rules.version());
}

ConvertOutcome Convert(const Engine& engine, ConvertRequest request, const CallOptions& call,
                       std::string_view scanner_version) {
  const std::shared_ptr<const rules::RuleSet> rules = engine.rules();
  request.scanner_version = std::string(scanner_version);
  request.rules_version = rules->version();
  return Convert(request, *rules, engine.limits(), JailFor(engine, call), scanner_version);
}

}  // namespace ckptscan::app
