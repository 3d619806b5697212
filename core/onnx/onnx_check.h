// ONNX models (onnxruntime, onnx): a ModelProto decoded with protobuf against the schema the
// runtimes use (onnx 1.17 with ONNX_ML, proto/onnx/onnx.proto), walked whole for what makes a
// runtime read other files or load native code.
//
// Judged (findings, by kind):
//   - "external_data_path": a tensor's external data `location` that is absolute, holds "..",
//     a NUL, a backslash or a drive letter, i.e. may leave the model's folder (CVE-2022-25882,
//     CVE-2024-27318): onnx.load and onnxruntime read the file it names; or onnxruntime's
//     in-memory marker "*/_ORT_MEM_ADDR_/*", whose offset it reads as an address;
//   - "custom_domain": nodes of an operator domain outside ONNX's own ("", "ai.onnx",
//     "ai.onnx.ml", "ai.onnx.preview.training") and not a function the model defines (domain,
//     name and overload): a runtime runs them with operators registered by native libraries
//     (one finding per domain);
//   - "external_data" (informational): the files a model's tensors are read from.
// Every message of the tree is visited, whatever the field that holds it, so a TensorProto is
// judged wherever the schema lets one appear: initializers, sparse tensors, node attributes at
// any depth, functions' nodes and default attributes, training graphs.
// Refused (an error): bytes that are no ModelProto, external data whose offset or length is not
// a non-negative decimal integer or overflows, a named limit hit. Not verified (an error beside
// the findings, Model::unverified): a field the schema does not know anywhere in the tree (a
// later runtime may read it), a model without a graph. Never opens a `location`.
//
// The walk uses an explicit stack as deep as the message nesting, which protobuf's decoder
// bounds at its default recursion limit (100); graphs inside graphs are bounded by
// max_graph_depth. Worker side only. Thread-safe.
#ifndef CKPTSCAN_CORE_ONNX_ONNX_CHECK_H_
#define CKPTSCAN_CORE_ONNX_ONNX_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckptscan::onnx_check {

struct Limits {
  uint64_t max_model_bytes = (2ull << 30) - 1;  // protobuf's own limit on one message
  uint64_t max_nodes = 1'000'000;               // nodes of every graph and function together
  uint32_t max_graph_depth = 64;                // graphs inside graph attributes
  uint64_t max_tensors = 10'000'000;            // tensors wherever they are, together
};

struct Finding {
  std::string kind;   // "external_data_path", "custom_domain", "external_data"
  std::string where;  // "graph \"main\" > node[0] \"If_0\" (If) > attribute[0] \"then_branch\" ..."
  std::string message;
};

struct Model {
  int64_t ir_version = 0;
  uint64_t nodes = 0;
  uint64_t graphs = 0;
  uint64_t tensors = 0;
  std::vector<Finding> findings;
  // InvalidArgument when the model was read and walked but cannot be verified: fields the
  // schema does not know (where, which), or no graph. The findings stand beside it.
  absl::Status unverified;
};

// Whether `data` is to be read as a ModelProto: it starts with field 1 (ir_version) as
// protobuf writes it (0x08 and a varint), or its top level is protobuf fields from the first
// byte to the last (any order, unknown fields and groups included, as the runtimes' decoder
// accepts them) among which a graph, a training_info or a function (fields 7, 20, 25, length
// delimited). Reads the top level only: linear in the size, no allocation past the group
// nesting (at most protobuf's recursion limit).
bool LooksLikeModel(std::string_view data);

// Decodes and walks a whole model. InvalidArgument for what is no model or is malformed,
// ResourceExhausted (base::LimitError) for a limit.
absl::StatusOr<Model> Read(std::string_view data, const Limits& limits);

}  // namespace ckptscan::onnx_check

#endif  // CKPTSCAN_CORE_ONNX_ONNX_CHECK_H_
