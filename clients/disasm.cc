#include "clients/disasm.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "app/report_format.h"
#include "sandbox/file_facts.h"
#include "sandbox/protocol.h"

namespace ckptscan::clients {
namespace {

constexpr size_t kFlushBytes = 64 << 10;  // listing bytes written per out() call

std::string Count(uint64_t n, const char* word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

}  // namespace

std::string DisasmSummary(const sandbox::FileFacts& facts, const v1::FileReport& report,
                          bool after_listing) {
  std::string summary =
      absl::StrCat(after_listing ? "\n" : "", "format: ", app::TerminalSafe(facts.format), "\n");
  for (const sandbox::MemberFacts& m : facts.members) {
    const pickle::StreamFacts& s = m.stream;
    for (size_t i = 0; i < s.pickles.size(); ++i) {
      const pickle::PickleFacts& p = s.pickles[i];
      absl::StrAppend(&summary, "pickle ", i, ": bytes ", p.start, "..", p.end, ", ",
                      p.protocol >= 0 ? absl::StrCat("protocol ", p.protocol) : "no PROTO", ", ",
                      Count(p.opcodes, "opcode"), ", ", Count(p.graph.globals.size(), "global"),
                      ", ", Count(p.graph.calls.size(), "call"));
      if (p.depth != 0) {
        absl::StrAppend(&summary, ", nested depth ", p.depth, " in pickle ", p.parent);
      }
      absl::StrAppend(&summary, p.error.has_value() ? ", stopped by an error" : "", "\n");
    }
    if (s.trailing_bytes != 0) {
      absl::StrAppend(&summary, "trailing: ", s.trailing_bytes, " bytes at offset ",
                      s.trailing_offset, " that do not form a pickle (pickle.load ignores them)\n");
    }
  }
  summary += app::FileReportToText(report);
  return summary;
}

void WriteJailedDisassembly(std::string_view listing, bool truncated,
                            const sandbox::FileFacts& facts, const v1::FileReport& report,
                            const TextSink& out) {
  // An honest worker's lines are already terminal-safe, so this changes nothing
  // for them; a compromised worker's control bytes are escaped here.
  const bool after_listing = !listing.empty() || truncated;
  std::string text;
  while (!listing.empty()) {
    const size_t nl = listing.find('\n');
    text += app::TerminalSafe(listing.substr(0, nl));
    text.push_back('\n');
    listing.remove_prefix(nl == std::string_view::npos ? listing.size() : nl + 1);
    if (text.size() >= kFlushBytes) {
      out(text);
      text.clear();
    }
  }
  if (truncated) {
    absl::StrAppend(&text, "... listing cut at ", sandbox::kMaxTraceBytes,
                    " bytes (kMaxTraceBytes)\n");
  }
  if (!text.empty()) out(text);
  out(DisasmSummary(facts, report, after_listing));
}

}  // namespace ckptscan::clients
