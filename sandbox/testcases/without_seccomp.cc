// without_seccomp: runs a command on a "kernel without seccomp", for the CLI's startup check.
//
//   without_seccomp PROGRAM ARG...
//
// Installs a filter (default: allow) under which seccomp(2) and prctl(PR_SET_SECCOMP) fail
// with ENOSYS / EINVAL, as on a kernel built without it, then execs PROGRAM. Test-only.
#include <errno.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("usage: without_seccomp PROGRAM ARG...\n", stderr);
    return 64;
  }
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(seccomp), 0) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(prctl), 1,
                       SCMP_A0(SCMP_CMP_EQ, PR_SET_SECCOMP)) != 0 ||
      seccomp_load(ctx) != 0) {
    std::fputs("without_seccomp: cannot install the filter\n", stderr);
    return 70;
  }
  seccomp_release(ctx);
  execv(argv[1], argv + 1);
  std::perror("without_seccomp: execv");
  return 127;
}
