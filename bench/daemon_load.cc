// daemon_load: a load generator for ckptscand (bench/README.md, "Daemon
// load"). A benchmark, not a test: it reports numbers and asserts none.
//
// It starts its own ckptscand (posix_spawn; a unix socket and a state directory in a fresh
// temporary directory, --root = the directories of the files), then for each --file:
//   1. the baseline: jailed scans without gRPC (app::ScanFile, the same worker binary
//      as the daemon's), --requests of them from one thread per core, then from one thread;
//   2. for each count C in --clients: C threads, each with its own stub (on one shared channel,
//      or on a channel and connection of its own), calling ScanPath (or ScanUpload with
//      --mode upload) until --requests calls were made in all or --max-seconds passed;
//   3. the all-cores baseline again: the phases are compared with the mean of the two, and
//      their difference shows how much the machine changed under the run.
// It reports scans per second, latency percentiles of the successful calls, errors by status
// code, verdicts, the ratio to the baseline, CPU per scan (the daemon's own threads, its
// workers, this client; from /proc/PID/stat and getrusage, 10 ms ticks) and the daemon's VmRSS
// (/proc/PID/status) before the first request and after each phase.
// --soak N instead runs a warm-up and then N requests at --soak-clients clients on the first
// file, sampling the daemon's RSS as it goes, and reports the growth.
// At the end the daemon gets SIGTERM and must exit 0.
//
// Bounded: every phase stops at --requests (or --soak) calls or --max-seconds, whichever comes
// first, and every call has a deadline; SIGINT/SIGTERM stop the phase in progress, and the
// daemon is still stopped cleanly. Loopback only: the one target is unix:TMP/d.sock. No flag
// takes an address, and --daemon-arg refuses the flags that would make the daemon listen
// elsewhere (--tcp, --no-socket, --socket, --config).
//
// Exit status: 0 every call succeeded and the daemon exited 0; 1 some call failed (the table
// says which status codes); 2 a setup failure, or the daemon did not exit 0; 64 usage.
//
//   build-int/bench/daemon_load --file small.pt --file medium.pt --json /tmp/load.json
//   build-int/bench/daemon_load --file small.pt --soak 10000 --max-seconds 600
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "app/scan_file.h"
#include "bench/proc_cpu.h"
#include "ckptscan/v1/scanner.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rules/rule_set.h"
#include "sandbox/availability.h"
#include "sandbox/run.h"

extern char** environ;

namespace ckptscan::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Bounds on what one run may ask for.
constexpr int kMaxClients = 256;
constexpr uint64_t kMaxRequests = 1'000'000;
constexpr double kMaxSeconds = 3600;
constexpr uint64_t kMaxUploadFileBytes = 512ull << 20;  // --mode upload holds the file in memory
constexpr uint64_t kChunkBytes = 1u << 20;              // the daemon's upload chunk limit
// A call may outlive its phase's --max-seconds by this much (a scan in flight finishes).
constexpr absl::Duration kCallGrace = absl::Seconds(30);
constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr double kDrainSeconds = 10;  // the daemon's --drain-seconds
constexpr absl::Duration kSoakSampleEvery = absl::Milliseconds(200);

std::atomic<bool> g_stop{false};  // SIGINT / SIGTERM: end the phase in progress

struct Options {
#ifdef CKPT_DAEMON
  std::string daemon = CKPT_DAEMON;
#else
  std::string daemon;
#endif
  std::vector<std::string> files;
  std::vector<int> clients = {1, 8, 64};
  uint64_t requests = 2000;
  double max_seconds = 60;
  std::string mode = "path";
  std::string channels = "shared";
  uint64_t soak = 0;
  int soak_clients = 8;
  uint64_t soak_warmup = 500;
  int baseline_threads = 0;
  bool no_baseline = false;
  std::vector<std::string> daemon_args;
  std::string json_path;
};

// ---- /proc ---------------------------------------------------------------------------------

absl::StatusOr<std::string> ReadSmall(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return absl::ErrnoToStatus(errno, "open " + path);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && out.size() < (1u << 20)) {
    out.append(buf, n);
  }
  std::fclose(f);
  return out;
}

// What we watch of a process: memory, threads, descriptors, CPU.
struct ProcSample {
  uint64_t vm_rss_kb = 0;
  uint64_t rss_anon_kb = 0;
  uint64_t vm_hwm_kb = 0;
  uint64_t threads = 0;
  uint64_t fds = 0;
  double cpu_s = 0;  // utime + stime, all threads
  // cutime + cstime (the children it reaped: per-job workers) plus its live descendants' (the
  // fork servers and the jobs they reaped).
  double children_cpu_s = 0;
};

absl::StatusOr<ProcSample> SampleProcess(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid);
  ProcSample s;
  absl::StatusOr<std::string> status = ReadSmall(dir + "/status");
  if (!status.ok()) return status.status();
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view key = line.substr(0, colon);
    absl::string_view value = line.substr(colon + 1);
    if (absl::EndsWith(value, " kB")) value.remove_suffix(3);
    value = absl::StripAsciiWhitespace(value);
    uint64_t* field = key == "VmRSS"     ? &s.vm_rss_kb
                      : key == "RssAnon" ? &s.rss_anon_kb
                      : key == "VmHWM"   ? &s.vm_hwm_kb
                      : key == "Threads" ? &s.threads
                                         : nullptr;
    if (field != nullptr && !absl::SimpleAtoi(value, field)) {
      return absl::InternalError(absl::StrCat(dir, "/status: bad ", key));
    }
  }
  absl::StatusOr<std::string> stat = ReadSmall(dir + "/stat");
  if (!stat.ok()) return stat.status();
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return absl::InternalError(dir + "/stat: no ')'");
  // Fields after "pid (comm)": [0] is field 3 (state), so utime (14) .. cstime (17) are 11..14.
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(*stat).substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t ticks[4];
  if (f.size() < 15) return absl::InternalError(dir + "/stat: too short");
  for (int i = 0; i < 4; ++i) {
    if (!absl::SimpleAtoi(f[11 + i], &ticks[i])) return absl::InternalError(dir + "/stat");
  }
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  s.cpu_s = static_cast<double>(ticks[0] + ticks[1]) / hz;
  s.children_cpu_s =
      static_cast<double>(ticks[2] + ticks[3]) / hz + bench::LiveDescendantsCpuSeconds(pid);
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++s.fds;
  }
  return s;
}

json ToJson(const ProcSample& s) {
  return {{"vm_rss_kb", s.vm_rss_kb},
          {"rss_anon_kb", s.rss_anon_kb},
          {"vm_hwm_kb", s.vm_hwm_kb},
          {"threads", s.threads},
          {"fds", s.fds}};
}

double SelfCpuSeconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

std::string LoadAverage() {
  absl::StatusOr<std::string> s = ReadSmall("/proc/loadavg");
  if (!s.ok()) return "?";
  std::vector<absl::string_view> f = absl::StrSplit(*s, ' ');
  return f.size() >= 3 ? absl::StrCat(f[0], " ", f[1], " ", f[2]) : "?";
}

// ---- the daemon ----------------------------------------------------------------------------

// Our ckptscand: started in a temporary directory of its own, stopped with SIGTERM. If it is
// still running when this object goes away (a failure in between), it is killed.
class DaemonProcess final {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const std::string& binary, const std::string& worker, const std::vector<std::string>& roots,
      uint32_t max_queued, const std::vector<std::string>& extra) {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string tmp = (base / "ckpt_daemon_load_XXXXXX").string();
    if (::mkdtemp(tmp.data()) == nullptr) return absl::ErrnoToStatus(errno, "mkdtemp");
    std::unique_ptr<DaemonProcess> d(new DaemonProcess(tmp));
    std::vector<std::string> argv = {binary};
    auto flag = [&argv](const char* name, std::string value) {
      argv.push_back(name);
      argv.push_back(std::move(value));
    };
    flag("--socket", tmp + "/d.sock");
    flag("--state-dir", tmp + "/state");
    flag("--worker", worker);
    flag("--max-queued", absl::StrCat(max_queued));
    // Every client is this one uid: in --mode upload each needs an upload place of its own, and
    // in every mode a job place of its own.
    flag("--max-uploads", absl::StrCat(std::max(1u, max_queued)));
    flag("--max-uploads-per-caller", absl::StrCat(std::max(1u, max_queued)));
    flag("--max-jobs-per-caller", absl::StrCat(std::max(1u, max_queued)));
    flag("--drain-seconds", absl::StrCat(kDrainSeconds));
    for (const std::string& r : roots) flag("--root", r);
    argv.insert(argv.end(), extra.begin(), extra.end());
    d->command_ = absl::StrJoin(argv, " ");
    if (absl::Status s = d->Spawn(argv); !s.ok()) return s;
    return d;
  }

  ~DaemonProcess() {
    if (pid_ > 0) {
      (void)::kill(pid_, SIGKILL);
      int status;
      (void)::waitpid(pid_, &status, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
  }

  pid_t pid() const { return pid_; }
  std::string target() const { return "unix:" + tmp_ + "/d.sock"; }
  const std::string& command() const { return command_; }

  // Nothing yet, or the daemon's exit if it has already gone.
  absl::Status CheckAlive() {
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(absl::StrCat("ckptscand exited (", DescribeWait(status),
                                                        "); its log ends:\n", LogTail()));
    }
    return absl::OkStatus();
  }

  // SIGTERM, then waits for the drain; OK only for exit status 0.
  absl::Status Stop() {
    if (pid_ <= 0) return absl::FailedPreconditionError("ckptscand is not running");
    (void)::kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(kDrainSeconds + 10);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        (void)::kill(pid_, SIGKILL);
        (void)::waitpid(pid_, &status, 0);
        pid_ = -1;
        return absl::DeadlineExceededError("ckptscand did not exit after SIGTERM; killed");
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    pid_ = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("ckptscand after SIGTERM: ", DescribeWait(status),
                                            "; its log ends:\n", LogTail()));
  }

  std::string LogTail() const {
    absl::StatusOr<std::string> log = ReadSmall(tmp_ + "/ckptscand.log");
    if (!log.ok()) return "(no log)";
    return log->size() > 2000 ? log->substr(log->size() - 2000) : *log;
  }

 private:
  explicit DaemonProcess(std::string tmp) : tmp_(std::move(tmp)) {}

  static std::string DescribeWait(int status) {
    if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
    return "unknown status";
  }

  // stdin /dev/null, stdout and stderr (the daemon's per-job log) to TMP/ckptscand.log; a
  // process group of its own (a terminal's ^C reaches us, and we stop it); default signals.
  absl::Status Spawn(const std::vector<std::string>& argv) {
    const std::string log = tmp_ + "/ckptscand.log";
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&defaults, s);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, argv[0].c_str(), &actions, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      pid_ = -1;
      return absl::ErrnoToStatus(rc, "posix_spawn " + argv[0]);
    }
    return absl::OkStatus();
  }

  std::string tmp_;
  std::string command_;
  pid_t pid_ = -1;
};

// The only way this tool makes a channel: to a unix socket.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const std::string& target,
                                                       bool own_connection) {
  if (!absl::StartsWith(target, "unix:")) {
    return absl::InvalidArgumentError(target + ": loopback only (unix:PATH)");
  }
  grpc::ChannelArguments args;
  // Channels with equal arguments share their connection (the global subchannel pool); a
  // local pool gives this channel a connection of its own.
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// Waits until the daemon answers Admin.Status (our uid is an admin by default).
absl::StatusOr<v1::StatusResponse> WaitReady(DaemonProcess* d) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = Connect(d->target(), false);
  if (!ch.ok()) return ch.status();
  std::unique_ptr<v1::Admin::Stub> admin = v1::Admin::NewStub(*ch);
  const absl::Time deadline = absl::Now() + kStartTimeout;
  grpc::Status last;
  while (absl::Now() < deadline) {
    if (absl::Status s = d->CheckAlive(); !s.ok()) return s;
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
    v1::StatusResponse r;
    last = admin->Status(&ctx, v1::StatusRequest(), &r);
    if (last.ok()) return r;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("ckptscand did not answer Admin.Status within 30 s: ", last.error_message(),
                   "; its log ends:\n", d->LogTail()));
}

absl::StatusOr<v1::StatusResponse> AdminStatus(const std::string& target) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = Connect(target, false);
  if (!ch.ok()) return ch.status();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::StatusResponse r;
  grpc::Status s = v1::Admin::NewStub(*ch)->Status(&ctx, v1::StatusRequest(), &r);
  if (!s.ok()) return absl::UnavailableError("Admin.Status: " + s.error_message());
  return r;
}

// ---- phases --------------------------------------------------------------------------------

// gRPC's codes are absl's (both are google.rpc.Code).
std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// What a set of calls (or baseline scans) gave.
struct Tally {
  uint64_t calls = 0;
  std::vector<double> latency_ms;  // successful calls only
  std::map<std::string, uint64_t> errors;
  std::map<std::string, uint64_t> verdicts;

  void Merge(Tally&& o) {
    calls += o.calls;
    latency_ms.insert(latency_ms.end(), o.latency_ms.begin(), o.latency_ms.end());
    for (auto& [k, v] : o.errors) errors[k] += v;
    for (auto& [k, v] : o.verdicts) verdicts[k] += v;
  }
  uint64_t failed() const {
    uint64_t n = 0;
    for (const auto& [k, v] : errors) n += v;
    return n;
  }
};

// Nearest rank; `sorted` ascending.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

struct Measured {
  Tally tally;
  double seconds = 0;
  bool stopped_by_time = false;  // before the budget was spent: --max-seconds, or a signal
  const char* StoppedNote() const {
    if (!stopped_by_time) return "";
    return g_stop.load() ? " (stopped by a signal)" : " (stopped by --max-seconds)";
  }
  double scans_per_s() const {
    return seconds > 0 ? static_cast<double>(tally.latency_ms.size()) / seconds : 0;
  }
};

json LatencyJson(const std::vector<double>& sorted) {
  return {{"p50", Percentile(sorted, 50)},
          {"p90", Percentile(sorted, 90)},
          {"p99", Percentile(sorted, 99)},
          {"max", sorted.empty() ? 0 : sorted.back()}};
}

// Runs `threads` threads of `body(thread, call_deadline, &tally)` calls (true: it succeeded),
// sharing a budget of `total` calls and a deadline. `sample` (may be empty) is called every
// kSoakSampleEvery with the calls done so far.
template <typename Body>
Measured RunThreads(int threads, uint64_t total, absl::Duration max_time, Body body,
                    const std::function<void(uint64_t)>& sample = nullptr) {
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<int> running{threads};
  std::atomic<bool> timed_out{false};
  std::vector<Tally> tallies(static_cast<size_t>(threads));
  std::latch go(1);
  absl::Time deadline;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Tally& tally = tallies[static_cast<size_t>(t)];
      go.wait();
      while (true) {
        if (g_stop.load() || absl::Now() >= deadline) {
          timed_out = true;
          break;
        }
        if (next.fetch_add(1) >= total) break;
        const Clock::time_point t0 = Clock::now();
        if (body(t, deadline + kCallGrace, &tally)) {
          tally.latency_ms.push_back(
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
        ++tally.calls;
        ++done;
      }
      --running;
    });
  }
  const Clock::time_point start = Clock::now();
  deadline = absl::Now() + max_time;
  go.count_down();
  while (sample && running.load() > 0) {
    sample(done.load());
    absl::SleepFor(kSoakSampleEvery);
  }
  for (std::thread& th : pool) th.join();
  Measured m;
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  m.stopped_by_time = timed_out.load() && next.load() < total;
  for (Tally& t : tallies) m.tally.Merge(std::move(t));
  std::sort(m.tally.latency_ms.begin(), m.tally.latency_ms.end());
  if (sample) sample(done.load());
  return m;
}

struct FileUnderTest {
  std::string path;  // absolute, symbolic links resolved
  std::string name;  // as given
  uint64_t size = 0;
  std::string bytes;  // --mode upload only
};

struct BaselineResult {
  int threads = 0;
  Measured m;
  double trusted_cpu_s = 0;  // this process: open, hash, spawn, decode, rules
  double worker_cpu_s = 0;   // the workers (reaped children, and the fork servers' jobs)
};

BaselineResult RunBaseline(const FileUnderTest& file, int threads, const Options& o,
                           const sandbox::JailOptions& jail, const rules::RuleSet& rules) {
  BaselineResult b;
  b.threads = threads;
  const double self0 = SelfCpuSeconds(RUSAGE_SELF);
  const double child0 =
      SelfCpuSeconds(RUSAGE_CHILDREN) + bench::LiveDescendantsCpuSeconds(::getpid());
  b.m = RunThreads(threads, o.requests, absl::Seconds(o.max_seconds),
                   [&](int, absl::Time, Tally* tally) {
                     absl::StatusOr<v1::FileReport> r = app::ScanFile(file.path, rules, {}, jail);
                     if (!r.ok()) {
                       ++tally->errors[absl::StatusCodeToString(r.status().code())];
                       return false;
                     }
                     ++tally->verdicts[v1::Verdict_Name(r->verdict())];
                     return true;
                   });
  b.trusted_cpu_s = SelfCpuSeconds(RUSAGE_SELF) - self0;
  b.worker_cpu_s =
      SelfCpuSeconds(RUSAGE_CHILDREN) + bench::LiveDescendantsCpuSeconds(::getpid()) - child0;
  return b;
}

grpc::Status Upload(v1::Scanner::Stub* stub, grpc::ClientContext* ctx, const FileUnderTest& file,
                    v1::Report* report) {
  std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> writer = stub->ScanUpload(ctx, report);
  v1::UploadChunk chunk;
  chunk.mutable_header()->set_name(file.name);
  chunk.mutable_header()->set_size(file.bytes.size());
  bool ok = writer->Write(chunk);
  for (size_t off = 0; ok && off < file.bytes.size(); off += kChunkBytes) {
    chunk.set_data(file.bytes.data() + off, std::min<size_t>(kChunkBytes, file.bytes.size() - off));
    ok = writer->Write(chunk);
  }
  if (ok) writer->WritesDone();
  return writer->Finish();
}

struct PhaseResult {
  std::string file;
  int clients = 0;
  bool per_client_channel = false;
  Measured m;
  ProcSample before, after;
  double client_cpu_s = 0;
  uint64_t refused = 0;  // the daemon's jobs_refused over the phase
};

// `clients` threads calling the daemon; `sample` as for RunThreads.
absl::StatusOr<PhaseResult> RunPhase(DaemonProcess* d, const FileUnderTest& file, int clients,
                                     bool per_client_channel, uint64_t total, const Options& o,
                                     const std::function<void(uint64_t)>& sample = nullptr) {
  PhaseResult p;
  p.file = file.name;
  p.clients = clients;
  p.per_client_channel = per_client_channel;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Scanner::Stub>> stubs;
  for (int c = 0; c < clients; ++c) {
    if (c == 0 || per_client_channel) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = Connect(d->target(), per_client_channel);
      if (!ch.ok()) return ch.status();
      // Connected before the clock starts.
      if (!(*ch)->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
        return absl::UnavailableError("could not connect to " + d->target());
      }
      channels.push_back(*ch);
    }
    stubs.push_back(v1::Scanner::NewStub(channels.back()));
  }
  absl::StatusOr<v1::StatusResponse> status0 = AdminStatus(d->target());
  absl::StatusOr<ProcSample> before = SampleProcess(d->pid());
  if (!status0.ok()) return status0.status();
  if (!before.ok()) return before.status();
  p.before = *before;
  const bool upload = o.mode == "upload";
  v1::ScanPathRequest request;
  request.set_path(file.path);
  const double self0 = SelfCpuSeconds(RUSAGE_SELF);
  p.m = RunThreads(
      clients, total, absl::Seconds(o.max_seconds),
      [&](int t, absl::Time call_deadline, Tally* tally) {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(call_deadline));
        v1::Report report;
        v1::Scanner::Stub* stub = stubs[static_cast<size_t>(t)].get();
        const grpc::Status s =
            upload ? Upload(stub, &ctx, file, &report) : stub->ScanPath(&ctx, request, &report);
        if (!s.ok()) {
          ++tally->errors[CodeName(s.error_code())];
          return false;
        }
        ++tally->verdicts[v1::Verdict_Name(report.verdict())];
        return true;
      },
      sample);
  p.client_cpu_s = SelfCpuSeconds(RUSAGE_SELF) - self0;
  absl::StatusOr<ProcSample> after = SampleProcess(d->pid());
  absl::StatusOr<v1::StatusResponse> status1 = AdminStatus(d->target());
  if (!after.ok()) return after.status();
  if (!status1.ok()) return status1.status();
  p.after = *after;
  p.refused = status1->jobs_refused() - status0->jobs_refused();
  return p;
}

// ---- output --------------------------------------------------------------------------------

std::string Counts(const std::map<std::string, uint64_t>& m) {
  if (m.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [k, v] : m) {
    parts.push_back(absl::StrCat(absl::StripPrefix(k, "VERDICT_"), ":", v));
  }
  return absl::StrJoin(parts, ",");
}

double PerScanMs(double seconds, const Measured& m) {
  return m.tally.latency_ms.empty() ? 0 : seconds * 1e3 / m.tally.latency_ms.size();
}

void PrintBaseline(const char* when, const BaselineResult& b) {
  std::printf(
      "  baseline %-8s (ScanFile, no gRPC, %d thread%s): %zu scans in %.2f s = "
      "%.0f scans/s; p50 %.2f ms, p99 %.2f ms; CPU ms/scan trusted/worker %.2f/%.2f; "
      "verdicts %s; errors %s%s\n",
      when, b.threads, b.threads == 1 ? "" : "s", b.m.tally.latency_ms.size(), b.m.seconds,
      b.m.scans_per_s(), Percentile(b.m.tally.latency_ms, 50), Percentile(b.m.tally.latency_ms, 99),
      PerScanMs(b.trusted_cpu_s, b.m), PerScanMs(b.worker_cpu_s, b.m),
      Counts(b.m.tally.verdicts).c_str(), Counts(b.m.tally.errors).c_str(), b.m.StoppedNote());
}

json BaselineJson(const BaselineResult& b) {
  return {
      {"threads", b.threads},
      {"scans", b.m.tally.latency_ms.size()},
      {"seconds", b.m.seconds},
      {"scans_per_s", b.m.scans_per_s()},
      {"latency_ms", LatencyJson(b.m.tally.latency_ms)},
      {"cpu_ms_per_scan",
       {{"trusted", PerScanMs(b.trusted_cpu_s, b.m)}, {"worker", PerScanMs(b.worker_cpu_s, b.m)}}},
      {"errors", b.m.tally.errors},
      {"verdicts", b.m.tally.verdicts},
      {"stopped_by_time", b.m.stopped_by_time}};
}

void PrintPhaseHeader() {
  std::printf("  %-7s %-8s %6s %7s %8s %7s %7s %7s %8s  %-22s %-12s %9s %s\n", "clients", "channel",
              "calls", "s", "scans/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
              "CPU ms/scan dmn/wkr/cli", "errors", "RSS KiB", "verdicts");
}

void PrintPhase(const PhaseResult& p) {
  const std::vector<double>& l = p.m.tally.latency_ms;
  const std::string cpu =
      absl::StrFormat("%.2f/%.2f/%.2f", PerScanMs(p.after.cpu_s - p.before.cpu_s, p.m),
                      PerScanMs(p.after.children_cpu_s - p.before.children_cpu_s, p.m),
                      PerScanMs(p.client_cpu_s, p.m));
  std::printf(
      "  %-7d %-8s %6llu %7.2f %8.0f %7.2f %7.2f %7.2f %8.2f  %-22s %-12s %9llu "
      "%s%s%s\n",
      p.clients, p.per_client_channel ? "own" : "shared",
      static_cast<unsigned long long>(p.m.tally.calls), p.m.seconds, p.m.scans_per_s(),
      Percentile(l, 50), Percentile(l, 90), Percentile(l, 99), l.empty() ? 0 : l.back(),
      cpu.c_str(), Counts(p.m.tally.errors).c_str(),
      static_cast<unsigned long long>(p.after.vm_rss_kb), Counts(p.m.tally.verdicts).c_str(),
      p.m.StoppedNote(), p.refused ? absl::StrCat(" refused:", p.refused).c_str() : "");
}

json PhaseJson(const PhaseResult& p) {
  const double ok = static_cast<double>(p.m.tally.latency_ms.size());
  return {
      {"file", p.file},
      {"clients", p.clients},
      {"channel", p.per_client_channel ? "per-client" : "shared"},
      {"calls", p.m.tally.calls},
      {"ok", p.m.tally.latency_ms.size()},
      {"seconds", p.m.seconds},
      {"scans_per_s", p.m.scans_per_s()},
      {"latency_ms", LatencyJson(p.m.tally.latency_ms)},
      {"errors", p.m.tally.errors},
      {"verdicts", p.m.tally.verdicts},
      {"stopped_by_time", p.m.stopped_by_time},
      {"jobs_refused", p.refused},
      {"cpu_ms_per_scan",
       ok == 0 ? json{}
               : json{{"daemon", (p.after.cpu_s - p.before.cpu_s) * 1e3 / ok},
                      {"workers", (p.after.children_cpu_s - p.before.children_cpu_s) * 1e3 / ok},
                      {"client", p.client_cpu_s * 1e3 / ok}}},
      {"daemon_before", ToJson(p.before)},
      {"daemon_after", ToJson(p.after)}};
}

// ---- main ----------------------------------------------------------------------------------

absl::StatusOr<FileUnderTest> LoadFile(const std::string& name, bool read_bytes) {
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::canonical(name, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(name, ": ", ec.message()));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, name);
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(name + ": not a regular file");
  FileUnderTest f{path.string(), name, static_cast<uint64_t>(st.st_size), ""};
  if (read_bytes) {
    if (f.size > kMaxUploadFileBytes) {
      return absl::ResourceExhaustedError(name + ": over 512 MiB, too big for --mode upload");
    }
    FILE* in = std::fopen(f.path.c_str(), "rbe");
    if (in == nullptr) return absl::ErrnoToStatus(errno, name);
    f.bytes.resize(f.size);
    const size_t got = std::fread(f.bytes.data(), 1, f.size, in);
    std::fclose(in);
    if (got != f.size) return absl::DataLossError(name + ": short read");
  }
  return f;
}

absl::Status CheckDaemonArgs(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    for (const char* refused :
         {"--tcp", "--no-socket", "--socket", "--config", "--state-dir", "--worker", "--max-queued",
          "--max-uploads", "--max-uploads-per-caller", "--max-jobs-per-caller"}) {
      if (a == refused || absl::StartsWith(a, absl::StrCat(refused, "="))) {
        return absl::InvalidArgumentError(
            absl::StrCat("--daemon-arg ", a,
                         ": not allowed (this tool owns the socket, state and queue; "
                         "loopback only)"));
      }
    }
  }
  return absl::OkStatus();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "daemon_load: %s\n", std::string(s.message()).c_str());
  return 2;
}

int Run(int argc, char** argv) {
  Options o;
  CLI::App app{
      "daemon_load: load generator for ckptscand (bench/README.md, \"Daemon load\"). "
      "Starts its own daemon on a unix socket, measures jailed scans without gRPC as "
      "the baseline, then drives the daemon with concurrent clients."};
  app.add_option("--daemon", o.daemon, "The ckptscand binary (its ckptscan-worker beside it)")
      ->type_name("PATH")
      ->capture_default_str();
  app.add_option("--file", o.files, "A checkpoint to scan (repeatable)")
      ->type_name("PATH")
      ->required();
  app.add_option("--clients", o.clients, "Concurrent clients per phase")
      ->delimiter(',')
      ->check(CLI::Range(1, kMaxClients))
      ->capture_default_str();
  app.add_option("--requests", o.requests, "Calls per phase (and baseline scans per file)")
      ->check(CLI::Range(uint64_t{1}, kMaxRequests))
      ->capture_default_str();
  app.add_option("--max-seconds", o.max_seconds, "Time limit per phase")
      ->check(CLI::Range(0.1, kMaxSeconds))
      ->capture_default_str();
  app.add_option("--mode", o.mode, "ScanPath (by path) or ScanUpload (streamed)")
      ->check(CLI::IsMember({"path", "upload"}))
      ->capture_default_str();
  app.add_option("--channels", o.channels,
                 "shared: one channel (one connection) for all clients; per-client: a channel "
                 "and connection each; both: every phase twice")
      ->check(CLI::IsMember({"shared", "per-client", "both"}))
      ->capture_default_str();
  app.add_option("--soak", o.soak,
                 "Instead of the phases: a warm-up, then N calls at --soak-clients on the first "
                 "file, with the daemon's RSS sampled throughout")
      ->check(CLI::Range(uint64_t{0}, kMaxRequests));
  app.add_option("--soak-clients", o.soak_clients)
      ->check(CLI::Range(1, kMaxClients))
      ->capture_default_str();
  app.add_option("--soak-warmup", o.soak_warmup, "Calls before the soak's first RSS reading")
      ->check(CLI::Range(uint64_t{0}, kMaxRequests))
      ->capture_default_str();
  app.add_option("--baseline-threads", o.baseline_threads, "Baseline threads (default: cores)")
      ->check(CLI::Range(1, kMaxClients));
  app.add_flag("--no-baseline", o.no_baseline, "Skip the baseline");
  app.add_option("--daemon-arg", o.daemon_args,
                 "One more ckptscand argument (repeatable), e.g. --daemon-arg=--max-running=1")
      ->allow_extra_args(false);
  app.add_option("--json", o.json_path, "Also write the numbers as JSON")->type_name("FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 64;
  }
  if (o.daemon.empty()) {
    std::fprintf(stderr, "daemon_load: --daemon is required (this build knows no ckptscand)\n");
    return 64;
  }
  if (absl::Status s = CheckDaemonArgs(o.daemon_args); !s.ok()) return Fail(s);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, also into a file or a pipe

  // Before any thread: SIGINT/SIGTERM are taken by one thread and end the phase in progress.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  std::atomic<bool> finished{false};
  std::thread signal_thread([&] {
    const timespec tick{0, 200'000'000};
    while (!finished.load()) {
      if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
        std::fprintf(stderr, "daemon_load: signal: ending the run\n");
        g_stop = true;
      }
    }
  });
  struct Joiner {
    std::atomic<bool>* finished;
    std::thread* t;
    ~Joiner() {
      *finished = true;
      t->join();
    }
  } joiner{&finished, &signal_thread};

  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int baseline_threads = o.baseline_threads > 0 ? o.baseline_threads : cores;
  std::vector<FileUnderTest> files;
  std::set<std::string> roots;
  for (const std::string& name : o.files) {
    absl::StatusOr<FileUnderTest> f = LoadFile(name, o.mode == "upload");
    if (!f.ok()) return Fail(f.status());
    roots.insert(std::filesystem::path(f->path).parent_path().string());
    files.push_back(*std::move(f));
  }
  const std::string worker_guess =
      (std::filesystem::path(o.daemon).parent_path() / sandbox::kWorkerBinaryName).string();
  absl::StatusOr<std::string> worker = sandbox::FindWorkerBinary(worker_guess);
  if (!worker.ok()) return Fail(worker.status());
  sandbox::JailOptions jail;
  jail.worker_path = *worker;
  const std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();

  int max_clients = o.soak > 0 ? o.soak_clients : 0;
  for (int c : o.clients) max_clients = std::max(max_clients, c);
  json out;
  utsname uts{};
  ::uname(&uts);
  out["machine"] = {{"cores", cores}, {"kernel", uts.release}, {"load_before", LoadAverage()}};
  std::printf("daemon_load: %d cores, kernel %s, load average %s\n", cores, uts.release,
              LoadAverage().c_str());

  absl::StatusOr<std::unique_ptr<DaemonProcess>> started =
      DaemonProcess::Start(o.daemon, *worker, {roots.begin(), roots.end()},
                           static_cast<uint32_t>(max_clients), o.daemon_args);
  if (!started.ok()) return Fail(started.status());
  DaemonProcess* d = started->get();
  absl::StatusOr<v1::StatusResponse> ready = WaitReady(d);
  if (!ready.ok()) return Fail(ready.status());
  absl::StatusOr<ProcSample> idle = SampleProcess(d->pid());
  if (!idle.ok()) return Fail(idle.status());
  std::printf("ckptscand pid %d: max_running %u, max_queued %u, jail: %s\n", d->pid(),
              ready->max_running(), ready->max_queued(), ready->jail_layers().c_str());
  std::printf("  %s\n", d->command().c_str());
  std::printf(
      "daemon RSS before the first request: VmRSS %llu KiB (RssAnon %llu), %llu "
      "threads, %llu fds\n",
      static_cast<unsigned long long>(idle->vm_rss_kb),
      static_cast<unsigned long long>(idle->rss_anon_kb),
      static_cast<unsigned long long>(idle->threads), static_cast<unsigned long long>(idle->fds));
  out["daemon"] = {{"command", d->command()},
                   {"max_running", ready->max_running()},
                   {"max_queued", ready->max_queued()},
                   {"jail", ready->jail_layers()},
                   {"idle", ToJson(*idle)}};
  out["mode"] = o.mode;

  uint64_t failed_calls = 0;
  if (o.soak > 0) {
    const FileUnderTest& file = files.front();
    std::printf("\nsoak: %s (%llu bytes), %s, %d clients: %llu warm-up calls, then %llu\n",
                file.name.c_str(), static_cast<unsigned long long>(file.size), o.mode.c_str(),
                o.soak_clients, static_cast<unsigned long long>(o.soak_warmup),
                static_cast<unsigned long long>(o.soak));
    json soak = {{"file", file.name},
                 {"clients", o.soak_clients},
                 {"requests", o.soak},
                 {"warmup", o.soak_warmup}};
    if (o.soak_warmup > 0) {
      absl::StatusOr<PhaseResult> warm = RunPhase(d, file, o.soak_clients, false, o.soak_warmup, o);
      if (!warm.ok()) return Fail(warm.status());
      failed_calls += warm->m.tally.failed();
      soak["after_warmup"] = ToJson(warm->after);
    }
    struct Point {
      uint64_t calls, vm_rss_kb, rss_anon_kb;
    };
    std::vector<Point> trace;
    absl::StatusOr<PhaseResult> p =
        RunPhase(d, file, o.soak_clients, false, o.soak, o, [&](uint64_t done) {
          absl::StatusOr<ProcSample> s = SampleProcess(d->pid());
          if (s.ok()) trace.push_back({done, s->vm_rss_kb, s->rss_anon_kb});
        });
    if (!p.ok()) return Fail(p.status());
    failed_calls += p->m.tally.failed();
    PrintPhaseHeader();
    PrintPhase(*p);
    const int64_t growth =
        static_cast<int64_t>(p->after.vm_rss_kb) - static_cast<int64_t>(p->before.vm_rss_kb);
    std::printf(
        "  RSS (VmRSS KiB) idle %llu, before the soak %llu, after %llu: growth %+lld "
        "KiB over %llu calls; RssAnon %llu -> %llu; threads %llu -> %llu; fds %llu -> "
        "%llu\n",
        static_cast<unsigned long long>(idle->vm_rss_kb),
        static_cast<unsigned long long>(p->before.vm_rss_kb),
        static_cast<unsigned long long>(p->after.vm_rss_kb), static_cast<long long>(growth),
        static_cast<unsigned long long>(p->m.tally.calls),
        static_cast<unsigned long long>(p->before.rss_anon_kb),
        static_cast<unsigned long long>(p->after.rss_anon_kb),
        static_cast<unsigned long long>(p->before.threads),
        static_cast<unsigned long long>(p->after.threads),
        static_cast<unsigned long long>(p->before.fds),
        static_cast<unsigned long long>(p->after.fds));
    // The trace at every tenth of the calls.
    std::string line;
    json points = json::array();
    size_t i = 0;
    for (int k = 0; k <= 10; ++k) {
      const uint64_t want = o.soak * static_cast<uint64_t>(k) / 10;
      while (i + 1 < trace.size() && trace[i].calls < want) ++i;
      if (i >= trace.size()) break;
      const Point& pt = trace[i];
      if (!points.empty() && points.back()["calls"] == pt.calls) continue;
      absl::StrAppend(&line, " ", pt.calls, ":", pt.vm_rss_kb, "/", pt.rss_anon_kb);
      points.push_back(
          {{"calls", pt.calls}, {"vm_rss_kb", pt.vm_rss_kb}, {"rss_anon_kb", pt.rss_anon_kb}});
    }
    std::printf("  by calls done, VmRSS/RssAnon KiB:%s\n", line.c_str());
    soak["phase"] = PhaseJson(*p);
    soak["rss_growth_kb"] = growth;
    soak["rss_trace"] = points;
    out["soak"] = soak;
  } else {
    out["files"] = json::array();
    std::vector<bool> channel_kinds;
    if (o.channels != "per-client") channel_kinds.push_back(false);
    if (o.channels != "shared") channel_kinds.push_back(true);
    for (const FileUnderTest& file : files) {
      if (g_stop) break;
      std::printf("\n%s (%llu bytes), %s\n", file.name.c_str(),
                  static_cast<unsigned long long>(file.size),
                  o.mode == "upload" ? "ScanUpload" : "ScanPath");
      json fj = {{"file", file.name}, {"bytes", file.size}, {"phases", json::array()}};
      // The baseline on every core before and after the phases (their mean is what the phases
      // are compared with; the two differ by how much the machine changed under us), and on
      // one thread (what one client at a time could get at most).
      double base = 0;
      std::optional<BaselineResult> before, one;
      if (!o.no_baseline) {
        before = RunBaseline(file, baseline_threads, o, jail, *rules);
        PrintBaseline("before", *before);
        fj["baseline_before"] = BaselineJson(*before);
        if (baseline_threads > 1) {
          one = RunBaseline(file, 1, o, jail, *rules);
          PrintBaseline("1 thread", *one);
          fj["baseline_1_thread"] = BaselineJson(*one);
        }
      }
      PrintPhaseHeader();
      std::vector<PhaseResult> phases;
      for (int c : o.clients) {
        for (bool own : channel_kinds) {
          if (g_stop) break;
          absl::StatusOr<PhaseResult> p = RunPhase(d, file, c, own, o.requests, o);
          if (!p.ok()) return Fail(p.status());
          failed_calls += p->m.tally.failed();
          PrintPhase(*p);
          fj["phases"].push_back(PhaseJson(*p));
          phases.push_back(*std::move(p));
        }
      }
      if (before.has_value() && !g_stop) {
        const BaselineResult after = RunBaseline(file, baseline_threads, o, jail, *rules);
        PrintBaseline("after", after);
        fj["baseline_after"] = BaselineJson(after);
        base = (before->m.scans_per_s() + after.m.scans_per_s()) / 2;
        fj["baseline_scans_per_s"] = base;
        std::printf("  baseline scans/s (mean of before and after): %.0f\n", base);
        for (size_t i = 0; i < phases.size(); ++i) {
          const double ratio = phases[i].m.scans_per_s() / base;
          fj["phases"][i]["ratio_to_baseline"] = ratio;
          std::printf("  %d clients, %s channel: %.0f scans/s = %.0f%% of the baseline\n",
                      phases[i].clients, phases[i].per_client_channel ? "own" : "shared",
                      phases[i].m.scans_per_s(), 100 * ratio);
        }
      }
      out["files"].push_back(fj);
    }
  }

  absl::StatusOr<v1::StatusResponse> last = AdminStatus(d->target());
  if (last.ok()) {
    json failures = json::object();
    for (const v1::WorkerFailure& w : last->worker_failures()) failures[w.kind()] = w.count();
    out["daemon"]["worker_failures"] = failures;
    out["daemon"]["jobs_refused"] = last->jobs_refused();
    if (!last->worker_failures().empty()) {
      std::printf("daemon worker failures: %s\n", failures.dump().c_str());
    }
  }
  const absl::Status stopped = d->Stop();
  out["daemon"]["exit"] = stopped.ok() ? "0 after SIGTERM" : std::string(stopped.message());
  out["machine"]["load_after"] = LoadAverage();
  std::printf("\nckptscand after SIGTERM: %s; load average %s\n",
              stopped.ok() ? "exit 0" : std::string(stopped.message()).c_str(),
              LoadAverage().c_str());
  if (!o.json_path.empty()) {
    const std::string text = out.dump(2) + "\n";
    FILE* f = std::fopen(o.json_path.c_str(), "we");
    if (f == nullptr) return Fail(absl::ErrnoToStatus(errno, "open " + o.json_path));
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !written) {
      return Fail(absl::DataLossError("could not write " + o.json_path));
    }
  }
  if (!stopped.ok()) return 2;
  if (g_stop) return 2;
  return failed_calls > 0 ? 1 : 0;
}

}  // namespace
}  // namespace ckptscan::bench

int main(int argc, char** argv) { return ckptscan::bench::Run(argc, argv); }
