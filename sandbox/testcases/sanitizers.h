// Whether this test binary runs under a sanitizer. Sanitizer runtimes make system calls the
// jail forbids (and ASan reserves terabytes of address space), so sandbox tests skip there:
//   if (kUnderSanitizer) GTEST_SKIP() << kSanitizerSkipReason;
#ifndef CKPTSCAN_SANDBOX_TESTCASES_SANITIZERS_H_
#define CKPTSCAN_SANDBOX_TESTCASES_SANITIZERS_H_

#ifndef CKPT_SANITIZER_BUILD
#define CKPT_SANITIZER_BUILD 0  // set by worker/CMakeLists.txt from CMAKE_CXX_FLAGS
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CKPT_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define CKPT_UNDER_SANITIZER 1
#endif
#endif
#ifndef CKPT_UNDER_SANITIZER
#define CKPT_UNDER_SANITIZER CKPT_SANITIZER_BUILD  // UBSan under GCC has no macro of its own
#endif

namespace ckptscan::sandbox {

inline constexpr bool kUnderSanitizer = CKPT_UNDER_SANITIZER != 0;
inline constexpr const char* kSanitizerSkipReason =
    "sandbox tests do not run under sanitizers: their runtimes need system calls the seccomp "
    "policy forbids, so results would be meaningless";

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_TESTCASES_SANITIZERS_H_
