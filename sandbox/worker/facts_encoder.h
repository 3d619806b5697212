// FileFacts -> ckptscan.worker.v1 messages: the worker's half of how facts cross the jail (the
// trusted side decodes and checks them: sandbox/facts_decoder.h). Runs inside the worker only.
// Thread-safe: pure functions.
#ifndef CKPTSCAN_SANDBOX_WORKER_FACTS_ENCODER_H_
#define CKPTSCAN_SANDBOX_WORKER_FACTS_ENCODER_H_

#include <cstdint>

#include "ckptscan/worker/v1/worker.pb.h"
#include "sandbox/file_facts.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {

void EncodeFacts(const FileFacts& facts, worker::v1::FileFacts* out);

// The values DecodeResult counts against kMaxFrameValues, list items included (the
// worker checks first).
uint64_t CountFrameValues(const FileFacts& facts);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_WORKER_FACTS_ENCODER_H_
