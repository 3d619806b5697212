// Makes Debian's absl::Mutex visible to ThreadSanitizer (the CKPT_TSAN build, scripts/ci_tsan.sh).
//
// Debian's libabsl_synchronization is built without -fsanitize=thread, so its Mutex carries no
// TSan annotations: TSan sees no order between two critical sections and reports every member
// an absl::Mutex guards as a data race. Linked into each test binary of the TSan build, the
// definitions below take the place of the library's (an executable's symbols come first, for
// the library's own calls and gRPC's too): each calls the real function (dlsym RTLD_NEXT) and
// tells TSan what it did, as abseil's own annotations do when abseil itself is built with TSan:
//   - a lock or a wait's return acquires the mutex, an unlock (or a wait, before blocking)
//     releases it;
//   - a Condition evaluated inside the library (by the thread that unlocks, for a waiter) runs
//     between an acquire and a release of that mutex, so its reads are ordered like the
//     critical section they belong to; and the Condition object itself, built by the waiter, is
//     released by it before the call and acquired by whichever thread evaluates it.
// Every locking, unlocking and waiting entry point of Mutex and CondVar is covered (Signal needs
// nothing: the woken thread takes the mutex again); a symbol missing from the library stops the
// program at its first use, with the name.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if !ABSL_OPTION_USE_INLINE_NAMESPACE
#error "the mangled names below assume abseil's inline namespace"
#endif

namespace {

#define CKPT_STR2(x) #x
#define CKPT_STR(x) CKPT_STR2(x)

// "_ZN4absl<len><inline namespace>" + rest: the library's mangled name.
template <typename Fn>
Fn Real(const char* rest, const char* qualifier = "_ZN") {
  static const std::string ns = CKPT_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = std::string(qualifier) + "4absl" + std::to_string(ns.size()) + ns + rest;
  void* fn = ::dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_mutex_tsan: %s not found in the abseil libraries\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// The mutex whose Conditions this thread may evaluate now (inside a real lock, unlock or wait).
thread_local const absl::Mutex* tls_mutex = nullptr;

class InLibrary {
 public:
  explicit InLibrary(const absl::Mutex* mu) : saved_(tls_mutex) { tls_mutex = mu; }
  ~InLibrary() { tls_mutex = saved_; }

 private:
  const absl::Mutex* saved_;
};

// A Condition is built by the waiting thread and may be evaluated by another (the one that
// unlocks): without a lock between them (LockWhen), the hand-over goes through the library's
// uninstrumented atomics. The waiter publishes its Condition; Eval acquires it.
void Publish(const absl::Condition& cond) { __tsan_release(const_cast<absl::Condition*>(&cond)); }
void Acquire(const absl::Mutex* mu) { __tsan_acquire(const_cast<absl::Mutex*>(mu)); }
void Release(const absl::Mutex* mu) { __tsan_release(const_cast<absl::Mutex*>(mu)); }

// Calls the library's function with `mu`'s Conditions evaluable, then (if `acquired` says the
// call took the lock) tells TSan this thread holds `mu`.
template <typename R, typename... Args>
R LockCall(const absl::Mutex* mu, R (*real)(Args...), bool (*acquired)(R), Args... args) {
  R result;
  {
    InLibrary in(mu);
    result = real(args...);
  }
  if (acquired(result)) Acquire(mu);
  return result;
}
template <typename... Args>
void LockCall(const absl::Mutex* mu, void (*real)(Args...), Args... args) {
  {
    InLibrary in(mu);
    real(args...);
  }
  Acquire(mu);
}
bool Always(bool) { return true; }
bool IfTrue(bool ok) { return ok; }

}  // namespace

namespace absl {

void Mutex::Lock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  LockCall(this, real, this);
}

void Mutex::ReaderLock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  LockCall(this, real, this);
}

bool Mutex::TryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  return LockCall(this, real, IfTrue, this);
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  return LockCall(this, real, IfTrue, this);
}

void Mutex::Unlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  Release(this);
  InLibrary in(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  Release(this);
  InLibrary in(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  Publish(cond);
  LockCall<Mutex*, const Condition&>(this, real, this, cond);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Publish(cond);
  LockCall<Mutex*, const Condition&>(this, real, this, cond);
}

// The lock is held on return whether or not the condition became true.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Publish(cond);
  return LockCall<bool, Mutex*, const Condition&, Duration>(this, real, Always, this, cond,
                                                            timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Publish(cond);
  return LockCall<bool, Mutex*, const Condition&, Time>(this, real, Always, this, cond, deadline);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Publish(cond);
  return LockCall<bool, Mutex*, const Condition&, Duration>(this, real, Always, this, cond,
                                                            timeout);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Publish(cond);
  return LockCall<bool, Mutex*, const Condition&, Time>(this, real, Always, this, cond, deadline);
}

// A wait releases the mutex (if it blocks) and holds it again on return.
void Mutex::Await(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  Publish(cond);
  Release(this);
  LockCall<Mutex*, const Condition&>(this, real, this, cond);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Publish(cond);
  Release(this);
  return LockCall<bool, Mutex*, const Condition&, Duration>(this, real, Always, this, cond,
                                                            timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Publish(cond);
  Release(this);
  return LockCall<bool, Mutex*, const Condition&, Time>(this, real, Always, this, cond, deadline);
}

void CondVar::Wait(Mutex* mu) {
  static const auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  LockCall(mu, real, this, mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  return LockCall(mu, real, Always, this, mu, timeout);
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real =
      Real<bool (*)(CondVar*, Mutex*, Time)>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  return LockCall(mu, real, Always, this, mu, deadline);
}

// Evaluated by the library with the mutex logically held, in whichever thread holds it.
bool Condition::Eval() const {
  static const auto real = Real<bool (*)(const Condition*)>("9Condition4EvalEv", "_ZNK");
  __tsan_acquire(const_cast<Condition*>(this));
  const Mutex* mu = tls_mutex;
  if (mu != nullptr) Acquire(mu);
  const bool result = real(this);
  if (mu != nullptr) Release(mu);
  return result;
}

}  // namespace absl
