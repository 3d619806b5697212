#include "sandbox/worker/trace_listing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/escape.h"
#include "base/strings.h"
#include "core/pickle/opcodes.h"

namespace ckptscan::sandbox {
namespace {

constexpr uint32_t kMaxIndentLevels = 16;
constexpr size_t kMaxArgChars = 100;

// As clients::TerminalSafe: valid UTF-8 on one line, controls and invisible
// characters escaped.
std::string Safe(std::string_view s) {
  return base::Escaped(s, {.escape_backslash = false, .escape_invisible = true});
}

std::string Clip(std::string s, size_t max) {
  if (s.size() <= max) return s;
  s.resize(max);
  s.append("...");
  return s;
}

std::string PickleHeader(const pickle::TraceEvent& e) {
  if (e.nested_depth == 0) return absl::StrCat("pickle ", e.pickle_index, ":\n");
  return absl::StrCat("pickle ", e.pickle_index, " (nested, depth ", e.nested_depth,
                      ": a byte string inside an earlier pickle):\n");
}

}  // namespace

std::string FormatTraceLine(const pickle::TraceEvent& e) {
  const char* name = pickle::OpName(e.opcode);
  const std::string op =
      name != nullptr ? std::string(name) : absl::StrFormat("<0x%02x>", e.opcode);
  std::string line = absl::StrFormat("%10d  ", e.offset);
  const uint32_t levels = std::min(e.mark_depth, kMaxIndentLevels);
  line.append(2 * levels, ' ');
  if (e.mark_depth > kMaxIndentLevels) absl::StrAppend(&line, "[", e.mark_depth, "] ");
  absl::StrAppendFormat(&line, "%-16s", op);
  if (!e.arg.empty()) absl::StrAppend(&line, " ", Clip(Safe(e.arg), kMaxArgChars));
  if (!e.note.empty()) absl::StrAppend(&line, "  ; ", Safe(e.note));
  while (!line.empty() && line.back() == ' ') line.pop_back();
  line.push_back('\n');
  return line;
}

void TraceListing::Add(const pickle::TraceEvent& e) {
  const std::pair<uint32_t, uint32_t> which{e.pickle_index, e.nested_depth};
  if (current_ != which) {
    out_(absl::StrCat(current_.has_value() ? "\n" : "", PickleHeader(e)));
    current_ = which;
  }
  out_(FormatTraceLine(e));
}

}  // namespace ckptscan::sandbox
