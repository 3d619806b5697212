// fp32/fp16 -> bf16 throughput per dispatch path, out of cache, against memcpy
// of the same output size and of the same input size, in the same run.
// See docs/bf16.md ("Throughput") for the command and measured numbers.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/bf16/bf16.h"

namespace ckptscan::bf16 {
namespace {

constexpr size_t kFp32Count = size_t{64} << 20 >> 2;  // 64 MiB of fp32 in.
constexpr size_t kInBytes = kFp32Count * sizeof(float);
constexpr size_t kOutBytes = kFp32Count * sizeof(uint16_t);

// Touched once before any timing so no run pays for page faults.
struct Buffers {
  std::vector<float> fp32;
  std::vector<uint16_t> fp16;
  std::vector<uint16_t> out;
  std::vector<unsigned char> copy_src, copy_dst;

  Buffers() : fp32(kFp32Count), fp16(kFp32Count), out(kFp32Count) {
    uint32_t x = 0x12345678u;
    for (size_t i = 0; i < kFp32Count; ++i) {
      x = x * 1664525u + 1013904223u;  // LCG; weights-like range around +-1.
      fp32[i] = static_cast<float>(static_cast<int32_t>(x)) * 0x1p-31f;
      fp16[i] = static_cast<uint16_t>(0x3000u + (x >> 20));
    }
    copy_src.assign(kInBytes, 1);
    copy_dst.assign(kInBytes, 2);
  }
};

Buffers& Bufs() {
  static Buffers* buffers = new Buffers();  // Never destroyed: used until exit.
  return *buffers;
}

// Shown as e.g. "19.6G/s": bytes per second, SI prefixes (G = 1e9).
void SetBytes(benchmark::State& state, size_t in_bytes, size_t out_bytes) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["in"] =
      benchmark::Counter(iters * static_cast<double>(in_bytes), benchmark::Counter::kIsRate);
  state.counters["out"] =
      benchmark::Counter(iters * static_cast<double>(out_bytes), benchmark::Counter::kIsRate);
}

void BM_MemcpyBytes(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Buffers& b = Bufs();
  for (auto _ : state) {
    std::memcpy(b.copy_dst.data(), b.copy_src.data(), bytes);
    benchmark::ClobberMemory();
  }
  SetBytes(state, bytes, bytes);
}

void BM_Fp32ToBf16(benchmark::State& state, Path path) {
  Buffers& b = Bufs();
  for (auto _ : state) {
    if (!Fp32ToBf16OnPath(path, b.fp32.data(), b.out.data(), kFp32Count).ok()) {
      state.SkipWithError("path not available");
      return;
    }
    benchmark::ClobberMemory();
  }
  SetBytes(state, kInBytes, kOutBytes);
}

void BM_Fp16ToBf16(benchmark::State& state, Path path) {
  Buffers& b = Bufs();
  for (auto _ : state) {
    if (!Fp16ToBf16OnPath(path, b.fp16.data(), b.out.data(), kFp32Count).ok()) {
      state.SkipWithError("path not available");
      return;
    }
    benchmark::ClobberMemory();
  }
  SetBytes(state, kOutBytes, kOutBytes);
}

// Prints the usual table, then each conversion's time against the two memcpy
// baselines of the same run: ratio = memcpy time / conversion time (> 1: the
// conversion is faster than copying that many bytes).
class RatioReporter final : public benchmark::ConsoleReporter {
 public:
  RatioReporter() : ConsoleReporter(OO_Tabular) {}

  // Keeps the best (minimum) time per pass of each benchmark; with
  // --benchmark_report_aggregates_only only the median is seen, so that is used.
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (run.run_type != Run::RT_Iteration && !median) continue;
      const double seconds =
          run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
      const std::string name = run.run_name.str();
      auto it = best_.find(name);
      if (it == best_.end()) {
        order_.push_back(name);
        best_[name] = seconds;
      } else {
        it->second = std::min(it->second, seconds);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintRatios() const {
    const std::string out_name = "BM_MemcpyBytes/" + std::to_string(kOutBytes) + "/real_time";
    const std::string in_name = "BM_MemcpyBytes/" + std::to_string(kInBytes) + "/real_time";
    if (!best_.count(out_name) || !best_.count(in_name)) return;
    const double t_out = best_.at(out_name), t_in = best_.at(in_name);
    std::printf(
        "\nbest (or median) time per pass; GB = 1e9 bytes; ratio = memcpy time / conversion "
        "time\n");
    std::printf("%-32s %9s %9s %9s %12s %12s\n", "benchmark", "ms", "in GB/s", "out GB/s",
                "vs cpy out", "vs cpy in");
    for (const std::string& name : order_) {
      const double t = best_.at(name);
      const bool fp16 = name.rfind("BM_Fp16", 0) == 0;
      double in_bytes = fp16 ? kOutBytes : kInBytes, out_bytes = kOutBytes;
      if (name.rfind("BM_Memcpy", 0) == 0)
        in_bytes = out_bytes = name == in_name ? kInBytes : kOutBytes;
      std::printf("%-32s %9.2f %9.2f %9.2f %12.2f %12.2f\n", name.c_str(), t * 1e3,
                  in_bytes / t / 1e9, out_bytes / t / 1e9, t_out / t, t_in / t);
    }
  }

 private:
  std::vector<std::string> order_;
  std::map<std::string, double> best_;
};

}  // namespace
}  // namespace ckptscan::bf16

int main(int argc, char** argv) {
  using namespace ckptscan::bf16;
  benchmark::Initialize(&argc, argv);
  Bufs();
  benchmark::RegisterBenchmark("BM_MemcpyBytes", BM_MemcpyBytes)
      ->Arg(static_cast<int64_t>(kOutBytes))
      ->Arg(static_cast<int64_t>(kInBytes))
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (Path path : AvailablePaths()) {
    const std::string name(PathName(path));
    benchmark::RegisterBenchmark(("BM_Fp32ToBf16/" + name).c_str(), BM_Fp32ToBf16, path)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (Path path : AvailablePaths()) {
    const std::string name(PathName(path));
    benchmark::RegisterBenchmark(("BM_Fp16ToBf16/" + name).c_str(), BM_Fp16ToBf16, path)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
