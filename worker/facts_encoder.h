// FileFacts -> ckptscan.worker.v1 messages: the worker's half of how facts cross the jail (the
// trusted side decodes and checks them: trusted/facts_decoder.h). Runs inside the worker only.
// Thread-safe: pure functions.
#ifndef CKPTSCAN_WORKER_FACTS_ENCODER_H_
#define CKPTSCAN_WORKER_FACTS_ENCODER_H_

#include <cstdint>

#include "ckptscan/worker/v1/worker.pb.h"
#include "protocol/file_facts.h"
#include "protocol/protocol.h"

namespace ckptscan::pipeline {

using sandbox::kListItemsPerValue;
using sandbox::ListItemValues;

void EncodeFacts(const FileFacts& facts, worker::v1::FileFacts* out);

// The values DecodeResult counts against sandbox::kMaxFrameValues, list items included (the
// worker checks first).
uint64_t CountFrameValues(const FileFacts& facts);

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_WORKER_FACTS_ENCODER_H_
