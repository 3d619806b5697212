#include "sandbox/fork_client.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <span>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "sandbox/process.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {
namespace {

// The payload that marks a lost helper's Unavailable when the request was never sent.
constexpr char kNotDeliveredPayload[] = "type.ckptscan/sandbox.fork_request_not_delivered";

}  // namespace

bool NotDelivered(const absl::Status& status) {
  return status.GetPayload(kNotDeliveredPayload).has_value();
}

ForkClient::Lease& ForkClient::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    server_ = std::exchange(other.server_, nullptr);
  }
  return *this;
}

void ForkClient::Lease::Release() {
  if (server_ != nullptr) std::exchange(server_, nullptr)->leases_.fetch_sub(1);
}

namespace {

absl::Mutex shared_mu(absl::kConstInit);

// Shared()'s servers by worker path, in the order they were added.
std::map<std::string, std::vector<std::unique_ptr<ForkClient>>>& SharedPools()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_mu) {
  static auto* pools = new std::map<std::string, std::vector<std::unique_ptr<ForkClient>>>();
  return *pools;
}

}  // namespace

size_t ForkClient::SharedPoolSize() {
  // Read once (Shared asks for it on every job, under its lock).
  static const size_t size = [] {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int n = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    return std::clamp<size_t>(static_cast<size_t>(std::max(n, 1)), 1, kMaxSharedForkServers);
  }();
  return size;
}

ForkClient::Lease ForkClient::Shared(const std::string& worker_path) {
  absl::MutexLock lock(&shared_mu);
  std::vector<std::unique_ptr<ForkClient>>& pool = SharedPools()[worker_path];
  ForkClient* best = nullptr;
  for (const std::unique_ptr<ForkClient>& s : pool) {
    if (best == nullptr || s->leases_.load() < best->leases_.load()) best = s.get();
  }
  if (best == nullptr || (best->leases_.load() > 0 && pool.size() < SharedPoolSize())) {
    pool.push_back(std::make_unique<ForkClient>(worker_path));
    best = pool.back().get();
  }
  best->leases_.fetch_add(1);
  return Lease(best);
}

absl::Status ForkClient::StartShared(const std::string& worker_path) {
  absl::MutexLock lock(&shared_mu);
  std::vector<std::unique_ptr<ForkClient>>& pool = SharedPools()[worker_path];
  while (pool.size() < SharedPoolSize()) pool.push_back(std::make_unique<ForkClient>(worker_path));
  for (const std::unique_ptr<ForkClient>& s : pool) {
    absl::MutexLock server_lock(&s->mu_);
    if (absl::Status started = s->EnsureHelperLocked(); !started.ok()) return started;
  }
  return absl::OkStatus();
}

std::vector<pid_t> ForkClient::SharedHelperPids(const std::string& worker_path) {
  absl::MutexLock lock(&shared_mu);
  std::vector<pid_t> pids;
  for (const std::unique_ptr<ForkClient>& s : SharedPools()[worker_path]) {
    if (const pid_t pid = s->helper_pid(); pid > 0) pids.push_back(pid);
  }
  return pids;
}

ForkClient::ForkClient(std::string worker_path)
    : worker_path_(std::move(worker_path)), spawner_([this] { SpawnerLoop(); }) {}

ForkClient::~ForkClient() {
  {
    absl::MutexLock lock(&mu_);
    StopHelperLocked();
  }
  {
    absl::MutexLock lock(&spawn_mu_);
    quit_ = true;
  }
  spawner_.join();
}

pid_t ForkClient::helper_pid() const {
  absl::MutexLock lock(&mu_);
  return helper_;
}

int ForkClient::restarts() const {
  absl::MutexLock lock(&mu_);
  return restarts_;
}

void ForkClient::SpawnerLoop() {
  absl::MutexLock lock(&spawn_mu_);
  for (;;) {
    spawn_mu_.Await(absl::Condition(
        +[](ForkClient* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->spawn_mu_) {
          return s->quit_ || (s->spawn_fd_ >= 0 && !s->spawn_done_);
        },
        this));
    if (quit_) return;
    const int child_end = spawn_fd_;
    absl::StatusOr<pid_t> result = [&]() -> absl::StatusOr<pid_t> {
      posix_spawn_file_actions_t actions;
      if (int rc = ::posix_spawn_file_actions_init(&actions); rc != 0) {
        return absl::ErrnoToStatus(rc, "posix_spawn_file_actions_init");
      }
      absl::Cleanup destroy_actions = [&actions] { ::posix_spawn_file_actions_destroy(&actions); };
      // The socket becomes kForkServerFd; 0, 1, 2 and everything above are closed.
      int rc = ::posix_spawn_file_actions_adddup2(&actions, child_end, kForkServerFd);
      for (int fd = 0; rc == 0 && fd < kForkServerFd; ++fd) {
        rc = ::posix_spawn_file_actions_addclose(&actions, fd);
      }
      if (rc == 0) rc = ::posix_spawn_file_actions_addclosefrom_np(&actions, kForkServerFd + 1);
      if (rc != 0) return absl::ErrnoToStatus(rc, "posix_spawn_file_actions");
      return SpawnClean(worker_path_, &actions,
                        {absl::StrCat(std::string(kForkServerFlag), ::getpid())},
                        "the fork server");
    }();
    spawn_result_ = std::move(result);
    spawn_done_ = true;
  }
}

absl::StatusOr<pid_t> ForkClient::SpawnOnOwnThread(int child_end) {
  absl::MutexLock lock(&spawn_mu_);
  spawn_fd_ = child_end;
  spawn_done_ = false;
  spawn_mu_.Await(absl::Condition(&spawn_done_));
  spawn_fd_ = -1;
  return std::move(spawn_result_);
}

void ForkClient::StopHelperLocked() {
  socket_.reset();  // a live helper sees EOF, kills its children and exits
  if (helper_ > 0) {
    (void)::kill(helper_, SIGKILL);
    (void)Reap(helper_);
  }
  helper_ = 0;
}

absl::Status ForkClient::EnsureHelperLocked() {
  if (helper_ > 0) return absl::OkStatus();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::ErrnoToStatus(errno, "socketpair");
  }
  base::UniqueFd ours(sv[0]);
  absl::StatusOr<base::UniqueFd> theirs = AboveHandedSlots(base::UniqueFd(sv[1]));
  if (!theirs.ok()) return theirs.status();
  absl::StatusOr<pid_t> pid = SpawnOnOwnThread(theirs->get());
  if (!pid.ok()) return pid.status();
  if (started_once_) ++restarts_;
  started_once_ = true;
  helper_ = *pid;
  socket_ = std::move(ours);
  return absl::OkStatus();
}

absl::StatusOr<base::UniqueFd> ForkClient::Fork(const std::vector<std::string>& args, int input,
                                                int result, int status, int output) {
  std::string data;
  for (const std::string& a : args) {
    if (a.find('\0') != std::string::npos) return absl::InvalidArgumentError("NUL in an argument");
    data.append(a);
    data.push_back('\0');
  }
  if (data.size() > kMaxForkRequestBytes) return absl::InvalidArgumentError("job too large");
  const int fds[kForkRequestFds + 1] = {input, result, status, output};
  const size_t nfds = output >= 0 ? kForkRequestFds + 1 : kForkRequestFds;

  absl::MutexLock lock(&mu_);
  if (absl::Status s = EnsureHelperLocked(); !s.ok()) return s;
  const auto lost = [&](const char* what, bool delivered) {
    mu_.AssertHeld();  // called only below, under the lock (for the thread-safety analysis)
    absl::Status unavailable =
        absl::UnavailableError(absl::StrCat("the fork server was lost (", what, ") and restarted",
                                            delivered ? "" : " (request not delivered)"));
    if (!delivered) unavailable.SetPayload(kNotDeliveredPayload, absl::Cord("1"));
    StopHelperLocked();
    if (absl::Status s = EnsureHelperLocked(); !s.ok()) return s;
    return unavailable;
  };

  ssize_t n = base::SendWithFds(socket_.get(), data, std::span<const int>(fds, nfds));
  if (n < 0) {
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) return lost("send", false);
    return absl::ErrnoToStatus(errno, "send to the fork server");
  }

  // The reply, within kForkReplyTimeout: a helper that does not answer is treated as dead.
  const absl::Time until = absl::Now() + kForkReplyTimeout;
  for (;;) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return lost("no reply", true);
    pollfd p{socket_.get(), POLLIN, 0};
    const int ready = ::poll(
        &p, 1,
        static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)))));
    if (ready > 0) break;
    if (ready < 0 && errno != EINTR) return absl::ErrnoToStatus(errno, "poll the fork server");
  }
  ForkReply reply;
  msghdr rmsg;
  alignas(cmsghdr) char rcontrol[CMSG_SPACE(sizeof(int) * 4)];
  n = base::ReceiveWithFds(socket_.get(), {reinterpret_cast<char*>(&reply), sizeof(reply)},
                           rcontrol, &rmsg, MSG_DONTWAIT);
  if (n < 0) return lost("receive", true);
  // Owned before anything else is checked; not read after a failed recvmsg (the control buffer
  // then holds stack garbage that could name any of this process's descriptors).
  std::vector<base::UniqueFd> got = base::TakeReceivedFds(rmsg);
  if (n == 0) return lost("EOF", true);
  if (n != sizeof(reply) || (rmsg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    return lost("malformed reply", true);
  }
  if (reply.error != 0) {
    return absl::ErrnoToStatus(reply.error, "the fork server could not start the job");
  }
  if (got.size() != 1) return lost("reply without a pidfd", true);
  return std::move(got[0]);
}

}  // namespace ckptscan::sandbox
