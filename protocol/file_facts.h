// FileFacts: what the worker side learns from one file's bytes. Facts only: no verdict.
//
// Built by ExtractFacts (worker/extract_facts.h, which runs core/torch's readers) in the
// jailed worker (or in-process with --no-sandbox), carried to the trusted side by
// trusted/facts_decoder.h, judged there by JudgeFacts (trusted/judge_facts.h). The types are
// core/torch/file_facts.h's; plain data, thread-compatible.
#ifndef CKPTSCAN_PROTOCOL_FILE_FACTS_H_
#define CKPTSCAN_PROTOCOL_FILE_FACTS_H_

#include "core/torch/file_facts.h"

namespace ckptscan::pipeline {

using FileFacts = torch::FileFacts;
using MemberFacts = torch::MemberFacts;

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_PROTOCOL_FILE_FACTS_H_
