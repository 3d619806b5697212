// The jail holds: every forbidden action dies of SIGSYS, every fate maps to its Result, and the
// trusted side survives whatever the worker does. Runs the test probe
// (sandbox/testcases/jail_probe.cc, the real EnterJail) and the real ckptscan-worker.
#include "sandbox/worker/jail.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "app/convert.h"
#include "app/scan_file.h"
#include "base/strings.h"
#include "gtest/gtest.h"
#include "rules/catalogue.h"
#include "rules/rule_set.h"
#include "sandbox/availability.h"
#include "sandbox/fork_client.h"
#include "sandbox/job.h"
#include "sandbox/protocol.h"
#include "sandbox/run.h"
#include "sandbox/spawner.h"
#include "sandbox/testcases/sanitizers.h"

namespace ckptscan::sandbox {
namespace {

#define SKIP_UNDER_SANITIZERS() \
  if (kUnderSanitizer) GTEST_SKIP() << kSanitizerSkipReason

constexpr char kSafePickle[] = "\x80\x02}q\x00.";              // {} (protocol 2)
constexpr char kEvilPickle[] = "cposix\nsystem\n(S'id'\ntR.";  // posix.system('id')

// A file holding `bytes`, opened read-only: the job's input.
struct Input {
  base::UniqueFd fd;
  uint64_t size = 0;
};

Input MakeInput(std::string_view bytes) {
  std::string path = testing::TempDir() + "/jail_test_XXXXXX";
  const int fd = ::mkstemp(path.data());
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  Input in{base::UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), bytes.size()};
  ::unlink(path.c_str());
  return in;
}

// How the tests below start their jobs: each suite runs once per mode (its fixture sets it).
SpawnMode g_spawn_mode = SpawnMode::kForkServer;

std::string ModeName(SpawnMode mode) {
  return mode == SpawnMode::kForkServer ? "fork_server" : "per_job";
}

const auto kSpawnModes = testing::Values(SpawnMode::kForkServer, SpawnMode::kSpawnPerJob);

// A suite whose parameter is (case, spawn mode).
template <typename Case>
class SpawnModeTest : public testing::TestWithParam<std::tuple<Case, SpawnMode>> {
 protected:
  void SetUp() override { g_spawn_mode = std::get<1>(this->GetParam()); }
  const Case& Param() const { return std::get<0>(this->GetParam()); }
};

JailOptions WorkerOptions() {
  JailOptions o;
  o.worker_path = CKPT_WORKER;
  o.spawn_mode = g_spawn_mode;
  return o;
}

JailOptions ProbeOptions(std::string_view mode) {
  JailOptions o;
  o.worker_path = CKPT_JAIL_PROBE;
  o.spawn_mode = g_spawn_mode;
  o.timeout = absl::Seconds(20);
  o.extra_args = {absl::StrCat("--probe=", base::AbslView(mode))};
  return o;
}

// Runs the probe as `options` say (the mode is in options.extra_args).
JailedRun RunProbe(const JailOptions& options, std::string_view input = kSafePickle) {
  Input in = MakeInput(input);
  return sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
}

JailedRun RunProbe(std::string_view mode) { return RunProbe(ProbeOptions(mode)); }

std::string Describe(const Result& r) {
  return absl::StrCat(OutcomeName(r.outcome), " signal=", r.signal, " exit=", r.exit_code, ": ",
                      r.message);
}

int CountOpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // the directory's own descriptor
}

// ------------------------------------------------------------ forbidden actions

class ForbiddenActionTest : public SpawnModeTest<const char*> {};

TEST_P(ForbiddenActionTest, DiesOfSigsysAndIsAViolation) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe(Param());
  EXPECT_EQ(run.result.outcome, Outcome::kViolation) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGSYS) << Describe(run.result);
}

INSTANTIATE_TEST_SUITE_P(
    Jail, ForbiddenActionTest,
    testing::Combine(testing::Values("open", "openat", "socket", "execve", "fork", "ptrace", "kill",
                                     "mmap_exec", "mprotect_exec", "mmap_shared_write",
                                     "write_stderr", "write_input", "read_input"),
                     kSpawnModes),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "_", ModeName(std::get<1>(info.param)));
    });

// The scenarios every spawn mode must pass (instantiated at the end of the file).
class JailTest : public testing::TestWithParam<SpawnMode> {
 protected:
  void SetUp() override { g_spawn_mode = GetParam(); }
};

TEST_P(JailTest, ViolationIsReportedDangerousWithTheSandboxViolationFinding) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions("socket");
  const JailedRun run = RunProbe(options);
  const v1::FileReport report = app::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_DANGEROUS);
  ASSERT_EQ(report.findings_size(), 1);
  EXPECT_EQ(report.findings(0).rule_id(), "sandbox.violation");
  EXPECT_EQ(report.findings(0).verdict(), v1::VERDICT_DANGEROUS);
  const rules::RuleInfo* info = rules::FindRule("sandbox.violation");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->verdict, v1::VERDICT_DANGEROUS);
}

TEST_P(JailTest, WorkerSeesNoneOfTheParentsEnvironment) {
  SKIP_UNDER_SANITIZERS();
  ASSERT_EQ(::setenv("CKPT_TEST_SECRET", "hunter2-do-not-leak", 1), 0);
  const JailedRun run = RunProbe("env");
  ::unsetenv("CKPT_TEST_SECRET");
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  EXPECT_FALSE(absl::StrContains(run.trace, "hunter2")) << run.trace;
  EXPECT_EQ(run.trace, "") << "the worker must start with an empty environment";
}

TEST_P(JailTest, DescriptorsOpenedBeforeTheJailAreClosedByIt) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe("leaked_fd");
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  EXPECT_EQ(run.trace, "fd 2: EBADF; fd 17: EBADF");
}

// ------------------------------------------------------------ fates

TEST_P(JailTest, DeadlineKillsASpinningWorkerAndReportsTimeout) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = ProbeOptions("spin");
  options.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  const JailedRun run = RunProbe(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(run.result.outcome, Outcome::kTimeout) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGKILL);
  const v1::FileReport report = app::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_TIMEOUT);
}

TEST_P(JailTest, CpuLimitStopsASpinningWorkerBeforeTheWallDeadline) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = ProbeOptions("spin");
  options.cpu_seconds = 1;
  options.timeout = absl::Seconds(30);
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kTimeout) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGXCPU) << Describe(run.result);
}

TEST_P(JailTest, AllocatingPastTheAddressSpaceLimitFailsCleanlyAsALimit) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = ProbeOptions("alloc");
  options.worker_memory = 256ull << 20;
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kLimit) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, kExitOutOfMemory);
  EXPECT_EQ(run.result.limit, JailLimit::kWorkerMemory);
  const v1::FileReport report = app::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(report.errors(0).limit_name(), "worker_memory");
}

TEST_P(JailTest, RealWorkerOutOfAddressSpaceIsALimitNotACrash) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = WorkerOptions();
  options.worker_memory = 1 << 20;  // far below what the process already maps
  // A pickle that builds a long list, so the VM must allocate.
  std::string big = "\x80\x04]q\x00(";
  for (int i = 0; i < 200000; ++i) big += "K\x01";
  big += "e.";
  Input in = MakeInput(big);
  const JailedRun run =
      sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  EXPECT_EQ(run.result.outcome, Outcome::kLimit) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, kExitOutOfMemory) << Describe(run.result);
}

TEST_P(JailTest, WorkerCrashIsSignaledAndTheTrustedSideCarriesOn) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions("crash");
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kSignaled) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGSEGV);
  const v1::FileReport report = app::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_SANDBOX);
}

TEST_P(JailTest, NonZeroExitIsFailed) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe("exit3");
  EXPECT_EQ(run.result.outcome, Outcome::kFailed) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, 3);
}

TEST_P(JailTest, WorkerThatCannotBeStartedIsFailed) {
  JailOptions options;
  options.worker_path = "/nonexistent/ckptscan-worker";
  Input in = MakeInput(kSafePickle);
  const JailedRun run =
      sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  EXPECT_EQ(run.result.outcome, Outcome::kFailed) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.result.message, "/nonexistent/ckptscan-worker"));
}

// ------------------------------------------------------------ bad frames

struct BadFrameCase {
  const char* mode;
  const char* why;  // in Result::message: the reason it was refused
};

class BadFrameTest : public SpawnModeTest<BadFrameCase> {};

TEST_P(BadFrameTest, IsBadFrameAndTheFileIsError) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions(Param().mode);
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kBadFrame) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.result.message, Param().why)) << Describe(run.result);
  EXPECT_TRUE(run.facts.members.empty());
  const v1::FileReport report = app::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_SANDBOX);
}

INSTANTIATE_TEST_SUITE_P(
    Jail, BadFrameTest,
    testing::Combine(testing::Values(BadFrameCase{"garbage", "not a worker.v1.Result"},
                                     BadFrameCase{"truncated", "truncated"},
                                     BadFrameCase{"trailing", "bytes after the declared"},
                                     BadFrameCase{"no_frame", "no result frame"},
                                     BadFrameCase{"inconsistent", "inconsistent graph"},
                                     BadFrameCase{"bad_enum", "is not a pickle::Kind"},
                                     BadFrameCase{"incomplete_jail", "incomplete jail"}),
                     kSpawnModes),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param).mode, "_", ModeName(std::get<1>(info.param)));
    });

// A declared length over the cap is refused at the header and the worker killed; the report
// names the limit (a compromised worker's or an honest one's too-large facts alike: ERROR).
TEST_P(JailTest, AFrameOverTheLimitIsErrorNamingMaxFrameBytes) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions("huge_length");
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kLimit) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.result.message, "(max_frame_bytes)")) << Describe(run.result);
  const v1::FileReport report = app::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(report.errors(0).limit_name(), "max_frame_bytes");
  EXPECT_EQ(report.errors(0).limit_value(), options.max_frame_bytes);
}

// ------------------------------------------------------------ the real worker

TEST_P(JailTest, RealWorkerScansAndReportsItsLayers) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = WorkerOptions();
  for (const auto& [bytes, verdict] : std::vector<std::pair<std::string_view, v1::Verdict>>{
           {std::string_view(kSafePickle, sizeof(kSafePickle) - 1), v1::VERDICT_SAFE},
           {kEvilPickle, v1::VERDICT_DANGEROUS},
           {"", v1::VERDICT_SAFE}}) {  // the empty file: data
    Input in = MakeInput(bytes);
    const JailedRun run =
        sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
    ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
    EXPECT_TRUE(run.layers.seccomp());
    EXPECT_TRUE(run.layers.no_new_privs());
    EXPECT_TRUE(run.layers.rlimits());
    EXPECT_TRUE(run.layers.closed_fds());
    EXPECT_EQ(app::ReportForRun(run, options, *rules::RuleSet::Default()).verdict(), verdict);
  }
  Input in = MakeInput(kSafePickle);
  const JailedRun run =
      sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  std::cout << "jail layers here: " << DescribeLayers(run.layers) << "\n";
}

// --no-sandbox: the same worker, unjailed, still in a child. It enters no layer and says so,
// the trusted side accepts that only for a run it asked to be unjailed (a jailed run that
// reports a missing layer is a bad frame: BadFrameTest/incomplete_jail), and the verdicts are
// the jailed ones. Runs under sanitizers too: nothing here needs the seccomp filter.
TEST(PerJobSpawnTest, UnjailedWorkerEntersNoLayerAndGivesTheSameVerdicts) {
  JailOptions options = WorkerOptions();
  options.unjailed = true;
  for (const auto& [bytes, verdict] : std::vector<std::pair<std::string_view, v1::Verdict>>{
           {std::string_view(kSafePickle, sizeof(kSafePickle) - 1), v1::VERDICT_SAFE},
           {kEvilPickle, v1::VERDICT_DANGEROUS}}) {
    Input in = MakeInput(bytes);
    const JailedRun run =
        sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
    ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
    EXPECT_FALSE(run.layers.seccomp());
    EXPECT_FALSE(run.layers.no_new_privs());
    EXPECT_FALSE(run.layers.rlimits());
    EXPECT_EQ(app::ReportForRun(run, options, *rules::RuleSet::Default()).verdict(), verdict);
  }
}

TEST_P(JailTest, RealWorkerReturnsTheListingForDisasm) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = WorkerOptions();
  Input in = MakeInput(kEvilPickle);
  const JailedRun run =
      sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_DISASM, {}, options);
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.trace, "GLOBAL")) << run.trace;
  EXPECT_TRUE(absl::StrContains(run.trace, "call posix.system('id')")) << run.trace;
  EXPECT_FALSE(run.trace_truncated);
}

TEST_P(JailTest, RealWorkerRefusesAnyArgumentButTheJob) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = WorkerOptions();
  options.extra_args = {"--probe=socket"};
  Input in = MakeInput(kSafePickle);
  const JailedRun run =
      sandbox::Run(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  EXPECT_EQ(run.result.outcome, Outcome::kFailed) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, kExitUsage);
}

TEST_P(JailTest, ProbeOkModeIsTheRealWorker) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe(ProbeOptions("ok"), kEvilPickle);
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  ASSERT_EQ(run.facts.members.size(), 1u);
  EXPECT_EQ(run.facts.format, "pickle");
}

// ------------------------------------------------------------ conversions

// A real torch.save checkpoint, converted by the probe with one of its bad-output modes.
absl::StatusOr<app::ConvertResult> ProbeConvert(std::string_view mode, const std::string& output) {
  app::ConvertRequest request;
  request.input = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/torch/sequential.pt";
  request.output = output;
  request.scanner_version = "test";
  return app::ConvertFile(request, *rules::RuleSet::Default(), {}, ProbeOptions(mode));
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

class BadConversionTest : public SpawnModeTest<const char*> {};

TEST_P(BadConversionTest, OutputThatIsNotThePlanIsNeverPublished) {
  SKIP_UNDER_SANITIZERS();
  // Per mode: ctest runs the two instances of a case at once.
  const std::string out = absl::StrCat(testing::TempDir(), "/bad_", Param(), "_",
                                       ModeName(g_spawn_mode), ".safetensors");
  ::unlink(out.c_str());
  absl::StatusOr<app::ConvertResult> r = ProbeConvert(Param(), out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->report.verdict(), v1::VERDICT_SAFE);  // the facts were the real ones
  EXPECT_FALSE(r->status.ok());
  EXPECT_FALSE(r->report.has_conversion());
  EXPECT_FALSE(Exists(out)) << out;
}

INSTANTIATE_TEST_SUITE_P(Jail, BadConversionTest,
                         testing::Combine(testing::Values("convert_bad_header", "convert_short",
                                                          "convert_long", "convert_nothing"),
                                          kSpawnModes),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_",
                                               ModeName(std::get<1>(info.param)));
                         });

// The trusted side fixes the structure (header, sizes, order) but cannot check tensor values
// without parsing the input itself, which it never does: a worker that writes other values
// in the planned places is indistinguishable from an input that held them (docs/sandbox.md).
TEST_P(JailTest, OtherTensorValuesInThePlannedLayoutCannotBeToldApart) {
  SKIP_UNDER_SANITIZERS();
  const std::string out =
      absl::StrCat(testing::TempDir(), "/other_data_", ModeName(g_spawn_mode), ".safetensors");
  ::unlink(out.c_str());
  absl::StatusOr<app::ConvertResult> r = ProbeConvert("convert_other_data", out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_TRUE(Exists(out));
  ::unlink(out.c_str());
}

TEST_P(JailTest, ProbeOkModeConvertsLikeTheRealWorker) {
  SKIP_UNDER_SANITIZERS();
  const std::string out =
      absl::StrCat(testing::TempDir(), "/ok_", ModeName(g_spawn_mode), ".safetensors");
  ::unlink(out.c_str());
  absl::StatusOr<app::ConvertResult> r = ProbeConvert("ok", out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(r->report.conversion().tensors(), 9u);
  EXPECT_TRUE(Exists(out));
  ::unlink(out.c_str());
}

// ------------------------------------------------------------ descriptors and children

// The processes whose parent is `pid` (from /proc: works for any process here).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    const pid_t p = static_cast<pid_t>(std::atoi(e->d_name));
    if (p <= 0) continue;
    std::ifstream stat(absl::StrCat("/proc/", p, "/stat"));
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) children.push_back(p);
  }
  ::closedir(d);
  return children;
}

// Every descendant of `pid`.
std::vector<pid_t> DescendantsOf(pid_t pid) {
  std::vector<pid_t> all;
  for (pid_t c : ChildrenOf(pid)) {
    all.push_back(c);
    for (pid_t d : DescendantsOf(c)) all.push_back(d);
  }
  return all;
}

TEST_P(JailTest, ManySpawnsLeakNoDescriptorAndNoChild) {
  SKIP_UNDER_SANITIZERS();
  // The fork server is one long-lived child with one socket: started before counting.
  (void)RunProbe("ok");
  const int before = CountOpenFds();
  for (int i = 0; i < 40; ++i) {
    for (const char* mode : {"ok", "socket", "garbage", "huge_length", "crash", "exit3"}) {
      (void)RunProbe(mode);
    }
  }
  JailOptions spin = ProbeOptions("spin");
  spin.timeout = absl::Milliseconds(50);
  for (int i = 0; i < 5; ++i) (void)RunProbe(spin);
  EXPECT_EQ(CountOpenFds(), before);
  // The only children left are fork servers (this suite's other mode may have started them),
  // and below each at most its pid-namespace half: every job's process was reaped (by this
  // process, or by its fork server before Wait() returned).
  std::vector<pid_t> servers;
  for (const char* path : {CKPT_JAIL_PROBE, CKPT_WORKER}) {
    for (pid_t helper : ForkClient::SharedHelperPids(path)) servers.push_back(helper);
  }
  for (pid_t child : ChildrenOf(::getpid())) {
    EXPECT_TRUE(std::find(servers.begin(), servers.end(), child) != servers.end())
        << "a worker was left unreaped: " << child;
  }
  for (pid_t server : servers) {
    EXPECT_LE(DescendantsOf(server).size(), 1u) << "a fork server's worker was left unreaped";
  }
  int status;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), servers.empty() ? -1 : 0);
}

// Forks an intermediate "spawner" that starts a probe and exits; this test process becomes
// the probe's parent (a subreaper) and returns its wait status.
// A jail_probe scan job in `mode`, as the spawner starts it (its parent: this process).
SpawnOptions ProbeSpawnOptions(std::string_view mode) {
  worker::v1::Job job;
  job.set_mode(worker::v1::Job::MODE_SCAN);
  job.mutable_jail()->set_address_space_bytes(8ull << 30);
  job.mutable_jail()->set_cpu_seconds(60);
  job.mutable_jail()->set_parent_pid(::getpid());
  SpawnOptions options;
  options.worker_path = CKPT_JAIL_PROBE;
  options.args = {EncodeJobArg(job), absl::StrCat("--probe=", base::AbslView(mode))};
  return options;
}

int OrphanedProbeStatus(std::string_view mode, bool wait_for_jail) {
  EXPECT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pipefd[2];
  EXPECT_EQ(::pipe(pipefd), 0);
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::close(pipefd[0]);
    const SpawnOptions options = ProbeSpawnOptions(mode);
    Input in = MakeInput(kSafePickle);
    absl::StatusOr<WorkerProcess> w =
        WorkerProcess::Start(options, std::move(in.fd), base::UniqueFd());
    if (!w.ok()) ::_exit(1);
    const pid_t pid = w->pid();
    if (wait_for_jail) {
      // Until its own filter is loaded: one more filter than this process has. Counting, not
      // "Seccomp: 2", because this test may itself run under a filter (without_namespaces),
      // which the worker inherits before its jail is set up.
      auto filters = [](pid_t p) {
        std::ifstream status(absl::StrCat("/proc/", p, "/status"));
        std::string line;
        int n = -1;
        while (std::getline(status, line)) {
          if (line.rfind("Seccomp_filters:", 0) == 0) n = std::atoi(line.c_str() + 16);
        }
        return n;
      };
      const int inherited = filters(::getpid());
      for (int i = 0; i < 5000; ++i) {
        if (filters(pid) > inherited) break;
        ::usleep(1000);
      }
    }
    (void)!::write(pipefd[1], &pid, sizeof(pid));
    ::_exit(0);  // no destructors: the WorkerProcess must not be reaped by us
  }
  ::close(pipefd[1]);
  pid_t probe = -1;
  EXPECT_EQ(::read(pipefd[0], &probe, sizeof(probe)), static_cast<ssize_t>(sizeof(probe)));
  ::close(pipefd[0]);
  int status = 0;
  EXPECT_EQ(::waitpid(middle, &status, 0), middle);
  // The orphan is now ours (subreaper); it must end by itself within a few seconds.
  int probe_status = -1;
  for (int i = 0; i < 5000; ++i) {
    if (::waitpid(probe, &probe_status, WNOHANG) == probe) break;
    ::usleep(1000);
  }
  (void)::kill(probe, SIGKILL);  // in case it did not: the assertions below then fail
  (void)::waitpid(probe, nullptr, WNOHANG);
  EXPECT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
  return probe_status;
}

TEST(PerJobSpawnTest, WorkerDiesWithItsParent) {
  SKIP_UNDER_SANITIZERS();
  const int status = OrphanedProbeStatus("spin", /*wait_for_jail=*/true);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(PerJobSpawnTest, WorkerWhoseParentDiedBeforeTheJailExitsWithoutWork) {
  SKIP_UNDER_SANITIZERS();
  const int status = OrphanedProbeStatus("late_jail", /*wait_for_jail=*/false);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kExitParentGone);
}

// ------------------------------------------------------------ the fork server

// A probe job started through `server`, not waited for.
absl::StatusOr<WorkerProcess> StartForked(ForkClient& server, std::string_view mode) {
  SpawnOptions options = ProbeSpawnOptions(mode);
  options.timeout = absl::Seconds(20);
  options.fork_server = &server;
  Input in = MakeInput(kSafePickle);
  return WorkerProcess::Start(options, std::move(in.fd), base::UniqueFd());
}

// A field of /proc/PID/status ("" if there is none, or no such process).
std::string StatusField(pid_t pid, std::string_view field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  const std::string prefix = absl::StrCat(base::AbslView(field), ":");
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t value = line.find_first_not_of(" \t", prefix.size());
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "";
}

// Until `pid` has loaded its own filter: one more than this process has (which may itself run
// under one, as under without_namespaces).
bool WaitForJail(pid_t pid) {
  const int inherited = std::atoi(StatusField(::getpid(), "Seccomp_filters").c_str());
  for (int i = 0; i < 5000; ++i) {
    if (std::atoi(StatusField(pid, "Seccomp_filters").c_str()) > inherited) return true;
    ::usleep(1000);
  }
  return false;
}

// Whether the process `pidfd` refers to ends within five seconds.
bool EndsSoon(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 5000) == 1;
}

base::UniqueFd PidfdOf(pid_t pid) {
  return base::UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

TEST(ForkServerTest, ChildIsUnderSeccompWithNoNewPrivsBeforeItReadsInput) {
  SKIP_UNDER_SANITIZERS();
  ForkClient server(CKPT_JAIL_PROBE);
  absl::StatusOr<WorkerProcess> w = StartForked(server, "spin");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_GT(w->pid(), 0);
  EXPECT_NE(w->pid(), server.helper_pid()) << "the job runs in a child, not in the server";
  ASSERT_TRUE(WaitForJail(w->pid()));
  EXPECT_EQ(StatusField(w->pid(), "Seccomp"), "2");
  EXPECT_EQ(StatusField(w->pid(), "NoNewPrivs"), "1");
  // The server itself is not under the job's filter (it must fork) but is no_new_privs.
  EXPECT_EQ(StatusField(server.helper_pid(), "NoNewPrivs"), "1");
}

TEST(ForkServerTest, AJobSeesNoneOfAnotherJobsDescriptors) {
  SKIP_UNDER_SANITIZERS();
  ForkClient server(CKPT_JAIL_PROBE);
  // A running job whose descriptors (and status pipe) the server holds while the next forks.
  absl::StatusOr<WorkerProcess> other = StartForked(server, "spin");
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(WaitForJail(other->pid()));
  absl::StatusOr<WorkerProcess> w = StartForked(server, "open_fds");
  ASSERT_TRUE(w.ok()) << w.status();
  const Result r = std::move(*w).Wait();
  ASSERT_EQ(r.outcome, Outcome::kOk) << Describe(r);
  worker::v1::Result frame;
  ASSERT_TRUE(frame.ParseFromString(r.payload));
  EXPECT_EQ(frame.trace(), "0 1") << "open descriptors of a job";
}

TEST(ForkServerTest, KilledServerIsRestartedAndTheNextJobSucceeds) {
  SKIP_UNDER_SANITIZERS();
  ForkClient server(CKPT_JAIL_PROBE);
  absl::StatusOr<WorkerProcess> w = StartForked(server, "spin");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(WaitForJail(w->pid()));
  const pid_t helper = server.helper_pid();
  ASSERT_EQ(::kill(helper, SIGKILL), 0);
  // The running job ends without a status from its server: fail closed.
  const Result lost = std::move(*w).Wait();
  EXPECT_EQ(lost.outcome, Outcome::kFailed) << Describe(lost);
  EXPECT_LT(lost.elapsed, absl::Seconds(10)) << "the job must not run to its deadline";
  EXPECT_EQ(server.restarts(), 0);
  absl::StatusOr<WorkerProcess> next = StartForked(server, "ok");
  ASSERT_TRUE(next.ok()) << next.status();
  const Result r = std::move(*next).Wait();
  EXPECT_EQ(r.outcome, Outcome::kOk) << Describe(r);
  EXPECT_EQ(server.restarts(), 1);
  EXPECT_NE(server.helper_pid(), helper);
  EXPECT_GT(server.helper_pid(), 0);
}

TEST(ForkServerTest, JobWhoseServerDiesIsKilled) {
  SKIP_UNDER_SANITIZERS();
  ForkClient server(CKPT_JAIL_PROBE);
  absl::StatusOr<WorkerProcess> w = StartForked(server, "spin");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(WaitForJail(w->pid()));
  const base::UniqueFd child = PidfdOf(w->pid());
  ASSERT_TRUE(child.valid());
  ASSERT_EQ(::kill(server.helper_pid(), SIGKILL), 0);
  EXPECT_TRUE(EndsSoon(child.get())) << "a job outlived its fork server";
}

// Jobs at once each get a helper of their own (one helper serves one request at a time), up to
// SharedPoolSize(); a released helper is reused before a new one is started.
TEST(ForkServerPoolTest, ConcurrentJobsGetHelpersOfTheirOwnUpToThePoolSize) {
  SKIP_UNDER_SANITIZERS();
  const size_t size = ForkClient::SharedPoolSize();
  std::printf("shared fork servers per worker binary here: %zu\n", size);
  ASSERT_GE(size, 1u);
  ASSERT_LE(size, ForkClient::kMaxSharedForkServers);
  std::vector<ForkClient::Lease> leases;
  std::set<ForkClient*> servers;
  for (size_t i = 0; i < size + 2; ++i) {
    leases.push_back(ForkClient::Shared(CKPT_JAIL_PROBE));
    servers.insert(leases.back().get());
    if (i < size) {
      EXPECT_EQ(servers.size(), i + 1) << "job " << i << " shared a busy helper";
    }
  }
  EXPECT_EQ(servers.size(), size) << "more helpers than the pool allows";
  // Every helper forks: a job through each of them, all running at once.
  std::vector<WorkerProcess> jobs;
  for (ForkClient* server : servers) {
    absl::StatusOr<WorkerProcess> w = StartForked(*server, "ok");
    ASSERT_TRUE(w.ok()) << w.status();
    jobs.push_back(*std::move(w));
  }
  std::set<pid_t> helpers;
  for (ForkClient* server : servers) helpers.insert(server->helper_pid());
  EXPECT_EQ(helpers.size(), size) << "two servers share one helper process";
  const std::vector<pid_t> listed = ForkClient::SharedHelperPids(CKPT_JAIL_PROBE);
  EXPECT_EQ(std::set<pid_t>(listed.begin(), listed.end()), helpers);
  for (WorkerProcess& w : jobs) {
    const Result r = std::move(w).Wait();
    EXPECT_EQ(r.outcome, Outcome::kOk) << Describe(r);
  }
  // Released: the next job goes to an idle helper, not a new one.
  leases.clear();
  ForkClient::Lease next = ForkClient::Shared(CKPT_JAIL_PROBE);
  EXPECT_TRUE(servers.count(next.get()) == 1) << "a new helper while others were idle";
  absl::StatusOr<WorkerProcess> w = StartForked(*next.get(), "ok");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(std::move(*w).Wait().outcome, Outcome::kOk);
}

// Many threads at once, each job leasing a helper through Shared (as scan -j and the daemon do):
// every job keeps its own fate (a clean job is kOk, a forbidden call a violation), whichever
// helper forked it and whatever its neighbours did; the pool stays within its size.
TEST(ForkServerPoolTest, ConcurrentLeasesKeepEachJobsFate) {
  SKIP_UNDER_SANITIZERS();
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 24;
  std::vector<std::vector<std::pair<bool, Result>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &results] {
      for (int i = 0; i < kJobsPerThread; ++i) {
        const bool hostile = (i + t) % 3 == 0;
        JailOptions options = ProbeOptions(hostile ? "socket" : "ok");
        options.spawn_mode = SpawnMode::kForkServer;
        results[t].emplace_back(hostile, RunProbe(options).result);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& per_thread : results) {
    for (const auto& [hostile, r] : per_thread) {
      EXPECT_EQ(r.outcome, hostile ? Outcome::kViolation : Outcome::kOk) << Describe(r);
    }
  }
  const std::vector<pid_t> helpers = ForkClient::SharedHelperPids(CKPT_JAIL_PROBE);
  EXPECT_GE(helpers.size(), 1u);
  EXPECT_LE(helpers.size(), ForkClient::SharedPoolSize());
}

// A hostile event in one helper (it is killed) reaches no other helper's job: the job running
// on the other helper finishes, that helper forks on without a restart, and only the killed
// helper is restarted, on its next job.
TEST(ForkServerPoolTest, AKilledHelperTouchesNoOtherHelpersJobs) {
  SKIP_UNDER_SANITIZERS();
  if (ForkClient::SharedPoolSize() < 2) {
    GTEST_SKIP() << "one CPU here: the pool has a single helper";
  }
  ForkClient::Lease first = ForkClient::Shared(CKPT_JAIL_PROBE);
  ForkClient::Lease second = ForkClient::Shared(CKPT_JAIL_PROBE);
  ASSERT_NE(first.get(), second.get());
  absl::StatusOr<WorkerProcess> running = StartForked(*first.get(), "spin");
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE(WaitForJail(running->pid()));
  absl::StatusOr<WorkerProcess> warm = StartForked(*second.get(), "ok");  // starts its helper
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(std::move(*warm).Wait().outcome, Outcome::kOk);
  const int first_restarts = first->restarts();
  const pid_t first_helper = first->helper_pid();
  ASSERT_EQ(::kill(second->helper_pid(), SIGKILL), 0);
  // The job on the first helper is untouched: still running (its status pipe has no status).
  const base::UniqueFd job = PidfdOf(running->pid());
  ASSERT_TRUE(job.valid());
  pollfd p{job.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 200), 0) << "a job died with another helper";
  absl::StatusOr<WorkerProcess> next = StartForked(*first.get(), "ok");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(std::move(*next).Wait().outcome, Outcome::kOk);
  EXPECT_EQ(first->restarts(), first_restarts);
  EXPECT_EQ(first->helper_pid(), first_helper);
  ASSERT_EQ(::kill(running->pid(), SIGKILL), 0);
  EXPECT_EQ(std::move(*running).Wait().outcome, Outcome::kSignaled);
  // Only the killed helper restarts, on its next job.
  const int second_restarts = second->restarts();
  absl::StatusOr<WorkerProcess> again = StartForked(*second.get(), "ok");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(std::move(*again).Wait().outcome, Outcome::kOk);
  EXPECT_EQ(second->restarts(), second_restarts + 1);
}

// A helper that lies in its reply (sandbox/testcases/hostile_fork_server.cc, its lie chosen by the
// name of the link it is started through): the request fails, no descriptor it sent stays open
// in the trusted process, and a lie that leaves the protocol restarts the helper.
class ForkServerReplyTest : public testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(ForkServerReplyTest, ALyingHelperLeaksNoDescriptorAndStartsNoJob) {
  SKIP_UNDER_SANITIZERS();
  const auto [lie, restarts] = GetParam();
  char dir[] = "/tmp/ckptscan_hostile_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string link = absl::StrCat(dir, "/", lie);
  ASSERT_EQ(::symlink(std::filesystem::absolute(CKPT_HOSTILE_FORK_SERVER).c_str(), link.c_str()),
            0);
  const int before = CountOpenFds();
  {
    ForkClient server(link);
    for (int attempt = 0; attempt < 3; ++attempt) {
      absl::StatusOr<WorkerProcess> w = StartForked(server, "ok");
      EXPECT_FALSE(w.ok()) << lie << ": a job was reported started";
    }
    if (restarts) {
      EXPECT_GE(server.restarts(), 1) << lie;
    } else {
      EXPECT_EQ(server.restarts(), 0) << lie;
    }
  }
  EXPECT_EQ(CountOpenFds(), before) << lie << ": a descriptor the helper sent is still open";
  ::unlink(link.c_str());
  ::rmdir(dir);
}

INSTANTIATE_TEST_SUITE_P(Lies, ForkServerReplyTest,
                         testing::Values(std::make_tuple("extra_fds", true),
                                         std::make_tuple("short_reply", true),
                                         std::make_tuple("error_with_fd", false),
                                         std::make_tuple("eof", true)),
                         [](const auto& info) { return std::string(std::get<0>(info.param)); });

// The trusted process (here a forked stand-in) exits: its fork server and the server's jobs die.
TEST(ForkServerTest, ServerAndItsJobsDieWithTheTrustedProcess) {
  SKIP_UNDER_SANITIZERS();
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::close(pipefd[0]);
    auto* server = new ForkClient(CKPT_JAIL_PROBE);  // never destroyed: the process just ends
    absl::StatusOr<WorkerProcess> w = StartForked(*server, "spin");
    pid_t pids[2] = {0, 0};
    if (w.ok() && WaitForJail(w->pid())) {
      pids[0] = server->helper_pid();
      pids[1] = w->pid();
    }
    (void)!::write(pipefd[1], pids, sizeof(pids));
    ::_exit(0);  // no destructors: nothing is killed on the way out
  }
  ::close(pipefd[1]);
  pid_t pids[2] = {0, 0};
  EXPECT_EQ(::read(pipefd[0], pids, sizeof(pids)), static_cast<ssize_t>(sizeof(pids)));
  ::close(pipefd[0]);
  int status = 0;
  EXPECT_EQ(::waitpid(middle, &status, 0), middle);
  ASSERT_GT(pids[0], 0);
  ASSERT_GT(pids[1], 0);
  // The job: gone already (pidfd_open fails), or gone within seconds.
  const base::UniqueFd job = PidfdOf(pids[1]);
  EXPECT_TRUE(!job.valid() || EndsSoon(job.get())) << "a job outlived the trusted process";
  // The server is ours now (subreaper): it must end by itself. Two ends race and both are
  // right: the death signal (SIGKILL) and, when the closed socket is seen first, exit 0 after
  // killing its jobs (fork_server.h).
  int server_status = 0;
  bool ended = false;
  for (int i = 0; i < 5000 && !ended; ++i) {
    ended = ::waitpid(pids[0], &server_status, WNOHANG) == pids[0];
    if (!ended) ::usleep(1000);
  }
  if (!ended) {
    (void)::kill(pids[0], SIGKILL);  // the assertion below fails; do not leave it running
    (void)::waitpid(pids[0], nullptr, 0);
  }
  EXPECT_TRUE(ended) << "the fork server outlived the trusted process by 5 s";
  EXPECT_TRUE((WIFSIGNALED(server_status) && WTERMSIG(server_status) == SIGKILL) ||
              (WIFEXITED(server_status) && WEXITSTATUS(server_status) == 0))
      << "fork server wait status " << server_status;
  // Its pid-namespace half, if any, was reparented here too: reap it.
  for (pid_t orphan : ChildrenOf(::getpid())) {
    std::vector<pid_t> shared = ForkClient::SharedHelperPids(CKPT_JAIL_PROBE);
    for (pid_t p : ForkClient::SharedHelperPids(CKPT_WORKER)) shared.push_back(p);
    if (std::find(shared.begin(), shared.end(), orphan) != shared.end()) continue;
    for (int i = 0; i < 5000 && ::waitpid(orphan, nullptr, WNOHANG) != orphan; ++i) ::usleep(1000);
  }
  EXPECT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
}

// ------------------------------------------------------------ policy

TEST(JailPolicyTest, SeccompIsAvailableOnThisMachine) {
  SKIP_UNDER_SANITIZERS();
  EXPECT_TRUE(CheckSeccompAvailable().ok()) << CheckSeccompAvailable();
}

TEST(JailPolicyTest, AllowlistIsExactlyTheDocumentedOne) {
  std::vector<std::string> names;
  for (const AllowedSyscall& s : SeccompAllowlist()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"brk", "mmap", "munmap", "mremap", "madvise", "futex",
                                             "write", "exit", "exit_group", "rt_sigreturn"}));
  for (const AllowedSyscall& s : SeccompAllowlist()) EXPECT_NE(std::string(s.reason), "");
}

INSTANTIATE_TEST_SUITE_P(Spawn, JailTest, kSpawnModes,
                         [](const testing::TestParamInfo<SpawnMode>& info) {
                           return ModeName(info.param);
                         });

}  // namespace
}  // namespace ckptscan::sandbox
