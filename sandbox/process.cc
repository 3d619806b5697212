#include "sandbox/process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace ckptscan::sandbox {

absl::StatusOr<base::UniqueFd> AboveHandedSlots(base::UniqueFd fd) {
  if (fd.get() >= kFirstSourceFd) return fd;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, kFirstSourceFd);
  if (moved < 0) return absl::ErrnoToStatus(errno, "fcntl(F_DUPFD_CLOEXEC)");
  return base::UniqueFd(moved);
}

int Reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

absl::StatusOr<pid_t> SpawnClean(const std::string& path, const posix_spawn_file_actions_t* actions,
                                 const std::vector<std::string>& args, const char* what) {
  posix_spawnattr_t attr;
  if (int rc = ::posix_spawnattr_init(&attr); rc != 0) {
    return absl::ErrnoToStatus(rc, "posix_spawnattr_init");
  }
  absl::Cleanup destroy_attr = [&attr] { ::posix_spawnattr_destroy(&attr); };
  sigset_t empty;
  sigset_t all;
  sigemptyset(&empty);
  sigfillset(&all);
  int rc = ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  if (rc == 0) rc = ::posix_spawnattr_setsigmask(&attr, &empty);
  if (rc == 0) rc = ::posix_spawnattr_setsigdefault(&attr, &all);
  if (rc != 0) return absl::ErrnoToStatus(rc, "posix_spawnattr");
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char* envp[] = {nullptr};  // no environment is inherited
  pid_t pid = -1;
  rc = ::posix_spawn(&pid, path.c_str(), actions, &attr, argv.data(), envp);
  if (rc != 0) return absl::ErrnoToStatus(rc, absl::StrCat("cannot start ", what, " ", path));
  return pid;
}

}  // namespace ckptscan::sandbox
