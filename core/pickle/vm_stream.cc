// The Vm's entry points (vm.h): one pickle, a stream of pickles one after another with the
// bytes that follow the last one, and the byte strings inside them that are pickles too. Each
// pickle is run by the opcode machine of vm.cc (internal::RunPickle).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/pickle/facts.h"
#include "core/pickle/opcodes.h"
#include "core/pickle/vm.h"
#include "core/pickle/vm_internal.h"

namespace ckptscan::pickle {
namespace {

// Whether a pickle imported or called anything: what makes a run worth reporting as a pickle.
bool HasContent(const PickleFacts& p) { return !p.graph.globals.empty() || !p.graph.calls.empty(); }

}  // namespace

PickleFacts Vm::RunOne(std::string_view data, uint64_t base_offset, const TraceSink* trace) const {
  return internal::RunPickle(limits_, data, base_offset, trace, 0, 0, loader_);
}

StreamFacts Vm::ScanStream(std::string_view data, uint64_t base_offset, const TraceSink* trace,
                           Pickles which) const {
  StreamFacts facts;
  if (data.size() > limits_.max_total_bytes) {
    VmError e;
    e.code = VmError::Code::kLimit;
    e.message = absl::StrFormat("stream of %d bytes is over the limit", data.size());
    e.offset = base_offset;
    e.limit_name = "max_total_bytes";
    e.limit_value = limits_.max_total_bytes;
    facts.stream_error = std::move(e);
    return facts;
  }

  // Top-level pickles, one after another, as repeated pickle.load(f) calls would read them.
  uint64_t pos = 0;
  while (true) {
    if (facts.pickles.size() >= limits_.max_pickles) {
      VmError e;
      e.code = VmError::Code::kLimit;
      e.message = "too many pickles in one stream";
      e.offset = base_offset + pos;
      e.limit_name = "max_pickles";
      e.limit_value = limits_.max_pickles;
      facts.stream_error = std::move(e);
      break;
    }
    PickleFacts p = internal::RunPickle(limits_, data.substr(pos), base_offset + pos, trace,
                                        static_cast<uint32_t>(facts.pickles.size()), 0, loader_);
    if (!facts.pickles.empty() && p.error.has_value() && !HasContent(p)) {
      // Not another pickle: what follows the last STOP is trailing data.
      facts.trailing_offset = base_offset + pos;
      facts.trailing_bytes = data.size() - pos;
      break;
    }
    bool failed = p.error.has_value();
    uint64_t next = p.end - base_offset;
    std::vector<PickleFacts> inline_pickles = std::move(p.inline_pickles);
    p.inline_pickles.clear();
    facts.pickles.push_back(std::move(p));
    for (PickleFacts& q : inline_pickles) facts.pickles.push_back(std::move(q));
    if (failed || next >= data.size() || which == Pickles::kFirst) break;
    pos = next;
  }

  ScanNested(data, base_offset, &facts, trace);
  return facts;
}

void Vm::ScanNested(std::string_view data, uint64_t base_offset, StreamFacts* out,
                    const TraceSink* trace) const {
  StreamFacts& facts = *out;
  // Byte strings that are themselves pickles, breadth first, to a bounded depth and volume.
  uint64_t nested_budget = limits_.max_nested_bytes;
  for (size_t pi = 0; pi < facts.pickles.size(); ++pi) {
    if (facts.pickles[pi].depth >= limits_.max_nested_depth) continue;
    const size_t node_count = facts.pickles[pi].graph.nodes.size();
    for (NodeId id = 0; id < node_count; ++id) {
      const Node& n = facts.pickles[pi].graph.nodes[id];
      if (n.kind != Kind::kBytes && n.kind != Kind::kByteArray && n.kind != Kind::kStr) continue;
      if (n.len < 6 || n.text.empty() || OpName(static_cast<uint8_t>(n.text[0])) == nullptr) {
        continue;
      }
      std::string_view candidate;
      if (n.in_stream && n.data_offset >= base_offset &&
          n.data_offset - base_offset <= data.size() &&
          n.len <= data.size() - (n.data_offset - base_offset)) {
        candidate = data.substr(n.data_offset - base_offset, n.len);
      } else if (!n.truncated) {
        candidate = n.text;
      } else {
        continue;
      }
      if (candidate.size() > nested_budget) continue;
      nested_budget -= candidate.size();
      std::string owned(candidate);  // the parent's graph may move as pickles are appended
      uint32_t depth = facts.pickles[pi].depth + 1;
      // Trace a nested attempt only if it turns out to be a pickle worth reporting.
      std::vector<TraceEvent> events;
      TraceSink buffer = [&events](const TraceEvent& ev) { events.push_back(ev); };
      PickleFacts nested =
          internal::RunPickle(limits_, owned, n.data_offset, trace != nullptr ? &buffer : nullptr,
                              static_cast<uint32_t>(facts.pickles.size()), depth);
      if (nested.error.has_value() || !HasContent(nested)) continue;
      if (trace != nullptr) {
        for (const TraceEvent& ev : events) (*trace)(ev);
      }
      nested.parent = static_cast<int32_t>(pi);
      nested.parent_node = id;
      facts.pickles.push_back(std::move(nested));
    }
  }
}

}  // namespace ckptscan::pickle
