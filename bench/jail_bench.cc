// What the jail costs per job: spawn to verdict for a tiny pickle, in-process, jailed with a
// posix_spawn per job and jailed through the fork server, against posix_spawn + wait of
// /bin/true (the cheapest process a job could be); one thread and two (both cores of our
// machines). After the runs it prints the ratios of the one-thread times (bench/README.md):
//   fork-server overhead / spawn(/bin/true) = (fork server - in-process) / spawn(/bin/true)
//   per-job overhead / fork-server overhead = (per job - in-process) / (fork server - in-process)
//
//   build/bench/jail_bench --benchmark_counters_tabular=true
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "app/scan_file.h"
#include "bench/proc_cpu.h"
#include "benchmark/benchmark.h"
#include "rules/rule_set.h"
#include "sandbox/run.h"
#include "tests/inprocess/local_scan.h"

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

// CPU seconds used so far by this process, the children it reaped, and its live descendants
// (the fork server, and the jobs it reaped): the whole cost of a job, on every core, whatever
// else the machine runs.
double CpuSeconds() {
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  rusage self;
  rusage reaped;
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &reaped);
  double cpu = seconds(self.ru_utime) + seconds(self.ru_stime) + seconds(reaped.ru_utime) +
               seconds(reaped.ru_stime);
  return cpu + bench::LiveDescendantsCpuSeconds(::getpid());
}

// Counts the CPU per iteration of a one-thread run (cpu_us).
class CpuCounter {
 public:
  explicit CpuCounter(benchmark::State& state) : state_(state), start_(CpuSeconds()) {}
  ~CpuCounter() {
    if (state_.threads() != 1) return;
    state_.counters["cpu_us"] =
        benchmark::Counter((CpuSeconds() - start_) * 1e6, benchmark::Counter::kAvgIterations);
  }

 private:
  benchmark::State& state_;
  const double start_;
};

void Check(const absl::StatusOr<v1::FileReport>& r, benchmark::State& state) {
  if (!r.ok() || r->verdict() != v1::VERDICT_SAFE) {
    state.SkipWithError(r.ok() ? r->DebugString().c_str() : "scan failed");
  }
}

void BM_InProcessScan(benchmark::State& state) {
  const std::string& path = TinyPicklePath();
  CpuCounter cpu(state);
  for (auto _ : state) {
    absl::StatusOr<v1::FileReport> r = inprocess::ScanFileInProcess(path, Rules(), {});
    Check(r, state);
  }
  state.SetItemsProcessed(state.iterations());
}

void JailedScan(benchmark::State& state, sandbox::SpawnMode mode) {
  const std::string& path = TinyPicklePath();
  sandbox::JailOptions jail;
  jail.worker_path = CKPT_WORKER;
  jail.spawn_mode = mode;
  // As `ckptscan scan` runs by default: no digest, so no pin and no hashing thread per job
  // (in-process, the SHA-256 of 30 bytes costs nothing).
  jail.sha256 = false;
  // The jailed job's phases (JailOptions::on_phase): "spawn" is Start() (posix_spawn, or the
  // fork server's request and reply), "parse" from there to reaped.
  absl::Duration spawn;
  absl::Duration parse;
  jail.on_phase = [&](std::string_view phase, absl::Duration d) {
    (phase == "spawn" ? spawn : parse) += d;
  };
  // A first job outside the timing: the fork server starts once per process, not per job.
  (void)app::ScanFile(path, Rules(), {}, jail);
  spawn = parse = absl::ZeroDuration();
  CpuCounter cpu(state);
  for (auto _ : state) {
    absl::StatusOr<v1::FileReport> r = app::ScanFile(path, Rules(), {}, jail);
    Check(r, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["spawn_us"] =
      benchmark::Counter(absl::ToDoubleMicroseconds(spawn), benchmark::Counter::kAvgIterations);
  state.counters["parse_us"] =
      benchmark::Counter(absl::ToDoubleMicroseconds(parse), benchmark::Counter::kAvgIterations);
}

void BM_JailedScanPerJobSpawn(benchmark::State& state) {
  JailedScan(state, sandbox::SpawnMode::kSpawnPerJob);
}

void BM_JailedScanForkServer(benchmark::State& state) {
  JailedScan(state, sandbox::SpawnMode::kForkServer);
}

// The baseline: the cheapest process a job could be, posix_spawn + waitpid of /bin/true with an
// empty environment.
void BM_SpawnTrue(benchmark::State& state) {
  char path[] = "/bin/true";
  char* argv[] = {path, nullptr};
  char* envp[] = {nullptr};
  CpuCounter cpu(state);
  for (auto _ : state) {
    pid_t pid;
    if (::posix_spawn(&pid, path, nullptr, nullptr, argv, envp) != 0) {
      state.SkipWithError("posix_spawn /bin/true");
      break;
    }
    int status;
    while (::waitpid(pid, &status, 0) < 0) {
    }
  }
  state.SetItemsProcessed(state.iterations());
}

// Real time: the worker's CPU time is not the benchmark thread's. Items/s = scans per second
// (summed over threads).
BENCHMARK(BM_InProcessScan)->UseRealTime()->Unit(benchmark::kMicrosecond)->Threads(1)->Threads(2);
BENCHMARK(BM_JailedScanPerJobSpawn)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_JailedScanForkServer)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_SpawnTrue)->UseRealTime()->Unit(benchmark::kMicrosecond)->Threads(1)->Threads(2);

// The console output, plus the one-thread means kept for the ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.threads != 1 || run.error_occurred) continue;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "mean") continue;
      const std::string name = run.run_name.function_name;
      us_[name].push_back(run.GetAdjustedRealTime());  // microseconds (Unit above)
      auto cpu = run.counters.find("cpu_us");
      if (cpu != run.counters.end()) cpu_us_[name].push_back(cpu->second.value);
    }
  }

  void PrintRatios() const {
    Print("wall-clock time", us_);
    Print("CPU time of the whole process tree", cpu_us_);
  }

 private:
  static void Print(const char* what, const std::map<std::string, std::vector<double>>& us) {
    const double in_process = Last(us, "BM_InProcessScan");
    const double per_job = Last(us, "BM_JailedScanPerJobSpawn");
    const double fork_server = Last(us, "BM_JailedScanForkServer");
    const double spawn_true = Last(us, "BM_SpawnTrue");
    if (in_process < 0 || per_job < 0 || fork_server < 0 || spawn_true <= 0) return;
    std::printf(
        "\n%s, one thread, per job: in-process %.1f us, per-job spawn %.1f us, fork "
        "server %.1f us, posix_spawn+wait of /bin/true %.1f us\n",
        what, in_process, per_job, fork_server, spawn_true);
    std::printf("  jail overhead: per-job spawn %.1f us, fork server %.1f us\n",
                per_job - in_process, fork_server - in_process);
    std::printf("  (fork server - in-process) / spawn(/bin/true) = %.3f   [target <= 0.3]\n",
                (fork_server - in_process) / spawn_true);
    std::printf(
        "  (per-job spawn - in-process) / (fork server - in-process) = %.2f   [target >= 4]\n",
        (per_job - in_process) / (fork_server - in_process));
  }

  // The last one-thread result of `name` (the mean aggregate when repeated); -1 if none.
  static double Last(const std::map<std::string, std::vector<double>>& us,
                     const std::string& name) {
    auto it = us.find(name);
    if (it == us.end() || it->second.empty()) return -1;
    return it->second.back();
  }

  std::map<std::string, std::vector<double>> us_;      // wall clock
  std::map<std::string, std::vector<double>> cpu_us_;  // CPU of the process tree
};

}  // namespace
}  // namespace ckptscan

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ckptscan::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
