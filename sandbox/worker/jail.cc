#include "sandbox/worker/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {
namespace {

absl::Status Errno(int err, const char* what) { return absl::ErrnoToStatus(err, what); }

// 1. Every descriptor but 0, 1 (and 3 when converting) is closed.
absl::Status CloseOtherDescriptors(bool output) {
  for (int fd : {kInputFd, kResultFd}) {
    if (::fcntl(fd, F_GETFD) == -1) {
      return absl::FailedPreconditionError(absl::StrCat("handed descriptor ", fd, " is not open"));
    }
  }
  if (output && ::fcntl(kOutputFd, F_GETFD) == -1) {
    return absl::FailedPreconditionError("the output descriptor 3 is not open");
  }
  const unsigned first_after = output ? kOutputFd + 1 : kOutputFd;
  bool ok = ::close_range(2, 2, 0) == 0 && ::close_range(first_after, ~0U, 0) == 0;
  if (!ok && errno == ENOSYS) {  // kernels before 5.9: close one by one up to the limit
    struct rlimit nofile;
    if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) return Errno(errno, "getrlimit");
    const int max_fd = static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1u << 20));
    for (int fd = 2; fd < max_fd; ++fd) {
      if (fd == kInputFd || fd == kResultFd || (output && fd == kOutputFd)) continue;
      (void)::close(fd);
    }
    ok = true;
  }
  if (!ok) return Errno(errno, "close_range");
  return absl::OkStatus();
}

absl::Status SetLimit(int resource, const char* name, rlim_t soft, rlim_t hard) {
  struct rlimit cur;
  if (::getrlimit(resource, &cur) != 0) return Errno(errno, "getrlimit");
  // Lowering always works; raising a hard limit needs CAP_SYS_RESOURCE, so never try.
  struct rlimit want;
  want.rlim_max = std::min(hard, cur.rlim_max);
  want.rlim_cur = std::min(soft, want.rlim_max);
  if (::setrlimit(resource, &want) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("setrlimit ", name));
  }
  return absl::OkStatus();
}

// 6. Resource limits, soft <= hard, never above what the process already has.
absl::Status SetRlimits(const JailConfig& c) {
  const rlim_t as = c.address_space_bytes;
  if (absl::Status s = SetLimit(RLIMIT_AS, "AS", as, as); !s.ok()) return s;
  const rlim_t cpu = std::max<uint64_t>(c.cpu_seconds, 1);
  if (absl::Status s = SetLimit(RLIMIT_CPU, "CPU", cpu, cpu + 1); !s.ok()) return s;
  // The result goes to a pipe, which RLIMIT_FSIZE does not cover; no file may grow, except
  // the conversion output (descriptor 3), up to its bound.
  const rlim_t fsize = c.output ? c.output_bytes : 0;
  if (absl::Status s = SetLimit(RLIMIT_FSIZE, "FSIZE", fsize, fsize); !s.ok()) return s;
  if (absl::Status s = SetLimit(RLIMIT_CORE, "CORE", 0, 0); !s.ok()) return s;
  if (absl::Status s = SetLimit(RLIMIT_NPROC, "NPROC", 0, 0); !s.ok()) return s;
  const rlim_t nofile = c.output ? kOutputFd + 1 : kResultFd + 1;
  return SetLimit(RLIMIT_NOFILE, "NOFILE", nofile, nofile);
}

// One allowlist entry and how it is added to the filter.
struct Entry {
  AllowedSyscall doc;
  std::function<int(scmp_filter_ctx, const JailConfig&)> add;
};

int Allow(scmp_filter_ctx ctx, int nr) { return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0); }

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      {{"brk", "", "glibc malloc grows the main heap"},
       [](scmp_filter_ctx ctx, const JailConfig&) { return Allow(ctx, SCMP_SYS(brk)); }},
      {{"mmap",
        "(prot & PROT_EXEC) == 0 and ((prot & PROT_WRITE) == 0 or (flags & MAP_SHARED) == 0)",
        "large allocations and the read-only mapping of the input; never executable (W^X), "
        "never a writable shared mapping (the output descriptor stays append-only: no byte "
        "already written can be rewritten)"},
       [](scmp_filter_ctx ctx, const JailConfig&) {
         const int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
                                         SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC | PROT_WRITE, 0));
         if (rc != 0) return rc;
         return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 2,
                                 SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0),
                                 SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_SHARED, 0));
       }},
      {{"munmap", "", "free of large allocations"},
       [](scmp_filter_ctx ctx, const JailConfig&) { return Allow(ctx, SCMP_SYS(munmap)); }},
      {{"mremap", "", "realloc of large allocations (cannot add PROT_EXEC)"},
       [](scmp_filter_ctx ctx, const JailConfig&) { return Allow(ctx, SCMP_SYS(mremap)); }},
      {{"madvise", "advice == MADV_DONTNEED", "glibc malloc returns freed pages"},
       [](scmp_filter_ctx ctx, const JailConfig&) {
         return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(madvise), 1,
                                 SCMP_A2(SCMP_CMP_EQ, MADV_DONTNEED));
       }},
      {{"futex", "op is FUTEX_WAIT or FUTEX_WAKE (private or not)",
        "libstdc++/glibc once-locks, e.g. on the first thrown exception (std::bad_alloc)"},
       [](scmp_filter_ctx ctx, const JailConfig&) {
         for (int op : {FUTEX_WAIT, FUTEX_WAKE, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE}) {
           const int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(futex), 1,
                                           SCMP_A1(SCMP_CMP_EQ, static_cast<scmp_datum_t>(op)));
           if (rc != 0) return rc;
         }
         return 0;
       }},
      {{"write", "fd == 1 (the result pipe); fd == 3 too when converting",
        "the result frame (and, when converting, the safetensors output on fd 3)"},
       [](scmp_filter_ctx ctx, const JailConfig& c) {
         int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1,
                                   SCMP_A0(SCMP_CMP_EQ, kResultFd));
         if (rc == 0 && c.output) {
           rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1,
                                 SCMP_A0(SCMP_CMP_EQ, kOutputFd));
         }
         return rc;
       }},
      {{"exit", "", "thread exit (glibc uses it on some exit paths)"},
       [](scmp_filter_ctx ctx, const JailConfig&) { return Allow(ctx, SCMP_SYS(exit)); }},
      {{"exit_group", "", "_exit after the frame is written"},
       [](scmp_filter_ctx ctx, const JailConfig&) { return Allow(ctx, SCMP_SYS(exit_group)); }},
      {{"rt_sigreturn", "", "return from a signal handler (harmless; none is installed)"},
       [](scmp_filter_ctx ctx, const JailConfig&) { return Allow(ctx, SCMP_SYS(rt_sigreturn)); }},
  };
  return entries;
}

// 7. Loads a program made by CompileSeccomp: after this only the allowlist works.
absl::Status LoadSeccomp(const SeccompProgram& program) {
  if (program.insns.empty() || program.insns.size() > BPF_MAXINSNS) {
    return absl::InternalError("no seccomp program to load");
  }
  struct sock_fprog prog;
  prog.len = static_cast<unsigned short>(program.insns.size());
  prog.filter = const_cast<sock_filter*>(program.insns.data());
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
    return Errno(errno, "seccomp(SECCOMP_SET_MODE_FILTER)");
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<AllowedSyscall>& SeccompAllowlist() {
  static const std::vector<AllowedSyscall> list = [] {
    std::vector<AllowedSyscall> v;
    for (const Entry& e : Entries()) v.push_back(e.doc);
    return v;
  }();
  return list;
}

void EnterNamespaces(JailLayers* layers, bool user) {
  struct Ns {
    int flag;
    bool JailLayers::*layer;
  };
  static constexpr Ns kNamespaces[] = {
      {CLONE_NEWUSER, &JailLayers::user_ns}, {CLONE_NEWNET, &JailLayers::net_ns},
      {CLONE_NEWIPC, &JailLayers::ipc_ns},   {CLONE_NEWUTS, &JailLayers::uts_ns},
      {CLONE_NEWNS, &JailLayers::mount_ns},  {CLONE_NEWPID, &JailLayers::pid_ns},
  };
  int all = 0;
  for (const Ns& ns : kNamespaces) {
    if (user || ns.flag != CLONE_NEWUSER) all |= ns.flag;
  }
  if (::unshare(all) == 0) {
    for (const Ns& ns : kNamespaces) layers->*ns.layer = (all & ns.flag) != 0;
    return;
  }
  for (const Ns& ns : kNamespaces) {
    layers->*ns.layer = (all & ns.flag) != 0 && ::unshare(ns.flag) == 0;
  }
}

// 7 (before it is loaded). The filter: default KILL_PROCESS (foreign architectures too), then
// the allowlist, compiled by libseccomp and exported as the BPF program the kernel loads.
absl::StatusOr<SeccompProgram> CompileSeccomp(bool output) {
  JailConfig config;
  config.output = output;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  absl::Cleanup release = [ctx] { seccomp_release(ctx); };
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0) {
    return Errno(-rc, "seccomp_attr_set(ACT_BADARCH)");
  }
  for (const Entry& e : Entries()) {
    if (int rc = e.add(ctx, config); rc != 0) {
      return absl::ErrnoToStatus(-rc, absl::StrCat("seccomp_rule_add(", e.doc.name, ")"));
    }
  }
  // libseccomp 2.5 exports only to a descriptor: a memfd, read back whole.
  const int raw = static_cast<int>(::syscall(SYS_memfd_create, "seccomp-bpf", MFD_CLOEXEC));
  if (raw < 0) return Errno(errno, "memfd_create");
  absl::Cleanup close_memfd = [raw] { ::close(raw); };
  if (int rc = seccomp_export_bpf(ctx, raw); rc != 0) return Errno(-rc, "seccomp_export_bpf");
  const off_t size = ::lseek(raw, 0, SEEK_END);
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0 ||
      static_cast<size_t>(size) / sizeof(sock_filter) > BPF_MAXINSNS) {
    return absl::InternalError("seccomp_export_bpf wrote no whole program");
  }
  SeccompProgram program;
  program.insns.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(raw, program.insns.data(), static_cast<size_t>(size), 0) != size) {
    return Errno(errno, "read the exported seccomp program");
  }
  return program;
}

absl::Status DieWithParent(pid_t parent) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return Errno(errno, "PR_SET_PDEATHSIG");
  if (parent != 0 && ::getppid() != parent) {
    return absl::UnavailableError("the spawner died before die-with-parent was armed");
  }
  return absl::OkStatus();
}

namespace {

// Whether /proc/self/<map> (uid_map or gid_map) maps [first, first + count) inside.
bool MapsRange(const char* map, uint32_t first, uint32_t count) {
  const int fd = ::open(map, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  ssize_t n = 0;
  size_t used = 0;
  while (used < sizeof(buf) - 1 && (n = ::read(fd, buf + used, sizeof(buf) - 1 - used)) > 0) {
    used += static_cast<size_t>(n);
  }
  ::close(fd);
  buf[used] = '\0';
  const uint64_t last = uint64_t{first} + count;
  for (char* line = buf; line != nullptr && *line != '\0';) {
    char* next = std::strchr(line, '\n');
    if (next != nullptr) *next++ = '\0';
    unsigned long long inside = 0, outside = 0, length = 0;  // NOLINT(runtime/int): sscanf
    if (std::sscanf(line, "%llu %llu %llu", &inside, &outside, &length) == 3 &&
        inside <= first && inside + length >= last) {
      return true;
    }
    line = next;
  }
  return false;
}

}  // namespace

bool CanTakeJobUids() {
  return ::geteuid() == 0 && MapsRange("/proc/self/uid_map", kJobUidBase, kJobUids) &&
         MapsRange("/proc/self/gid_map", kJobUidBase, kJobUids);
}

absl::Status HardenProcess() {
  if (::prctl(PR_SET_DUMPABLE, 0) != 0) return Errno(errno, "PR_SET_DUMPABLE");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno(errno, "PR_SET_NO_NEW_PRIVS");
  if (::prctl(PR_GET_DUMPABLE) != 0 || ::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
    return absl::FailedPreconditionError("non-dumpable / no_new_privs did not take effect");
  }
  return absl::OkStatus();
}

namespace {

// Steps 1-7 in order, shared by both ways into the jail. Step 5's namespaces are entered here,
// or, with `inherited_ns`, were entered by the fork server this process was forked from; the
// filter is compiled here, or `precompiled` by that fork server.
absl::StatusOr<JailLayers> EnterJailSteps(const JailConfig& config, pid_t parent,
                                          const JailLayers* inherited_ns,
                                          const SeccompProgram* precompiled) {
  // Every setup failure is FailedPrecondition, so that Unavailable means only "parent gone".
  const auto setup_failed = [](const absl::Status& s) {
    return absl::FailedPreconditionError(s.message());
  };
  JailLayers layers;
  if (absl::Status s = CloseOtherDescriptors(config.output); !s.ok()) return setup_failed(s);
  layers.closed_fds = true;

  if (absl::Status s = DieWithParent(parent); !s.ok()) {
    return absl::IsUnavailable(s) ? s : setup_failed(s);
  }
  layers.die_with_parent = true;

  if (absl::Status s = HardenProcess(); !s.ok()) return setup_failed(s);
  layers.non_dumpable = true;
  layers.no_new_privs = true;

  if (inherited_ns == nullptr) {
    // A per-job worker of a root daemon: a uid and gid of its own first (kJobUidBase + its pid
    // modulo kJobUids: two workers alive at once share one only if their pids agree modulo
    // 65536), so that its user namespace is an unprivileged uid's and the job holds nothing of
    // root's. Before die-with-parent and non-dumpable: a change of credentials resets both.
    if (CanTakeJobUids()) {
      const uid_t id = kJobUidBase + static_cast<uint32_t>(::getpid()) % kJobUids;
      if (::setgroups(0, nullptr) != 0 || ::setresgid(id, id, id) != 0 ||
          ::setresuid(id, id, id) != 0) {
        return setup_failed(Errno(errno, "set the job's uid"));
      }
      if (absl::Status s = DieWithParent(parent); !s.ok()) {
        return absl::IsUnavailable(s) ? s : setup_failed(s);
      }
      if (absl::Status s = HardenProcess(); !s.ok()) return setup_failed(s);
    }
    EnterNamespaces(&layers);
  } else {
    layers.user_ns = inherited_ns->user_ns;
    layers.net_ns = inherited_ns->net_ns;
    layers.ipc_ns = inherited_ns->ipc_ns;
    layers.uts_ns = inherited_ns->uts_ns;
    layers.mount_ns = inherited_ns->mount_ns;
    layers.pid_ns = inherited_ns->pid_ns;
  }

  // Compiled (it allocates) before the address-space limit is set.
  absl::StatusOr<SeccompProgram> compiled;
  if (precompiled == nullptr) {
    compiled = CompileSeccomp(config.output);
    if (!compiled.ok()) return setup_failed(compiled.status());
    precompiled = &*compiled;
  }

  if (absl::Status s = SetRlimits(config); !s.ok()) return setup_failed(s);
  layers.rlimits = true;

  if (absl::Status s = LoadSeccomp(*precompiled); !s.ok()) return setup_failed(s);
  layers.seccomp = true;
  return layers;
}

}  // namespace

absl::StatusOr<JailLayers> EnterJail(const JailConfig& config) {
  return EnterJailSteps(config, config.parent_pid, nullptr, nullptr);
}

absl::StatusOr<JailLayers> EnterForkedJail(const JailConfig& config, const PreparedJail& prepared) {
  return EnterJailSteps(config, prepared.server_pid, &prepared.namespaces,
                        config.output ? &prepared.convert_filter : &prepared.scan_filter);
}

}  // namespace ckptscan::sandbox
