// The jail holds: every forbidden action dies of SIGSYS, every fate maps to its Result, and the
// trusted side survives whatever the worker does. Runs the test probe
// (worker/testing/jail_probe.cc, the real EnterJail) and the real ckptscan-worker.
#include "worker/jail.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/strings.h"
#include "gtest/gtest.h"
#include "protocol/job.h"
#include "protocol/protocol.h"
#include "rules/catalogue.h"
#include "rules/rule_set.h"
#include "trusted/availability.h"
#include "trusted/jailed_scan.h"
#include "trusted/spawner.h"
#include "worker/testing/sanitizers.h"

namespace ckptscan::sandbox {
namespace {

using pipeline::JailedRun;
using pipeline::JailOptions;

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

JailOptions ProbeOptions(std::string_view mode) {
  JailOptions o;
  o.worker_path = CKPT_JAIL_PROBE;
  o.timeout = absl::Seconds(20);
  o.extra_args = {absl::StrCat("--probe=", base::AbslView(mode))};
  return o;
}

// Runs the probe as `options` say (the mode is in options.extra_args).
JailedRun RunProbe(const JailOptions& options, std::string_view input = kSafePickle) {
  Input in = MakeInput(input);
  return pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
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

class ForbiddenActionTest : public testing::TestWithParam<const char*> {};

TEST_P(ForbiddenActionTest, DiesOfSigsysAndIsAViolation) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe(GetParam());
  EXPECT_EQ(run.result.outcome, Outcome::kViolation) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGSYS) << Describe(run.result);
}

INSTANTIATE_TEST_SUITE_P(Jail, ForbiddenActionTest,
                         testing::Values("open", "openat", "socket", "execve", "fork", "ptrace",
                                         "kill", "mmap_exec", "mprotect_exec", "mmap_shared_write",
                                         "write_stderr", "write_input", "read_input"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(JailTest, ViolationIsReportedDangerousWithTheSandboxViolationFinding) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions("socket");
  const JailedRun run = RunProbe(options);
  const v1::FileReport report = pipeline::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_DANGEROUS);
  ASSERT_EQ(report.findings_size(), 1);
  EXPECT_EQ(report.findings(0).rule_id(), "sandbox.violation");
  EXPECT_EQ(report.findings(0).verdict(), v1::VERDICT_DANGEROUS);
  const rules::RuleInfo* info = rules::FindRule("sandbox.violation");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->verdict, v1::VERDICT_DANGEROUS);
}

TEST(JailTest, WorkerSeesNoneOfTheParentsEnvironment) {
  SKIP_UNDER_SANITIZERS();
  ASSERT_EQ(::setenv("CKPT_TEST_SECRET", "hunter2-do-not-leak", 1), 0);
  const JailedRun run = RunProbe("env");
  ::unsetenv("CKPT_TEST_SECRET");
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  EXPECT_FALSE(absl::StrContains(run.trace, "hunter2")) << run.trace;
  EXPECT_EQ(run.trace, "") << "the worker must start with an empty environment";
}

TEST(JailTest, DescriptorsOpenedBeforeTheJailAreClosedByIt) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe("leaked_fd");
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  EXPECT_EQ(run.trace, "fd 2: EBADF; fd 17: EBADF");
}

// ------------------------------------------------------------ fates

TEST(JailTest, DeadlineKillsASpinningWorkerAndReportsTimeout) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = ProbeOptions("spin");
  options.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  const JailedRun run = RunProbe(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(run.result.outcome, Outcome::kTimeout) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGKILL);
  const v1::FileReport report = pipeline::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_TIMEOUT);
}

TEST(JailTest, CpuLimitStopsASpinningWorkerBeforeTheWallDeadline) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = ProbeOptions("spin");
  options.cpu_seconds = 1;
  options.timeout = absl::Seconds(30);
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kTimeout) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGXCPU) << Describe(run.result);
}

TEST(JailTest, AllocatingPastTheAddressSpaceLimitFailsCleanlyAsALimit) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options = ProbeOptions("alloc");
  options.worker_memory = 256ull << 20;
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kLimit) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, kExitOutOfMemory);
  EXPECT_EQ(run.result.limit_name, "worker_memory");
  const v1::FileReport report = pipeline::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(report.errors(0).limit_name(), "worker_memory");
}

TEST(JailTest, RealWorkerOutOfAddressSpaceIsALimitNotACrash) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options;
  options.worker_path = CKPT_WORKER;
  options.worker_memory = 1 << 20;  // far below what the process already maps
  // A pickle that builds a long list, so the VM must allocate.
  std::string big = "\x80\x04]q\x00(";
  for (int i = 0; i < 200000; ++i) big += "K\x01";
  big += "e.";
  Input in = MakeInput(big);
  const JailedRun run =
      pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  EXPECT_EQ(run.result.outcome, Outcome::kLimit) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, kExitOutOfMemory) << Describe(run.result);
}

TEST(JailTest, WorkerCrashIsSignaledAndTheTrustedSideCarriesOn) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions("crash");
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kSignaled) << Describe(run.result);
  EXPECT_EQ(run.result.signal, SIGSEGV);
  const v1::FileReport report = pipeline::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_SANDBOX);
}

TEST(JailTest, NonZeroExitIsFailed) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe("exit3");
  EXPECT_EQ(run.result.outcome, Outcome::kFailed) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, 3);
}

TEST(JailTest, WorkerThatCannotBeStartedIsFailed) {
  JailOptions options;
  options.worker_path = "/nonexistent/ckptscan-worker";
  Input in = MakeInput(kSafePickle);
  const JailedRun run =
      pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  EXPECT_EQ(run.result.outcome, Outcome::kFailed) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.result.message, "/nonexistent/ckptscan-worker"));
}

// ------------------------------------------------------------ bad frames

struct BadFrameCase {
  const char* mode;
  const char* why;  // in Result::message: the reason it was refused
};

class BadFrameTest : public testing::TestWithParam<BadFrameCase> {};

TEST_P(BadFrameTest, IsBadFrameAndTheFileIsError) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions(GetParam().mode);
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kBadFrame) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.result.message, GetParam().why)) << Describe(run.result);
  EXPECT_TRUE(run.facts.members.empty());
  const v1::FileReport report = pipeline::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_SANDBOX);
}

INSTANTIATE_TEST_SUITE_P(Jail, BadFrameTest,
                         testing::Values(BadFrameCase{"garbage", "not a worker.v1.Result"},
                                         BadFrameCase{"truncated", "truncated"},
                                         BadFrameCase{"trailing", "bytes after the declared"},
                                         BadFrameCase{"no_frame", "no result frame"},
                                         BadFrameCase{"inconsistent", "inconsistent graph"},
                                         BadFrameCase{"bad_enum", "is not a pickle::Kind"},
                                         BadFrameCase{"incomplete_jail", "incomplete jail"}),
                         [](const testing::TestParamInfo<BadFrameCase>& info) {
                           return std::string(info.param.mode);
                         });

// A declared length over the cap is refused at the header and the worker killed; the report
// names the limit (a compromised worker's or an honest one's too-large facts alike: ERROR).
TEST(JailTest, AFrameOverTheLimitIsErrorNamingMaxFrameBytes) {
  SKIP_UNDER_SANITIZERS();
  const JailOptions options = ProbeOptions("huge_length");
  const JailedRun run = RunProbe(options);
  EXPECT_EQ(run.result.outcome, Outcome::kLimit) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.result.message, "(max_frame_bytes)")) << Describe(run.result);
  const v1::FileReport report = pipeline::ReportForRun(run, options, *rules::RuleSet::Default());
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(report.errors_size(), 1);
  EXPECT_EQ(report.errors(0).code(), v1::ERROR_CODE_LIMIT);
  EXPECT_EQ(report.errors(0).limit_name(), "max_frame_bytes");
  EXPECT_EQ(report.errors(0).limit_value(), options.max_frame_bytes);
}

// ------------------------------------------------------------ the real worker

TEST(JailTest, RealWorkerScansAndReportsItsLayers) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options;
  options.worker_path = CKPT_WORKER;
  for (const auto& [bytes, verdict] : std::vector<std::pair<std::string_view, v1::Verdict>>{
           {std::string_view(kSafePickle, sizeof(kSafePickle) - 1), v1::VERDICT_SAFE},
           {kEvilPickle, v1::VERDICT_DANGEROUS},
           {"", v1::VERDICT_SAFE}}) {  // the empty file: data
    Input in = MakeInput(bytes);
    const JailedRun run =
        pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
    ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
    EXPECT_TRUE(run.layers.seccomp());
    EXPECT_TRUE(run.layers.no_new_privs());
    EXPECT_TRUE(run.layers.rlimits());
    EXPECT_TRUE(run.layers.closed_fds());
    EXPECT_EQ(pipeline::ReportForRun(run, options, *rules::RuleSet::Default()).verdict(), verdict);
  }
  Input in = MakeInput(kSafePickle);
  const JailedRun run =
      pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  std::cout << "jail layers here: " << DescribeLayers(run.layers) << "\n";
}

// --no-sandbox: the same worker, unjailed, still in a child. It enters no layer and says so,
// the trusted side accepts that only for a run it asked to be unjailed (a jailed run that
// reports a missing layer is a bad frame: BadFrameTest/incomplete_jail), and the verdicts are
// the jailed ones. Runs under sanitizers too: nothing here needs the seccomp filter.
TEST(JailTest, UnjailedWorkerEntersNoLayerAndGivesTheSameVerdicts) {
  JailOptions options;
  options.worker_path = CKPT_WORKER;
  options.unjailed = true;
  for (const auto& [bytes, verdict] : std::vector<std::pair<std::string_view, v1::Verdict>>{
           {std::string_view(kSafePickle, sizeof(kSafePickle) - 1), v1::VERDICT_SAFE},
           {kEvilPickle, v1::VERDICT_DANGEROUS}}) {
    Input in = MakeInput(bytes);
    const JailedRun run =
        pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
    ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
    EXPECT_FALSE(run.layers.seccomp());
    EXPECT_FALSE(run.layers.no_new_privs());
    EXPECT_FALSE(run.layers.rlimits());
    EXPECT_EQ(pipeline::ReportForRun(run, options, *rules::RuleSet::Default()).verdict(), verdict);
  }
}

TEST(JailTest, RealWorkerReturnsTheListingForDisasm) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options;
  options.worker_path = CKPT_WORKER;
  Input in = MakeInput(kEvilPickle);
  const JailedRun run =
      pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_DISASM, {}, options);
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  EXPECT_TRUE(absl::StrContains(run.trace, "GLOBAL")) << run.trace;
  EXPECT_TRUE(absl::StrContains(run.trace, "call posix.system('id')")) << run.trace;
  EXPECT_FALSE(run.trace_truncated);
}

TEST(JailTest, RealWorkerRefusesAnyArgumentButTheJob) {
  SKIP_UNDER_SANITIZERS();
  JailOptions options;
  options.worker_path = CKPT_WORKER;
  options.extra_args = {"--probe=socket"};
  Input in = MakeInput(kSafePickle);
  const JailedRun run =
      pipeline::RunJailedJob(std::move(in.fd), in.size, worker::v1::Job::MODE_SCAN, {}, options);
  EXPECT_EQ(run.result.outcome, Outcome::kFailed) << Describe(run.result);
  EXPECT_EQ(run.result.exit_code, kExitUsage);
}

TEST(JailTest, ProbeOkModeIsTheRealWorker) {
  SKIP_UNDER_SANITIZERS();
  const JailedRun run = RunProbe(ProbeOptions("ok"), kEvilPickle);
  ASSERT_EQ(run.result.outcome, Outcome::kOk) << Describe(run.result);
  ASSERT_EQ(run.facts.members.size(), 1u);
  EXPECT_EQ(run.facts.format, "pickle");
}

// ------------------------------------------------------------ conversions

// A real torch.save checkpoint, converted by the probe with one of its bad-output modes.
absl::StatusOr<pipeline::ConvertResult> ProbeConvert(std::string_view mode,
                                                     const std::string& output) {
  pipeline::ConvertRequest request;
  request.input = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/torch/sequential.pt";
  request.output = output;
  request.scanner_version = "test";
  return pipeline::ConvertFileJailed(request, *rules::RuleSet::Default(), {}, ProbeOptions(mode));
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

class BadConversionTest : public testing::TestWithParam<const char*> {};

TEST_P(BadConversionTest, OutputThatIsNotThePlanIsNeverPublished) {
  SKIP_UNDER_SANITIZERS();
  const std::string out = absl::StrCat(testing::TempDir(), "/bad_", GetParam(), ".safetensors");
  ::unlink(out.c_str());
  absl::StatusOr<pipeline::ConvertResult> r = ProbeConvert(GetParam(), out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->report.verdict(), v1::VERDICT_SAFE);  // the facts were the real ones
  EXPECT_FALSE(r->status.ok());
  EXPECT_FALSE(r->report.has_conversion());
  EXPECT_FALSE(Exists(out)) << out;
}

INSTANTIATE_TEST_SUITE_P(Jail, BadConversionTest,
                         testing::Values("convert_bad_header", "convert_short", "convert_long",
                                         "convert_nothing"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// The trusted side fixes the structure (header, sizes, order) but cannot check tensor values
// without parsing the input itself, which it never does: a worker that writes other values
// in the planned places is indistinguishable from an input that held them (docs/sandbox.md).
TEST(JailTest, OtherTensorValuesInThePlannedLayoutCannotBeToldApart) {
  SKIP_UNDER_SANITIZERS();
  const std::string out = testing::TempDir() + "/other_data.safetensors";
  ::unlink(out.c_str());
  absl::StatusOr<pipeline::ConvertResult> r = ProbeConvert("convert_other_data", out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_TRUE(Exists(out));
  ::unlink(out.c_str());
}

TEST(JailTest, ProbeOkModeConvertsLikeTheRealWorker) {
  SKIP_UNDER_SANITIZERS();
  const std::string out = testing::TempDir() + "/ok.safetensors";
  ::unlink(out.c_str());
  absl::StatusOr<pipeline::ConvertResult> r = ProbeConvert("ok", out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(r->report.conversion().tensors(), 9u);
  EXPECT_TRUE(Exists(out));
  ::unlink(out.c_str());
}

// ------------------------------------------------------------ descriptors and children

TEST(JailTest, ManySpawnsLeakNoDescriptorAndNoChild) {
  SKIP_UNDER_SANITIZERS();
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
  int status;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "a worker was left unreaped";
  EXPECT_EQ(errno, ECHILD);
}

// Forks an intermediate "spawner" that starts a probe and exits; this test process becomes
// the probe's parent (a subreaper) and returns its wait status.
int OrphanedProbeStatus(std::string_view mode, bool wait_for_jail) {
  EXPECT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pipefd[2];
  EXPECT_EQ(::pipe(pipefd), 0);
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::close(pipefd[0]);
    worker::v1::Job job;
    job.set_mode(worker::v1::Job::MODE_SCAN);
    job.mutable_jail()->set_address_space_bytes(8ull << 30);
    job.mutable_jail()->set_cpu_seconds(60);
    job.mutable_jail()->set_parent_pid(::getpid());
    SpawnOptions options;
    options.worker_path = CKPT_JAIL_PROBE;
    options.args = {EncodeJobArg(job), absl::StrCat("--probe=", base::AbslView(mode))};
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

TEST(JailTest, WorkerDiesWithItsParent) {
  SKIP_UNDER_SANITIZERS();
  const int status = OrphanedProbeStatus("spin", /*wait_for_jail=*/true);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(JailTest, WorkerWhoseParentDiedBeforeTheJailExitsWithoutWork) {
  SKIP_UNDER_SANITIZERS();
  const int status = OrphanedProbeStatus("late_jail", /*wait_for_jail=*/false);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kExitParentGone);
}

// ------------------------------------------------------------ policy

TEST(JailTest, SeccompIsAvailableOnThisMachine) {
  SKIP_UNDER_SANITIZERS();
  EXPECT_TRUE(CheckSeccompAvailable().ok()) << CheckSeccompAvailable();
}

TEST(JailTest, AllowlistIsExactlyTheDocumentedOne) {
  std::vector<std::string> names;
  for (const AllowedSyscall& s : SeccompAllowlist()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"brk", "mmap", "munmap", "mremap", "madvise", "futex",
                                             "write", "exit", "exit_group", "rt_sigreturn"}));
  for (const AllowedSyscall& s : SeccompAllowlist()) EXPECT_NE(std::string(s.reason), "");
}

}  // namespace
}  // namespace ckptscan::sandbox
