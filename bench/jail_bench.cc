// What the jail costs per job: spawn to verdict for a tiny pickle, jailed and in-process,
// one thread and two (both cores of our machines). See bench/README.md.
//
//   build/bench/jail_bench --benchmark_counters_tabular=true
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "rules/rule_set.h"
#include "tests/inprocess/local_scan.h"
#include "trusted/jailed_scan.h"

namespace ckptscan {
namespace {

// {'weight': 1.0} at protocol 2: what a tiny state_dict-like pickle parses to.
constexpr char kTinyPickle[] =
    "\x80\x02}q\x00X\x06\x00\x00\x00weightq\x01G?\xf0\x00\x00\x00\x00\x00\x00s.";

const std::string& TinyPicklePath() {
  static const std::string path = [] {
    std::string p = "/tmp/ckptscan_jail_bench_XXXXXX";
    const int fd = ::mkstemp(p.data());
    if (fd < 0 || ::write(fd, kTinyPickle, sizeof(kTinyPickle) - 1) < 0) std::abort();
    ::close(fd);
    std::atexit([] { ::unlink(TinyPicklePath().c_str()); });
    return p;
  }();
  return path;
}

const rules::RuleSet& Rules() {
  static const std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();
  return *rules;
}

void Check(const absl::StatusOr<v1::FileReport>& r, benchmark::State& state) {
  if (!r.ok() || r->verdict() != v1::VERDICT_SAFE) {
    state.SkipWithError(r.ok() ? r->DebugString().c_str() : "scan failed");
  }
}

void BM_InProcessScan(benchmark::State& state) {
  const std::string& path = TinyPicklePath();
  for (auto _ : state) {
    absl::StatusOr<v1::FileReport> r = pipeline::ScanFileInProcess(path, Rules(), {});
    Check(r, state);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_JailedScan(benchmark::State& state) {
  const std::string& path = TinyPicklePath();
  pipeline::JailOptions jail;
  jail.worker_path = CKPT_WORKER;
  for (auto _ : state) {
    absl::StatusOr<v1::FileReport> r = pipeline::ScanFileJailed(path, Rules(), {}, jail);
    Check(r, state);
  }
  state.SetItemsProcessed(state.iterations());
}

// Real time: the worker's CPU time is not the benchmark thread's. Items/s = scans per second
// (summed over threads).
BENCHMARK(BM_InProcessScan)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(BM_JailedScan)->UseRealTime()->Threads(1)->Threads(2);

}  // namespace
}  // namespace ckptscan

BENCHMARK_MAIN();
