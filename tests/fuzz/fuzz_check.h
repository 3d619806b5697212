// Shared by the fuzz targets in tests/fuzz (docs/security.md, "Fuzzing and sanitizers").
//
// A target must do more than "not crash": it asserts the invariants its API promises, cheaply,
// with CKPT_FUZZ_CHECK. A failed check prints what failed and aborts, which libFuzzer records
// as a crash (and the replay driver, tests/fuzz/replay_main.cc, as a failed test).
//
// The checks of facts shared by several targets are in facts_check.h.
#ifndef CKPTSCAN_TESTS_FUZZ_FUZZ_CHECK_H_
#define CKPTSCAN_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

// Aborts with the failed condition and a detail (a printf format and its arguments).
#define CKPT_FUZZ_CHECK(cond, ...)                                                           \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fputc('\n', stderr);                                                              \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#endif  // CKPTSCAN_TESTS_FUZZ_FUZZ_CHECK_H_
