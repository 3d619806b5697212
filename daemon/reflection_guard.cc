#include "daemon/reflection_guard.h"

#include <grpcpp/server_context.h>
#include <grpcpp/support/interceptor.h>

#include <algorithm>
#include <utility>

#include "daemon/log.h"

namespace ckptscan::daemon {

using grpc::experimental::InterceptionHookPoints;

bool IsReflectionMethod(std::string_view method) {
  return method.starts_with("/grpc.reflection.") && method.ends_with("/ServerReflectionInfo");
}

bool IsHealthWatchMethod(std::string_view method) {
  return method == "/grpc.health.v1.Health/Watch";
}

// One per reflection stream. It registers itself when the stream's initial metadata has been
// received and forgets itself when the stream's status is sent (and, at the latest, when gRPC
// destroys it): the guard's thread only ever cancels a stream whose handler is still running.
class ReflectionGuard::Interceptor final : public grpc::experimental::Interceptor {
 public:
  Interceptor(ReflectionGuard* guard, grpc::ServerContextBase* ctx) : guard_(guard), ctx_(ctx) {}
  ~Interceptor() override { guard_->Forget(this); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    uint64_t to_log = 0;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA) &&
        !guard_->Admit(this, ctx_, &to_log)) {
      if (to_log != 0) {
        LogLine(guard_->kind_.event, "warning")
            .Str("reason", guard_->kind_.cap_limit)
            .Int("max_streams", guard_->limits_.max_streams)
            .Int("cancelled", to_log)
            .Emit();
      }
      ctx_->TryCancel();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      guard_->Forget(this);
    }
    methods->Proceed();
  }

 private:
  ReflectionGuard* const guard_;
  grpc::ServerContextBase* const ctx_;
};

class ReflectionGuard::Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(ReflectionGuard* guard) : guard_(guard) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (info->method() == nullptr || !guard_->kind_.matches(info->method())) return nullptr;
    return new Interceptor(guard_, info->server_context());
  }

 private:
  ReflectionGuard* const guard_;
};

ReflectionGuard::ReflectionGuard(ReflectionLimits limits, GuardedStreams kind)
    : limits_(limits), kind_(kind), reaper_([this] { Reap(); }) {}

ReflectionGuard::~ReflectionGuard() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;  // Reap's condition: re-evaluated when mu_ is released
  }
  reaper_.join();
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ReflectionGuard::Factories() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<Factory>(this));
  return out;
}

size_t ReflectionGuard::open_streams() const {
  absl::MutexLock lock(&mu_);
  return streams_.size();
}

bool ReflectionGuard::Admit(const void* key, grpc::ServerContextBase* ctx, uint64_t* to_log) {
  absl::MutexLock lock(&mu_);
  if (streams_.size() >= limits_.max_streams) {
    // A flood of streams over the cap is one log line a second, with its count.
    ++refused_unlogged_;
    const absl::Time now = absl::Now();
    if (now - refused_logged_ >= absl::Seconds(1)) {
      *to_log = std::exchange(refused_unlogged_, 0);
      refused_logged_ = now;
    }
    return false;
  }
  streams_.emplace(key, Stream{ctx, absl::Now()});
  return true;
}

void ReflectionGuard::Forget(const void* key) {
  absl::MutexLock lock(&mu_);
  streams_.erase(key);
}

void ReflectionGuard::Reap() {
  const absl::Duration period = absl::Milliseconds(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(limits_.max_stream_age) / 4, 10, 1000));
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) {
    const absl::Time now = absl::Now();
    for (auto& [key, stream] : streams_) {
      if (stream.cancelled || now - stream.start < limits_.max_stream_age) continue;
      // Under the lock: the stream's interceptor cannot forget it (its handler cannot finish)
      // meanwhile. TryCancel runs the interceptors' cancel hook, which takes no lock.
      stream.ctx->TryCancel();
      stream.cancelled = true;
      LogLine(kind_.event, "warning")
          .Str("reason", kind_.age_limit)
          .Num("seconds", absl::ToDoubleSeconds(limits_.max_stream_age))
          .Emit();
    }
  }
}

}  // namespace ckptscan::daemon
