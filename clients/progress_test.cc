#include "clients/progress.h"

#include <string>

#include "gtest/gtest.h"

namespace ckptscan::clients {
namespace {

TEST(ProgressTextTest, FilesAndBytesWithTheRate) {
  EXPECT_EQ(ProgressText("scan", 3, 120, 512ull << 20, 1288490189ull, 0.5),
            "scan: 3/120 files, 512.0 MiB of 1.2 GiB read, 1073.7 MB/s");
}

TEST(ProgressTextTest, TimeLeftOnceASecondHasPassed) {
  // 100 MB in 2 s of 1 GB: 9 s left at 50 MB/s.
  EXPECT_EQ(ProgressText("scan", 0, 1, 100000000, 1000000000, 2.0),
            "scan: 0/1 file, 95.4 MiB of 953.7 MiB read, 50.0 MB/s, 18 s left");
  EXPECT_EQ(ProgressText("scan", 0, 1, 1000000, 1000000000, 1.0),
            "scan: 0/1 file, 976.6 KiB of 953.7 MiB read, 1.0 MB/s, 16 min 39 s left");
  EXPECT_NE(ProgressText("scan", 0, 1, 100, 1000000000000, 100.0).find(" h "),
            std::string::npos);
}

TEST(ProgressTextTest, LineFitsTheTerminalWidth) {
  EXPECT_EQ(FitToWidth("scan: 1/2 files", 0), "scan: 1/2 files");
  EXPECT_EQ(FitToWidth("scan: 1/2 files", 80), "scan: 1/2 files");
  EXPECT_EQ(FitToWidth("scan: 1/2 files", 10), "scan: 1/2");
  EXPECT_EQ(FitToWidth("scan: 1/2 files", 1), "");
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
