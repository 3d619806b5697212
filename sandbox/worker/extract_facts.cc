#include "sandbox/worker/extract_facts.h"

#include "core/formats/read_file.h"

namespace ckptscan::sandbox {

FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       const pickle::TraceSink* trace, std::string_view file_name) {
  return ExtractFacts(bytes, limits, formats::ReadOptions{}, trace, file_name);
}

FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       formats::ReadOptions options, const pickle::TraceSink* trace,
                       std::string_view file_name) {
  options.trace = trace;
  options.file_name = std::string(file_name);
  return formats::ReadFile(bytes, pickle::Vm(limits), options);
}

}  // namespace ckptscan::sandbox
