// peak_rss OUT -- COMMAND [ARG...]: runs COMMAND, waits for it and writes to OUT the peak
// resident set size, in KiB, of COMMAND and every descendant it waited for (wait4's
// ru_maxrss: for ckptscan, the larger of the CLI and its jailed worker). Exits with
// COMMAND's exit code (128 + N if a signal N ended it).
//
// Why a tool: Linux keeps ru_maxrss across execve, so a command spawned straight from a big
// process (a Python test that just built a 50 MB input) reports that process's peak, not its
// own. Started from this small binary, the count starts small.
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 4 || std::strcmp(argv[2], "--") != 0) {
    std::fprintf(stderr, "usage: peak_rss OUT -- COMMAND [ARG...]\n");
    return 2;
  }
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("peak_rss: fork");
    return 2;
  }
  if (pid == 0) {
    execvp(argv[3], argv + 3);
    std::fprintf(stderr, "peak_rss: %s: %s\n", argv[3], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) {
      std::perror("peak_rss: wait4");
      return 2;
    }
  }
  FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr || std::fprintf(out, "%ld\n", usage.ru_maxrss) < 0 || std::fclose(out) != 0) {
    std::fprintf(stderr, "peak_rss: cannot write %s\n", argv[1]);
    return 2;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
