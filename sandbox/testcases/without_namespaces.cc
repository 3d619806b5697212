// without_namespaces: runs a command as in a container under the runtime's default seccomp
// profile (Docker, containerd and CRI-O `RuntimeDefault`), which forbids creating namespaces to
// a process without CAP_SYS_ADMIN. For the test that the jail holds without its namespace layer
// (sandbox/without_namespaces_test.sh; docs/operations.md, "The jail in a pod").
//
//   without_namespaces PROGRAM ARG...
//
// Installs a filter (default: allow) under which, as in moby's profiles/seccomp/default.json:
//   unshare(2), setns(2)                          fail with EPERM (whatever the flags)
//   clone(2) with any CLONE_NEW* flag              fails with EPERM (plain clones, threads and
//                                                  posix_spawn's CLONE_VM|CLONE_VFORK still work)
//   clone3(2)                                      fails with ENOSYS (its flags sit in memory a
//                                                  filter cannot read; glibc falls back to clone)
// then execs PROGRAM. The filter is inherited across fork and exec, so every worker the program
// spawns runs under it too, beneath its own jail filter. Test-only.
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

namespace {

// Every namespace flag clone(2) accepts (moby masks 0x7E020000, the same set).
constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                        CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET};

bool InstallFilter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return false;
  bool ok = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 0) == 0 &&
            seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setns), 0) == 0 &&
            seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) == 0;
  // clone's first argument is the flags on x86-64 and arm64 alike. One rule per flag: a filter
  // can test "these bits are set" but not "any of these bits is set".
  for (uint64_t flag : kNamespaceFlags) {
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)) == 0;
  }
  ok = ok && seccomp_load(ctx) == 0;
  seccomp_release(ctx);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("usage: without_namespaces PROGRAM ARG...\n", stderr);
    return 64;
  }
  if (!InstallFilter()) {
    std::fputs("without_namespaces: cannot install the filter\n", stderr);
    return 70;
  }
  execv(argv[1], argv + 1);
  std::perror("without_namespaces: execv");
  return 127;
}
