// Test-only: writes the facts_codec_fuzz seeds (tests/fuzz/seeds.py runs it). For each input
// file, the worker.v1.Result frame payload an honest worker sends for it: ExtractFacts (the
// worker's parsers, default limits) then EncodeFacts, serialized.
//
//   fuzz_seed_tool OUT_DIR FILE...      writes OUT_DIR/<n>.result for the n-th FILE (from 0)
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "ckptscan/worker/v1/worker.pb.h"
#include "core/pickle/vm.h"
#include "sandbox/worker/extract_facts.h"
#include "sandbox/worker/facts_encoder.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR FILE...\n", argv[0]);
    return 64;
  }
  const std::string out_dir = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "%s: cannot read\n", argv[i]);
      return 1;
    }
    const ckptscan::sandbox::FileFacts facts =
        ckptscan::sandbox::ExtractFacts(bytes, ckptscan::pickle::Limits{});
    ckptscan::worker::v1::Result result;
    ckptscan::sandbox::EncodeFacts(facts, result.mutable_facts());
    const std::string path = out_dir + "/" + std::to_string(i - 2) + ".result";
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!result.SerializeToOstream(&out) || !out.flush()) {
      std::fprintf(stderr, "%s: cannot write\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
