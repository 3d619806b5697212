// FileFacts: what the worker side learns from one file's bytes. Facts only: no verdict.
//
// Built by ExtractFacts (pipeline/extract_facts.h) in the jailed worker (or in-process with
// --no-sandbox), carried to the trusted side by pipeline/facts_codec.h, judged there by
// JudgeFacts (pipeline/judge_facts.h). Plain data; thread-compatible.
#ifndef CKPTSCAN_PIPELINE_FILE_FACTS_H_
#define CKPTSCAN_PIPELINE_FILE_FACTS_H_

#include <string>
#include <vector>

#include "ckptscan/v1/report.pb.h"
#include "core/pickle/facts.h"

namespace ckptscan::pipeline {

// The facts of one pickle stream: a raw pickle file, or (later) one member of a
// container.
struct MemberFacts {
  std::string member;  // "" for a raw pickle file
  pickle::StreamFacts stream;
};

struct FileFacts {
  // Detected from the content, never from the name: "pickle", "zip", "tar",
  // "gzip", "bzip2", "xz", "zstd", "lz4", "7z", "rar", or "empty".
  std::string format;
  // Why (part of) the file could not be scanned: unsupported container, empty
  // file.
  std::vector<v1::ScanError> errors;
  std::vector<MemberFacts> members;
};

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_PIPELINE_FILE_FACTS_H_
