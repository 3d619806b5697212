#include "daemon/service.h"

#include <fcntl.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "app/convert.h"
#include "app/report.h"
#include "app/report_format.h"
#include "app/scan_set.h"
#include "app/verdict.h"
#include "base/escape.h"
#include "base/strings.h"
#include "base/unique_fd.h"
#include "daemon/log.h"
#include "trusted/judge_facts.h"
#include "trusted/output_file.h"
#include "trusted/shard_set.h"
#include "trusted/signing/limits.h"

namespace ckptscan::daemon {
namespace {

using base::AbslView;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

double MillisSince(absl::Time start) { return absl::ToDoubleMilliseconds(absl::Now() - start); }

// Waits for a worker slot (the "queue" phase).
absl::Status RunWhenSlotFree(JobSlots::Ticket* ticket, grpc::ServerContext* ctx, Metrics* metrics) {
  const absl::Time start = absl::Now();
  absl::Status s = ticket->Run([ctx] { return ctx->IsCancelled(); });
  metrics->Phase("queue", absl::Now() - start);
  return s;
}

// The jail options for one call: the caller's cancellation and deadline kill the worker.
pipeline::JailOptions JailFor(const ServiceOptions& options, grpc::ServerContext* ctx, bool sha256,
                              Metrics* metrics) {
  pipeline::JailOptions jail = options.jail;
  jail.on_worker_exit = [metrics](const sandbox::Result& r) { metrics->WorkerExit(r); };
  jail.on_phase = [metrics](std::string_view phase, absl::Duration d) { metrics->Phase(phase, d); };
  jail.sha256 = sha256;
  const absl::Time deadline = absl::FromChrono(ctx->deadline());
  const absl::Duration left = deadline - absl::Now();
  if (left < jail.timeout) jail.timeout = std::max(left, absl::Milliseconds(1));
  jail.cancelled = [ctx] { return ctx->IsCancelled(); };
  return jail;
}

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
         Metrics* metrics)
      : line_("job"), rpc_(rpc), metrics_(metrics), start_(absl::Now()) {
    line_.Str("rpc", rpc).Str("caller", caller.name);
    // W3C trace context: the caller's trace id, so a hub can find its request in our logs.
    const std::string trace = TraceId(ctx);
    if (!trace.empty()) line_.Str("trace_id", trace);
  }
  void Name(std::string_view name) { name_ = std::string(name); }
  // How the input was pinned for the job (trusted/pinned_input.h); the first one of a set.
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
  }
  grpc::Status Done(const grpc::Status& status) {
    metrics_->Request(rpc_, static_cast<int>(status.error_code()), absl::Now() - start_);
    line_.Str("name", name_);
    if (!verdict_.empty()) line_.Str("verdict", verdict_).Str("sha256", sha256_).Int("size", size_);
    if (!pin_.empty()) line_.Str("pin", pin_);
    line_.Int("code", static_cast<uint64_t>(status.error_code()));
    if (!status.ok()) line_.Str("error", status.error_message());
    line_.Num("ms", MillisSince(start_)).Emit();
    return status;
  }

 private:
  LogLine line_;
  std::string rpc_;
  Metrics* metrics_;
  absl::Time start_;
  std::string name_;
  std::string pin_;
  std::string verdict_;
  std::string sha256_;
  uint64_t size_ = 0;
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
  return SpoolOptions{o.max_upload_bytes, o.upload_idle_timeout, o.spool_dir};
}

// Whose upload places and job places (max_uploads_per_caller, max_jobs_per_caller) a call takes:
// the caller's identity when it has one (a uid on the unix socket, a verified client
// certificate). Every caller without one shares the bucket "anonymous": a TCP peer's address is
// no identity, as one client can connect from many ports and addresses.
std::string LimitBucket(const Caller& caller) {
  return caller.authenticated ? caller.name : "anonymous";
}

absl::Status ParseConvertOptions(const v1::ConvertOptions& in, signing::Method default_method,
                                 pipeline::ConvertRequest* request) {
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

// Files the daemon judges, each in a jailed worker: opened by `open` (beneath the roots, or an
// upload's own bytes), counted in the status and the metrics as they are judged.
class JailedFiles final : public app::FileSource {
 public:
  using Opener = std::function<absl::StatusOr<base::UniqueFd>(const std::string&)>;
  JailedFiles(Opener open, const rules::RuleSet& rules, const pickle::Limits& limits,
              const pipeline::JailOptions& jail, Daemon* daemon)
      : open_(std::move(open)), rules_(rules), limits_(limits), jail_(jail), d_(daemon) {}

  v1::FileReport Scan(const std::string& path) override {
    absl::StatusOr<base::UniqueFd> fd = open_(path);
    absl::StatusOr<v1::FileReport> file =
        fd.ok() ? pipeline::ScanFdJailed(*std::move(fd), path, rules_, limits_, jail_)
                : absl::StatusOr<v1::FileReport>(fd.status());
    v1::FileReport out =
        file.ok() ? *std::move(file) : pipeline::UnreadableFileReport(path, file.status());
    d_->Judged(out);
    return out;
  }

  absl::StatusOr<app::FileId> Find(const std::string& path) override {
    absl::StatusOr<base::UniqueFd> fd = open_(path);
    if (!fd.ok()) return fd.status();
    struct stat st;
    if (::fstat(fd->get(), &st) != 0) return absl::ErrnoToStatus(errno, "fstat");
    return app::FileId{st.st_dev, st.st_ino};
  }

 private:
  const Opener open_;
  const rules::RuleSet& rules_;
  const pickle::Limits& limits_;
  const pipeline::JailOptions& jail_;
  Daemon* d_;
};

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

absl::StatusOr<std::unique_ptr<RulesHolder>> RulesHolder::Load(pipeline::RulesSource source) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> loaded = pipeline::LoadRules(source);
  if (!loaded.ok()) return loaded.status();
  return std::unique_ptr<RulesHolder>(new RulesHolder(std::move(source), *std::move(loaded)));
}

std::shared_ptr<const rules::RuleSet> RulesHolder::Get() const {
  absl::MutexLock lock(&mu_);
  return rules_;
}

absl::StatusOr<RulesHolder::Reloaded> RulesHolder::Reload() {
  // Compiled and checked whole before anything changes: a bad file leaves the old rules.
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> loaded = pipeline::LoadRules(source_);
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const rules::RuleSet> fresh = *std::move(loaded);
  absl::MutexLock lock(&mu_);
  Reloaded r{rules_->version(), fresh->version()};
  rules_ = std::move(fresh);
  return r;
}

void Stats::Record(const v1::FileReport& file) {
  absl::MutexLock lock(&mu_);
  ++done_[file.verdict()];
  for (const v1::Finding& f : file.findings()) {
    if (f.rule_id() == "sandbox.violation") ++failures_["violation"];
  }
  for (const v1::ScanError& e : file.errors()) {
    if (e.code() == v1::ERROR_CODE_TIMEOUT || e.code() == v1::ERROR_CODE_SANDBOX ||
        e.code() == v1::ERROR_CODE_CANCELLED ||
        (e.code() == v1::ERROR_CODE_LIMIT &&
         (e.limit_name() == "worker_memory" || e.limit_name() == "max_frame_bytes" ||
          e.limit_name() == "file_size"))) {
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
      return caller;
    }
  }
  caller.by_path = true;  // TCP: the transport admitted it; the roots are what it may name
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    // A verified client certificate: each identity typed by where it was found, so that a
    // SAN of one type never passes for another, nor for the common name.
    std::vector<std::string> ids;
    // gRPC reports one common name; a subject with several has no one common name, and the one
    // reported may be any of them: then none counts (nor when the count cannot be read).
    const bool one_cn = CommonNameCount(*auth) == 1;
    for (const auto& [property, type] : {std::pair{GRPC_X509_CN_PROPERTY_NAME, "cn:"},
                                         std::pair{GRPC_PEER_URI_PROPERTY_NAME, "uri:"},
                                         std::pair{GRPC_PEER_DNS_PROPERTY_NAME, "dns:"},
                                         std::pair{GRPC_PEER_EMAIL_PROPERTY_NAME, "email:"},
                                         std::pair{GRPC_PEER_IP_PROPERTY_NAME, "ip:"}}) {
      if (std::string_view(type) == "cn:" && !one_cn) continue;
      for (const grpc::string_ref& v : auth->FindPropertyValues(property)) {
        ids.push_back(absl::StrCat(type, absl::string_view(v.data(), v.size())));
      }
    }
    caller.authenticated = !ids.empty();
    caller.name = ids.empty() ? peer : absl::StrCat("cert:", ids.front());
    for (const std::string& id : ids) {
      if (options_.admin_identities.count(id) != 0) caller.admin = true;
    }
    return caller;
  }
  caller.name = peer;
  return caller;
}

absl::StatusOr<RulesHolder::Reloaded> ReloadRules(Daemon* daemon, const std::string& by) {
  absl::StatusOr<RulesHolder::Reloaded> r = daemon->rules().Reload();
  LogLine line("reload_rules", r.ok() ? "info" : "error");
  line.Str("caller", by).Str("source", daemon->rules().source());
  if (r.ok()) {
    line.Str("previous_version", r->previous_version).Str("rules_version", r->version);
  } else {
    line.Str("error", base::StdView(r.status().message()));
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
      JobLog log(rpc, d->Identify(*ctx), *ctx, &d->metrics());
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

grpc::Status ScannerService::ScanJob(
    grpc::ServerContext* ctx, base::UniqueFd input, const std::string& name,
    std::function<absl::StatusOr<base::UniqueFd>(const std::string&)> others,
    const v1::ScanOptions& options, JobLog* log, v1::Report* response) {
  const std::shared_ptr<const rules::RuleSet> rules = d_->rules().Get();
  const ServiceOptions::ScanDigest digest = d_->options().scan_digest;
  const bool sha256 = digest == ServiceOptions::ScanDigest::kAlways ||
                      (digest == ServiceOptions::ScanDigest::kRequest && !options.skip_digest());
  pipeline::JailOptions jail = JailFor(d_->options(), ctx, sha256, &d_->metrics());
  jail.list_tensors = options.list_tensors();
  jail.on_pin = [log](std::string_view how) { log->Pin(how); };
  // The input is read through the descriptor opened for the call, never by its name again.
  const int held = input.get();
  JailedFiles files(
      [&](const std::string& path) -> absl::StatusOr<base::UniqueFd> {
        if (path == name) return ReopenReadOnly(held);
        return others(path);
      },
      *rules, d_->options().limits, jail, d_);
  *response = app::NewReport(d_->options().scanner_version, rules->version());
  if (options.single_file()) {
    *response->add_files() = files.Scan(name);
    app::FoldVerdict(response);
  } else {
    app::ScanTarget input;
    input.path = name;
    app::ScanSet({input}, {}, &files, response);
  }
  if (ctx->IsCancelled()) {
    return log->Done(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"));
  }
  log->Report(*response);
  return log->Done(grpc::Status::OK);
}

grpc::Status ScannerService::DoScanPath(grpc::ServerContext* ctx,
                                        const v1::ScanPathRequest* request, v1::Report* response) {
  const Caller caller = d_->Identify(*ctx);
  JobLog log("ScanPath", caller, *ctx, &d_->metrics());
  log.Name(request->path());
  if (absl::Status st = CheckPathCaller(caller); !st.ok()) return log.Done(ToGrpc(st));
  if (d_->roots() == nullptr) {
    return log.Done(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "this daemon has no roots configured (--root): it scans "
                                 "uploads only"));
  }
  absl::StatusOr<base::UniqueFd> fd = d_->roots()->OpenForRead(request->path());
  if (!fd.ok()) return log.Done(ToGrpc(fd.status()));
  absl::StatusOr<JobSlots::Ticket> ticket = d_->slots().Admit(LimitBucket(caller));
  if (!ticket.ok()) return log.Done(ToGrpc(ticket.status()));
  if (absl::Status s = RunWhenSlotFree(&*ticket, ctx, &d_->metrics()); !s.ok()) {
    return log.Done(ToGrpc(s));
  }
  const ConfinedRoots* roots = d_->roots();
  return ScanJob(
      ctx, *std::move(fd), request->path(),
      [roots](const std::string& path) -> absl::StatusOr<base::UniqueFd> {
        absl::StatusOr<base::UniqueFd> shard = roots->OpenForRead(path);
        if (absl::IsNotFound(shard.status())) return app::MissingFile(path, ENOENT);
        return shard;
      },
      request->options(), &log, response);
}

grpc::Status ScannerService::DoScanUpload(grpc::ServerContext* ctx,
                                          grpc::ServerReader<v1::UploadChunk>* reader,
                                          v1::Report* response) {
  const Caller caller = d_->Identify(*ctx);
  JobLog log("ScanUpload", caller, *ctx, &d_->metrics());
  // An upload place while the bytes stream in; a job place only once they are all spooled.
  absl::StatusOr<JobSlots::Upload> upload = d_->slots().BeginUpload(LimitBucket(caller));
  if (!upload.ok()) return log.Done(ToGrpc(upload.status()));
  v1::UploadHeader header;
  absl::StatusOr<base::UniqueFd> fd =
      ReceiveUpload(SpoolOptionsOf(d_->options()), ctx, reader, &*upload, &d_->watchdog(), &header);
  log.Name(header.name());
  if (!fd.ok()) return log.Done(ToGrpc(fd.status()));
  absl::StatusOr<JobSlots::Ticket> ticket = upload->Admit();
  if (!ticket.ok()) return log.Done(ToGrpc(ticket.status()));
  if (absl::Status s = RunWhenSlotFree(&*ticket, ctx, &d_->metrics()); !s.ok()) {
    return log.Done(ToGrpc(s));
  }
  return ScanJob(
      ctx, *std::move(fd), header.name(),
      [](const std::string& path) -> absl::StatusOr<base::UniqueFd> {
        return absl::NotFoundError(
            absl::StrCat(app::TerminalSafe(path),
                         ": not in the upload (an upload holds one file: scan a sharded "
                         "checkpoint by path, or upload each shard)"));
      },
      header.options(), &log, response);
}

grpc::Status ScannerService::DoConvertPath(grpc::ServerContext* ctx,
                                           const v1::ConvertPathRequest* request,
                                           v1::ConvertResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  JobLog log("ConvertPath", caller, *ctx, &d_->metrics());
  log.Name(request->input());
  if (absl::Status st = CheckPathCaller(caller); !st.ok()) return log.Done(ToGrpc(st));
  const ConfinedRoots* roots = d_->roots();
  if (roots == nullptr) {
    return log.Done(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "this daemon has no roots configured (--root): it converts "
                                 "uploads only"));
  }
  pipeline::ConvertRequest convert;
  if (absl::Status s = ParseConvertOptions(request->options(), d_->options().sign_method, &convert);
      !s.ok()) {
    return log.Done(ToGrpc(s));
  }
  // The input (and a set's shards) opened beneath the roots only.
  {
    absl::StatusOr<base::UniqueFd> probe = roots->OpenForRead(request->input());
    if (!probe.ok()) return log.Done(ToGrpc(probe.status()));
  }
  absl::StatusOr<std::pair<std::string, std::string>> out = SplitOutput(request->output());
  if (!out.ok()) return log.Done(ToGrpc(out.status()));
  const auto& [out_dir, out_name] = *out;
  absl::StatusOr<base::UniqueFd> dir = roots->OpenDirectory(out_dir.empty() ? "." : out_dir);
  if (!dir.ok()) return log.Done(ToGrpc(dir.status()));
  struct stat st;
  if (!convert.replace && ::fstatat(dir->get(), out_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !S_ISDIR(st.st_mode)) {
    return log.Done(grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                                 absl::StrCat(request->output(), " exists (set replace)")));
  }
  absl::StatusOr<JobSlots::Ticket> ticket = d_->slots().Admit(LimitBucket(caller));
  if (!ticket.ok()) return log.Done(ToGrpc(ticket.status()));
  if (absl::Status s = RunWhenSlotFree(&*ticket, ctx, &d_->metrics()); !s.ok()) {
    return log.Done(ToGrpc(s));
  }
  const std::shared_ptr<const rules::RuleSet> rules = d_->rules().Get();
  // The output goes into the directory already resolved beneath its root, through its
  // descriptor: renaming or relinking a parent afterwards cannot redirect it.
  const std::string proc_dir = absl::StrCat("/proc/self/fd/", dir->get());
  const std::string display_dir = out_dir.empty() ? std::string(".") : out_dir;
  convert.input = request->input();
  convert.output = absl::StrCat(proc_dir, "/", out_name);
  convert.output_dir_fd = dir->get();  // a set's staging directory is made through it too
  convert.scanner_version = d_->options().scanner_version;
  convert.rules_version = rules->version();
  convert.sign.key = &d_->key();
  convert.sign.on_signed = [this](absl::Duration d) { d_->metrics().Phase("sign", d); };
  convert.open_input = [roots](const std::string& path) { return roots->OpenForRead(path); };
  pipeline::JailOptions jail = JailFor(d_->options(), ctx, true, &d_->metrics());
  jail.on_pin = [&log](std::string_view how) { log.Pin(how); };
  app::ConvertOutcome outcome = app::Convert(
      convert,
      [&](const pipeline::ConvertRequest& r, const pipeline::PlanCheck& check) {
        return pipeline::ConvertFileJailed(r, *rules, d_->options().limits, jail, check);
      },
      d_->options().scanner_version, rules->version());
  if (ctx->IsCancelled()) {
    return log.Done(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"));
  }
  *response = ConvertAnswer(std::move(outcome));
  for (v1::FileReport& f : *response->mutable_report()->mutable_files()) {
    RewritePaths(&f, proc_dir, display_dir);
    d_->Judged(f);
  }
  // A message that names the descriptor path names the caller's directory instead.
  response->set_error(absl::StrReplaceAll(response->error(), {{proc_dir, display_dir}}));
  log.Report(response->report());
  return log.Done(grpc::Status::OK);
}

grpc::Status ScannerService::DoConvertUpload(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream) {
  const Caller caller = d_->Identify(*ctx);
  JobLog log("ConvertUpload", caller, *ctx, &d_->metrics());
  // An upload place while the bytes stream in; a job place only once they are all spooled.
  absl::StatusOr<JobSlots::Upload> upload = d_->slots().BeginUpload(LimitBucket(caller));
  if (!upload.ok()) return log.Done(ToGrpc(upload.status()));
  v1::UploadHeader header;
  absl::StatusOr<base::UniqueFd> fd =
      ReceiveUpload(SpoolOptionsOf(d_->options()), ctx, stream, &*upload, &d_->watchdog(), &header);
  log.Name(header.name());
  if (!fd.ok()) return log.Done(ToGrpc(fd.status()));
  pipeline::ConvertRequest convert;
  if (absl::Status s = ParseConvertOptions(header.convert(), d_->options().sign_method, &convert);
      !s.ok()) {
    return log.Done(ToGrpc(s));
  }
  absl::StatusOr<JobDir> job = JobDir::Create(d_->options().spool_dir);
  if (!job.ok()) return log.Done(ToGrpc(job.status()));
  absl::StatusOr<JobSlots::Ticket> ticket = upload->Admit();
  if (!ticket.ok()) return log.Done(ToGrpc(ticket.status()));
  if (absl::Status s = RunWhenSlotFree(&*ticket, ctx, &d_->metrics()); !s.ok()) {
    return log.Done(ToGrpc(s));
  }
  const std::shared_ptr<const rules::RuleSet> rules = d_->rules().Get();
  const int spooled = fd->get();
  const std::string name = header.name();
  convert.input = name;
  convert.output = absl::StrCat(job->dir(), "/model.safetensors");
  convert.replace = false;
  convert.allow_index = false;  // a set's shards are not in the upload: sets convert by path
  convert.scanner_version = d_->options().scanner_version;
  convert.rules_version = rules->version();
  convert.sign.key = &d_->key();
  convert.sign.on_signed = [this](absl::Duration d) { d_->metrics().Phase("sign", d); };
  convert.open_input = [spooled, name](const std::string& path) -> absl::StatusOr<base::UniqueFd> {
    if (path != name) {
      return absl::PermissionDeniedError("an upload can only read its own bytes");
    }
    return ReopenReadOnly(spooled);
  };
  pipeline::JailOptions jail = JailFor(d_->options(), ctx, true, &d_->metrics());
  jail.on_pin = [&log](std::string_view how) { log.Pin(how); };
  app::ConvertOutcome outcome = app::Convert(
      convert,
      [&](const pipeline::ConvertRequest& r, const pipeline::PlanCheck& check) {
        return pipeline::ConvertFileJailed(r, *rules, d_->options().limits, jail, check);
      },
      d_->options().scanner_version, rules->version());
  if (ctx->IsCancelled()) {
    return log.Done(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"));
  }
  v1::ConvertChunk first;
  v1::ConvertResponse* response = first.mutable_response();
  *response = ConvertAnswer(std::move(outcome));
  // The files live in the job directory only until they are sent: the caller names them.
  for (v1::FileReport& f : *response->mutable_report()->mutable_files()) {
    if (f.has_conversion()) {
      f.mutable_conversion()->clear_output();
      f.mutable_conversion()->clear_signature();
    }
    d_->Judged(f);
  }
  response->set_error(absl::StrReplaceAll(response->error(), {{job->dir() + "/", ""}}));
  log.Report(response->report());
  base::UniqueFd output;
  uint64_t output_size = 0;
  if (response->converted()) {
    output = base::UniqueFd(::open(convert.output.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    absl::StatusOr<std::string> bundle =
        signing::ReadSmallFile(pipeline::SignaturePathFor(convert.output),
                               signing::Limits{}.max_bundle_bytes, "Limits::max_bundle_bytes");
    if (!output.valid() || ::fstat(output.get(), &st) != 0 || !bundle.ok()) {
      return log.Done(
          grpc::Status(grpc::StatusCode::INTERNAL, "the converted output could not be read back"));
    }
    output_size = static_cast<uint64_t>(st.st_size);
    response->set_signature(*std::move(bundle));
    response->set_output_size(output_size);
  }
  // The caller takes the output within output_idle_timeout per chunk, or the call is cancelled
  // (the files go with it).
  if (absl::Status sent = SendConverted(d_->options().output_idle_timeout, &d_->watchdog(), ctx,
                                        stream, first, output.get(), output_size);
      !sent.ok()) {
    return log.Done(ToGrpc(sent));
  }
  return log.Done(grpc::Status::OK);
}

// --- Admin --------------------------------------------------------------------------------

namespace {

// Admin calls are logged whether they are allowed or refused (one "admin" line each).
grpc::Status RequireAdmin(const Caller& caller, std::string_view rpc) {
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
  line.Emit();
  return s;
}

}  // namespace

grpc::Status AdminService::Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                                  v1::StatusResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  if (grpc::Status s = RequireAdmin(caller, "Status"); !s.ok()) return s;
  response->set_scanner_version(d_->options().scanner_version);
  response->set_rules_version(d_->rules().Get()->version());
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
  if (grpc::Status s = RequireAdmin(caller, "Metrics"); !s.ok()) return s;
  response->set_text(d_->metrics().Text());
  return grpc::Status::OK;
}

grpc::Status AdminService::ReloadRules(grpc::ServerContext* ctx, const v1::ReloadRulesRequest*,
                                       v1::ReloadRulesResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  if (grpc::Status s = RequireAdmin(caller, "ReloadRules"); !s.ok()) return s;
  absl::StatusOr<RulesHolder::Reloaded> r = daemon::ReloadRules(d_, caller.name);
  if (!r.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("the rules were not reloaded (the old rules stay in force): ",
                                     r.status().message()));
  }
  response->set_previous_version(r->previous_version);
  response->set_rules_version(r->version);
  response->set_source(d_->rules().source());
  return grpc::Status::OK;
}

grpc::Status AdminService::PublicKey(grpc::ServerContext* ctx, const v1::PublicKeyRequest*,
                                     v1::PublicKeyResponse* response) {
  const Caller caller = d_->Identify(*ctx);
  if (grpc::Status s = RequireAdmin(caller, "PublicKey"); !s.ok()) return s;
  response->set_pem(d_->key().public_key().pem());
  response->set_hint(d_->key().public_key().hint());
  return grpc::Status::OK;
}

}  // namespace ckptscan::daemon
