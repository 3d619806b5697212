// ExtractFacts: untrusted bytes -> FileFacts. The worker's half of a scan.
//
// Format detection by content and the format readers of core/torch (torch zip, legacy, numpy,
// raw pickles; core/formats/read_file.h), each running the symbolic pickle VM. It never sees the
// rules and decides no verdict. It runs inside the jailed ckptscan-worker
// (sandbox/worker/worker.h), or in the CLI process with --no-sandbox. Linked by the worker; the
// trusted side never needs it.
//
// Thread-safe: reentrant.
#ifndef CKPTSCAN_SANDBOX_WORKER_EXTRACT_FACTS_H_
#define CKPTSCAN_SANDBOX_WORKER_EXTRACT_FACTS_H_

#include <string_view>

#include "core/formats/read_file.h"
#include "core/pickle/vm.h"
#include "sandbox/file_facts.h"

namespace ckptscan::sandbox {

// Reads the file as its loader would (formats::ReadFile). `trace`, when given, receives every
// opcode executed in the file's main pickle stream (the disassembler). `file_name`: the
// file's last path component, for what loaders read by name (formats::ReadOptions::file_name).
FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       const pickle::TraceSink* trace = nullptr, std::string_view file_name = "");
// The same with the format limits of `options` (its trace and file_name are set from the
// arguments above).
FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       formats::ReadOptions options, const pickle::TraceSink* trace,
                       std::string_view file_name);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_WORKER_EXTRACT_FACTS_H_
