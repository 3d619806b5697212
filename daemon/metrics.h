// ckptscand's metrics (docs/operations.md lists them and the alerts they feed), kept
// with prometheus-cpp and exposed two ways: the Prometheus text format on a port of their own
// (--metrics-port; bound to loopback unless --metrics-address says otherwise) and the same text
// from Admin.Metrics.
//
//   ckptscand_requests_total{rpc,code}            calls by RPC and gRPC status code name
//   ckptscand_request_duration_seconds{rpc}       latency histogram per RPC
//   ckptscand_jobs_total{verdict}                 files judged, by verdict
//   ckptscand_phase_duration_seconds{phase}       queue, spawn, parse, convert, sign
//   ckptscand_worker_exits_total{reason}          ok, violation (SIGSYS: the security alert),
//                                                 timeout, signaled, failed, bad_frame, limit,
//                                                 cancelled
//   ckptscand_jobs_queued, ckptscand_jobs_running  gauges, read from the job slots when scraped
//   ckptscand_jobs_refused_total                   RESOURCE_EXHAUSTED answers (queue full,
//                                                  upload limits)
//   ckptscand_uploads_in_flight, ckptscand_upload_spool_bytes  gauges, from the job slots
//   ckptscand_bytes_scanned_total, ckptscand_bytes_converted_total
//   ckptscand_build_info{version}                 1: the daemon's version
//   ckptscand_rules_info{version}                 1 for the rules in force (one series; a
//                                                 reload replaces it)
//   ckptscand_rules_reloads_total{result}         reloads (SIGHUP, Admin.ReloadRules): ok, failed
//
// Thread-safe.
#ifndef CKPTSCAN_DAEMON_METRICS_H_
#define CKPTSCAN_DAEMON_METRICS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/job_slots.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "sandbox/result.h"

namespace ckptscan::daemon {

class Metrics final : public prometheus::Collectable {
 public:
  explicit Metrics(const JobSlots* slots);

  void Request(std::string_view rpc, int code, absl::Duration elapsed);
  void Job(std::string_view verdict);
  void Phase(std::string_view phase, absl::Duration elapsed);
  void WorkerExit(const sandbox::Result& result);
  void Scanned(uint64_t bytes);
  void Converted(uint64_t bytes);
  // The daemon's version (once, at start) and the rules in force: at start, and after each
  // reload (`reload` true: counted as a reload that succeeded).
  void BuildInfo(std::string_view version);
  void RulesInForce(std::string_view version, bool reload);
  void RulesReloadFailed();

  // The Prometheus text exposition of everything (what /metrics serves).
  std::string Text() const;

  // prometheus::Collectable: refreshes the gauges from the job slots, then collects.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const JobSlots* slots_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Counter>& jobs_;
  prometheus::Family<prometheus::Histogram>& phases_;
  prometheus::Family<prometheus::Counter>& exits_;
  // Family::Add and every metric's own updates are thread-safe; mu_ orders Collect's copies
  // of the job counts, and refused_'s read-then-increment catch-up, between collectors.
  mutable absl::Mutex mu_;
  prometheus::Gauge& queued_ ABSL_GUARDED_BY(mu_);
  prometheus::Gauge& running_ ABSL_GUARDED_BY(mu_);
  prometheus::Counter& refused_ ABSL_GUARDED_BY(mu_);
  prometheus::Gauge& uploading_ ABSL_GUARDED_BY(mu_);
  prometheus::Gauge& spool_bytes_ ABSL_GUARDED_BY(mu_);
  prometheus::Counter& scanned_;
  prometheus::Counter& converted_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Gauge>& rules_info_;
  prometheus::Family<prometheus::Counter>& reloads_;
  prometheus::Counter& reloads_ok_;
  prometheus::Counter& reloads_failed_;
  // The rules_info series in force, removed when a reload replaces it.
  absl::Mutex rules_mu_;
  prometheus::Gauge* rules_series_ ABSL_GUARDED_BY(rules_mu_) = nullptr;
};

// The reason label of a worker's fate.
std::string_view ExitReason(sandbox::Outcome outcome);

// The code label of a gRPC status code: its name ("OK", "RESOURCE_EXHAUSTED"), or the
// number for a code gRPC does not define.
std::string StatusCodeName(int code);

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_METRICS_H_
