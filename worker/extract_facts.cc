#include "worker/extract_facts.h"

#include "core/torch/detect.h"

namespace ckptscan::pipeline {

FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       const pickle::TraceSink* trace, std::string_view file_name) {
  torch::ReadOptions options;
  options.trace = trace;
  options.file_name = std::string(file_name);
  return torch::ReadFile(bytes, pickle::Vm(limits), options);
}

}  // namespace ckptscan::pipeline
