// The opcode listing of `ckptscan disasm`, built from VM trace events.
//
// One line per executed opcode:
//       57  REDUCE           ; call posix.system('id')
//   offset, opcode name, argument, then what it produced; indented two spaces
//   per open MARK (capped, with the depth shown past the cap). A header line
//   starts each pickle; nested pickles (byte strings that are themselves
//   pickles) are labelled with their depth. Strings from the file are made
//   terminal-safe (base::Escaped with invisible characters escaped).
//
// It runs where the VM runs: in the jailed worker (which returns the text in its
// result frame) or in-process with --no-sandbox. It needs no rules.
// Thread-compatible: one TraceListing per VM run.
#ifndef CKPTSCAN_SANDBOX_WORKER_TRACE_LISTING_H_
#define CKPTSCAN_SANDBOX_WORKER_TRACE_LISTING_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/pickle/vm.h"

namespace ckptscan::sandbox {

// One listing line (with its newline) for one executed opcode.
std::string FormatTraceLine(const pickle::TraceEvent& event);

// Turns trace events into listing text, handed to `out` piece by piece as it is
// produced (so a large listing need not be held whole).
class TraceListing final {
 public:
  using Sink = std::function<void(std::string_view)>;
  explicit TraceListing(Sink out) : out_(std::move(out)) {}

  void Add(const pickle::TraceEvent& event);
  // Whether any line was written (the summary then starts with a blank line).
  bool started() const { return current_.has_value(); }
  // A TraceSink that feeds this listing; valid while the listing lives.
  pickle::TraceSink AsSink() {
    return [this](const pickle::TraceEvent& e) { Add(e); };
  }

 private:
  Sink out_;
  std::optional<std::pair<uint32_t, uint32_t>> current_;  // (pickle_index, nested_depth)
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_WORKER_TRACE_LISTING_H_
