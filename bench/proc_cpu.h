// CPU seconds of process trees, read from /proc (utime, stime, cutime, cstime; clock ticks).
// The benchmarks count a job's whole cost with it: a fork server's jobs are reaped by the fork
// server, never by the benchmark, so getrusage(RUSAGE_CHILDREN) alone misses them, and the fork
// server is a child of whichever thread first asked for it, not necessarily the main one.
#ifndef CKPTSCAN_BENCH_PROC_CPU_H_
#define CKPTSCAN_BENCH_PROC_CPU_H_

#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ckptscan::bench {

// utime + stime + cutime + cstime of `pid` (its own and its reaped children's), in seconds; 0
// if it is gone.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return 0;
  // Fields after "pid (comm) ": state is field 3, utime .. cstime are 14 .. 17.
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 17 && rest >> field; ++i) {
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// ProcessCpuSeconds of each live child of each thread of `pid`, and of their live children, down
// to `max_depth` levels (a fork server, its pid-namespace half, and that one's jobs: 3).
inline double LiveDescendantsCpuSeconds(pid_t pid, int max_depth = 4) {
  if (max_depth <= 0) return 0;
  double cpu = 0;
  std::error_code ec;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (auto task = std::filesystem::directory_iterator(tasks, ec);
       !ec && task != std::filesystem::directory_iterator(); task.increment(ec)) {
    std::ifstream children(task->path() / "children");
    pid_t child;
    while (children >> child) {
      cpu += ProcessCpuSeconds(child) + LiveDescendantsCpuSeconds(child, max_depth - 1);
    }
  }
  return cpu;
}

}  // namespace ckptscan::bench

#endif  // CKPTSCAN_BENCH_PROC_CPU_H_
