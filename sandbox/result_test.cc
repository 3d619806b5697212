#include "sandbox/result.h"

#include "gtest/gtest.h"

namespace ckptscan::sandbox {
namespace {

TEST(JailLimitTest, EveryLimitIsNamedAsReportsNameItAndParsesBack) {
  for (JailLimit limit : {JailLimit::kWorkerMemory, JailLimit::kFileSize, JailLimit::kMaxFrameBytes,
                          JailLimit::kMaxFrameValues, JailLimit::kFactsMemory}) {
    const std::string_view name = JailLimitName(limit);
    EXPECT_FALSE(name.empty());
    EXPECT_EQ(JailLimitNamed(name), limit) << name;
  }
  EXPECT_EQ(JailLimitName(JailLimit::kWorkerMemory), "worker_memory");
  EXPECT_EQ(JailLimitName(JailLimit::kMaxFrameBytes), "max_frame_bytes");
}

TEST(JailLimitTest, OtherLimitsAreNoneOfTheJails) {
  EXPECT_EQ(JailLimitNamed("max_opcodes"), std::nullopt);
  EXPECT_EQ(JailLimitNamed("max_sealed_copy_bytes"), std::nullopt);
  EXPECT_EQ(JailLimitNamed(""), std::nullopt);
}

}  // namespace
}  // namespace ckptscan::sandbox
