// FileFacts: what the worker side learns from one file's bytes. Facts only: no verdict.
//
// Built by ExtractFacts (sandbox/worker/extract_facts.h, which runs core/torch's readers) in the
// jailed worker (or in-process with --no-sandbox), carried to the trusted side by
// sandbox/facts_decoder.h, judged there by JudgeFacts (app/judge.h). The types are
// core/torch/file_facts.h's; plain data, thread-compatible.
#ifndef CKPTSCAN_SANDBOX_FILE_FACTS_H_
#define CKPTSCAN_SANDBOX_FILE_FACTS_H_

#include "core/torch/file_facts.h"

namespace ckptscan::sandbox {

using FileFacts = torch::FileFacts;
using MemberFacts = torch::MemberFacts;

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_FILE_FACTS_H_
