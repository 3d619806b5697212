#include "sandbox/worker/fork_server.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "sandbox/job.h"
#include "sandbox/protocol.h"
#include "sandbox/worker/jail.h"

namespace ckptscan::sandbox {
namespace {

// Received job descriptors are moved at or above this in the child before they are put in
// place, so that no dup2 onto 0, 1 or 3 clobbers another. As low as it can be: the server may
// run under a small RLIMIT_NOFILE (F_DUPFD past it fails).
constexpr int kFirstSourceFd = kOutputFd + 1;

struct Request {
  std::vector<std::string> args;
  std::vector<base::UniqueFd> fds;  // input, result, status[, output]
};

enum class Received { kRequest, kMalformed, kPeerGone };

// One request from kForkServerFd. kPeerGone: the trusted side closed its end (or the socket
// failed): the server ends.
// Where a request is read: in a job's child (see StartNext), never in the server but to refuse
// one it cannot fork for (Discard wipes it then).
char g_request[kMaxForkRequestBytes];

void WipeReceiveBuffer() { ::explicit_bzero(g_request, sizeof(g_request)); }

Received Receive(Request* request) {
  char* const data = g_request;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kForkRequestFds + 1))];
  msghdr msg;
  const ssize_t n = base::ReceiveWithFds(kForkServerFd, g_request, control, &msg);
  if (n < 0) return errno == EAGAIN ? Received::kMalformed : Received::kPeerGone;
  // Every descriptor received is owned (and closed) whatever else is wrong with the message.
  request->fds = base::TakeReceivedFds(msg);
  if (n == 0 && request->fds.empty()) return Received::kPeerGone;
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return Received::kMalformed;
  std::string_view rest(data, static_cast<size_t>(n));
  if (rest.empty() || rest.back() != '\0') return Received::kMalformed;
  while (!rest.empty()) {
    const size_t end = rest.find('\0');
    request->args.emplace_back(rest.substr(0, end));
    rest.remove_prefix(end + 1);
  }
  return Received::kRequest;
}

void Reply(int32_t error, int pidfd) {
  ForkReply reply;
  reply.error = error;
  const int fds[] = {pidfd};
  // A failed reply means the trusted side is gone: the next receive ends the server.
  (void)base::SendWithFds(kForkServerFd,
                          std::string_view(reinterpret_cast<const char*>(&reply), sizeof(reply)),
                          error == 0 ? std::span<const int>(fds) : std::span<const int>());
}

// The job's own uid and gid (a root helper's child only): supplementary groups dropped, real,
// effective and saved ids all `id`, so no capability is left (the kernel clears them when every
// uid leaves 0). Before the jail's die-with-parent and non-dumpable steps: a change of
// credentials resets both, and the jail sets them again.
bool BecomeJobUser(uid_t id) {
  return ::setgroups(0, nullptr) == 0 && ::setresgid(id, id, id) == 0 &&
         ::setresuid(id, id, id) == 0 && ::getuid() == id && ::geteuid() == id;
}

// Namespaces of the job's own, entered after its uid is set: a user namespace (the job's uid
// owns it; under a root helper, which kept the init one to set uids), and net and ipc
// namespaces apart from the helper's and every other job's (they take effect for the caller at
// once; a pid namespace would need one more fork: jobs share their helper's). Best effort:
// what fails leaves the helper's, which the layers then report.
void EnterJobNamespaces(bool root_helper, JailLayers* layers) {
  if (root_helper) layers->user_ns = ::unshare(CLONE_NEWUSER) == 0;
  if (::unshare(CLONE_NEWNET | CLONE_NEWIPC) != 0) return;
  layers->net_ns = true;
  layers->ipc_ns = true;
}

// The child of one job: never returns.
[[noreturn]] void RunChild(Request& request, bool output, const PreparedJail& shared,
                           JobMain job_main) {
  // The server blocks SIGCHLD and SIGPIPE; the job starts, as a spawned worker does, with an
  // empty mask (every disposition is the default one: the server installs no handler).
  sigset_t empty;
  sigemptyset(&empty);
  if (::sigprocmask(SIG_SETMASK, &empty, nullptr) != 0) ::_exit(kExitJailSetup);
  (void)::prctl(PR_SET_NAME, kForkedJobName);
  PreparedJail prepared = shared;
  EnterJobNamespaces(shared.root_helper, &prepared.namespaces);
  int moved[kForkRequestFds + 1];
  for (size_t i = 0; i < request.fds.size(); ++i) {
    moved[i] = -1;
    if (!request.fds[i].valid()) continue;  // the status pipe: handed back to the server
    moved[i] = ::fcntl(request.fds[i].get(), F_DUPFD_CLOEXEC, kFirstSourceFd);
    if (moved[i] < 0) ::_exit(kExitJailSetup);
  }
  // input -> 0, result -> 1, output -> 3. The status pipe is never placed: only the server
  // writes a status (the child's copy is closed with everything else by the jail's step 1).
  if (::dup2(moved[0], kInputFd) != kInputFd || ::dup2(moved[1], kResultFd) != kResultFd ||
      (output && ::dup2(moved[3], kOutputFd) != kOutputFd)) {
    ::_exit(kExitJailSetup);
  }
  std::vector<char*> argv;
  static char name[] = "ckptscan-worker";
  argv.push_back(name);
  for (std::string& a : request.args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const JailEntry enter = [&prepared](const JailConfig& config) {
    return EnterForkedJail(config, prepared);
  };
  ::_exit(job_main(static_cast<int>(argv.size() - 1), argv.data(), enter));
}

class Server {
 public:
  Server(const PreparedJail& prepared, JobMain job_main)
      : prepared_(prepared), job_main_(job_main) {}

  int Run() {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGPIPE);  // a status pipe whose reader is gone: EPIPE, not death
    if (::sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) return kExitJailSetup;
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    base::UniqueFd sigfd(::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!sigfd.valid()) return kExitJailSetup;
    for (;;) {
      pollfd fds[2] = {{kForkServerFd, POLLIN, 0}, {sigfd.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if ((fds[1].revents & POLLIN) != 0) {
        signalfd_siginfo info;
        while (::read(sigfd.get(), &info, sizeof(info)) > 0) {
        }
        Reap();
      }
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !StartNext()) break;
    }
    // The trusted side is gone: so are its jobs.
    for (const auto& [pid, status] : children_) (void)::kill(pid, SIGKILL);
    return kExitOk;
  }

 private:
  // What a child tells the server on its handoff socket once it has read its request: kStarted
  // (with the status pipe's write end, SCM_RIGHTS), kMalformed, or kPeerGone.
  enum Handoff : char { kStarted = 'S', kMalformed = 'M', kPeerGone = 'G' };

  // One request: the server forks first and the CHILD reads the request (and its descriptors)
  // off kForkServerFd, so that no byte of any job's request ever enters the server's memory,
  // and hence none of a later job's (each job is a fork of the server: it would inherit the
  // server's receive buffer and heap, an earlier caller's file names and options with them).
  // The child hands back only its status pipe. False when the trusted side is gone.
  bool StartNext() {
    const std::optional<uid_t> uid = FreeUid();
    int handoff[2];
    if (!uid.has_value() || ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, handoff) != 0) {
      return Discard(uid.has_value() ? errno : EAGAIN);
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      ::close(handoff[0]);
      ::close(handoff[1]);
      return Discard(err);
    }
    if (pid == 0) {
      ::close(handoff[0]);
      ReceiveAndRun(handoff[1], *uid);
    }
    ::close(handoff[1]);
    base::UniqueFd from_child(handoff[0]);
    char what = kMalformed;
    std::vector<base::UniqueFd> status = ReceiveHandoff(from_child.get(), &what);
    if (what == kPeerGone) return false;
    if (what != kStarted || status.size() != 1) {
      (void)::kill(pid, SIGKILL);  // reaped like any other (not a job: no status pipe)
      Reply(EINVAL, -1);
      return true;
    }
    // glibc 2.36's <sys/pidfd.h> lacks extern "C": the system call is made directly.
    base::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    children_.emplace(pid, Child{std::move(status[0]), *uid});
    if (!pidfd.valid()) {
      const int err = errno;
      (void)::kill(pid, SIGKILL);  // reaped like any other; its status goes nowhere useful
      Reply(err, -1);
      return true;
    }
    Reply(0, pidfd.get());
    return true;
  }

  // The child's side of StartNext: reads the request, checks it, hands the status pipe back,
  // takes its own uid (a root helper's) and runs the job. Never returns.
  [[noreturn]] void ReceiveAndRun(int handoff, uid_t uid) {
    const auto tell = [handoff](char what, std::span<const int> fds) {
      (void)base::SendWithFds(handoff, std::string_view(&what, 1), fds);
    };
    Request request;
    const Received r = Receive(&request);
    if (r != Received::kRequest) {
      tell(r == Received::kPeerGone ? kPeerGone : kMalformed, {});
      ::_exit(kExitUsage);
    }
    if (request.args.empty()) {
      tell(kMalformed, {});
      ::_exit(kExitUsage);
    }
    absl::StatusOr<worker::v1::Job> job = DecodeJobArg(request.args[0]);
    // Only jailed jobs: an unjailed one (--no-sandbox) is a per-job worker.
    const bool output = job.ok() && job->jail().output();
    if (!job.ok() || job->jail().unjailed() ||
        request.fds.size() != static_cast<size_t>(kForkRequestFds + (output ? 1 : 0))) {
      tell(kMalformed, {});
      ::_exit(kExitUsage);
    }
    if (prepared_.root_helper && !BecomeJobUser(uid)) {
      tell(kMalformed, {});
      ::_exit(kExitJailSetup);
    }
    const int status[] = {request.fds[2].get()};
    tell(kStarted, status);
    request.fds[2].reset();  // only the server writes a status
    ::close(handoff);
    RunChild(request, output, prepared_, job_main_);
  }

  // The child's word and descriptors; kMalformed when it died before saying anything.
  static std::vector<base::UniqueFd> ReceiveHandoff(int fd, char* what) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
    msghdr msg;
    const ssize_t n = base::ReceiveWithFds(fd, {what, 1}, control, &msg);
    if (n <= 0) {
      *what = kMalformed;
      return {};
    }
    return base::TakeReceivedFds(msg);
  }

  // When no child can be made to read the request: it is read here into a buffer on the stack,
  // wiped before anything else runs, its descriptors closed, and refused with `err`.
  bool Discard(int err) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kForkRequestFds + 1))];
    msghdr msg;
    const ssize_t n = base::ReceiveWithFds(kForkServerFd, g_request, control, &msg);
    const bool gone = (n < 0 && errno != EAGAIN) || (n == 0 && base::TakeReceivedFds(msg).empty());
    if (n > 0) (void)base::TakeReceivedFds(msg);  // closed
    WipeReceiveBuffer();
    if (gone) return false;
    Reply(err, -1);
    return true;
  }

  // A uid no running job of this helper holds (kJobUidsPerHelper slots from the helper's range);
  // any uid (unused) for a helper that does not set uids.
  std::optional<uid_t> FreeUid() {
    if (!prepared_.root_helper) return ::getuid();
    for (uint32_t i = 0; i < kJobUidsPerHelper; ++i) {
      const uid_t uid = prepared_.job_uid_first + (next_slot_ + i) % kJobUidsPerHelper;
      bool taken = false;
      for (const auto& entry : children_) taken = taken || entry.second.uid == uid;
      if (!taken) {
        next_slot_ = (next_slot_ + i + 1) % kJobUidsPerHelper;
        return uid;
      }
    }
    return std::nullopt;
  }

  // Reaps every ended child and hands its wait status to its job's status pipe.
  void Reap() {
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = children_.find(pid);
      if (it == children_.end()) continue;
      const int32_t s = status;
      ssize_t n;
      do {
        n = ::write(it->second.status.get(), &s, sizeof(s));
      } while (n < 0 && errno == EINTR);
      children_.erase(it);  // closes the status pipe: EOF after the status
    }
  }

  const PreparedJail& prepared_;
  const JobMain job_main_;
  struct Child {
    base::UniqueFd status;  // the status pipe's write end
    uid_t uid;
  };
  std::map<pid_t, Child> children_;  // running jobs
  uint32_t next_slot_ = 0;
};

// The outer process of a pid-namespace fork server: waits for the server (pid 1 inside) and
// ends as it ended. It holds no descriptor but `alive` (whose closing tells the inner one that
// it is gone).
[[noreturn]] void WaitForInner(pid_t inner) {
  int status = 0;
  while (::waitpid(inner, &status, 0) < 0) {
    if (errno != EINTR) ::_exit(kExitInternal);
  }
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  ::signal(sig, SIG_DFL);
  ::kill(::getpid(), sig);
  ::_exit(128 + sig);
}

// A root helper's capabilities: CAP_SETUID and CAP_SETGID (its children's uids) and CAP_KILL
// (its children, under those uids), in the bounding, permitted and effective sets; none else.
bool KeepOnlyJobCapabilities() {
  const uint64_t keep = (1ull << CAP_SETUID) | (1ull << CAP_SETGID) | (1ull << CAP_KILL);
  for (int cap = 0; cap < 64; ++cap) {
    if ((keep & (1ull << cap)) != 0) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return false;
  }
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[2]{};
  data[0].effective = data[0].permitted = static_cast<uint32_t>(keep);
  return ::syscall(SYS_capset, &header, data) == 0;
}

}  // namespace

int ForkServer::Serve(int argc, char** argv, JobMain job_main) {
  if (argc != 2) return kExitUsage;
  const std::string_view arg = argv[1];
  if (!arg.starts_with(kForkServerFlag)) return kExitUsage;
  const std::string_view number = arg.substr(kForkServerFlag.size());
  pid_t parent = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), parent);
  if (ec != std::errc() || end != number.data() + number.size() || parent <= 0) {
    return kExitUsage;
  }

  // 1. Only the request socket stays open.
  if (::fcntl(kForkServerFd, F_GETFD) == -1) return kExitJailSetup;
  if (::close_range(0, kForkServerFd - 1, 0) != 0 ||
      ::close_range(kForkServerFd + 1, ~0U, 0) != 0) {
    return kExitJailSetup;
  }
  int type = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(kForkServerFd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      type != SOCK_SEQPACKET) {
    return kExitJailSetup;
  }
  // 2-4. Die with the trusted process, non-dumpable, no_new_privs (all inherited by children,
  // which set and check them again).
  if (absl::Status s = DieWithParent(parent); !s.ok()) {
    return absl::IsUnavailable(s) ? kExitParentGone : kExitJailSetup;
  }
  if (!HardenProcess().ok()) return kExitJailSetup;

  // 5. The namespaces, once: every child is created in them. A root helper keeps the init
  // user namespace (its children take uids of their own, each then a user namespace of its
  // own) and drops every capability but those it needs for that and to kill its children.
  PreparedJail prepared;
  prepared.root_helper = CanTakeJobUids();
  prepared.job_uid_first =
      kJobUidBase +
      (static_cast<uint32_t>(::getpid()) % (kJobUids / kJobUidsPerHelper)) * kJobUidsPerHelper;
  EnterNamespaces(&prepared.namespaces, !prepared.root_helper);
  if (prepared.root_helper && !KeepOnlyJobCapabilities()) return kExitJailSetup;
  if (prepared.namespaces.pid_ns) {
    // Only the children of the unsharing process are in the new pid namespace: fork once so
    // that the server is its pid 1 and every job a process inside it. When pid 1 ends, the
    // kernel kills everything left in the namespace.
    int alive[2];
    if (::pipe2(alive, O_CLOEXEC) != 0) return kExitJailSetup;
    const pid_t inner = ::fork();
    if (inner < 0) return kExitJailSetup;  // the namespace would take the first job as pid 1
    if (inner > 0) {
      ::close(kForkServerFd);
      ::close(alive[0]);
      WaitForInner(inner);
    }
    ::close(alive[1]);
    // The outer process is not visible in here (getppid() is 0), so its being alive is checked
    // through the pipe: it holds the write end until it dies.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return kExitJailSetup;
    pollfd p{alive[0], POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) return kExitParentGone;  // POLLHUP: the outer one is gone
    ::close(alive[0]);
  }
  prepared.server_pid = ::getpid();

  // 7 (compiled only). Both filters, once; each child loads one.
  absl::StatusOr<SeccompProgram> scan = CompileSeccomp(false);
  absl::StatusOr<SeccompProgram> convert = CompileSeccomp(true);
  if (!scan.ok() || !convert.ok()) return kExitJailSetup;
  prepared.scan_filter = *std::move(scan);
  prepared.convert_filter = *std::move(convert);

  Server server(prepared, job_main);
  return server.Run();
}

}  // namespace ckptscan::sandbox
