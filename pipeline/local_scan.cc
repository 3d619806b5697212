#include "pipeline/local_scan.h"

#include <string>
#include <utility>

#include "core/base/status_macros.h"
#include "pipeline/mapped_file.h"
#include "pipeline/sha256.h"

namespace ckptscan::pipeline {

absl::StatusOr<v1::FileReport> ScanFileInProcess(const std::string& path,
                                                 const rules::RuleSet& rules,
                                                 const pickle::Limits& limits, bool sha256_on) {
  CKPT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  std::string sha256;
  if (sha256_on) {
    CKPT_ASSIGN_OR_RETURN(sha256, Sha256Hex(file.bytes()));
  }
  // Worker half (the jail runs it in ckptscan-worker), then trusted half.
  const FileFacts facts = ExtractFacts(file.bytes(), limits);
  v1::FileReport report = JudgeFacts(facts, rules);
  report.set_path(path);
  report.set_sha256(std::move(sha256));
  report.set_size(file.bytes().size());
  return report;
}

}  // namespace ckptscan::pipeline
