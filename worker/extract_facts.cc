#include "worker/extract_facts.h"

#include "core/torch/detect.h"

namespace ckptscan::pipeline {

FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       const pickle::TraceSink* trace) {
  torch::ReadOptions options;
  options.trace = trace;
  return torch::ReadFile(bytes, pickle::Vm(limits), options);
}

}  // namespace ckptscan::pipeline
