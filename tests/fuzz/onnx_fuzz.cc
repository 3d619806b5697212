// libFuzzer target: the ONNX model reader (core/onnx/onnx_check.h).
//
// Invariants: a failure is InvalidArgument or ResourceExhausted (a named limit); an accepted
// model decodes as a ModelProto, is not verified (InvalidArgument) without a graph, walked its
// graph when it has one, counts no more nodes
// and tensors than the limits, and every finding has a known kind and a terminal-safe message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/onnx/onnx_check.h"
#include "onnx/onnx.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr size_t kMaxInputBytes = 256 << 10;

ckptscan::onnx_check::Limits SmallLimits() {
  ckptscan::onnx_check::Limits l;
  l.max_model_bytes = kMaxInputBytes;
  l.max_nodes = 10000;
  l.max_graph_depth = 16;
  l.max_tensors = 10000;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const onnx_check::Limits limits = SmallLimits();
  (void)onnx_check::LooksLikeModel(bytes);
  const absl::StatusOr<onnx_check::Model> m = onnx_check::Read(bytes, limits);
  if (!m.ok()) {
    const absl::StatusCode code = m.status().code();
    CKPT_FUZZ_CHECK(
        code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kResourceExhausted,
        "%s", m.status().ToString().c_str());
    return 0;
  }
  onnx::ModelProto proto;
  CKPT_FUZZ_CHECK(proto.ParseFromArray(data, static_cast<int>(size)),
                  "accepted bytes that are no ModelProto");
  CKPT_FUZZ_CHECK(m->unverified.ok() || m->unverified.code() == absl::StatusCode::kInvalidArgument,
                  "%s", m->unverified.ToString().c_str());
  // A model without a graph is walked (its functions may name external data) but never
  // verified.
  CKPT_FUZZ_CHECK(proto.has_graph() || !m->unverified.ok(), "verified a model without a graph");
  CKPT_FUZZ_CHECK(!proto.has_graph() || m->graphs >= 1, "no graph walked");
  CKPT_FUZZ_CHECK(m->nodes <= limits.max_nodes && m->tensors <= limits.max_tensors,
                  "%llu nodes, %llu tensors", (unsigned long long)m->nodes,
                  (unsigned long long)m->tensors);
  for (const onnx_check::Finding& f : m->findings) {
    CKPT_FUZZ_CHECK(
        f.kind == "external_data_path" || f.kind == "custom_domain" || f.kind == "external_data",
        "finding kind %s", f.kind.c_str());
    for (const std::string* s : {&f.message, &f.where}) {
      for (char c : *s) {
        CKPT_FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f,
                        "raw control byte in %s", s->c_str());
      }
    }
  }
  return 0;
}
