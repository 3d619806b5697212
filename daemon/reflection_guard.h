// Bounds gRPC server reflection (ckptscand --reflection) so that it cannot take the threads the
// jobs and Admin need.
//
// ServerReflectionInfo is a bidirectional stream, and the synchronous server holds one of its
// threads (grpc::ResourceQuota::SetMaxThreads, daemon/main.cc) for each stream until it ends:
// a client that opens streams and sends nothing held them all with 80 streams, and every call,
// Admin included, was then refused with RESOURCE_EXHAUSTED. The guard is a server interceptor
// that sees every reflection stream as it starts: past max_streams at once the new one is
// cancelled at once; a stream older than max_stream_age is cancelled by the guard's own
// thread (a reflection client asks a few questions in milliseconds). Both are logged
// ("reflection_stream_cancelled"). Other methods are not intercepted.
//
// The same guard, with kHealthWatchStreams, bounds grpc.health.v1.Health/Watch streams on the
// main and the plaintext health servers (one guard for both: the cap is daemon-wide).
//
// Thread-safe. Must outlive the server it is installed on.
//
//   ReflectionGuard guard({.max_streams = 4, .max_stream_age = absl::Seconds(10)});
//   builder.experimental().SetInterceptorCreators(guard.Factories());
#ifndef CKPTSCAN_DAEMON_REFLECTION_GUARD_H_
#define CKPTSCAN_DAEMON_REFLECTION_GUARD_H_

#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ckptscan::daemon {

struct ReflectionLimits {
  uint32_t max_streams = 4;                           // --max-reflection-streams
  absl::Duration max_stream_age = absl::Seconds(10);  // --reflection-stream-seconds
};

// Whether `method` (as gRPC names it, "/package.Service/Method") is server reflection's.
bool IsReflectionMethod(std::string_view method);
// Whether `method` is grpc.health.v1.Health/Watch (a server stream that stays open).
bool IsHealthWatchMethod(std::string_view method);

// Which streams a guard bounds and how it names them in its log lines.
struct GuardedStreams {
  bool (*matches)(std::string_view method);
  const char* event;      // the log line's event
  const char* cap_limit;  // its reason when one more stream is over the cap
  const char* age_limit;  // its reason when a stream is older than the age
};
inline constexpr GuardedStreams kReflectionStreams = {
    IsReflectionMethod, "reflection_stream_cancelled", "max_reflection_streams",
    "reflection_stream_seconds"};
// Health Watch streams (--max-health-watches, --health-watch-seconds): 50,000 idle ones on the
// plaintext health port held +900 MB; past the cap one more is cancelled, and one older than
// the age is cancelled (a prober reconnects; Check is not bounded).
inline constexpr GuardedStreams kHealthWatchStreams = {
    IsHealthWatchMethod, "stream_cancelled", "max_health_watches", "health_watch_seconds"};

class ReflectionGuard final {
 public:
  explicit ReflectionGuard(ReflectionLimits limits, GuardedStreams kind = kReflectionStreams);
  ~ReflectionGuard();
  ReflectionGuard(const ReflectionGuard&) = delete;
  ReflectionGuard& operator=(const ReflectionGuard&) = delete;

  // The interceptor factory to install on the server builder.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> Factories();

  // Streams open now (for tests).
  size_t open_streams() const;

 private:
  class Factory;
  class Interceptor;

  // Registers a stream; false when the cap is reached (the stream is to be cancelled), with
  // `*to_log` the refusals to log now (at most one line a second, 0: none now).
  bool Admit(const void* key, grpc::ServerContextBase* ctx, uint64_t* to_log)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const void* key) ABSL_LOCKS_EXCLUDED(mu_);
  void Reap() ABSL_LOCKS_EXCLUDED(mu_);

  struct Stream {
    grpc::ServerContextBase* ctx;
    absl::Time start;
    bool cancelled = false;
  };

  const ReflectionLimits limits_;
  const GuardedStreams kind_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;  // Reap awaits it
  std::map<const void*, Stream> streams_ ABSL_GUARDED_BY(mu_);
  uint64_t refused_unlogged_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time refused_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread reaper_;
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_REFLECTION_GUARD_H_
