#include "sandbox/spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sandbox/fork_client.h"
#include "sandbox/frame.h"
#include "sandbox/process.h"

namespace ckptscan::sandbox {
namespace {

// Bytes read from the result pipe per read().
constexpr size_t kReadChunk = 64 << 10;

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.3g s", absl::ToDoubleSeconds(d));
}

const char* ExitMeaning(int code) {
  switch (code) {
    case kExitUsage:
      return "bad worker arguments";
    case kExitJailSetup:
      return "the worker could not set up its jail";
    case kExitParentGone:
      return "the spawner was gone before the worker armed die-with-parent";
    case kExitOutOfMemory:
      return "out of memory under the worker's address-space limit";
    case kExitFrameTooLarge:
      return "the facts do not fit in a result frame";
    case kExitInput:
      return "the worker could not map its input";
    case kExitInternal:
      return "the worker failed internally";
    default:
      return "the worker failed";
  }
}

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// The pid a pidfd refers to, in this process's pid namespace (-1 if unknown).
pid_t PidOfPidfd(int pidfd) {
  std::ifstream info(absl::StrCat("/proc/self/fdinfo/", pidfd));
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("Pid:", 0) != 0) continue;
    const char* p = line.c_str() + 4;
    while (*p == ' ' || *p == '\t') ++p;
    pid_t pid = -1;
    (void)std::from_chars(p, line.c_str() + line.size(), pid);
    return pid;
  }
  return -1;
}

// A frame the reader refused: over the frame limit (the worker's facts are larger than this
// side accepts: a limit, ERROR naming max_frame_bytes) or broken (kBadFrame).
void FrameFailure(const absl::Status& error, Result* result) {
  result->outcome = absl::IsResourceExhausted(error) ? Outcome::kLimit : Outcome::kBadFrame;
  if (result->outcome == Outcome::kLimit) result->limit = JailLimit::kMaxFrameBytes;
  result->message = std::string(error.message());
}

}  // namespace

WorkerProcess::WorkerProcess(pid_t pid, base::UniqueFd result_pipe, absl::Time start,
                             absl::Time deadline, uint64_t max_frame_bytes,
                             std::function<bool()> cancelled)
    : pid_(pid),
      pipe_(std::move(result_pipe)),
      start_(start),
      deadline_(deadline),
      max_frame_bytes_(max_frame_bytes),
      cancelled_(std::move(cancelled)) {}

WorkerProcess::WorkerProcess(WorkerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pipe_(std::move(other.pipe_)),
      start_(other.start_),
      deadline_(other.deadline_),
      max_frame_bytes_(other.max_frame_bytes_),
      cancelled_(std::move(other.cancelled_)),
      pidfd_(std::move(other.pidfd_)),
      status_pipe_(std::move(other.status_pipe_)),
      status_bytes_(std::move(other.status_bytes_)) {}

WorkerProcess::~WorkerProcess() {
  if (status_pipe_.valid()) {
    // A fork server's child: killed here, reaped by the server.
    (void)PidfdSendSignal(pidfd_.get(), SIGKILL);
  } else if (pid_ > 0) {
    (void)::kill(pid_, SIGKILL);
    (void)Reap(pid_);
  }
}

absl::StatusOr<WorkerProcess> WorkerProcess::Start(const SpawnOptions& options,
                                                   base::UniqueFd input, base::UniqueFd output) {
  if (!input.valid()) return absl::InvalidArgumentError("no input descriptor");
  if (options.fork_server != nullptr) {
    return StartForked(options, std::move(input), std::move(output));
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
  base::UniqueFd read_end(fds[0]);
  base::UniqueFd write_end(fds[1]);
  if (::fcntl(read_end.get(), F_SETFL, O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, "fcntl(O_NONBLOCK)");
  }
  absl::StatusOr<base::UniqueFd> in = AboveHandedSlots(std::move(input));
  if (!in.ok()) return in.status();
  absl::StatusOr<base::UniqueFd> wr = AboveHandedSlots(std::move(write_end));
  if (!wr.ok()) return wr.status();
  std::optional<base::UniqueFd> out;
  if (output.valid()) {
    absl::StatusOr<base::UniqueFd> o = AboveHandedSlots(std::move(output));
    if (!o.ok()) return o.status();
    out = *std::move(o);
  }

  posix_spawn_file_actions_t actions;
  if (int rc = ::posix_spawn_file_actions_init(&actions); rc != 0) {
    return absl::ErrnoToStatus(rc, "posix_spawn_file_actions_init");
  }
  absl::Cleanup destroy_actions = [&actions] { ::posix_spawn_file_actions_destroy(&actions); };
  int rc = ::posix_spawn_file_actions_adddup2(&actions, in->get(), kInputFd);
  if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&actions, wr->get(), kResultFd);
  if (rc == 0) rc = ::posix_spawn_file_actions_addclose(&actions, 2);
  if (rc == 0 && out.has_value()) {
    rc = ::posix_spawn_file_actions_adddup2(&actions, out->get(), kOutputFd);
  }
  if (rc == 0) {
    rc = ::posix_spawn_file_actions_addclosefrom_np(&actions,
                                                    out.has_value() ? kOutputFd + 1 : kOutputFd);
  }
  if (rc != 0) return absl::ErrnoToStatus(rc, "posix_spawn_file_actions");

  const absl::Time start = absl::Now();
  absl::StatusOr<pid_t> pid = SpawnClean(options.worker_path, &actions, options.args, "the worker");
  if (!pid.ok()) return pid.status();
  // The parent's copies of the handed descriptors close here (in, wr, out go out of scope).
  return WorkerProcess(*pid, std::move(read_end), start, start + options.timeout,
                       options.max_frame_bytes, options.cancelled);
}

pid_t WorkerProcess::pid() const {
  if (pid_ == 0 && pidfd_.valid()) return PidOfPidfd(pidfd_.get());
  return pid_;
}

Result WorkerProcess::Wait() && {
  Result result;
  const pid_t pid = std::exchange(pid_, -1);
  FrameReader reader(max_frame_bytes_);
  absl::Status frame_error;
  bool eof = false;
  bool exited = false;
  bool timed_out = false;
  bool cancelled = false;
  int status = 0;
  // A fork server's child: its fate comes through the status pipe (the server reaps it).
  const bool forked = status_pipe_.valid();
  bool server_lost = false;
  // glibc 2.36's <sys/pidfd.h> lacks extern "C", so the system call is made directly.
  // Invalid on kernels before 5.3: the pid is then polled with waitpid(WNOHANG).
  base::UniqueFd pidfd(forked ? -1 : static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  // Not zeroed: only what read() returns is used (64 KiB of memset per job otherwise).
  const std::unique_ptr<char[]> buf = std::make_unique_for_overwrite<char[]>(kReadChunk);

  while (!(eof && exited)) {
    const absl::Duration left = deadline_ - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    if (cancelled_ && cancelled_()) {
      cancelled = true;
      break;
    }
    int timeout_ms = static_cast<int>(std::min<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1 << 30));
    if (cancelled_) {
      timeout_ms =
          std::min(timeout_ms, static_cast<int>(absl::ToInt64Milliseconds(kCancelPollInterval)));
    }
    pollfd fds[2];
    nfds_t n = 0;
    if (!eof) fds[n++] = {pipe_.get(), POLLIN, 0};
    const bool poll_pid = !exited && (forked || pidfd.valid());
    if (poll_pid) fds[n++] = {forked ? status_pipe_.get() : pidfd.get(), POLLIN, 0};
    if (!exited && !poll_pid) timeout_ms = std::min(timeout_ms, 1);  // poll the pid
    const int ready = ::poll(fds, n, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      frame_error = absl::ErrnoToStatus(errno, "poll");
      break;
    }
    if (!eof && ready > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t got = ::read(pipe_.get(), buf.get(), kReadChunk);
      if (got > 0) {
        frame_error = reader.Feed(std::string_view(buf.get(), static_cast<size_t>(got)));
        if (!frame_error.ok()) break;  // oversized or trailing: stop reading, kill
      } else if (got == 0) {
        eof = true;
      } else if (errno != EAGAIN && errno != EINTR) {
        frame_error = absl::ErrnoToStatus(errno, "read result pipe");
        break;
      }
    }
    if (!exited && forked) {
      if (ready > 0 && (fds[n - 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const int got = PollStatus(&status);
        if (got != 0) exited = true;
        if (got < 0) {
          // The server died: its child dies with it; made sure of here, and fail closed.
          server_lost = true;
          (void)PidfdSendSignal(pidfd_.get(), SIGKILL);
        }
      }
    } else if (!exited) {
      // With a pidfd, only when it is readable; without one, every round.
      const bool check = !poll_pid || (ready > 0 && (fds[n - 1].revents & POLLIN) != 0);
      if (check) {
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) exited = true;
      }
    }
  }
  if (!exited && forked) {
    // The pidfd names this child even once the server has reaped it: no reused pid is hit.
    (void)PidfdSendSignal(pidfd_.get(), SIGKILL);
    if (!ReadStatus(absl::Now() + kForkReplyTimeout, &status)) server_lost = true;
  } else if (!exited) {
    (void)::kill(pid, SIGKILL);  // not reaped yet, so the pid cannot have been reused
    status = Reap(pid);
  }
  pipe_.reset();
  pidfd_.reset();
  status_pipe_.reset();
  result.elapsed = absl::Now() - start_;

  if (cancelled && !exited) {
    result.outcome = Outcome::kCancelled;
    result.signal = SIGKILL;
    result.message = "the job was cancelled by its caller; the worker was killed";
    return result;
  }
  if (timed_out && !exited) {
    result.outcome = Outcome::kTimeout;
    result.signal = SIGKILL;
    result.message = absl::StrCat("no result within ", Seconds(deadline_ - start_),
                                  " (--timeout); the worker was killed");
    return result;
  }
  if (server_lost) {
    result.outcome = Outcome::kFailed;
    result.message = "the fork server ended before it reported the worker's fate";
    return result;
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    result.signal = sig;
    if (sig == SIGSYS) {
      result.outcome = Outcome::kViolation;
      result.message =
          "the worker was killed by SIGSYS: it made a system call outside the sandbox policy";
    } else if (!frame_error.ok()) {  // killed by us for an oversized or trailing frame
      FrameFailure(frame_error, &result);
    } else if (sig == SIGXCPU) {
      result.outcome = Outcome::kTimeout;
      result.message = "the worker hit its CPU time limit (SIGXCPU)";
    } else if (sig == SIGXFSZ) {
      result.outcome = Outcome::kLimit;
      result.limit = JailLimit::kFileSize;
      result.message = "the worker hit its file size limit (SIGXFSZ)";
    } else {
      result.outcome = Outcome::kSignaled;
      result.message = absl::StrCat("the worker was killed by ", SignalName(sig));
    }
    return result;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.exit_code = code;
  if (code != kExitOk) {
    if (code == kExitOutOfMemory || code == kExitFrameTooLarge) {
      result.outcome = Outcome::kLimit;
      result.limit =
          code == kExitOutOfMemory ? JailLimit::kWorkerMemory : JailLimit::kMaxFrameBytes;
    } else {
      result.outcome = Outcome::kFailed;
    }
    result.message = absl::StrCat(ExitMeaning(code), " (exit ", code, ")");
    return result;
  }
  if (!frame_error.ok()) {
    FrameFailure(frame_error, &result);
    return result;
  }
  absl::StatusOr<std::string> payload = std::move(reader).Finish();
  if (!payload.ok()) {
    result.outcome = Outcome::kBadFrame;
    result.message = std::string(payload.status().message());
    return result;
  }
  result.outcome = Outcome::kOk;
  result.payload = *std::move(payload);
  return result;
}

int WorkerProcess::PollStatus(int* status) {
  char buf[kWaitStatusBytes + 1];
  for (;;) {
    const ssize_t n = ::read(status_pipe_.get(), buf, sizeof(buf));
    if (n > 0) {
      status_bytes_.append(buf, static_cast<size_t>(n));
      if (status_bytes_.size() > kWaitStatusBytes) return -1;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (status_bytes_.size() == kWaitStatusBytes) {
      int32_t s;
      std::memcpy(&s, status_bytes_.data(), sizeof(s));
      *status = s;
      return 1;
    }
    if (n < 0 && errno == EAGAIN) return 0;
    return -1;  // EOF (or an error) before the whole status
  }
}

bool WorkerProcess::ReadStatus(absl::Time until, int* status) {
  for (;;) {
    const int got = PollStatus(status);
    if (got != 0) return got > 0;
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{status_pipe_.get(), POLLIN, 0};
    (void)::poll(
        &p, 1,
        static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)))));
  }
}

absl::StatusOr<WorkerProcess> WorkerProcess::StartForked(const SpawnOptions& options,
                                                         base::UniqueFd input,
                                                         base::UniqueFd output) {
  const absl::Time start = absl::Now();
  // Twice at most: a helper found dead is restarted, and the job retried with fresh pipes (a
  // child of the dead one may still hold the old ones for a moment). A converting job is
  // retried only if its request never reached the old helper (the output's offset is shared).
  for (int attempt = 0;; ++attempt) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
    base::UniqueFd read_end(fds[0]);
    base::UniqueFd write_end(fds[1]);
    if (::pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
    base::UniqueFd status_read(fds[0]);
    base::UniqueFd status_write(fds[1]);
    if (::fcntl(read_end.get(), F_SETFL, O_NONBLOCK) != 0 ||
        ::fcntl(status_read.get(), F_SETFL, O_NONBLOCK) != 0) {
      return absl::ErrnoToStatus(errno, "fcntl(O_NONBLOCK)");
    }
    absl::StatusOr<base::UniqueFd> pidfd =
        options.fork_server->Fork(options.args, input.get(), write_end.get(), status_write.get(),
                                  output.valid() ? output.get() : -1);
    if (absl::IsUnavailable(pidfd.status()) && attempt == 0 &&
        (!output.valid() || NotDelivered(pidfd.status()))) {
      continue;
    }
    if (!pidfd.ok()) return pidfd.status();
    // The parent's copies of the handed descriptors close here (the child holds its own).
    // pid 0: looked up from the pidfd only when asked (pid()).
    WorkerProcess w(0, std::move(read_end), start, start + options.timeout, options.max_frame_bytes,
                    options.cancelled);
    w.pidfd_ = *std::move(pidfd);
    w.status_pipe_ = std::move(status_read);
    return w;
  }
}

Result RunWorker(const SpawnOptions& options, base::UniqueFd input, base::UniqueFd output) {
  absl::StatusOr<WorkerProcess> worker =
      WorkerProcess::Start(options, std::move(input), std::move(output));
  if (!worker.ok()) {
    Result r;
    r.outcome = Outcome::kFailed;
    r.message = std::string(worker.status().message());
    return r;
  }
  return std::move(*worker).Wait();
}

}  // namespace ckptscan::sandbox
