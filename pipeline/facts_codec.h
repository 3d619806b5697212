// FileFacts <-> ckptscan.worker.v1 messages: how facts cross the jail.
//
// The worker encodes (EncodeFacts); the trusted side decodes (DecodeResult / DecodeFacts) and
// trusts nothing: every enum must be one of ours, every node id, global and call-site index,
// root, parent pickle and parent node must be in range (pickle::FindInconsistency and more),
// opcodes must be bytes, nested pickles must follow their parents. Anything else is
// InvalidArgument naming the member, pickle and element, and the frame is rejected whole
// (the file is ERROR): a compromised worker cannot make the trusted side index out of range.
// Strings are carried as bytes and copied as they are (the report formatters escape them).
//
// Memory: a payload is at most sandbox::kMaxFrameBytes, and before anything is built its
// values (errors, members, pickles, nodes, globals, call sites, tensors, ...) and its list items
// (a node's items / states / mutations, a tensor's shape / stride: packed or not) are counted on
// the wire, kListItemsPerValue items to a value, and refused past DecodeLimits::max_values (at
// most sandbox::kMaxFrameValues): an element can take 2 bytes on the wire and ~400 here, a list
// item 1 byte and ~25 here (docs/sandbox.md, "Frame"). DecodeLimits::admit sees the count before
// anything is built (the daemon reserves memory there, pipeline/facts_budget.h).
// Thread-safe: pure functions. Links no parser.
#ifndef CKPTSCAN_PIPELINE_FACTS_CODEC_H_
#define CKPTSCAN_PIPELINE_FACTS_CODEC_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "pipeline/file_facts.h"
#include "sandbox/protocol.h"

namespace ckptscan::pipeline {

// List items (repeated scalars) charged as one value (~400 decoded bytes, kDecodedBytesPerValue
// in pipeline/facts_budget.h): 25 bytes an item; an int64 element (a tensor's shape / stride)
// counts as two items. Measured (glibc 2.36, protobuf 3.21):
// - decode alone: FactsCodecTest.DecodedListItemsCostWhatTheyAreCharged decodes one node with
//   8M one-byte packed items (8 MB on the wire): peak RSS +63,824 kB besides the frame, 8.2
//   bytes an item (the parsed RepeatedField<uint32>, 4 bytes, and pickle::Node's copy, 4).
// - the whole job in ckptscand (frame, decode, judge): tests/attacks/daemon_resources_test.py
//   A2 on today's main, 23.4M items a job, two at once: VmHWM 637 MiB from 21, ~13 bytes an item.
// 25 leaves about twice the job's measured cost.
inline constexpr uint64_t kListItemsPerValue = 16;
inline constexpr uint64_t ListItemValues(uint64_t items) {
  return items / kListItemsPerValue + (items % kListItemsPerValue != 0 ? 1 : 0);
}

void EncodeFacts(const FileFacts& facts, worker::v1::FileFacts* out);

// The values DecodeResult counts against sandbox::kMaxFrameValues, list items included (the
// worker checks first).
uint64_t CountFrameValues(const FileFacts& facts);

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
  // Most values one result may hold (sandbox::kMaxFrameValues is the protocol's own cap; a
  // larger value means that).
  uint64_t max_values = sandbox::kMaxFrameValues;
  // May be empty. Called once the values are counted and before anything is built, with the
  // payload's size and its values; a non-OK status is returned as the decode's.
  std::function<absl::Status(uint64_t payload_bytes, uint64_t values)> admit;
};

// As above, and the payload is freed as soon as it is parsed (before the facts are built).
absl::StatusOr<DecodedResult> DecodeResult(std::string* payload, const DecodeLimits& limits);

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_PIPELINE_FACTS_CODEC_H_
