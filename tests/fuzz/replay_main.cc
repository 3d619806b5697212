// A stand-in for libFuzzer's main in builds without it (the normal gcc build): runs
// LLVMFuzzerTestOneInput once on every regular file in the given files and directories
// (recursively, in name order), so that seed corpora and saved crash inputs
// (tests/fuzz/regressions/<target>/) are replayed by every build's ctest. Arguments starting
// with '-' (libFuzzer flags such as -runs=0) are ignored, so one command line serves both.
//
//   pickle_fuzz [-runs=0] DIR_OR_FILE...      exit 0: every input ran; a failed invariant or a
//                                              sanitizer report aborts (the input is named first)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (fs::recursive_directory_iterator it(arg, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file(ec)) inputs.push_back(it->path());
      }
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    }
    if (ec) {
      std::fprintf(stderr, "replay: %s: %s\n", arg.c_str(), ec.message().c_str());
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  size_t bytes = 0;
  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 2;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), data.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    bytes += data.size();
  }
  std::printf("replay: %zu inputs, %zu bytes, all passed\n", inputs.size(), bytes);
  return 0;
}
