#include "app/report_format.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "app/verdict.h"
#include "base/escape.h"
#include "base/sha256.h"
#include "base/strings.h"

namespace ckptscan::app {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kSarifSchema = "https://json.schemastore.org/sarif-2.1.0.json";
constexpr std::string_view kInformationUri = "https://github.com/ckptscan/ckptscan";

// Invalid UTF-8 (from a scanned file or a non-UTF-8 path) becomes U+FFFD
// instead of throwing.
std::string Dump(const Json& j) {
  return j.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

// ---------------------------------------------------------------- JSON

Json LocationJson(const v1::Location& l) {
  Json j;
  j["member"] = l.member();
  j["offset"] = l.offset();
  j["opcode"] = l.opcode();
  if (l.pickle_index() != 0) j["pickle_index"] = l.pickle_index();
  if (l.nested_depth() != 0) j["nested_depth"] = l.nested_depth();
  return j;
}

Json FindingJson(const v1::Finding& f) {
  Json j;
  j["rule_id"] = f.rule_id();
  j["severity"] = SeverityName(f.severity());
  j["category"] = f.category();
  j["global"] = f.global();
  j["call"] = f.call();
  j["location"] = LocationJson(f.location());
  j["message"] = f.message();
  j["verdict"] = VerdictName(f.verdict());
  return j;
}

Json ErrorJson(const v1::ScanError& e) {
  Json j;
  j["code"] = ErrorCodeName(e.code());
  j["message"] = e.message();
  j["location"] = LocationJson(e.location());
  if (!e.limit_name().empty()) {
    j["limit_name"] = e.limit_name();
    j["limit_value"] = e.limit_value();
  }
  return j;
}

Json FileJson(const v1::FileReport& f) {
  Json j;
  j["path"] = f.path();
  j["sha256"] = f.sha256();
  j["size"] = f.size();
  j["format"] = f.format();
  j["kind"] = f.kind();
  j["verdict"] = VerdictName(f.verdict());
  Json findings = Json::array();
  for (const v1::Finding& x : f.findings()) findings.push_back(FindingJson(x));
  j["findings"] = std::move(findings);
  Json errors = Json::array();
  for (const v1::ScanError& x : f.errors()) errors.push_back(ErrorJson(x));
  j["errors"] = std::move(errors);
  j["tensors"] = Json{{"count", f.tensors().count()},
                      {"bytes", f.tensors().bytes()},
                      {"storages", f.tensors().storages()},
                      {"shared", f.tensors().shared()},
                      {"unsupported", f.tensors().unsupported()}};
  j["pickles"] = f.pickles();
  j["globals"] = f.globals();
  if (f.shards_size() > 0) {
    Json shards = Json::array();
    for (const std::string& s : f.shards()) shards.push_back(s);
    j["shards"] = std::move(shards);
  }
  if (!f.expected_sha256().empty()) j["expected_sha256"] = f.expected_sha256();
  if (f.code_files_size() > 0) {
    Json code = Json::array();
    for (const v1::CodeFile& c : f.code_files()) {
      code.push_back(Json{{"name", c.name()}, {"bytes", c.bytes()}, {"sha256", c.sha256()}});
    }
    j["code_files"] = std::move(code);
  }
  if (f.tensor_list_size() > 0) {
    Json list = Json::array();
    for (const v1::TensorInfo& t : f.tensor_list()) {
      Json shape = Json::array();
      for (int64_t d : t.shape()) shape.push_back(d);
      list.push_back(Json{{"name", t.name()},
                          {"dtype", t.dtype()},
                          {"shape", std::move(shape)},
                          {"bytes", t.bytes()},
                          {"storage", t.storage()},
                          {"shared", t.shared()},
                          {"note", t.note()}});
    }
    j["tensor_list"] = std::move(list);
  }
  if (f.has_conversion()) {
    const v1::Conversion& c = f.conversion();
    Json not_written = Json::array();
    for (const v1::NotWritten& n : c.not_written()) {
      not_written.push_back(Json{{"path", n.path()}, {"type", n.type()}});
    }
    Json dtypes = Json::array();
    for (const v1::DtypeConversion& d : c.dtypes()) {
      dtypes.push_back(Json{{"source", d.source()},
                            {"written", d.written()},
                            {"how", d.how()},
                            {"tensors", d.tensors()}});
    }
    j["conversion"] = Json{{"output", c.output()},
                           {"tensors", c.tensors()},
                           {"aliases", c.aliases()},
                           {"bytes", c.bytes()},
                           {"dtype", c.dtype()},
                           {"dtypes", std::move(dtypes)},
                           {"not_written", std::move(not_written)},
                           {"not_written_total", c.not_written_total()}};
    if (c.quantized_layers_size() != 0) {
      Json layers = Json::array();
      for (const v1::QuantizedLayers& q : c.quantized_layers()) {
        layers.push_back(Json{{"layout", q.layout()},
                              {"layers", q.layers()},
                              {"kept", q.kept()},
                              {"example", q.example()}});
      }
      j["conversion"]["quantized_layers"] = std::move(layers);
    }
    if (!c.declared_quantization().empty()) {
      j["conversion"]["declared_quantization"] = c.declared_quantization();
    }
  }
  return j;
}

// ---------------------------------------------------------------- text

// How a complex64 tensor written as float32 [..., 2] is restored (docs/safetensors.md).
constexpr char kComplexAsRealNote[] =
    "safetensors < 0.7.0 cannot read C64; names in __metadata__ "
    "ckptscan.complex64_as_real, torch.view_as_complex restores them";

std::string Plural(uint64_t n, std::string_view word) {
  return absl::StrCat(n, " ", base::AbslView(word), n == 1 ? "" : "s");
}

std::string LocationText(const v1::Location& l) {
  std::string s = l.member().empty() ? absl::StrCat("offset ", l.offset())
                                     : absl::StrCat(TerminalSafe(l.member()), "@", l.offset());
  if (l.pickle_index() != 0 || l.nested_depth() != 0) {
    absl::StrAppend(&s, " [pickle ", l.pickle_index());
    if (l.nested_depth() != 0) absl::StrAppend(&s, ", nested depth ", l.nested_depth());
    s += "]";
  }
  if (!l.opcode().empty()) absl::StrAppend(&s, " (", TerminalSafe(l.opcode()), ")");
  return s;
}

// ---------------------------------------------------------------- SARIF

std::string SarifLevel(v1::Verdict v) {
  switch (v) {
    case v1::VERDICT_DANGEROUS:
    case v1::VERDICT_ERROR:
      return "error";
    case v1::VERDICT_SUSPICIOUS:
      return "warning";
    case v1::VERDICT_SAFE:
      return "note";
    default:
      return "warning";
  }
}

// GitHub code scanning reads properties.security-severity (0.0-10.0) to rank
// alerts.
std::string SecuritySeverity(v1::Severity s) {
  switch (s) {
    case v1::SEVERITY_CRITICAL:
      return "9.5";
    case v1::SEVERITY_HIGH:
      return "8.0";
    case v1::SEVERITY_MEDIUM:
      return "5.5";
    case v1::SEVERITY_LOW:
      return "3.0";
    default:
      return "";
  }
}

// "global.denied.shell" -> "GlobalDeniedShell".
std::string RuleName(std::string_view id) {
  std::string name;
  bool upper = true;
  for (char c : id) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum) {
      upper = true;
      continue;
    }
    name.push_back(upper && c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c);
    upper = false;
  }
  return name;
}

// A relative path stays relative; an absolute one becomes a file:// URI. Bytes
// outside RFC 3986's unreserved set and '/' are percent-encoded.
std::string PathToUri(std::string_view path) {
  std::string uri = !path.empty() && path[0] == '/' ? "file://" : "";
  for (unsigned char c : path) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
    if (keep) {
      uri.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&uri, "%%%02X", c);
    }
  }
  return uri;
}

std::string Fingerprint(std::string_view rule_id, std::string_view path, std::string_view member,
                        std::string_view global, uint64_t offset) {
  absl::StatusOr<std::string> hex = base::Sha256Hex(
      absl::StrCat(base::AbslView(rule_id), "|", base::AbslView(path), "|", base::AbslView(member),
                   "|", base::AbslView(global), "|", offset));
  return hex.ok() ? *std::move(hex) : std::string();
}

std::string WhereText(const v1::Location& l) {
  std::string s = l.member().empty()
                      ? absl::StrCat("at byte ", l.offset())
                      : absl::StrCat("at byte ", l.offset(), " of member ", l.member());
  if (l.nested_depth() != 0) {
    absl::StrAppend(&s, " (nested pickle ", l.pickle_index(), ", depth ", l.nested_depth(), ")");
  } else if (l.pickle_index() != 0) {
    absl::StrAppend(&s, " (pickle ", l.pickle_index(), ")");
  }
  if (!l.opcode().empty()) absl::StrAppend(&s, ", opcode ", l.opcode());
  return s;
}

// Checkpoints are binary: there are no lines to point at. GitHub code scanning
// needs region.startLine to place an alert, so every result names line 1 of
// the file; where in the file (byte offset, member, opcode) is in the message
// text and in the result's properties (`member`, `offset`). A SARIF region may
// not mix a text line with a byte range that does not lie on it, so no
// byteOffset is given.
Json SarifLocation(const v1::FileReport& f) {
  Json physical;
  physical["artifactLocation"] = Json{{"uri", PathToUri(f.path())}};
  physical["region"] = Json{{"startLine", 1}};
  Json loc;
  loc["physicalLocation"] = std::move(physical);
  return loc;
}

Json RuleDescriptor(std::string_view id, absl::Span<const rules::RuleInfo> catalogue) {
  const rules::RuleInfo* info = nullptr;
  for (const rules::RuleInfo& r : catalogue) {
    if (r.id == id) {
      info = &r;
      break;
    }
  }
  std::string title;
  std::string help;
  std::string level;
  std::string security_severity;
  if (info != nullptr) {
    title = std::string(info->title);
    help = std::string(info->help);
    level = SarifLevel(info->verdict);
    security_severity = SecuritySeverity(info->severity);
  } else if (id == kDigestMismatchRuleId) {
    title = "The file is not the file the manifest lists";
    help =
        "scan --manifest: the file's SHA-256 differs from the digest its manifest lists. It "
        "was changed, replaced or corrupted after the manifest was made; whatever its own "
        "verdict, it is not the file that was reviewed. Restore the listed file or update the "
        "manifest after reviewing the change.";
    level = "error";
  } else if (id == kScanErrorRuleId) {
    title = "The file could not be verified";
    help =
        "The scanner could not read or parse the file whole: it is malformed, "
        "in a format that "
        "is not scanned, over a configured limit, or unreadable. Its verdict "
        "is ERROR and it "
        "must not be loaded as if it were safe.";
    level = "error";
  } else {
    title = std::string(id);
    help = absl::StrCat("Rule ", base::AbslView(id), " is not in this scanner's rule catalogue.");
    level = "warning";
  }
  Json d;
  d["id"] = id;
  d["name"] = RuleName(id);
  d["shortDescription"] = Json{{"text", title}};
  d["fullDescription"] = Json{{"text", help}};
  d["help"] = Json{{"text", help}};
  d["defaultConfiguration"] = Json{{"level", level}};
  Json props;
  props["tags"] = Json::array({"security"});
  if (!security_severity.empty()) props["security-severity"] = security_severity;
  d["properties"] = std::move(props);
  return d;
}

// A scan error's SARIF rule: its own for a manifest digest mismatch, else
// scan.error.
std::string ErrorRuleId(const v1::ScanError& e) {
  return std::string(e.code() == v1::ERROR_CODE_DIGEST_MISMATCH ? kDigestMismatchRuleId
                                                                : kScanErrorRuleId);
}

// ---------------------------------------------------------------- JUnit

// Text for XML character data and attribute values: made terminal-safe first
// (controls, bidi overrides and bytes that are not UTF-8 become visible
// escapes, so only XML 1.0 characters remain), then the noncharacters
// U+FFFE/U+FFFF (not XML characters either) and the five markup characters.
std::string XmlEscape(std::string_view text) {
  const std::string safe = TerminalSafe(text);
  std::string out;
  out.reserve(safe.size());
  for (size_t i = 0; i < safe.size(); ++i) {
    const char c = safe[i];
    if (c == '\xEF' && i + 2 < safe.size() && safe[i + 1] == '\xBF' &&
        (safe[i + 2] == '\xBE' || safe[i + 2] == '\xBF')) {
      out += safe[i + 2] == '\xBE' ? "\\u{FFFE}" : "\\u{FFFF}";
      i += 2;
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// The body of a failure or error element: one line per finding or error.
std::string JunitDetails(const v1::FileReport& f) {
  std::string out;
  for (const v1::Finding& x : f.findings()) {
    absl::StrAppend(&out, base::AbslView(SeverityName(x.severity())), " ", x.rule_id());
    if (!x.global().empty()) absl::StrAppend(&out, " ", x.global());
    absl::StrAppend(&out, " ", WhereText(x.location()), ": ", x.message());
    if (!x.call().empty()) absl::StrAppend(&out, " [call ", x.call(), "]");
    out += "\n";
  }
  for (const v1::ScanError& e : f.errors()) {
    absl::StrAppend(&out, "error ", ErrorCodeName(e.code()));
    if (e.has_location()) absl::StrAppend(&out, " ", WhereText(e.location()));
    absl::StrAppend(&out, ": ", e.message(), "\n");
  }
  return out;
}

// XmlEscape, line by line: TerminalSafe would show the newlines between the
// lines as "\n".
std::string XmlEscapeLines(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    out += XmlEscape(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    out += "\n";
    text.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace

std::string TerminalSafe(std::string_view s) {
  return base::Escaped(s, {.escape_backslash = false, .escape_invisible = true});
}

std::string ReportToJson(const v1::Report& report) {
  Json j;
  j["schema"] = kReportSchema;
  j["scanner_version"] = report.scanner_version();
  j["rules_version"] = report.rules_version();
  j["verdict"] = VerdictName(report.verdict());
  Json files = Json::array();
  for (const v1::FileReport& f : report.files()) files.push_back(FileJson(f));
  j["files"] = std::move(files);
  const v1::Summary& s = report.summary();
  Json kinds = Json::object();
  // Sorted by kind: the map's order is not the wire's.
  for (const auto& [kind, n] :
       std::map<std::string, uint32_t>(s.kinds().begin(), s.kinds().end())) {
    kinds[kind] = n;
  }
  j["summary"] =
      Json{{"files", s.files()},         {"safe", s.safe()},   {"suspicious", s.suspicious()},
           {"dangerous", s.dangerous()}, {"error", s.error()}, {"skipped", s.skipped()},
           {"kinds", std::move(kinds)}};
  Json skipped = Json::array();
  for (const v1::SkippedPath& x : report.skipped()) {
    skipped.push_back(Json{{"path", x.path()}, {"reason", x.reason()}});
  }
  j["skipped"] = std::move(skipped);
  return Dump(j);
}

namespace {

std::string ShapeText(const v1::TensorInfo& t) {
  std::string out = "[";
  for (int i = 0; i < t.shape_size(); ++i) absl::StrAppend(&out, i == 0 ? "" : ", ", t.shape(i));
  return out + "]";
}

}  // namespace

std::string FileReportToText(const v1::FileReport& f, bool tensor_lines) {
  std::string out =
      absl::StrCat(TerminalSafe(f.path()), ": ", base::AbslView(VerdictName(f.verdict())), " (",
                   f.format().empty() ? "unknown format" : TerminalSafe(f.format()), ", ",
                   Plural(f.pickles(), "pickle"), ", ", Plural(f.globals(), "global"), ")\n");
  for (const v1::Finding& x : f.findings()) {
    absl::StrAppend(&out, "  ", base::AbslView(SeverityName(x.severity())), " ",
                    TerminalSafe(x.rule_id()));
    if (!x.global().empty()) absl::StrAppend(&out, " ", TerminalSafe(x.global()));
    absl::StrAppend(&out, " at ", LocationText(x.location()), ": ", TerminalSafe(x.message()),
                    "\n");
    if (!x.call().empty()) absl::StrAppend(&out, "      call: ", TerminalSafe(x.call()), "\n");
  }
  for (const v1::ScanError& e : f.errors()) {
    absl::StrAppend(&out, "  error ", ErrorCodeName(e.code()));
    if (e.has_location()) absl::StrAppend(&out, " at ", LocationText(e.location()));
    absl::StrAppend(&out, ": ", TerminalSafe(e.message()));
    if (!e.limit_name().empty()) {
      absl::StrAppend(&out, " [limit ", TerminalSafe(e.limit_name()), "=", e.limit_value(), "]");
    }
    out += "\n";
  }
  for (const v1::CodeFile& c : f.code_files()) {
    absl::StrAppend(
        &out, "  code ", TerminalSafe(c.name()), " (", Plural(c.bytes(), "byte"),
        c.sha256().empty() ? std::string(")") : absl::StrCat(", sha256 ", c.sha256(), ")"), "\n");
  }
  for (int i = 0; tensor_lines && i < f.tensor_list_size(); ++i) {
    const v1::TensorInfo& t = f.tensor_list(i);
    absl::StrAppend(&out, "  tensor ", TerminalSafe(t.name()), " ",
                    t.dtype().empty() ? "?" : TerminalSafe(t.dtype()), " ", ShapeText(t), " ",
                    Plural(t.bytes(), "byte"));
    if (t.storage() >= 0) {
      absl::StrAppend(&out, ", storage ", t.storage(), t.shared() ? " (shared)" : "");
    }
    if (!t.note().empty()) absl::StrAppend(&out, ": ", TerminalSafe(t.note()));
    out += "\n";
  }
  if (f.has_conversion()) {
    const v1::Conversion& c = f.conversion();
    absl::StrAppend(&out, "  converted to ", TerminalSafe(c.output()), ": ",
                    Plural(c.tensors(), "tensor"));
    if (c.aliases() != 0) absl::StrAppend(&out, " (+", Plural(c.aliases(), "alias"), ")");
    absl::StrAppend(&out, ", ", Plural(c.bytes(), "byte"), ", dtype ", TerminalSafe(c.dtype()),
                    "\n");
    for (const v1::DtypeConversion& d : c.dtypes()) {
      absl::StrAppend(&out, "    ", TerminalSafe(d.source()), " -> ", TerminalSafe(d.written()));
      if (d.how() == "as-real") {
        absl::StrAppend(&out, " [..., 2] (as real: ", kComplexAsRealNote, ")");
      } else if (d.how() == "bf16") {
        out += " (--dtype bf16)";
      } else if (d.how() == "allowed") {
        out += " (--allow-dtype: the widely deployed safetensors cannot read this file)";
      } else if (d.how() == "quantized-layer") {
        out += " (kept: a quantized layer's, --cast-quantized casts it)";
      } else if (d.how() == "quantized") {
        out += " (quantized integer data)";
      } else if (d.how() == "quantizer") {
        out += " (quantization parameters: NAME.scale, .zero_point, .axis)";
      } else if (d.how() != "as-is") {
        absl::StrAppend(&out, " (", TerminalSafe(d.how()), ")");
      }
      absl::StrAppend(&out, ": ", Plural(d.tensors(), "tensor"), "\n");
    }
    for (const v1::QuantizedLayers& q : c.quantized_layers()) {
      absl::StrAppend(&out, "    quantized layers (", TerminalSafe(q.layout()), "): ", q.layers(),
                      ", e.g. ", TerminalSafe(q.example()), "; ", Plural(q.kept(), "float tensor"),
                      " kept in their dtype\n");
    }
    if (!c.declared_quantization().empty()) {
      absl::StrAppend(&out, "    config.json declares quantization_config: quant_method ",
                      TerminalSafe(c.declared_quantization()), "\n");
    }
    if (c.not_written_total() != 0) {
      absl::StrAppend(&out, "  not written (not tensors): ", Plural(c.not_written_total(), "value"),
                      "\n");
      constexpr int kShown = 20;
      for (int i = 0; i < c.not_written_size() && i < kShown; ++i) {
        absl::StrAppend(&out, "    ", TerminalSafe(c.not_written(i).path()), " (",
                        TerminalSafe(c.not_written(i).type()), ")\n");
      }
      if (c.not_written_total() > static_cast<uint64_t>(kShown)) {
        absl::StrAppend(&out, "    ... (--format json lists up to 1000)\n");
      }
    }
  }
  return out;
}

namespace {

// The table of one file's tensors, columns aligned (cells made terminal-safe first).
std::string TensorTable(const v1::FileReport& f) {
  if (f.tensor_list_size() == 0) {
    return absl::StrCat("  no tensors listed (", Plural(f.tensors().count(), "tensor"), ", ",
                        Plural(f.tensors().bytes(), "byte"), " in the file's summary)\n");
  }
  std::vector<std::array<std::string, 6>> rows;
  rows.push_back({"NAME", "DTYPE", "SHAPE", "BYTES", "STORAGE", "NOTE"});
  uint64_t total = 0;
  for (const v1::TensorInfo& t : f.tensor_list()) {
    total = t.bytes() > UINT64_MAX - total ? UINT64_MAX : total + t.bytes();
    rows.push_back({TerminalSafe(t.name()), t.dtype().empty() ? "?" : TerminalSafe(t.dtype()),
                    ShapeText(t), absl::StrCat(t.bytes()),
                    t.storage() < 0 ? "-" : absl::StrCat(t.storage(), t.shared() ? " shared" : ""),
                    TerminalSafe(t.note())});
  }
  std::array<size_t, 6> width{};
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      // Numbers right-aligned, text left-aligned; no padding after the last column.
      const size_t pad = width[c] - row[c].size();
      if (c == 3) {
        absl::StrAppend(&line, std::string(pad, ' '), row[c]);
      } else {
        absl::StrAppend(&line, row[c], c + 1 < row.size() ? std::string(pad, ' ') : "");
      }
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  absl::StrAppend(&out, "  ", Plural(f.tensor_list_size(), "tensor"), ", ", Plural(total, "byte"),
                  " of tensor data (a shared storage counts for each tensor on it)\n");
  return out;
}

std::string Summary(const v1::Report& report, std::string out);

}  // namespace

std::string TensorTableText(const v1::Report& report) {
  std::string out;
  for (const v1::FileReport& f : report.files()) {
    out += FileReportToText(f, /*tensor_lines=*/false);
    out += TensorTable(f);
  }
  return Summary(report, std::move(out));
}

std::string ReportToText(const v1::Report& report, bool only_unsafe) {
  std::string out;
  for (const v1::FileReport& f : report.files()) {
    if (!only_unsafe || f.verdict() != v1::VERDICT_SAFE) out += FileReportToText(f);
  }
  return Summary(report, std::move(out));
}

namespace {

std::string Summary(const v1::Report& report, std::string out) {
  std::map<v1::Verdict, uint64_t> counts;
  for (const v1::FileReport& f : report.files()) ++counts[f.verdict()];
  uint64_t unspecified = report.files_size();
  for (v1::Verdict v :
       {v1::VERDICT_SAFE, v1::VERDICT_SUSPICIOUS, v1::VERDICT_DANGEROUS, v1::VERDICT_ERROR}) {
    unspecified -= counts[v];
  }
  absl::StrAppend(&out, Plural(report.files_size(), "file"), ": ", counts[v1::VERDICT_SAFE],
                  " SAFE, ", counts[v1::VERDICT_SUSPICIOUS], " SUSPICIOUS, ",
                  counts[v1::VERDICT_DANGEROUS], " DANGEROUS, ", counts[v1::VERDICT_ERROR],
                  " ERROR");
  if (unspecified != 0) absl::StrAppend(&out, ", ", unspecified, " UNSPECIFIED");
  absl::StrAppend(&out, "; verdict ", base::AbslView(VerdictName(report.verdict())), "\n");
  if (report.summary().kinds_size() > 0 || report.skipped_size() > 0) {
    std::string kinds;
    for (const auto& [kind, n] : std::map<std::string, uint32_t>(report.summary().kinds().begin(),
                                                                 report.summary().kinds().end())) {
      absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", n, " ", TerminalSafe(kind));
    }
    absl::StrAppend(&out, "kinds: ", kinds.empty() ? "none" : kinds, "; ", report.skipped_size(),
                    " skipped\n");
  }
  return out;
}

}  // namespace

std::string ReportToSarif(const v1::Report& report, absl::Span<const rules::RuleInfo> catalogue,
                          int exit_code) {
  // Rules actually used, sorted by id; ruleIndex points into this list.
  std::set<std::string> used;
  for (const v1::FileReport& f : report.files()) {
    for (const v1::Finding& x : f.findings()) used.insert(x.rule_id());
    for (const v1::ScanError& e : f.errors()) used.insert(ErrorRuleId(e));
  }
  std::map<std::string, size_t> index;
  Json rules = Json::array();
  for (const std::string& id : used) {
    index[id] = rules.size();
    rules.push_back(RuleDescriptor(id, catalogue));
  }

  Json results = Json::array();
  for (const v1::FileReport& f : report.files()) {
    for (const v1::Finding& x : f.findings()) {
      const v1::Location& l = x.location();
      std::string text = x.message().empty() ? x.rule_id() : x.message();
      if (!x.global().empty()) absl::StrAppend(&text, " [global ", x.global(), "]");
      if (!x.call().empty()) absl::StrAppend(&text, " [call ", x.call(), "]");
      absl::StrAppend(&text, " ", WhereText(l));
      Json r;
      r["ruleId"] = x.rule_id();
      r["ruleIndex"] = index[x.rule_id()];
      // A data file's SUSPICIOUS finding (a config naming code) is a note, not an alert.
      r["level"] = f.kind() == "data" && x.verdict() == v1::VERDICT_SUSPICIOUS
                       ? std::string("note")
                       : SarifLevel(x.verdict());
      r["message"] = Json{{"text", text}};
      r["locations"] = Json::array({SarifLocation(f)});
      r["partialFingerprints"] =
          Json{{kFingerprintKey,
                Fingerprint(x.rule_id(), f.path(), l.member(), x.global(), l.offset())}};
      r["properties"] = Json{{"verdict", VerdictName(x.verdict())},
                             {"severity", SeverityName(x.severity())},
                             {"category", x.category()},
                             {"global", x.global()},
                             {"call", x.call()},
                             {"member", l.member()},
                             {"offset", l.offset()}};
      results.push_back(std::move(r));
    }
    for (const v1::ScanError& e : f.errors()) {
      const v1::Location* l = e.has_location() ? &e.location() : nullptr;
      std::string text = absl::StrCat("scan error (", ErrorCodeName(e.code()), "): ", e.message());
      if (l != nullptr) absl::StrAppend(&text, " ", WhereText(*l));
      if (!e.limit_name().empty()) {
        absl::StrAppend(&text, " [limit ", e.limit_name(), "=", e.limit_value(), "]");
      }
      Json r;
      const std::string rule_id = ErrorRuleId(e);
      r["ruleId"] = rule_id;
      r["ruleIndex"] = index[rule_id];
      r["level"] = "error";
      r["message"] = Json{{"text", text}};
      r["locations"] = Json::array({SarifLocation(f)});
      // The error code stands in for the global.
      r["partialFingerprints"] =
          Json{{kFingerprintKey, Fingerprint(rule_id, f.path(), l ? l->member() : "",
                                             ErrorCodeName(e.code()), l ? l->offset() : 0)}};
      Json props;
      props["verdict"] = "ERROR";
      props["code"] = ErrorCodeName(e.code());
      props["member"] = l ? l->member() : "";
      props["offset"] = l ? l->offset() : 0;
      if (!e.limit_name().empty()) {
        props["limit_name"] = e.limit_name();
        props["limit_value"] = e.limit_value();
      }
      r["properties"] = std::move(props);
      results.push_back(std::move(r));
    }
  }

  Json driver;
  driver["name"] = "ckptscan";
  if (!report.scanner_version().empty()) {
    driver["version"] = report.scanner_version();
    driver["semanticVersion"] = report.scanner_version();
  }
  driver["informationUri"] = kInformationUri;
  driver["rules"] = std::move(rules);

  Json run;
  run["tool"] = Json{{"driver", std::move(driver)}};
  run["results"] = std::move(results);
  if (exit_code >= 0) {
    // ckptscan ran to the end whenever it reached a verdict: exit 0, 1 or 2.
    run["invocations"] =
        Json::array({Json{{"executionSuccessful", exit_code <= 2}, {"exitCode", exit_code}}});
  }
  run["properties"] =
      Json{{"rules_version", report.rules_version()}, {"verdict", VerdictName(report.verdict())}};

  Json sarif;
  sarif["$schema"] = kSarifSchema;
  sarif["version"] = "2.1.0";
  sarif["runs"] = Json::array({std::move(run)});
  return Dump(sarif);
}

std::string ReportToJunit(const v1::Report& report, FailOn fail_on) {
  uint64_t failures = 0;
  uint64_t errors = 0;
  std::string cases;
  for (const v1::FileReport& f : report.files()) {
    const std::string_view verdict = VerdictName(f.verdict());
    const bool error = f.verdict() != v1::VERDICT_SAFE && f.verdict() != v1::VERDICT_SUSPICIOUS &&
                       f.verdict() != v1::VERDICT_DANGEROUS;
    const bool failure = !error && Fails(f.verdict(), fail_on);
    absl::StrAppend(&cases, "    <testcase classname=\"ckptscan.scan\" name=\"",
                    XmlEscape(f.path()), "\" file=\"", XmlEscape(f.path()), "\"");
    const std::string details = JunitDetails(f);
    const std::string summary =
        absl::StrCat(base::AbslView(verdict), ": ", f.findings_size(), " finding",
                     f.findings_size() == 1 ? "" : "s", ", ", f.errors_size(), " error",
                     f.errors_size() == 1 ? "" : "s", " (",
                     f.format().empty() ? "unknown format" : f.format(), ")");
    if (error || failure) {
      const char* tag = error ? "error" : "failure";
      ++(error ? errors : failures);
      absl::StrAppend(&cases, ">\n      <", tag, " type=\"", base::AbslView(verdict),
                      "\" message=\"", XmlEscape(summary), "\">", XmlEscapeLines(details), "</",
                      tag, ">\n    </testcase>\n");
    } else if (!details.empty()) {
      // SAFE with informational findings, or SUSPICIOUS under --fail-on dangerous.
      absl::StrAppend(&cases, ">\n      <system-out>", XmlEscape(summary), "\n",
                      XmlEscapeLines(details), "</system-out>\n    </testcase>\n");
    } else {
      cases += "/>\n";
    }
  }
  for (const v1::SkippedPath& x : report.skipped()) {
    absl::StrAppend(&cases, "    <testcase classname=\"ckptscan.scan\" name=\"",
                    XmlEscape(x.path()), "\" file=\"", XmlEscape(x.path()),
                    "\">\n      <skipped message=\"", XmlEscape(x.reason()),
                    "\"/>\n    </testcase>\n");
  }
  const std::string counts = absl::StrCat("tests=\"", report.files_size() + report.skipped_size(),
                                          "\" failures=\"", failures, "\" errors=\"", errors, "\"");
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", "<testsuites name=\"ckptscan\" ", counts,
      " skipped=\"", report.skipped_size(), "\">\n", "  <testsuite name=\"ckptscan scan\" ", counts,
      " skipped=\"", report.skipped_size(), "\">\n", "    <properties>\n",
      "      <property name=\"scanner_version\" value=\"", XmlEscape(report.scanner_version()),
      "\"/>\n", "      <property name=\"rules_version\" value=\"",
      XmlEscape(report.rules_version()), "\"/>\n", "      <property name=\"verdict\" value=\"",
      base::AbslView(VerdictName(report.verdict())), "\"/>\n", "    </properties>\n", cases,
      "  </testsuite>\n</testsuites>\n");
}

}  // namespace ckptscan::app
