// ckptscan.worker.v1 messages -> FileFacts: the trusted side's half of how facts cross the jail.
//
// The worker encodes (sandbox/worker/facts_encoder.h); the trusted side decodes (DecodeResult /
// DecodeFacts) and trusts nothing: every enum must be one of ours, every node id, global and
// call-site index, root, parent pickle and parent node must be in range (pickle::FindInconsistency
// and more), opcodes must be bytes, nested pickles must follow their parents. Anything else is
// InvalidArgument naming the member, pickle and element, and the frame is rejected whole
// (the file is ERROR): a compromised worker cannot make the trusted side index out of range.
// Strings are carried as bytes and copied as they are (the report formatters escape them).
//
// Memory: a payload is at most kMaxFrameBytes, and before anything is built its
// values (errors, members, pickles, nodes, globals, call sites, tensors, ...) and its list items
// (a node's items / states / mutations, a tensor's shape / stride: packed or not) are counted on
// the wire, kListItemsPerValue items to a value, and refused past DecodeLimits::max_values (at
// most kMaxFrameValues): an element can take 2 bytes on the wire and ~400 here, a list
// item 1 byte and ~25 here (docs/sandbox.md, "Frame"). DecodeLimits::admit sees the count before
// anything is built (the daemon reserves memory there, sandbox/facts_budget.h).
// Thread-safe: pure functions. Links no parser.
#ifndef CKPTSCAN_SANDBOX_FACTS_DECODER_H_
#define CKPTSCAN_SANDBOX_FACTS_DECODER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "sandbox/file_facts.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {

absl::StatusOr<FileFacts> DecodeFacts(const worker::v1::FileFacts& in);

// A whole worker result, decoded and checked.
struct DecodedResult {
  FileFacts facts;
  worker::v1::JailLayers layers;
  std::string trace;  // disasm listing as the worker wrote it (untrusted text)
  bool trace_truncated = false;
  std::string convert_error;  // MODE_CONVERT: why the worker wrote no output (untrusted text)
};

// Parses a frame payload (a serialized worker.v1.Result) and decodes it. InvalidArgument for
// anything that is not a well-formed, consistent Result; ResourceExhausted (naming
// max_frame_values) for one with more values than the limit.
absl::StatusOr<DecodedResult> DecodeResult(std::string_view payload);

struct DecodeLimits {
  // Most values one result may hold (kMaxFrameValues is the protocol's own cap; a
  // larger value means that).
  uint64_t max_values = kMaxFrameValues;
  // May be empty. Called once the values are counted and before anything is built, with the
  // payload's size and its values; a non-OK status is returned as the decode's.
  std::function<absl::Status(uint64_t payload_bytes, uint64_t values)> admit;
};

// As above, and the payload is freed as soon as it is parsed (before the facts are built).
absl::StatusOr<DecodedResult> DecodeResult(std::string* payload, const DecodeLimits& limits);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_FACTS_DECODER_H_
