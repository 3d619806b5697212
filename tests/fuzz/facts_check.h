// Invariants of VM and format-reader facts (core/pickle/facts.h, core/torch/file_facts.h),
// shared by the pickle, legacy and extract fuzz targets, and the small limits they run with.
// Header-only; link ckpt_pickle_facts (and ckpt_proto for FileFacts).
#ifndef CKPTSCAN_TESTS_FUZZ_FACTS_CHECK_H_
#define CKPTSCAN_TESTS_FUZZ_FACTS_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "core/pickle/facts.h"
#include "core/pickle/graph_check.h"
#include "core/pickle/vm.h"
#include "core/torch/file_facts.h"
#include "tests/fuzz/fuzz_check.h"

namespace ckptscan::fuzz {

// Limits small enough that one input runs in milliseconds, large enough that every fixture
// parses whole (the seeds must reach deep code, not stop at a limit).
inline pickle::Limits SmallPickleLimits() {
  pickle::Limits l;
  l.max_opcodes = 200'000;
  l.max_stack_depth = 50'000;
  l.max_mark_depth = 1'000;
  l.max_memo_entries = 50'000;
  l.max_memo_index = 1u << 16;
  l.max_nodes = 200'000;
  l.max_expanded_values = 1'000'000;
  l.max_string_bytes = 1u << 20;
  l.max_line_bytes = 64u << 10;
  l.max_total_bytes = 16u << 20;
  l.max_kept_string = 4u << 10;
  l.max_pickles = 64;
  l.max_nested_depth = 2;
  l.max_nested_bytes = 1u << 20;
  return l;
}

// What the VM promises about one stream's facts (`base`: the offset of data[0], `size`: the
// bytes the VM was given). Every id resolves; every offset of a top-level pickle lies in the
// stream; a pickle without an error has a root; nested pickles follow their parents.
inline void CheckStreamFacts(const pickle::StreamFacts& s, uint64_t base, uint64_t size,
                             const pickle::Limits& limits) {
  const uint64_t end = base + size;
  for (size_t i = 0; i < s.pickles.size(); ++i) {
    const pickle::PickleFacts& p = s.pickles[i];
    const std::optional<std::string> bad = pickle::FindInconsistency(p.graph);
    CKPT_FUZZ_CHECK(!bad.has_value(), "pickle %zu: %s", i, bad ? bad->c_str() : "");
    CKPT_FUZZ_CHECK(p.start <= p.end, "pickle %zu: start %llu > end %llu", i,
                    (unsigned long long)p.start, (unsigned long long)p.end);
    CKPT_FUZZ_CHECK(p.opcodes <= limits.max_opcodes, "pickle %zu: %llu opcodes", i,
                    (unsigned long long)p.opcodes);
    if (!p.error) {
      CKPT_FUZZ_CHECK(p.root != pickle::kNoNode && p.root < p.graph.nodes.size(),
                      "pickle %zu parsed whole but has no root", i);
    } else if (p.error->code == pickle::VmError::Code::kLimit) {
      CKPT_FUZZ_CHECK(!p.error->limit_name.empty(), "pickle %zu: unnamed limit", i);
    }
    if (p.depth == 0) {
      CKPT_FUZZ_CHECK(p.parent == -1, "pickle %zu: top level with a parent", i);
      CKPT_FUZZ_CHECK(base <= p.start && p.end <= end,
                      "pickle %zu: [%llu, %llu) outside the stream [%llu, %llu)", i,
                      (unsigned long long)p.start, (unsigned long long)p.end,
                      (unsigned long long)base, (unsigned long long)end);
    } else {
      CKPT_FUZZ_CHECK(p.parent >= 0 && static_cast<size_t>(p.parent) < i,
                      "pickle %zu: parent %d does not precede it", i, p.parent);
      const pickle::PickleFacts& parent = s.pickles[p.parent];
      CKPT_FUZZ_CHECK(p.depth == parent.depth + 1, "pickle %zu: depth %u under depth %u", i,
                      p.depth, parent.depth);
      CKPT_FUZZ_CHECK(p.depth <= limits.max_nested_depth, "pickle %zu: depth %u", i, p.depth);
      CKPT_FUZZ_CHECK(p.parent_node < parent.graph.nodes.size(),
                      "pickle %zu: parent node %u out of range", i, p.parent_node);
    }
    // The printers walk attacker-shaped graphs: bounded, no recursion, no crash.
    if (p.root != pickle::kNoNode) {
      CKPT_FUZZ_CHECK(pickle::Summarize(p.graph, p.root).size() <= 1024, "pickle %zu", i);
    }
    for (const pickle::CallSite& c : p.graph.calls) {
      CKPT_FUZZ_CHECK(pickle::SummarizeCall(p.graph, c).size() <= 1024, "pickle %zu", i);
    }
  }
  CKPT_FUZZ_CHECK(s.trailing_bytes <= size && s.trailing_offset <= end - s.trailing_bytes,
                  "trailing [%llu, +%llu) outside the stream",
                  (unsigned long long)s.trailing_offset, (unsigned long long)s.trailing_bytes);
}

// What a format reader promises about FileFacts of a `size`-byte file.
inline void CheckFileFacts(const torch::FileFacts& f, uint64_t size, const pickle::Limits& limits) {
  CKPT_FUZZ_CHECK(!f.format.empty(), "no format");
  CKPT_FUZZ_CHECK(f.storages.size() == f.storage_data.size(), "%zu storages, %zu storage_data",
                  f.storages.size(), f.storage_data.size());
  for (const torch::StorageData& d : f.storage_data) {
    if (d.stored && d.nbytes > 0) {
      CKPT_FUZZ_CHECK(d.offset <= size && d.nbytes <= size - d.offset,
                      "storage %s: [%llu, +%llu) outside the %llu-byte file", d.key.c_str(),
                      (unsigned long long)d.offset, (unsigned long long)d.nbytes,
                      (unsigned long long)size);
    }
  }
  for (const torch::MemberFacts& m : f.members) {
    // Member offsets are file offsets for stored members but not for inflated ones, so only
    // the graph invariants are checked here (bounds: against an unbounded stream).
    CheckStreamFacts(m.stream, 0, UINT64_MAX / 2, limits);
  }
}

}  // namespace ckptscan::fuzz

#endif  // CKPTSCAN_TESTS_FUZZ_FACTS_CHECK_H_
