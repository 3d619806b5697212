#include "daemon/service.h"

#include <fcntl.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "app/convert.h"
#include "app/judge.h"
#include "app/output_file.h"
#include "app/report.h"
#include "app/report_format.h"
#include "app/scan_file.h"
#include "app/scan_set.h"
#include "app/shard_set.h"
#include "app/verdict.h"
#include "base/escape.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "base/unique_fd.h"
#include "daemon/log.h"
#include "sandbox/result.h"
#include "signing/limits.h"

namespace ckptscan::daemon {
namespace {

using base::AbslView;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

double MillisSince(absl::Time start) { return absl::ToDoubleMilliseconds(absl::Now() - start); }

std::string TraceId(const grpc::ServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  const auto it = md.find("traceparent");
  if (it == md.end()) return "";
  return TraceIdOf(std::string_view(it->second.data(), it->second.size()));
}

}  // namespace

// One log line per job, written when the call ends however it ends.
class JobLog {
 public:
  JobLog(std::string_view rpc, const Caller& caller, const grpc::ServerContext& ctx,
         Metrics* metrics, LogLimiter* limiter)
      : line_("job"),
        rpc_(rpc),
        caller_(caller.name),
        metrics_(metrics),
        limiter_(limiter),
        start_(absl::Now()) {
    line_.Str("rpc", rpc).Str("caller", caller.name);
    // W3C trace context: the caller's trace id, so a hub can find its request in our logs.
    const std::string trace = TraceId(ctx);
    if (!trace.empty()) line_.Str("trace_id", trace);
  }
  void Name(std::string_view name) { name_ = std::string(name); }
  // How the input was pinned for the job (sandbox/pinned_input.h); the first one of a set.
  void Pin(std::string_view how) {
    if (pin_.empty()) pin_ = std::string(how);
  }
  // The job's verdict (the whole report's: a set's shards count) and its input's digest.
  void Report(const v1::Report& r) {
    verdict_ = std::string(app::VerdictName(r.verdict()));
    if (r.files_size() > 0) {
      sha256_ = r.files(0).sha256();
      size_ = r.files(0).size();
    }
    // The rules that fired, each once, sorted: what a log search or alert keys on. Ids are
    // the catalogue's own (never text from the file); the line's cut bounds a long list.
    for (const v1::FileReport& f : r.files()) {
      for (const v1::Finding& finding : f.findings()) rule_ids_.insert(finding.rule_id());
    }
    rule_ids_.erase("");
  }
  grpc::Status Done(const grpc::Status& status) {
    metrics_->Request(rpc_, static_cast<int>(status.error_code()), absl::Now() - start_);
    line_.Str("name", name_);
    if (!verdict_.empty()) line_.Str("verdict", verdict_).Str("sha256", sha256_).Int("size", size_);
    if (!rule_ids_.empty()) line_.Str("rules", absl::StrJoin(rule_ids_, ","));
    if (!pin_.empty()) line_.Str("pin", pin_);
    line_.Int("code", static_cast<uint64_t>(status.error_code()));
    if (!status.ok()) line_.Str("error", status.error_message());
    line_.Num("ms", MillisSince(start_));
    // One caller's calls cannot flood the log: past its rate its lines are counted instead.
    if (limiter_ == nullptr || limiter_->Admit(caller_)) line_.Emit();
    return status;
  }

 private:
  LogLine line_;
  std::string rpc_;
  std::string caller_;
  Metrics* metrics_;
  LogLimiter* limiter_;
  absl::Time start_;
  std::string name_;
  std::string pin_;
  std::string verdict_;
  std::string sha256_;
  uint64_t size_ = 0;
  std::set<std::string> rule_ids_;
};

namespace {

// By-path calls act with this daemon's rights: over the unix socket only the uids trusted with
// them may make one (ServiceOptions::path_uids).
absl::Status CheckPathCaller(const Caller& caller) {
  if (caller.by_path) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      caller.name,
      " may not name paths: by-path calls read and write with this daemon's rights, so on the "
      "unix socket they are open only to its own uid, root and --path-uid; upload the file "
      "instead (ckptscan without --by-path)"));
}

SpoolOptions SpoolOptionsOf(const ServiceOptions& o) {
  return SpoolOptions{o.max_upload_bytes, o.upload_idle_timeout, o.upload_min_rate,
                      o.upload_deadline, o.spool_dir};
}

// Whose upload places and job places (max_uploads_per_caller, max_jobs_per_caller) a call takes:
// the caller's identity when it has one (a uid on the unix socket, a verified client
// certificate). Every caller without one shares the bucket "anonymous": a TCP peer's address is
// no identity, as one client can connect from many ports and addresses.
std::string LimitBucket(const Caller& caller) {
  return caller.authenticated ? caller.name : "anonymous";
}

// Whether the call may take the operator's reserved places (JobSlots).
Privilege PrivilegeOf(const Caller& caller) {
  return caller.privileged ? Privilege::kOperator : Privilege::kCaller;
}

// Replaces `from` with `to` at the start of every path a conversion report names.
void RewritePaths(v1::FileReport* f, const std::string& from, const std::string& to) {
  auto fix = [&](std::string* p) {
    if (!from.empty() && absl::StartsWith(*p, from)) *p = to + p->substr(from.size());
  };
  if (f->has_conversion()) {
    fix(f->mutable_conversion()->mutable_output());
    fix(f->mutable_conversion()->mutable_signature());
  }
}

// The answer of a conversion: the report, and whether (or why not) it was converted.
v1::ConvertResponse ConvertAnswer(app::ConvertOutcome outcome) {
  v1::ConvertResponse response;
  *response.mutable_report() = std::move(outcome.report);
  response.set_converted(outcome.converted);
  if (!outcome.error.ok()) response.set_error(std::string(outcome.error.message()));
  return response;
}

// "name" or "dir/name" -> ("dir" or "", "name"). A NUL would cut the name short where it is
// used as a C string (the directory part is refused by ConfinedRoots, like every input path).
absl::StatusOr<std::pair<std::string, std::string>> SplitOutput(const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("the output contains a NUL byte");
  }
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  std::string dir = slash == std::string::npos ? "" : p.substr(0, slash == 0 ? 1 : slash);
  std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("output \"", path, "\" does not end in a file or directory name"));
  }
  return std::make_pair(std::move(dir), std::move(name));
}

}  // namespace

// --- RulesHolder, Stats, Daemon -----------------------------------------------------------

void Stats::Record(const v1::FileReport& file) {
  absl::MutexLock lock(&mu_);
  ++done_[file.verdict()];
  for (const v1::Finding& f : file.findings()) {
    if (f.rule_id() == "sandbox.violation") ++failures_["violation"];
  }
  for (const v1::ScanError& e : file.errors()) {
    // The limits that stop a worker itself (its memory, its output, its frame) count as its
    // failures; the others (the VM's, the decode budget's) are the file's.
    const std::optional<sandbox::JailLimit> limit = sandbox::JailLimitNamed(e.limit_name());
    const bool worker_limit =
        e.code() == v1::ERROR_CODE_LIMIT && limit.has_value() &&
        (*limit == sandbox::JailLimit::kWorkerMemory ||
         *limit == sandbox::JailLimit::kMaxFrameBytes || *limit == sandbox::JailLimit::kFileSize);
    if (e.code() == v1::ERROR_CODE_TIMEOUT || e.code() == v1::ERROR_CODE_SANDBOX ||
        e.code() == v1::ERROR_CODE_CANCELLED || worker_limit) {
      ++failures_[app::ErrorCodeName(e.code())];
    }
  }
}

void Stats::SetJailLayers(std::string layers) {
  absl::MutexLock lock(&mu_);
  jail_layers_ = std::move(layers);
}

void Stats::Fill(v1::StatusResponse* out) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [verdict, count] : done_) {
    v1::VerdictCount* c = out->add_jobs_done();
    c->set_verdict(static_cast<v1::Verdict>(verdict));
    c->set_count(count);
  }
  for (const auto& [kind, count] : failures_) {
    v1::WorkerFailure* f = out->add_worker_failures();
    f->set_kind(kind);
    f->set_count(count);
  }
  out->set_jail_layers(jail_layers_);
}

void Daemon::Judged(const v1::FileReport& file) {
  stats_.Record(file);
  metrics_->Job(app::VerdictName(file.verdict()));
  metrics_->Scanned(file.size());
  if (file.has_conversion()) metrics_->Converted(file.conversion().bytes());
}

absl::StatusOr<std::string> ParseIdentity(std::string_view flag_value) {
  const size_t colon = flag_value.find(':');
  const std::string_view type = flag_value.substr(0, colon == std::string_view::npos ? 0 : colon);
  const std::string_view value =
      colon == std::string_view::npos ? std::string_view() : flag_value.substr(colon + 1);
  if ((type == "uri" || type == "dns" || type == "email" || type == "ip" || type == "cn") &&
      !value.empty()) {
    return std::string(flag_value);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "identity \"", AbslView(base::Escaped(flag_value)),
      "\" needs its type: uri:, dns:, email: or ip: for a subject alternative name of that "
      "type, cn: for the certificate's common name"));
}

namespace {

// How many common-name attributes the peer certificate's subject holds, read by OpenSSL from the
// certificate gRPC verified (x509_pem_cert); 0 when it cannot be read.
int CommonNameCount(const grpc::AuthContext& auth) {
  const std::vector<grpc::string_ref> pems =
      auth.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pems.empty()) return 0;
  const std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pems.front().data(), static_cast<int>(pems.front().size())), &BIO_free);
  if (bio == nullptr) return 0;
  const std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) return 0;
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  int n = 0;
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;) ++n;
  return n;
}

}  // namespace

Caller Daemon::Identify(const grpc::ServerContext& ctx) const {
  Caller caller;
  const std::string peer = ctx.peer();
  if (listener_ != nullptr) {
    if (std::optional<PeerCred> cred = listener_->PeerOf(peer)) {
      caller.name = absl::StrCat("uid:", cred->uid);
      caller.authenticated = true;
      caller.admin = options_.admin_uids.count(cred->uid) != 0;
      caller.by_path = options_.path_uids.count(cred->uid) != 0;
      caller.privileged = caller.admin || cred->uid == 0 || cred->uid == ::geteuid();
      return caller;
    }
  }
  caller.by_path = true;  // TCP: the transport admitted it; the roots are what it may name
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    // A verified client certificate: each identity typed by where it was found, so that a
    // SAN of one type never passes for another, nor for the common name. The subject
    // alternative names come first, the common name last: a name is only as good as what the CA
    // checked, and SANs are what it checks.
    std::vector<std::string> ids;
    // gRPC reports one common name; a subject with several has no one common name, and the one
    // reported may be any of them: then none counts (nor when the count cannot be read).
    const bool one_cn = CommonNameCount(*auth) == 1;
    for (const auto& [property, type] : {std::pair{GRPC_PEER_URI_PROPERTY_NAME, "uri:"},
                                         std::pair{GRPC_PEER_DNS_PROPERTY_NAME, "dns:"},
                                         std::pair{GRPC_PEER_EMAIL_PROPERTY_NAME, "email:"},
                                         std::pair{GRPC_PEER_IP_PROPERTY_NAME, "ip:"},
                                         std::pair{GRPC_X509_CN_PROPERTY_NAME, "cn:"}}) {
      if (std::string_view(type) == "cn:" && !one_cn) continue;
      for (const grpc::string_ref& v : auth->FindPropertyValues(property)) {
        ids.push_back(absl::StrCat(type, absl::string_view(v.data(), v.size())));
      }
    }
    caller.authenticated = !ids.empty();
    // The caller is named -- in the logs, and for its per-caller limits -- by the typed
    // identity that matched policy: the admin identity it holds, else its first SAN (its
    // common name only without one). Never by a name another certificate can carry beside
    // different SANs: a non-admin certificate with the admin's common name is not the admin.
    const auto admin = std::find_if(ids.begin(), ids.end(), [&](const std::string& id) {
      return options_.admin_identities.count(id) != 0;
    });
    caller.admin = admin != ids.end();
    caller.privileged = caller.admin;
    caller.name = ids.empty() ? peer : absl::StrCat("cert:", caller.admin ? *admin : ids.front());
    return caller;
  }
  caller.name = peer;
  return caller;
}

absl::StatusOr<sandbox::OutputAllowance> OutputBudget::Allow(uint64_t input_bytes) {
  // Saturating: expansion x input + slack, as bytes.
  const double by_ratio =
      expansion_ * static_cast<double>(input_bytes) + static_cast<double>(kOutputHeaderSlack);
  uint64_t bytes = by_ratio >= 1.8e19 ? ~0ull : static_cast<uint64_t>(by_ratio);
  std::string limit =
      absl::StrCat("max_output_expansion ", expansion_, " of its ", input_bytes, " input bytes");
  absl::MutexLock lock(&mu_);
  if (max_bytes_ != 0) {
    const uint64_t left = max_bytes_ - std::min(used_, max_bytes_);
    if (left < bytes) {
      bytes = left;
      limit = absl::StrCat("max_output_bytes ", max_bytes_, " for the call");
    }
    if (bytes == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "not converted: this call's outputs already hold max_output_bytes ", max_bytes_));
    }
  }
  absl::StatusOr<JobSlots::SpoolReservation> reserved = slots_->ReserveSpool(bytes);
  if (!reserved.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not converted: its output allowance of ", bytes, " bytes (", limit,
                     ") does not fit: ", reserved.status().message()));
  }
  held_.push_back(*std::move(reserved));
  used_ += bytes;
  return sandbox::OutputAllowance{bytes, std::move(limit)};
}

absl::StatusOr<app::Engine::Reloaded> ReloadRules(Daemon* daemon, const std::string& by) {
  absl::StatusOr<app::Engine::Reloaded> r = daemon->engine().ReloadRules();
  LogLine line("reload_rules", r.ok() ? "info" : "error");
  line.Str("caller", by).Str("source", daemon->engine().rules_source());
  if (r.ok()) {
    line.Str("previous_version", r->previous_version).Str("rules_version", r->version);
    daemon->metrics().RulesInForce(r->version, /*reload=*/true);
  } else {
    line.Str("error", base::StdView(r.status().message()));
    daemon->metrics().RulesReloadFailed();
  }
  line.Emit();
  return r;
}

// --- Scanner ------------------------------------------------------------------------------

namespace {

// Runs a handler body. If the daemon cannot allocate (std::bad_alloc: an address-space limit,
// a container's memory limit with overcommit off), the call is answered RESOURCE_EXHAUSTED and
// logged as a job, instead of the exception reaching gRPC, which answers UNKNOWN and logs
// nothing. Unwinding releases the call's job place, descriptors and spooled upload (RAII);
// the daemon carries on with its other calls.
template <typename Body>
grpc::Status OutOfMemoryGuard(Daemon* d, std::string_view rpc, grpc::ServerContext* ctx,
                              Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    const grpc::Status status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "ckptscand ran out of memory for this call; try again later");
    try {
      JobLog log(rpc, d->Identify(*ctx), *ctx, &d->metrics(), &d->log_limiter());
      return log.Done(status);
    } catch (const std::bad_alloc&) {
      return status;  // not even the log line fits: the answer still goes out
    }
  }
}

}  // namespace

grpc::Status ScannerService::ScanPath(grpc::ServerContext* ctx, const v1::ScanPathRequest* request,
                                      v1::Report* response) {
  return OutOfMemoryGuard(d_, "ScanPath", ctx, [&] { return DoScanPath(ctx, request, response); });
}

grpc::Status ScannerService::ScanUpload(grpc::ServerContext* ctx,
                                        grpc::ServerReader<v1::UploadChunk>* reader,
                                        v1::Report* response) {
  return OutOfMemoryGuard(d_, "ScanUpload", ctx,
                          [&] { return DoScanUpload(ctx, reader, response); });
}

grpc::Status ScannerService::ConvertPath(grpc::ServerContext* ctx,
                                         const v1::ConvertPathRequest* request,
                                         v1::ConvertResponse* response) {
  return OutOfMemoryGuard(d_, "ConvertPath", ctx,
                          [&] { return DoConvertPath(ctx, request, response); });
}

grpc::Status ScannerService::ConvertUpload(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream) {
  return OutOfMemoryGuard(d_, "ConvertUpload", ctx, [&] { return DoConvertUpload(ctx, stream); });
}

namespace {

// One RPC in flight: who calls, its job log line (written when the call ends, however it ends),
// and the steps every handler takes around its one app:: call.
class Call final {
 public:
  Call(Daemon* d, grpc::ServerContext* ctx, std::string_view rpc)
      : d_(d),
        ctx_(ctx),
        caller_(d->Identify(*ctx)),
        log_(rpc, caller_, *ctx, &d->metrics(), &d->log_limiter()),
        outputs_(&d->slots(), d->options().max_output_expansion, d->options().max_output_bytes) {}

  const Caller& caller() const { return caller_; }
  JobLog& log() { return log_; }

  // A job place, admitted (`ticket`), once a worker slot is free (the "queue" phase).
  absl::StatusOr<JobSlots::Ticket> Admit(absl::StatusOr<JobSlots::Ticket> ticket) {
    if (!ticket.ok()) return ticket.status();
    const absl::Time start = absl::Now();
    absl::Status s = ticket->Run([ctx = ctx_] { return ctx->IsCancelled(); });
    d_->metrics().Phase("queue", absl::Now() - start);
    if (!s.ok()) return s;
    return ticket;
  }

  // The call's options for the engine: the caller's deadline and cancellation kill its
  // workers; phases, workers' fates and judged files go to the metrics and the status; the
  // input's pin to the job line.
  app::CallOptions Options(bool sha256) {
    app::CallOptions call;
    call.sha256 = sha256;
    call.deadline = absl::FromChrono(ctx_->deadline());
    call.cancelled = [ctx = ctx_] { return ctx->IsCancelled(); };
    Metrics* metrics = &d_->metrics();
    call.on_worker_exit = [metrics](const sandbox::Result& r) { metrics->WorkerExit(r); };
    call.on_phase = [metrics](std::string_view phase, absl::Duration d) {
      metrics->Phase(phase, d);
    };
    call.on_pin = [this](std::string_view how) { log_.Pin(how); };
    call.on_judged = [d = d_](const v1::FileReport& file) { d->Judged(file); };
    return call;
  }

  // A conversion's call options: Options(true), and each output's allowance reserved against
  // the spool budget before it is written, held until the call ends.
  app::CallOptions ConversionOptions() {
    app::CallOptions call = Options(true);
    call.output_allowance = [this](uint64_t input_bytes) { return outputs_.Allow(input_bytes); };
    return call;
  }

  grpc::Status Done(const absl::Status& status) { return log_.Done(ToGrpc(status)); }

  // A job's answer: its report on the job line; CANCELLED when the caller went away meanwhile.
  grpc::Status Answered(const v1::Report& report) {
    if (ctx_->IsCancelled()) {
      return log_.Done(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"));
    }
    log_.Report(report);
    return log_.Done(grpc::Status::OK);
  }

 private:
  Daemon* d_;
  grpc::ServerContext* ctx_;
  const Caller caller_;
  JobLog log_;
  OutputBudget outputs_;  // destroyed after the handler's own objects: its outputs are gone
};

// By-path calls: the caller may name paths, the daemon has roots, and `path` opens beneath
// them. `what` says what the daemon does without roots ("scans", "converts").
absl::StatusOr<base::UniqueFd> OpenByPath(const Daemon& d, const Caller& caller,
                                          const std::string& path, std::string_view what) {
  CKPT_RETURN_IF_ERROR(CheckPathCaller(caller));
  if (d.roots() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("this daemon has no roots configured (--root): it ", base::AbslView(what),
                     " uploads only"));
  }
  return d.roots()->OpenForRead(path);
}

// A scan's call options: the digest as the daemon's --scan-digest, then the request, says; the
// tensor list as the request asks.
app::CallOptions ScanCall(Call& call, const ServiceOptions& options,
                          const v1::ScanOptions& request) {
  app::CallOptions c = call.Options(
      options.scan_digest == ServiceOptions::ScanDigest::kAlways ||
      (options.scan_digest == ServiceOptions::ScanDigest::kRequest && !request.skip_digest()));
  c.list_tensors = request.list_tensors();
  return c;
}

// An index's shards beneath the roots (a missing one is MissingFile, as the CLI says it).
app::JailedFiles::Opener ShardsBeneath(const ConfinedRoots* roots) {
  return [roots](const std::string& path) -> absl::StatusOr<base::UniqueFd> {
    absl::StatusOr<base::UniqueFd> shard = roots->OpenForRead(path);
    if (absl::IsNotFound(shard.status())) return app::MissingFile(path, ENOENT);
    return shard;
  };
}

// An upload holds one file: an index's shards are not in it.
absl::StatusOr<base::UniqueFd> NotInUpload(const std::string& path) {
  return absl::NotFoundError(
      absl::StrCat(app::TerminalSafe(path),
                   ": not in the upload (an upload holds one file: scan a sharded checkpoint by "
                   "path, or upload each shard)"));
}

// A ConvertPath request made ready: the options parsed, the output's directory resolved beneath
// the roots (the output goes in through its descriptor: renaming or relinking a parent
// afterwards cannot redirect it), an existing output refused unless replace.
struct PathConversion {
  base::UniqueFd dir;
  std::string proc_dir;     // /proc/self/fd/N of `dir`: what the request's paths name
  std::string display_dir;  // the caller's name for it, in the answer
  app::ConvertRequest request;
};

absl::StatusOr<PathConversion> PrepareConvertPath(const Daemon& d, const Caller& caller,
                                                  const v1::ConvertPathRequest& in) {
  PathConversion job;
  // The input (and a set's shards) opened beneath the roots only.
  CKPT_RETURN_IF_ERROR(OpenByPath(d, caller, in.input(), "converts").status());
  CKPT_RETURN_IF_ERROR(
      app::ApplyConvertOptions(in.options(), d.options().sign_method, &job.request));
  CKPT_ASSIGN_OR_RETURN(auto out, SplitOutput(in.output()));
  const auto& [out_dir, out_name] = out;
  CKPT_ASSIGN_OR_RETURN(job.dir, d.roots()->OpenDirectory(out_dir.empty() ? "." : out_dir));
  CKPT_RETURN_IF_ERROR(app::CheckOutputAbsent(job.dir.get(), out_name, in.output(),
                                              job.request.replace, "the request's replace"));
  job.proc_dir = absl::StrCat("/proc/self/fd/", job.dir.get());
  job.display_dir = out_dir.empty() ? std::string(".") : out_dir;
  job.request.input = in.input();
  job.request.output = absl::StrCat(job.proc_dir, "/", out_name);
  job.request.output_dir_fd = job.dir.get();  // a set's staging directory is made through it too
  const ConfinedRoots* roots = d.roots();
  job.request.open_input = [roots](const std::string& path) { return roots->OpenForRead(path); };
  return job;
}

// Signing with the daemon's key, timed in the metrics.
void SignWithDaemonKey(Daemon* d, app::ConvertRequest* request) {
  request->sign.key = &d->key();
  request->sign.on_signed = [d](absl::Duration t) { d->metrics().Phase("sign", t); };
}

}  // namespace

grpc::Status ScannerService::DoScanPath(grpc::ServerContext* ctx,
                                        const v1::ScanPathRequest* request, v1::Report* response) {
  Call call(d_, ctx, "ScanPath");
  call.log().Name(request->path());
  absl::StatusOr<base::UniqueFd> fd = OpenByPath(*d_, call.caller(), request->path(), "scans");
  if (!fd.ok()) return call.Done(fd.status());
  absl::StatusOr<JobSlots::Ticket> ticket =
      call.Admit(d_->slots().Admit(LimitBucket(call.caller()), PrivilegeOf(call.caller())));
  if (!ticket.ok()) return call.Done(ticket.status());
  *response = app::ScanInput(d_->engine(), *std::move(fd), request->path(),
                             ShardsBeneath(d_->roots()), request->options().single_file(),
                             ScanCall(call, d_->options(), request->options()),
                             d_->options().scanner_version);
  return call.Answered(*response);
}

grpc::Status ScannerService::DoScanUpload(grpc::ServerContext* ctx,
                                          grpc::ServerReader<v1::UploadChunk>* reader,
                                          v1::Report* response) {
  Call call(d_, ctx, "ScanUpload");
  // An upload place while the bytes stream in; a job place only once they are all spooled.
  absl::StatusOr<JobSlots::Upload> upload =
      d_->slots().BeginUpload(LimitBucket(call.caller()), PrivilegeOf(call.caller()));
  if (!upload.ok()) return call.Done(upload.status());
  v1::UploadHeader header;
  absl::StatusOr<base::UniqueFd> fd =
      ReceiveUpload(SpoolOptionsOf(d_->options()), ctx, reader, &*upload, &d_->watchdog(), &header);
  call.log().Name(header.name());
  if (!fd.ok()) return call.Done(fd.status());
  absl::StatusOr<JobSlots::Ticket> ticket = call.Admit(upload->Admit());
  if (!ticket.ok()) return call.Done(ticket.status());
  *response = app::ScanInput(
      d_->engine(), *std::move(fd), header.name(), NotInUpload, header.options().single_file(),
      ScanCall(call, d_->options(), header.options()), d_->options().scanner_version);
  return call.Answered(*response);
}

grpc::Status ScannerService::DoConvertPath(grpc::ServerContext* ctx,
                                           const v1::ConvertPathRequest* request,
                                           v1::ConvertResponse* response) {
  Call call(d_, ctx, "ConvertPath");
  call.log().Name(request->input());
  absl::StatusOr<PathConversion> job = PrepareConvertPath(*d_, call.caller(), *request);
  if (!job.ok()) return call.Done(job.status());
  absl::StatusOr<JobSlots::Ticket> ticket =
      call.Admit(d_->slots().Admit(LimitBucket(call.caller()), PrivilegeOf(call.caller())));
  if (!ticket.ok()) return call.Done(ticket.status());
  SignWithDaemonKey(d_, &job->request);
  *response = ConvertAnswer(app::Convert(d_->engine(), std::move(job->request),
                                         call.ConversionOptions(), d_->options().scanner_version));
  // Messages and paths that name the descriptor's path name the caller's directory instead.
  for (v1::FileReport& f : *response->mutable_report()->mutable_files()) {
    RewritePaths(&f, job->proc_dir, job->display_dir);
    d_->Judged(f);
  }
  response->set_error(absl::StrReplaceAll(response->error(), {{job->proc_dir, job->display_dir}}));
  return call.Answered(response->report());
}

grpc::Status ScannerService::DoConvertUpload(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream) {
  Call call(d_, ctx, "ConvertUpload");
  absl::StatusOr<JobSlots::Upload> upload =
      d_->slots().BeginUpload(LimitBucket(call.caller()), PrivilegeOf(call.caller()));
  if (!upload.ok()) return call.Done(upload.status());
  v1::UploadHeader header;
  absl::StatusOr<base::UniqueFd> fd =
      ReceiveUpload(SpoolOptionsOf(d_->options()), ctx, stream, &*upload, &d_->watchdog(), &header);
  call.log().Name(header.name());
  if (!fd.ok()) return call.Done(fd.status());
  absl::StatusOr<UploadConversion> job = UploadConversion::Prepare(
      header, *std::move(fd), d_->options().spool_dir, d_->options().sign_method);
  if (!job.ok()) return call.Done(job.status());
  absl::StatusOr<JobSlots::Ticket> ticket = call.Admit(upload->Admit());
  if (!ticket.ok()) return call.Done(ticket.status());
  SignWithDaemonKey(d_, &job->request);
  v1::ConvertChunk first;
  *first.mutable_response() = ConvertAnswer(app::Convert(
      d_->engine(), job->request, call.ConversionOptions(), d_->options().scanner_version));
  for (const v1::FileReport& f : first.response().report().files()) d_->Judged(f);
  if (ctx->IsCancelled()) return call.Done(absl::CancelledError("the caller went away"));
  call.log().Report(first.response().report());
  // The caller takes the output within output_idle_timeout per chunk, or the call is cancelled
  // (the files go with it).
  return call.Done(
      job->Send(d_->options().output_idle_timeout, &d_->watchdog(), ctx, stream, std::move(first)));
}

// --- Admin --------------------------------------------------------------------------------

namespace {

// Admin calls are logged whether they are allowed or refused (one "admin" line each, within the
// caller's log rate).
grpc::Status RequireAdmin(Daemon* d, const Caller& caller, std::string_view rpc) {
  grpc::Status s = grpc::Status::OK;
  if (!caller.admin && !caller.authenticated) {
    s = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                     "Admin calls need an identity: a uid on the unix socket or a client "
                     "certificate over mTLS");
  } else if (!caller.admin) {
    s = grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                     absl::StrCat(caller.name, " is not in the daemon's admin list"));
  }
  LogLine line("admin", s.ok() ? "info" : "warning");
  line.Str("rpc", rpc)
      .Str("caller", caller.name)
      .Int("code", static_cast<uint64_t>(s.error_code()));
  if (!s.ok()) line.Str("error", s.error_message());
  if (d->log_limiter().Admit(caller.name)) line.Emit();
  return s;
}

}  // namespace

grpc::Status AdminService::Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                                  v1::StatusResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  if (grpc::Status s = RequireAdmin(d_, caller, "Status"); !s.ok()) return s;
  response->set_scanner_version(d_->options().scanner_version);
  response->set_rules_version(d_->engine().rules()->version());
  response->set_uptime_seconds(
      static_cast<uint64_t>(absl::ToInt64Seconds(absl::Now() - d_->started())));
  const JobSlots::Counts counts = d_->slots().counts();
  response->set_jobs_running(counts.running);
  response->set_jobs_queued(counts.queued);
  response->set_jobs_refused(counts.refused);
  response->set_draining(counts.draining);
  response->set_max_running(d_->slots().max_running());
  response->set_max_queued(d_->slots().max_queued());
  if (d_->roots() != nullptr) {
    for (const std::string& r : d_->roots()->roots()) response->add_roots(r);
  }
  response->set_signer(d_->key().public_key().hint());
  d_->stats().Fill(response);
  return grpc::Status::OK;
}

grpc::Status AdminService::Metrics(grpc::ServerContext* ctx, const v1::MetricsRequest*,
                                   v1::MetricsResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  if (grpc::Status s = RequireAdmin(d_, caller, "Metrics"); !s.ok()) return s;
  response->set_text(d_->metrics().Text());
  return grpc::Status::OK;
}

grpc::Status AdminService::ReloadRules(grpc::ServerContext* ctx, const v1::ReloadRulesRequest*,
                                       v1::ReloadRulesResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  if (grpc::Status s = RequireAdmin(d_, caller, "ReloadRules"); !s.ok()) return s;
  absl::StatusOr<app::Engine::Reloaded> r = daemon::ReloadRules(d_, caller.name);
  if (!r.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("the rules were not reloaded (the old rules stay in force): ",
                                     r.status().message()));
  }
  response->set_previous_version(r->previous_version);
  response->set_rules_version(r->version);
  response->set_source(d_->engine().rules_source());
  return grpc::Status::OK;
}

grpc::Status AdminService::PublicKey(grpc::ServerContext* ctx, const v1::PublicKeyRequest*,
                                     v1::PublicKeyResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  if (grpc::Status s = RequireAdmin(d_, caller, "PublicKey"); !s.ok()) return s;
  response->set_pem(d_->key().public_key().pem());
  response->set_hint(d_->key().public_key().hint());
  return grpc::Status::OK;
}

}  // namespace ckptscan::daemon
