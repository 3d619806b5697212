#include "clients/progress.h"

#include "gtest/gtest.h"

namespace ckptscan::clients {
namespace {

TEST(ProgressTextTest, FilesAndBytesWithTheRate) {
  EXPECT_EQ(ProgressText("scan", 3, 120, 512ull << 20, 1288490189ull, 0.5),
            "scan: 3/120 files, 512.0 MiB of 1.2 GiB read, 1073.7 MB/s");
}

TEST(ProgressTextTest, PartsWithoutATotalAreLeftOut) {
  EXPECT_EQ(ProgressText("scan", 0, 1, 0, 0, 1.0), "scan: 0/1 file");
  EXPECT_EQ(ProgressText("convert", 0, 0, 2048, 0, 0), "convert: 2.0 KiB read");
  EXPECT_EQ(ProgressText("convert", 0, 0, 100, 1000, 0), "convert: 100 B of 1000 B read");
}

TEST(ProgressMeterTest, CountsFromSeveralThreadsWithoutDrawing) {
  ProgressMeter meter(/*draw=*/false, "scan");
  meter.AddFiles(2);
  meter.FileDone();
  meter.bytes()->fetch_add(10);
  EXPECT_EQ(meter.bytes()->load(), 10u);
}

}  // namespace
}  // namespace ckptscan::clients
