// libFuzzer target: the trusted side's decoder of the worker's result frame
// (sandbox/facts_decoder.h, DecodeResult): the bytes a compromised worker could send.
//
// Invariants: a frame the decoder accepts is safe to use — every graph is consistent, nested
// pickles follow their parents — and the trusted side's whole judgement (JudgeFacts with the
// default rules) runs on it without crashing; decoding is a fixed point (re-encoding the
// accepted facts decodes again to the same bytes).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "app/judge.h"
#include "core/pickle/graph_check.h"
#include "rules/rule_set.h"
#include "sandbox/facts_decoder.h"
#include "sandbox/worker/facts_encoder.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// A real frame may be 64 MiB (sandbox::kMaxFrameBytes); the seeds, the facts of the fixture
// files, are at most ~100 KiB, and size checks against kMaxFrameValues are unit-tested.
constexpr size_t kMaxInputBytes = 256 << 10;

std::string Serialized(const ckptscan::torch::FileFacts& facts) {
  ckptscan::worker::v1::FileFacts msg;
  ckptscan::sandbox::EncodeFacts(facts, &msg);
  std::string out;
  CKPT_FUZZ_CHECK(msg.SerializeToString(&out), "cannot serialize");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const std::shared_ptr<const rules::RuleSet> rule_set = rules::RuleSet::Default();

  absl::StatusOr<sandbox::DecodedResult> r = sandbox::DecodeResult(bytes);
  if (!r.ok()) {
    CKPT_FUZZ_CHECK(r.status().code() == absl::StatusCode::kInvalidArgument, "%s",
                    r.status().ToString().c_str());
    return 0;
  }
  for (const torch::MemberFacts& m : r->facts.members) {
    for (size_t i = 0; i < m.stream.pickles.size(); ++i) {
      const pickle::PickleFacts& p = m.stream.pickles[i];
      const std::optional<std::string> bad = pickle::FindInconsistency(p.graph);
      CKPT_FUZZ_CHECK(!bad.has_value(), "accepted an inconsistent graph: %s", bad->c_str());
      if (p.root != pickle::kNoNode) {
        CKPT_FUZZ_CHECK(p.root < p.graph.nodes.size(), "accepted root %u", p.root);
      }
      if (p.depth > 0) {
        CKPT_FUZZ_CHECK(p.parent >= 0 && static_cast<size_t>(p.parent) < i,
                        "accepted a nested pickle before its parent");
        CKPT_FUZZ_CHECK(p.parent_node < m.stream.pickles[p.parent].graph.nodes.size(),
                        "accepted parent node %u", p.parent_node);
      }
    }
  }
  const v1::FileReport report = app::JudgeFacts(r->facts, *rule_set);
  CKPT_FUZZ_CHECK(report.verdict() != v1::VERDICT_UNSPECIFIED, "no verdict");

  const std::string once = Serialized(r->facts);
  worker::v1::FileFacts msg;
  CKPT_FUZZ_CHECK(msg.ParseFromString(once), "cannot parse our own encoding");
  absl::StatusOr<torch::FileFacts> again = sandbox::DecodeFacts(msg);
  CKPT_FUZZ_CHECK(again.ok(), "accepted facts are refused once re-encoded: %s",
                  again.status().ToString().c_str());
  CKPT_FUZZ_CHECK(Serialized(*again) == once, "decoding is not a fixed point");
  return 0;
}
