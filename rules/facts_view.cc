#include "rules/facts_view.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "core/pickle/opcodes.h"

namespace ckptscan::rules::internal {

using pickle::Graph;
using pickle::Kind;
using pickle::kNoNode;
using pickle::Node;
using pickle::NodeId;

const Node* NodeAt(const Graph& g, NodeId id) {
  if (id == kNoNode || id >= g.nodes.size()) return nullptr;
  return &g.nodes[id];
}

void AppendSanitized(std::string* out, std::string_view s, bool escape_backslash) {
  base::AppendEscaped(out, s, {.escape_backslash = escape_backslash});
}

std::string Sanitized(std::string_view s, size_t max_bytes, bool escape_backslash) {
  std::string out;
  AppendSanitized(&out, s.substr(0, max_bytes), escape_backslash);
  if (s.size() > max_bytes) out += "…";
  return out;
}

std::string ShownName(std::string_view s) { return Sanitized(s, kMaxShownName); }

std::string GlobalName(const pickle::GlobalRef& ref) {
  return absl::StrCat(ShownName(ref.resolved_module), ".", ShownName(ref.resolved_name));
}

std::string DynamicGlobalName(const pickle::GlobalRef& ref) {
  return absl::StrCat("<computed ", ref.module_computed ? "?" : ShownName(ref.resolved_module),
                      ".", ref.name_computed ? "?" : ShownName(ref.resolved_name), ">");
}

std::string GlobalName(const Graph& g, const Node& n) {
  if (n.kind != Kind::kGlobal || n.ref >= g.globals.size()) return "";
  const pickle::GlobalRef& ref = g.globals[n.ref];
  if (ref.via == pickle::Via::kExt) return absl::StrCat("<ext ", ref.ext_code, ">");
  if (ref.via == pickle::Via::kDynamic) return DynamicGlobalName(ref);
  return GlobalName(ref);
}

std::string OpcodeName(uint8_t op) {
  if (const char* name = pickle::OpName(op); name != nullptr) return name;
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02x", op);
  return buf;
}

}  // namespace ckptscan::rules::internal
