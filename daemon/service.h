// ckptscand's gRPC services (proto/ckptscan/v1/scanner.proto; docs/daemon.md): Scanner (scan and
// convert, by path beneath the configured roots or by upload) and Admin (status, rule reload,
// the public key).
//
// Every job goes through the same application layer as the CLI (app/scan_file.h, app/convert.h)
// on the daemon's engine: a fresh jailed worker per file parses it; this process decides the
// verdict with the rules, validates the output and signs it. A handler identifies the caller,
// admits the job, makes one app:: call and maps its status. This process never parses an untrusted
// byte: uploads are spooled to an unlinked file and handed to the worker as they are. The signing
// key stays here.
//
// Jobs are bounded by JobSlots (max_running at once, max_queued waiting: past both,
// RESOURCE_EXHAUSTED at once; at most max_jobs_per_caller of them one caller's). A caller's
// deadline or cancellation kills its job's worker. The services use gRPC's synchronous API: a
// handler thread per call in flight, which JobSlots bounds. An upload takes a job place only once
// it is spooled whole; while it streams in it holds an upload place (max_uploads,
// max_uploads_per_caller) and spool bytes (max_spool_bytes), and a stream that stalls -- no chunk
// within upload_idle_timeout, or ConvertUpload output the caller does not take within
// output_idle_timeout -- is cancelled by the watchdog.
//
// Thread-safe.
#ifndef CKPTSCAN_DAEMON_SERVICE_H_
#define CKPTSCAN_DAEMON_SERVICE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "app/engine.h"
#include "ckptscan/v1/scanner.grpc.pb.h"
#include "daemon/confine.h"
#include "daemon/job_slots.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/unix_listener.h"
#include "daemon/upload.h"
#include "signing/keys.h"
#include "signing/manifest.h"

namespace ckptscan::daemon {

struct ServiceOptions {
  std::string scanner_version;
  uint64_t max_upload_bytes = 64ull << 30;
  // --scan-digest: whether a scan's report carries the input's SHA-256. kRequest: as the
  // request's ScanOptions.skip_digest says; kAlways: every scan (a hub that records
  // provenance); kNever: none (throughput). Conversions always hash their input.
  enum class ScanDigest { kRequest, kAlways, kNever };
  ScanDigest scan_digest = ScanDigest::kRequest;
  // How long an upload may wait for its next chunk, and a chunk of ConvertUpload's output for
  // the caller to take it, before the call is cancelled (--upload-idle-timeout,
  // --output-idle-timeout).
  absl::Duration upload_idle_timeout = absl::Seconds(30);
  absl::Duration output_idle_timeout = absl::Seconds(30);
  // An upload's liveness beyond its idle timeout (--upload-min-rate, --upload-deadline): after
  // its first upload_idle_timeout it must have sent this many bytes for every second since it
  // began, and be whole within the deadline.
  uint64_t upload_min_rate = 0;
  absl::Duration upload_deadline = absl::InfiniteDuration();
  std::string spool_dir;  // private to this daemon (0700); uploads are unlinked files in it
  signing::Method sign_method = signing::Method::kFiles;
  std::set<uid_t> admin_uids;  // unix socket peers allowed to call Admin
  // Client-certificate identities allowed to call Admin over mTLS, typed (ParseIdentity): a
  // DNS SAN never matches a URI one, and the common name only when asked ("cn:").
  std::set<std::string> admin_identities;
  // Unix socket peers allowed to make by-path calls. Those read and write with this daemon's
  // rights, so any other uid would get a file it cannot read, or replace one it cannot write.
  std::set<uid_t> path_uids;
  // How many log lines one caller's calls may write (--log-lines-per-second, --log-burst).
  LogRateLimits log_rate;
  // A conversion's outputs (--max-output-expansion, --max-output-bytes): each file's output at
  // most this many times its input (+ kOutputHeaderSlack), the call's outputs together at most
  // max_output_bytes (0: only the spool budget), reserved against max_spool_bytes before they
  // are written.
  double max_output_expansion = 4;
  uint64_t max_output_bytes = 0;
};

// What an output may hold beyond expansion x input: the safetensors header's metadata, which the
// daemon writes itself (provenance, versions).
inline constexpr uint64_t kOutputHeaderSlack = 16u << 10;

// One conversion call's outputs: each file's allowance is its input's size times
// max_output_expansion plus kOutputHeaderSlack, within what is left of max_output_bytes for the
// call, and is reserved against the daemon's spool budget (JobSlots::ReserveSpool) until this
// object is destroyed (when the call ends, its outputs sent or published).
//
// Thread-safe (a set's shards may ask from several threads).
class OutputBudget final {
 public:
  OutputBudget(JobSlots* slots, double expansion, uint64_t max_bytes)
      : slots_(slots), expansion_(expansion), max_bytes_(max_bytes) {}
  absl::StatusOr<sandbox::OutputAllowance> Allow(uint64_t input_bytes) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  JobSlots* const slots_;
  const double expansion_;
  const uint64_t max_bytes_;
  absl::Mutex mu_;
  std::vector<JobSlots::SpoolReservation> held_ ABSL_GUARDED_BY(mu_);
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

// "uri:X", "dns:X", "email:X", "ip:X" (a subject alternative name of that type) or "cn:X"
// (the subject's common name): the canonical form stored in admin_identities. Anything else,
// an untyped name included, is InvalidArgument.
absl::StatusOr<std::string> ParseIdentity(std::string_view flag_value);

// Who is calling: "uid:N" on the unix socket, "cert:NAME" with a verified client certificate,
// or the transport's peer string otherwise.
struct Caller {
  std::string name;
  bool admin = false;
  bool authenticated = false;  // a uid or a verified certificate
  // May name paths (ScanPath, ConvertPath): a unix peer in path_uids, or any TCP caller the
  // transport admitted (over TCP the roots themselves are the grant; docs/daemon.md).
  bool by_path = false;
  // May take the operator's reserved job and upload places: root and this daemon's uid on the
  // unix socket, and every admin (uid or certificate).
  bool privileged = false;
};

// What Status reports; updated by the services.
class Stats final {
 public:
  void Record(const v1::FileReport& file);
  void SetJailLayers(std::string layers);
  void Fill(v1::StatusResponse* out) const;

 private:
  mutable absl::Mutex mu_;
  std::map<int, uint64_t> done_ ABSL_GUARDED_BY(mu_);              // by v1::Verdict
  std::map<std::string, uint64_t> failures_ ABSL_GUARDED_BY(mu_);  // by kind
  std::string jail_layers_ ABSL_GUARDED_BY(mu_);
};

// The state both services share.
class Daemon final {
 public:
  // `engine`, `slots` and `metrics` are not owned and outlive the daemon.
  Daemon(ServiceOptions options, app::Engine* engine, std::unique_ptr<ConfinedRoots> roots,
         signing::PrivateKey key, JobSlots* slots, Metrics* metrics)
      : options_(std::move(options)),
        engine_(engine),
        roots_(std::move(roots)),
        key_(std::move(key)),
        slots_(slots),
        metrics_(metrics),
        log_limiter_(options_.log_rate),
        started_(absl::Now()) {}

  // The unix listener, once it exists (peer credentials come from it).
  void SetListener(const UnixListener* listener) { listener_ = listener; }
  Caller Identify(const grpc::ServerContext& ctx) const;

  const ServiceOptions& options() const { return options_; }
  app::Engine& engine() { return *engine_; }
  const ConfinedRoots* roots() const { return roots_.get(); }
  const signing::PrivateKey& key() const { return key_; }
  JobSlots& slots() { return *slots_; }
  StallWatchdog& watchdog() { return watchdog_; }
  Stats& stats() { return stats_; }
  Metrics& metrics() { return *metrics_; }
  // The log lines each caller's calls may write (job and admin lines).
  LogLimiter& log_limiter() { return log_limiter_; }
  // A file judged: the status counters and the metrics.
  void Judged(const v1::FileReport& file);
  absl::Time started() const { return started_; }

 private:
  const ServiceOptions options_;
  app::Engine* engine_;
  std::unique_ptr<ConfinedRoots> roots_;  // null: no roots, by-path calls are refused
  const signing::PrivateKey key_;
  JobSlots* slots_;
  Metrics* metrics_;
  LogLimiter log_limiter_;
  Stats stats_;
  const UnixListener* listener_ = nullptr;
  const absl::Time started_;
  StallWatchdog watchdog_;  // stalled uploads and unread outputs
};

class JobLog;

class ScannerService final : public v1::Scanner::Service {
 public:
  explicit ScannerService(Daemon* daemon) : d_(daemon) {}
  grpc::Status ScanPath(grpc::ServerContext* ctx, const v1::ScanPathRequest* request,
                        v1::Report* response) override;
  grpc::Status ScanUpload(grpc::ServerContext* ctx, grpc::ServerReader<v1::UploadChunk>* reader,
                          v1::Report* response) override;
  grpc::Status ConvertPath(grpc::ServerContext* ctx, const v1::ConvertPathRequest* request,
                           v1::ConvertResponse* response) override;
  grpc::Status ConvertUpload(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream) override;

 private:
  // The handlers' bodies. The overrides above run them under OutOfMemoryGuard (service.cc):
  // an allocation failure in the daemon answers RESOURCE_EXHAUSTED and is logged, instead of
  // reaching gRPC as UNKNOWN with no log line.
  grpc::Status DoScanPath(grpc::ServerContext* ctx, const v1::ScanPathRequest* request,
                          v1::Report* response);
  grpc::Status DoScanUpload(grpc::ServerContext* ctx, grpc::ServerReader<v1::UploadChunk>* reader,
                            v1::Report* response);
  grpc::Status DoConvertPath(grpc::ServerContext* ctx, const v1::ConvertPathRequest* request,
                             v1::ConvertResponse* response);
  grpc::Status DoConvertUpload(grpc::ServerContext* ctx,
                               grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream);

  Daemon* d_;
};

class AdminService final : public v1::Admin::Service {
 public:
  explicit AdminService(Daemon* daemon) : d_(daemon) {}
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override;
  grpc::Status Metrics(grpc::ServerContext* ctx, const v1::MetricsRequest* request,
                       v1::MetricsResponse* response) override;
  grpc::Status ReloadRules(grpc::ServerContext* ctx, const v1::ReloadRulesRequest* request,
                           v1::ReloadRulesResponse* response) override;
  grpc::Status PublicKey(grpc::ServerContext* ctx, const v1::PublicKeyRequest* request,
                         v1::PublicKeyResponse* response) override;

 private:
  Daemon* d_;
};

// The rule reload both Admin.ReloadRules and SIGHUP run (logged either way).
absl::StatusOr<app::Engine::Reloaded> ReloadRules(Daemon* daemon, const std::string& by);

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_SERVICE_H_
