#include "daemon/metrics.h"

#include <string>

#include "absl/status/status.h"
#include "prometheus/text_serializer.h"

namespace ckptscan::daemon {
namespace {

// Seconds: 1 ms .. ~2 min, roughly doubling (small files take a few ms, large ones seconds).
const prometheus::Histogram::BucketBoundaries& Buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  return b;
}

}  // namespace

std::string StatusCodeName(int code) {
  // gRPC's status codes are absl's, number for number (grpc::StatusCode, absl::StatusCode).
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? std::to_string(code) : name;
}

std::string_view ExitReason(sandbox::Outcome outcome) {
  switch (outcome) {
    case sandbox::Outcome::kOk:
      return "ok";
    case sandbox::Outcome::kViolation:
      return "violation";
    case sandbox::Outcome::kTimeout:
      return "timeout";
    case sandbox::Outcome::kSignaled:
      return "signaled";
    case sandbox::Outcome::kFailed:
      return "failed";
    case sandbox::Outcome::kBadFrame:
      return "bad_frame";
    case sandbox::Outcome::kLimit:
      return "limit";
    case sandbox::Outcome::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

Metrics::Metrics(const JobSlots* slots)
    : slots_(slots),
      registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("ckptscand_requests_total")
                    .Help("gRPC calls handled, by RPC and status code")
                    .Register(*registry_)),
      latency_(prometheus::BuildHistogram()
                   .Name("ckptscand_request_duration_seconds")
                   .Help("Latency of gRPC calls, by RPC")
                   .Register(*registry_)),
      jobs_(prometheus::BuildCounter()
                .Name("ckptscand_jobs_total")
                .Help("Files judged, by verdict")
                .Register(*registry_)),
      phases_(prometheus::BuildHistogram()
                  .Name("ckptscand_phase_duration_seconds")
                  .Help("Time per job phase: queue, spawn, parse, convert, sign")
                  .Register(*registry_)),
      exits_(prometheus::BuildCounter()
                 .Name("ckptscand_worker_exits_total")
                 .Help("Workers ended, by reason; reason=violation is a worker killed for a "
                       "forbidden system call (a file that attacked the parser)")
                 .Register(*registry_)),
      queued_(prometheus::BuildGauge()
                  .Name("ckptscand_jobs_queued")
                  .Help("Jobs admitted and waiting for a worker slot (uploads once complete)")
                  .Register(*registry_)
                  .Add({})),
      running_(prometheus::BuildGauge()
                   .Name("ckptscand_jobs_running")
                   .Help("Jobs with a worker running")
                   .Register(*registry_)
                   .Add({})),
      refused_(prometheus::BuildCounter()
                   .Name("ckptscand_jobs_refused_total")
                   .Help("Jobs refused with RESOURCE_EXHAUSTED: the queue was full, or an upload "
                         "limit (max_uploads, max_uploads_per_caller, max_spool_bytes) was "
                         "reached")
                   .Register(*registry_)
                   .Add({})),
      uploading_(prometheus::BuildGauge()
                     .Name("ckptscand_uploads_in_flight")
                     .Help("Uploads streaming in (they hold no job place yet)")
                     .Register(*registry_)
                     .Add({})),
      spool_bytes_(prometheus::BuildGauge()
                       .Name("ckptscand_upload_spool_bytes")
                       .Help("Bytes spooled by the uploads in flight (max_spool_bytes bounds it)")
                       .Register(*registry_)
                       .Add({})),
      scanned_(prometheus::BuildCounter()
                   .Name("ckptscand_bytes_scanned_total")
                   .Help("Bytes of files scanned")
                   .Register(*registry_)
                   .Add({})),
      converted_(prometheus::BuildCounter()
                     .Name("ckptscand_bytes_converted_total")
                     .Help("Bytes of safetensors written by conversions")
                     .Register(*registry_)
                     .Add({})),
      build_info_(prometheus::BuildGauge()
                      .Name("ckptscand_build_info")
                      .Help("Always 1; the label is the daemon's version")
                      .Register(*registry_)),
      rules_info_(prometheus::BuildGauge()
                      .Name("ckptscand_rules_info")
                      .Help("Always 1; the label is the version of the rules in force")
                      .Register(*registry_)),
      reloads_(prometheus::BuildCounter()
                   .Name("ckptscand_rules_reloads_total")
                   .Help("Rules reloads (SIGHUP, Admin.ReloadRules), by result: ok, or failed "
                         "(the old rules stay in force)")
                   .Register(*registry_)),
      reloads_ok_(reloads_.Add({{"result", "ok"}})),
      reloads_failed_(reloads_.Add({{"result", "failed"}})) {
  // Every reason and verdict from the start, so that rate() and alerts see zeros, not gaps.
  for (sandbox::Outcome o :
       {sandbox::Outcome::kOk, sandbox::Outcome::kViolation, sandbox::Outcome::kTimeout,
        sandbox::Outcome::kSignaled, sandbox::Outcome::kFailed, sandbox::Outcome::kBadFrame,
        sandbox::Outcome::kLimit, sandbox::Outcome::kCancelled}) {
    exits_.Add({{"reason", std::string(ExitReason(o))}});
  }
  for (const char* v : {"SAFE", "SUSPICIOUS", "DANGEROUS", "ERROR"}) jobs_.Add({{"verdict", v}});
}

void Metrics::Request(std::string_view rpc, int code, absl::Duration elapsed) {
  requests_.Add({{"rpc", std::string(rpc)}, {"code", StatusCodeName(code)}}).Increment();
  latency_.Add({{"rpc", std::string(rpc)}}, Buckets()).Observe(absl::ToDoubleSeconds(elapsed));
}

void Metrics::Job(std::string_view verdict) {
  jobs_.Add({{"verdict", std::string(verdict)}}).Increment();
}

void Metrics::Phase(std::string_view phase, absl::Duration elapsed) {
  phases_.Add({{"phase", std::string(phase)}}, Buckets()).Observe(absl::ToDoubleSeconds(elapsed));
}

void Metrics::WorkerExit(const sandbox::Result& result) {
  exits_.Add({{"reason", std::string(ExitReason(result.outcome))}}).Increment();
}

void Metrics::Scanned(uint64_t bytes) { scanned_.Increment(static_cast<double>(bytes)); }

void Metrics::Converted(uint64_t bytes) { converted_.Increment(static_cast<double>(bytes)); }

void Metrics::BuildInfo(std::string_view version) {
  build_info_.Add({{"version", std::string(version)}}).Set(1);
}

void Metrics::RulesInForce(std::string_view version, bool reload) {
  absl::MutexLock lock(&rules_mu_);
  prometheus::Gauge& now = rules_info_.Add({{"version", std::string(version)}});
  if (rules_series_ != nullptr && rules_series_ != &now) rules_info_.Remove(rules_series_);
  now.Set(1);
  rules_series_ = &now;
  if (reload) reloads_ok_.Increment();
}

void Metrics::RulesReloadFailed() { reloads_failed_.Increment(); }

std::vector<prometheus::MetricFamily> Metrics::Collect() const {
  {
    absl::MutexLock lock(&mu_);
    const JobSlots::Counts counts = slots_->counts();
    queued_.Set(counts.queued);
    running_.Set(counts.running);
    uploading_.Set(counts.uploading);
    spool_bytes_.Set(static_cast<double>(counts.spool_bytes));
    const double refused = static_cast<double>(counts.refused);
    if (refused > refused_.Value()) refused_.Increment(refused - refused_.Value());
  }
  return registry_->Collect();
}

std::string Metrics::Text() const { return prometheus::TextSerializer().Serialize(Collect()); }

}  // namespace ckptscan::daemon
