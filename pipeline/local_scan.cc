#include "pipeline/local_scan.h"

#include <cctype>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/strings.h"
#include "core/pickle/opcodes.h"
#include "pipeline/mapped_file.h"
#include "pipeline/sha256.h"

namespace ckptscan::pipeline {
namespace {

// A container recognised by its leading bytes. None of them is scanned yet:
// fail closed.
struct Magic {
  std::string_view bytes;
  std::string_view format;
  std::string_view message;
};

constexpr std::string_view kCompressed =
    "compressed files are not scanned; decompress it and scan the contents";

constexpr Magic kMagics[] = {
    {{"PK\x03\x04", 4},
     "zip",
     "torch zip archives are scanned in a later release"},
    {{"\x1f\x8b", 2}, "gzip", kCompressed},
    {{"\x37\x7a\xbc\xaf\x27\x1c", 6}, "7z", "7z archives are not scanned"},
    {{"Rar!\x1a\x07", 6}, "rar", "rar archives are not scanned"},
    {{"\xfd\x37\x7a\x58\x5a\x00", 6}, "xz", kCompressed},
    {{"\x28\xb5\x2f\xfd", 4}, "zstd", kCompressed},
    {{"\x04\x22\x4d\x18", 4}, "lz4", kCompressed},
};

bool IsBzip2(std::string_view b) {
  return b.size() >= 4 && b.substr(0, 3) == "BZh" && b[3] >= '1' && b[3] <= '9';
}

// Python's tarfile (which torch's legacy loader tries first) accepts a file
// whose first 512-byte block is not all NUL and carries a valid header
// checksum, whatever its magic. Such a file is loaded as a tar of pickles, so
// it must never be judged as a raw pickle.
bool IsTar(std::string_view b) {
  constexpr size_t kBlock = 512;
  if (b.size() < kBlock) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(b.data());
  bool all_nul = true;
  int64_t unsigned_sum = 8 * ' ';
  int64_t signed_sum = 8 * ' ';
  for (size_t i = 0; i < kBlock; ++i) {
    if (u[i] != 0) all_nul = false;
    if (i >= 148 && i < 156) continue;  // the checksum field counts as spaces
    unsigned_sum += u[i];
    signed_sum += static_cast<signed char>(u[i]);
  }
  if (all_nul) return false;

  std::string_view field = b.substr(148, 8);
  int64_t value = 0;
  if (u[148] == 0x80 ||
      u[148] == 0xff) {  // base-256 (GNU); tarfile.nti accepts it
    for (size_t i = 1; i < field.size(); ++i) value = (value << 8) | u[148 + i];
    if (u[148] == 0xff) value -= int64_t{1} << 56;
  } else {
    // tarfile.nti: up to the first NUL, stripped, int(s, 8) (sign, "0o" and '_'
    // allowed).
    field = field.substr(0, std::min(field.find('\0'), field.size()));
    while (!field.empty() &&
           std::isspace(static_cast<unsigned char>(field.front()))) {
      field.remove_prefix(1);
    }
    while (!field.empty() &&
           std::isspace(static_cast<unsigned char>(field.back()))) {
      field.remove_suffix(1);
    }
    bool negative = false;
    if (!field.empty() && (field[0] == '+' || field[0] == '-')) {
      negative = field[0] == '-';
      field.remove_prefix(1);
    }
    if (field.size() >= 2 && field[0] == '0' &&
        (field[1] == 'o' || field[1] == 'O')) {
      field.remove_prefix(2);
    }
    bool digits = false;
    for (char c : field) {
      if (c == '_') continue;
      if (c < '0' || c > '7') return false;
      value = value * 8 + (c - '0');
      digits = true;
    }
    if (!digits) value = 0;
    if (negative) value = -value;
  }
  return value == unsigned_sum || value == signed_sum;
}

v1::ScanError UnsupportedError(std::string_view format,
                               std::string_view message) {
  v1::ScanError e;
  e.set_code("unsupported");
  e.set_message(
      absl::StrCat(base::AbslView(format), ": ", base::AbslView(message)));
  return e;
}

v1::ScanError MalformedError(std::string message) {
  v1::ScanError e;
  e.set_code("malformed");
  e.set_message(std::move(message));
  return e;
}

const char* VmErrorCode(pickle::VmError::Code code) {
  switch (code) {
    case pickle::VmError::Code::kMalformed:
      return "malformed";
    case pickle::VmError::Code::kLimit:
      return "limit";
    case pickle::VmError::Code::kUnsupported:
      return "unsupported";
  }
  return "malformed";
}

}  // namespace

FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       const pickle::TraceSink* trace) {
  FileFacts facts;
  if (bytes.empty()) {
    facts.format = "empty";
    facts.errors.push_back(
        MalformedError("empty file: there is no pickle to verify"));
    return facts;
  }
  for (const Magic& m : kMagics) {
    if (bytes.substr(0, m.bytes.size()) == m.bytes) {
      facts.format = std::string(m.format);
      facts.errors.push_back(UnsupportedError(m.format, m.message));
      return facts;
    }
  }
  if (IsBzip2(bytes)) {
    facts.format = "bzip2";
    facts.errors.push_back(UnsupportedError("bzip2", kCompressed));
    return facts;
  }
  if (IsTar(bytes)) {
    facts.format = "tar";
    facts.errors.push_back(
        UnsupportedError("tar",
                         "legacy torch tar archives are not scanned "
                         "(torch.load would unpack it)"));
    return facts;
  }
  facts.format = "pickle";
  MemberFacts member;
  member.stream =
      pickle::Vm(limits).ScanStream(bytes, /*base_offset=*/0, trace);
  facts.members.push_back(std::move(member));
  return facts;
}

v1::ScanError ToScanError(const pickle::VmError& error, std::string_view member,
                          uint32_t pickle_index, uint32_t nested_depth) {
  v1::ScanError e;
  e.set_code(VmErrorCode(error.code));
  e.set_message(error.message);
  v1::Location* loc = e.mutable_location();
  loc->set_member(std::string(member));
  loc->set_offset(error.offset);
  if (error.has_opcode) {
    const char* name = pickle::OpName(error.opcode);
    loc->set_opcode(name != nullptr ? name : "");
  }
  loc->set_pickle_index(pickle_index);
  loc->set_nested_depth(nested_depth);
  if (error.code == pickle::VmError::Code::kLimit) {
    e.set_limit_name(error.limit_name);
    e.set_limit_value(error.limit_value);
  }
  return e;
}

v1::FileReport JudgeFacts(const FileFacts& facts, const rules::RuleSet& rules) {
  v1::FileReport report;
  report.set_format(facts.format);
  for (const v1::ScanError& e : facts.errors) *report.add_errors() = e;

  v1::Verdict verdict = v1::VERDICT_SAFE;
  uint64_t pickles = 0;
  uint64_t globals = 0;
  for (const MemberFacts& m : facts.members) {
    const int errors_before = report.errors_size();
    bool complete_top_level = false;
    for (size_t i = 0; i < m.stream.pickles.size(); ++i) {
      const pickle::PickleFacts& p = m.stream.pickles[i];
      ++pickles;
      globals += p.graph.globals.size();
      if (p.error.has_value()) {
        *report.add_errors() =
            ToScanError(*p.error, m.member, static_cast<uint32_t>(i), p.depth);
      } else if (p.depth == 0) {
        complete_top_level = true;
      }
    }
    if (m.stream.stream_error.has_value()) {
      *report.add_errors() =
          ToScanError(*m.stream.stream_error, m.member, 0, 0);
    }
    if (!complete_top_level && report.errors_size() == errors_before) {
      v1::ScanError e = MalformedError("no complete pickle in the stream");
      e.mutable_location()->set_member(m.member);
      *report.add_errors() = std::move(e);
    }

    // Calls are rendered by the VM's own summariser, as `ckptscan disasm` shows
    // them.
    rules::Evaluation eval =
        rules.Evaluate(m.stream, m.member,
                       [](const pickle::Graph& g, const pickle::CallSite& c) {
                         return pickle::SummarizeCall(g, c);
                       });
    verdict = rules::WorseVerdict(verdict, eval.verdict);
    for (v1::Finding& f : eval.findings) {
      verdict = rules::WorseVerdict(verdict, f.verdict());
      *report.add_findings() = std::move(f);
    }
  }
  // Fail closed: facts that scanned nothing and explain nothing cannot be SAFE.
  if (facts.members.empty() && report.errors_size() == 0) {
    v1::ScanError e;
    e.set_code("internal");
    e.set_message("nothing was scanned");
    *report.add_errors() = std::move(e);
  }
  if (report.errors_size() > 0)
    verdict = rules::WorseVerdict(verdict, v1::VERDICT_ERROR);

  report.set_verdict(verdict);
  report.set_pickles(
      static_cast<uint32_t>(std::min<uint64_t>(pickles, UINT32_MAX)));
  report.set_globals(
      static_cast<uint32_t>(std::min<uint64_t>(globals, UINT32_MAX)));
  report.mutable_tensors()->set_count(0);
  report.mutable_tensors()->set_bytes(0);
  return report;
}

absl::StatusOr<v1::FileReport> ScanFileInProcess(const std::string& path,
                                                 const rules::RuleSet& rules,
                                                 const pickle::Limits& limits) {
  CKPT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  CKPT_ASSIGN_OR_RETURN(std::string sha256, Sha256Hex(file.bytes()));
  // Worker half (to be jailed), then trusted half.
  const FileFacts facts = ExtractFacts(file.bytes(), limits);
  v1::FileReport report = JudgeFacts(facts, rules);
  report.set_path(path);
  report.set_sha256(std::move(sha256));
  report.set_size(file.bytes().size());
  return report;
}

v1::FileReport UnreadableFileReport(const std::string& path,
                                    const absl::Status& status) {
  v1::FileReport report;
  report.set_path(path);
  report.set_verdict(v1::VERDICT_ERROR);
  v1::ScanError* e = report.add_errors();
  e->set_code(status.code() == absl::StatusCode::kInternal ? "internal" : "io");
  e->set_message(std::string(status.message()));
  report.mutable_tensors();
  return report;
}

}  // namespace ckptscan::pipeline
