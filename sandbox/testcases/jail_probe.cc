// jail_probe: a test-only worker that enters the real jail (EnterJail, with the
// job's JailConfig, exactly as ckptscan-worker does) and then does one thing the tests name:
//
//   jail_probe --job=HEX --probe=MODE
//   jail_probe --fork-server=PID      (a fork server whose jobs are probes: their arguments
//                                      are --job=HEX --probe=MODE)
//
// Forbidden actions (each must die of SIGSYS): open openat socket execve fork ptrace kill
//   mmap_exec mprotect_exec mmap_shared_write write_stderr write_input read_input
// Reports (a valid frame whose listing text says what the probe saw):
//   env        the environment the worker was given
//   leaked_fd  mmap of descriptors opened before the jail (must be closed: EBADF)
//   open_fds   which descriptors below 1024 are open (mmap does not fail with EBADF)
// Fates: ok (the real worker's job), spin, alloc, crash, exit3, late_jail (sleeps before the
//   jail, so the parent can die first)
// Bad frames: garbage huge_length truncated trailing no_frame inconsistent bad_enum
//   incomplete_jail
// Bad conversions (MODE_CONVERT; the facts are the real ones, the output descriptor gets
//   something else than the plan): convert_bad_header convert_short convert_long
//   convert_nothing convert_other_data
// Never built into anything but tests.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "core/convert/convert.h"
#include "sandbox/frame.h"
#include "sandbox/job.h"
#include "sandbox/protocol.h"
#include "sandbox/worker/extract_facts.h"
#include "sandbox/worker/facts_encoder.h"
#include "sandbox/worker/jail.h"
#include "sandbox/worker/worker.h"

extern char** environ;

namespace ckptscan::sandbox {
namespace {

constexpr int kExitProbeUsage = 90;
constexpr int kExitNotKilled = 91;  // a forbidden call returned instead of killing

worker::v1::Result BaseResult(const JailLayers& layers) {
  worker::v1::Result r;
  r.mutable_facts()->set_format("probe");
  *r.mutable_layers() = LayersToProto(layers);
  return r;
}

int WriteResult(const worker::v1::Result& r) {
  return WriteFrame(kResultFd, r.SerializeAsString()).ok() ? 0 : kExitNotKilled;
}

int Report(const JailLayers& layers, std::string text) {
  worker::v1::Result r = BaseResult(layers);
  r.set_trace(std::move(text));
  return WriteResult(r);
}

void WriteRaw(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(kResultFd, bytes.data(), bytes.size());
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

std::string MmapOutcome(int fd) {
  void* p = ::mmap(nullptr, 1, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p != MAP_FAILED) return absl::StrCat("fd ", fd, ": open");
  return absl::StrCat("fd ", fd, ": ", errno == EBADF ? "EBADF" : std::to_string(errno));
}

// The real facts, and an output that is not what they plan (the trusted side must refuse it).
// The input's size, taken before the jail (fstat is not allowed in it).
uint64_t input_size = 0;

int BadConversion(std::string_view mode, const worker::v1::Job& job, const JailLayers& layers) {
  if (input_size == 0) return kExitProbeUsage;
  void* addr = ::mmap(nullptr, input_size, PROT_READ, MAP_PRIVATE, kInputFd, 0);
  if (addr == MAP_FAILED) return kExitProbeUsage;
  const std::string_view input(static_cast<const char*>(addr), input_size);
  const FileFacts facts = ExtractFacts(input, {});
  absl::StatusOr<convert::Plan> plan = convert::PlanFromSpec(facts, job.convert());
  if (!plan.ok()) return kExitProbeUsage;
  convert::StringSink sink;
  if (!convert::WriteSafetensors(input, facts, *plan, sink).ok()) return kExitProbeUsage;
  std::string out = sink.str();
  const size_t header = plan->header.bytes.size();
  if (mode == "convert_bad_header") {
    const size_t at = out.find("\"pt\"", 8);
    if (at == std::string::npos || at >= header) return kExitProbeUsage;
    out[at + 1] = 'q';  // same length, still valid JSON and safetensors: not the plan
  } else if (mode == "convert_short") {
    out.pop_back();
  } else if (mode == "convert_long") {
    out.append(8, '\0');
  } else if (mode == "convert_nothing") {
    out.clear();
  } else if (mode == "convert_other_data") {
    if (out.size() == header) return kExitProbeUsage;
    out[header] = static_cast<char>(out[header] ^ 0x40);  // same structure, other values
  } else {
    return kExitProbeUsage;
  }
  std::string_view rest = out;
  while (!rest.empty()) {
    const ssize_t n = ::write(kOutputFd, rest.data(), rest.size());
    if (n <= 0) return kExitProbeUsage;
    rest.remove_prefix(static_cast<size_t>(n));
  }
  worker::v1::Result r;
  EncodeFacts(facts, r.mutable_facts());
  *r.mutable_layers() = LayersToProto(layers);
  return WriteResult(r);
}

int Probe(std::string_view mode, const worker::v1::Job& job, const JailLayers& layers) {
  char path[] = "/etc/passwd";
  if (mode == "open") {
    (void)::open(path, O_RDONLY);  // glibc: openat(2)
    return kExitNotKilled;
  }
  if (mode == "openat") {
    (void)::syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    return kExitNotKilled;
  }
  if (mode == "socket") {
    (void)::socket(AF_INET, SOCK_STREAM, 0);
    return kExitNotKilled;
  }
  if (mode == "execve") {
    char* argv[] = {path, nullptr};
    char* envp[] = {nullptr};
    (void)::execve("/bin/true", argv, envp);
    return kExitNotKilled;
  }
  if (mode == "fork") {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    return kExitNotKilled;
  }
  if (mode == "ptrace") {
    (void)::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    return kExitNotKilled;
  }
  if (mode == "kill") {
    (void)::kill(1, 0);
    return kExitNotKilled;
  }
  if (mode == "mmap_exec") {
    (void)::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return kExitNotKilled;
  }
  if (mode == "mmap_shared_write") {
    // What a worker would need to rewrite bytes it already wrote to its output descriptor.
    (void)::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return kExitNotKilled;
  }
  if (mode == "mprotect_exec") {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    (void)::mprotect(p, 4096, PROT_READ | PROT_EXEC);
    return kExitNotKilled;
  }
  if (mode == "write_stderr") {
    (void)::write(2, "x", 1);
    return kExitNotKilled;
  }
  if (mode == "write_input") {
    (void)::write(kInputFd, "x", 1);
    return kExitNotKilled;
  }
  if (mode == "read_input") {
    char c;
    (void)::read(kInputFd, &c, 1);
    return kExitNotKilled;
  }
  if (mode == "env") {
    std::string all;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) absl::StrAppend(&all, *e, "\n");
    return Report(layers, all);
  }
  if (mode == "leaked_fd") {
    // Descriptors 2 and 17 were opened (without O_CLOEXEC) before the jail: see main().
    return Report(layers, absl::StrCat(MmapOutcome(2), "; ", MmapOutcome(17)));
  }
  if (mode == "open_fds") {
    std::string open;
    for (int fd = 0; fd < 1024; ++fd) {
      if (::mmap(nullptr, 1, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED && errno == EBADF) {
        continue;
      }
      absl::StrAppend(&open, open.empty() ? "" : " ", fd);
    }
    return Report(layers, open);
  }
  if (mode == "spin") {
    volatile uint64_t i = 0;
    for (;;) {
      i = i + 1;
    }
  }
  if (mode == "alloc") {
    // Twice the address-space limit: malloc must fail (not crash, not succeed), and operator
    // new must throw std::bad_alloc, which the worker maps to kExitOutOfMemory.
    const size_t huge = static_cast<size_t>(job.jail().address_space_bytes()) * 2;
    void* p = std::malloc(huge);
    if (p != nullptr) return kExitNotKilled;
    try {
      std::vector<char> v(huge);
      v[huge - 1] = 1;
      return kExitNotKilled;
    } catch (const std::bad_alloc&) {
      return kExitOutOfMemory;
    }
  }
  if (mode == "crash") {
    volatile int* volatile nowhere = nullptr;
    *nowhere = 1;
    return kExitNotKilled;
  }
  if (mode == "exit3") return 3;
  if (mode == "garbage") {
    WriteRaw(FrameHeader(16));
    WriteRaw(std::string(16, '\xff'));
    return 0;
  }
  if (mode == "huge_length") {
    WriteRaw(FrameHeader(uint64_t{1} << 62));
    WriteRaw("x");
    return 0;
  }
  if (mode == "truncated") {
    const std::string payload = BaseResult(layers).SerializeAsString();
    WriteRaw(FrameHeader(payload.size() + 100));
    WriteRaw(payload);
    return 0;
  }
  if (mode == "trailing") {
    if (WriteResult(BaseResult(layers)) != 0) return kExitNotKilled;
    WriteRaw("trailing");
    return 0;
  }
  if (mode == "no_frame") return 0;
  if (mode == "inconsistent" || mode == "bad_enum") {
    worker::v1::Result r = BaseResult(layers);
    worker::v1::PickleFacts* p = r.mutable_facts()->add_members()->mutable_stream()->add_pickles();
    p->set_root(0xFFFFFFFFu);
    p->set_parent(-1);
    p->set_parent_node(0xFFFFFFFFu);
    worker::v1::Node* n = p->mutable_graph()->add_nodes();
    n->set_kind(mode == "bad_enum" ? 99 : 7 /* kTuple */);
    if (mode == "inconsistent") n->add_items(999);
    return WriteResult(r);
  }
  if (mode.starts_with("convert_")) return BadConversion(mode, job, layers);
  if (mode == "incomplete_jail") {
    worker::v1::Result r = BaseResult(layers);
    r.mutable_layers()->set_seccomp(false);
    return WriteResult(r);
  }
  return kExitProbeUsage;
}

int ProbeJob(int argc, char** argv, const JailEntry& enter) {
  if (argc != 3) return kExitProbeUsage;
  const std::string_view flag = "--probe=";
  const std::string_view arg = argv[2];
  if (arg.substr(0, flag.size()) != flag) return kExitProbeUsage;
  const std::string_view mode = arg.substr(flag.size());
  if (mode == "ok") return WorkerJob(2, argv, enter);  // the real worker, unchanged

  absl::StatusOr<worker::v1::Job> job = DecodeJobArg(argv[1]);
  if (!job.ok()) return kExitUsage;
  if (mode == "leaked_fd") {
    // Opened by the worker itself, without O_CLOEXEC: only EnterJail can close them.
    if (::dup2(kInputFd, 2) != 2 || ::dup2(kInputFd, 17) != 17) return kExitProbeUsage;
  }
  if (mode == "late_jail") ::usleep(1'000'000);  // long enough for the test's parent to exit
  struct stat st;
  if (::fstat(kInputFd, &st) == 0 && S_ISREG(st.st_mode)) {
    input_size = static_cast<uint64_t>(st.st_size);
  }
  absl::StatusOr<JailLayers> layers = enter(JailConfigFromJob(*job));
  if (!layers.ok()) {
    return absl::IsUnavailable(layers.status()) ? kExitParentGone : kExitJailSetup;
  }
  if (mode == "late_jail") return 0;
  return Probe(mode, *job, *layers);
}

int ProbeMain(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]).starts_with(kForkServerFlag)) {
    return ForkServer::Serve(argc, argv, ProbeJob);  // each job a probe, forked as a worker's
  }
  return ProbeJob(argc, argv, EnterJail);
}

}  // namespace
}  // namespace ckptscan::sandbox

int main(int argc, char** argv) { ::_exit(ckptscan::sandbox::ProbeMain(argc, argv)); }
