#include "clients/disasm.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/report_format.h"
#include "core/pickle/opcodes.h"
#include "pipeline/local_scan.h"

namespace ckptscan::clients {
namespace {

constexpr uint32_t kMaxIndentLevels = 16;
constexpr size_t kMaxArgChars = 100;

std::string Clip(std::string s, size_t max) {
  if (s.size() <= max) return s;
  s.resize(max);
  return s + "...";
}

std::string Count(uint64_t n, const char* word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

std::string PickleHeader(const pickle::TraceEvent& e) {
  if (e.nested_depth == 0)
    return absl::StrCat("pickle ", e.pickle_index, ":\n");
  return absl::StrCat("pickle ", e.pickle_index, " (nested, depth ",
                      e.nested_depth,
                      ": a byte string inside an earlier pickle):\n");
}

}  // namespace

std::string FormatTraceLine(const pickle::TraceEvent& e) {
  const char* name = pickle::OpName(e.opcode);
  const std::string op = name != nullptr
                             ? std::string(name)
                             : absl::StrFormat("<0x%02x>", e.opcode);
  std::string line = absl::StrFormat("%10d  ", e.offset);
  const uint32_t levels = std::min(e.mark_depth, kMaxIndentLevels);
  line.append(2 * levels, ' ');
  if (e.mark_depth > kMaxIndentLevels)
    absl::StrAppend(&line, "[", e.mark_depth, "] ");
  absl::StrAppendFormat(&line, "%-16s", op);
  if (!e.arg.empty())
    absl::StrAppend(&line, " ", Clip(TerminalSafe(e.arg), kMaxArgChars));
  if (!e.note.empty()) absl::StrAppend(&line, "  ; ", TerminalSafe(e.note));
  while (!line.empty() && line.back() == ' ') line.pop_back();
  line += "\n";
  return line;
}

v1::FileReport Disassemble(const std::string& path, std::string_view bytes,
                           const rules::RuleSet& rules,
                           const pickle::Limits& limits, const TextSink& out) {
  std::optional<std::pair<uint32_t, uint32_t>>
      current;  // (pickle_index, nested_depth)
  const pickle::TraceSink trace = [&](const pickle::TraceEvent& e) {
    const std::pair<uint32_t, uint32_t> which{e.pickle_index, e.nested_depth};
    if (current != which) {
      out(absl::StrCat(current.has_value() ? "\n" : "", PickleHeader(e)));
      current = which;
    }
    out(FormatTraceLine(e));
  };
  const pipeline::FileFacts facts =
      pipeline::ExtractFacts(bytes, limits, &trace);
  v1::FileReport report = pipeline::JudgeFacts(facts, rules);
  report.set_path(path);
  report.set_size(bytes.size());

  std::string summary =
      absl::StrCat(current.has_value() ? "\n" : "",
                   "format: ", TerminalSafe(facts.format), "\n");
  for (const pipeline::MemberFacts& m : facts.members) {
    const pickle::StreamFacts& s = m.stream;
    for (size_t i = 0; i < s.pickles.size(); ++i) {
      const pickle::PickleFacts& p = s.pickles[i];
      absl::StrAppend(
          &summary, "pickle ", i, ": bytes ", p.start, "..", p.end, ", ",
          p.protocol >= 0 ? absl::StrCat("protocol ", p.protocol) : "no PROTO",
          ", ", Count(p.opcodes, "opcode"), ", ",
          Count(p.graph.globals.size(), "global"), ", ",
          Count(p.graph.calls.size(), "call"));
      if (p.depth != 0) {
        absl::StrAppend(&summary, ", nested depth ", p.depth, " in pickle ",
                        p.parent);
      }
      absl::StrAppend(&summary,
                      p.error.has_value() ? ", stopped by an error" : "", "\n");
    }
    if (s.trailing_bytes != 0) {
      absl::StrAppend(
          &summary, "trailing: ", s.trailing_bytes, " bytes at offset ",
          s.trailing_offset,
          " that do not form a pickle (pickle.load ignores them)\n");
    }
  }
  summary += FileReportToText(report);
  out(summary);
  return report;
}

}  // namespace ckptscan::clients
