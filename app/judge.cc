#include "app/judge.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/checked.h"
#include "base/escape.h"
#include "core/pickle/opcodes.h"
#include "rules/catalogue.h"

namespace ckptscan::app {
namespace {

// Per storage of `facts`: whether more than one tensor uses it (tied weights, views).
std::vector<bool> SharedStorages(const sandbox::FileFacts& facts) {
  std::vector<uint32_t> users(facts.storages.size(), 0);
  for (const torch::TensorFact& t : facts.tensors) {
    if (t.storage >= 0 && static_cast<size_t>(t.storage) < users.size()) ++users[t.storage];
  }
  std::vector<bool> shared(users.size());
  for (size_t i = 0; i < users.size(); ++i) shared[i] = users[i] > 1;
  return shared;
}

bool OnSharedStorage(const torch::TensorFact& t, const std::vector<bool>& shared) {
  return t.storage >= 0 && static_cast<size_t>(t.storage) < shared.size() && shared[t.storage];
}

v1::ScanError MalformedError(std::string message) {
  v1::ScanError e;
  e.set_code(v1::ERROR_CODE_MALFORMED);
  e.set_message(std::move(message));
  return e;
}

v1::ErrorCode VmErrorCode(pickle::VmError::Code code) {
  switch (code) {
    case pickle::VmError::Code::kMalformed:
      return v1::ERROR_CODE_MALFORMED;
    case pickle::VmError::Code::kLimit:
      return v1::ERROR_CODE_LIMIT;
    case pickle::VmError::Code::kUnsupported:
    case pickle::VmError::Code::kStricter:
      return v1::ERROR_CODE_UNSUPPORTED;
  }
  return v1::ERROR_CODE_MALFORMED;
}

}  // namespace

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

v1::FileReport JudgeFacts(const sandbox::FileFacts& facts, const rules::RuleSet& rules) {
  v1::FileReport report;
  report.set_format(facts.format);
  for (const v1::ScanError& e : facts.errors) *report.add_errors() = e;

  v1::Verdict verdict = v1::VERDICT_SAFE;
  uint64_t pickles = 0;
  uint64_t globals = 0;
  for (const sandbox::MemberFacts& m : facts.members) {
    const int errors_before = report.errors_size();
    bool complete_top_level = false;
    for (size_t i = 0; i < m.stream.pickles.size(); ++i) {
      const pickle::PickleFacts& p = m.stream.pickles[i];
      ++pickles;
      globals += p.graph.globals.size();
      // Another loader's reading that its loader would also stop at this point: that
      // loader fails to load the file here, which is no error of the file.
      const bool loader_stops =
          m.alternative && p.error.has_value() && pickle::AlternativeStopIsClean(m.stream, i);
      if (p.error.has_value() && !loader_stops) {
        *report.add_errors() = ToScanError(*p.error, m.member, static_cast<uint32_t>(i), p.depth);
      } else if (p.depth == 0) {
        complete_top_level = true;
      }
    }
    if (m.stream.stream_error.has_value() &&
        !(m.alternative && pickle::LoaderStopsToo(*m.stream.stream_error))) {
      *report.add_errors() = ToScanError(*m.stream.stream_error, m.member, 0, 0);
    }
    if (!complete_top_level && report.errors_size() == errors_before && !m.alternative) {
      v1::ScanError e = MalformedError("no complete pickle in the stream");
      e.mutable_location()->set_member(m.member);
      *report.add_errors() = std::move(e);
    }

    // Calls are rendered by the VM's own summariser, as `ckptscan disasm` shows
    // them.
    rules::Evaluation eval =
        rules.Evaluate(m.stream, m.member, [](const pickle::Graph& g, const pickle::CallSite& c) {
          return pickle::SummarizeCall(g, c);
        });
    verdict = rules::WorseVerdict(verdict, eval.verdict);
    for (v1::Finding& f : eval.findings) {
      verdict = rules::WorseVerdict(verdict, f.verdict());
      *report.add_findings() = std::move(f);
    }
  }
  // Container anomalies: one finding each, graded by the catalogue (informational kinds do
  // not raise the verdict).
  for (const torch::ContainerAnomaly& a : facts.anomalies) {
    const std::string id = absl::StrCat(a.category, ".", a.kind);
    const rules::RuleInfo* info = rules::FindRule(id);
    // An id the catalogue does not know is graded as its family's catch-all.
    const std::string fallback = a.category == "template" ? "template.sandbox_escape"
                                 : a.category == "repo"   ? "repo.remote_code"
                                 : a.category == "keras"  ? "keras.foreign_object"
                                 : a.category == "onnx"   ? "onnx.custom_domain"
                                 : a.category == "joblib" ? "joblib.companion_path"
                                                          : "container.unexpected_member";
    if (info == nullptr) info = rules::FindRule(fallback);
    v1::Finding f;
    f.set_rule_id(info != nullptr ? std::string(info->id) : fallback);
    f.set_category(a.category);
    f.set_severity(info != nullptr ? info->severity : v1::SEVERITY_MEDIUM);
    f.set_verdict(!a.must_flag      ? v1::VERDICT_SAFE
                  : info != nullptr ? info->verdict
                                    : v1::VERDICT_SUSPICIOUS);
    if (!a.must_flag) f.set_severity(v1::SEVERITY_INFO);
    f.mutable_location()->set_member(a.member);
    f.mutable_location()->set_offset(a.offset);
    f.set_message(a.message);
    verdict = rules::WorseVerdict(verdict, f.verdict());
    *report.add_findings() = std::move(f);
  }
  // Fail closed: facts that scanned nothing and explain nothing cannot be SAFE (numeric
  // .npy/.npz files have tensors and no pickle; a sharded checkpoint's JSON index is data; a
  // safetensors file that passed the strict validator is data).
  const bool valid_safetensors = facts.format == "safetensors" && facts.safetensors.valid;
  // A GGUF file the strict reader read whole (no code runs from it; its templates are judged);
  // a zip of files read member by member (each member judged as a file).
  const bool valid_gguf = facts.format == "gguf" && facts.gguf.valid;
  // An ONNX model decoded and walked whole (its external data and operator domains judged).
  const bool valid_onnx = facts.format == "onnx" && facts.onnx.valid;
  const bool data = torch::IsDataFormat(facts.format);
  report.set_kind(std::string(KindOfFormat(facts.format)));
  if (facts.members.empty() && facts.tensors.empty() && !facts.shard_index.present &&
      !valid_safetensors && !valid_gguf && !valid_onnx && !data && facts.files_read == 0 &&
      report.errors_size() == 0) {
    v1::ScanError e;
    e.set_code(v1::ERROR_CODE_INTERNAL);
    e.set_message("nothing was scanned");
    *report.add_errors() = std::move(e);
  }
  if (report.errors_size() > 0) verdict = rules::WorseVerdict(verdict, v1::VERDICT_ERROR);

  report.set_verdict(verdict);
  report.set_pickles(static_cast<uint32_t>(std::min<uint64_t>(pickles, UINT32_MAX)));
  report.set_globals(static_cast<uint32_t>(std::min<uint64_t>(globals, UINT32_MAX)));
  uint64_t tensor_bytes = 0;
  for (const torch::StorageData& d : facts.storage_data) tensor_bytes += d.nbytes;
  const std::vector<bool> shared_storage = SharedStorages(facts);
  uint64_t unsupported = 0;
  uint64_t shared = 0;
  for (const torch::TensorFact& t : facts.tensors) {
    if (!t.problem.empty()) ++unsupported;
    if (OnSharedStorage(t, shared_storage)) ++shared;
  }
  v1::TensorSummary* ts = report.mutable_tensors();
  ts->set_count(facts.tensors.size());
  ts->set_bytes(tensor_bytes);
  ts->set_storages(facts.storages.size());
  ts->set_shared(shared);
  ts->set_unsupported(unsupported);
  if (valid_safetensors) {
    // Each tensor has its own byte range (the validator refuses overlaps and gaps).
    ts->set_count(facts.safetensors.tensors);
    ts->set_bytes(facts.safetensors.data_bytes);
    ts->set_storages(facts.safetensors.tensors);
  }
  // TorchScript code files (their digests are added where the report leaves the jail's side:
  // sandbox/run.h, ReportForRun).
  for (const torch::CodeFile& c : facts.code_files) {
    v1::CodeFile* p = report.add_code_files();
    p->set_name(base::Escaped(c.name));
    p->set_bytes(c.nbytes);
  }
  if (facts.shard_index.present) {
    std::set<std::string> files;
    for (const auto& entry : facts.shard_index.weight_map) files.insert(entry.second);
    for (const std::string& f : files) report.add_shards(f);
  }
  return report;
}

void AddTensorList(const sandbox::FileFacts& facts, v1::FileReport* report) {
  const std::vector<bool> shared_storage = SharedStorages(facts);
  for (const torch::TensorFact& t : facts.tensors) {
    v1::TensorInfo* info = report->add_tensor_list();
    info->set_name(base::Escaped(t.name));
    for (int64_t d : t.shape) info->add_shape(d);
    if (t.dtype != nullptr) {
      info->set_dtype(std::string(t.dtype->name));
      // numel x element size (packed dtypes round up); 0 when it overflows.
      const uint64_t numel = t.numel();
      const uint64_t per = std::max<uint32_t>(t.dtype->per_byte, 1);
      uint64_t bytes = 0;
      if (numel != UINT64_MAX &&
          base::CheckedMul<uint64_t>(numel / per + (numel % per != 0), t.dtype->size, &bytes)) {
        info->set_bytes(bytes);
      }
    }
    const bool has_storage =
        t.storage >= 0 && static_cast<size_t>(t.storage) < facts.storages.size();
    info->set_storage(has_storage ? t.storage : -1);
    info->set_shared(OnSharedStorage(t, shared_storage));
    info->set_note(base::Escaped(t.problem));
  }
}

std::string_view KindOfFormat(std::string_view format) {
  if (torch::IsDataFormat(format)) return "data";
  if (format == "unknown") return "unknown";
  if (format == "zip" || format == "tar" || format == "7z" || format == "rar" || format == "zstd") {
    return "archive";
  }
  return "model";
}

void JudgeName(std::string_view path, v1::FileReport* report) {
  constexpr std::string_view kPy = ".py";
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (name.size() <= kPy.size() || name.substr(name.size() - kPy.size()) != kPy) return;
  const rules::RuleInfo* info = rules::FindRule("repo.remote_code");
  v1::Finding f;
  f.set_rule_id("repo.remote_code");
  f.set_category("repo");
  f.set_severity(info != nullptr ? info->severity : v1::SEVERITY_MEDIUM);
  f.set_verdict(info != nullptr ? info->verdict : v1::VERDICT_SUSPICIOUS);
  f.set_message(
      "a Python file in the repository: transformers imports and runs it when a config's "
      "auto_map names it and the model is loaded with trust_remote_code=True");
  if (report->format() == "text") report->set_kind("code");
  report->set_verdict(rules::WorseVerdict(report->verdict(), f.verdict()));
  *report->add_findings() = std::move(f);
}

v1::FileReport UnreadableFileReport(const std::string& path, const absl::Status& status) {
  v1::FileReport report;
  report.set_path(path);
  report.set_verdict(v1::VERDICT_ERROR);
  v1::ScanError* e = report.add_errors();
  e->set_code(status.code() == absl::StatusCode::kInternal ? v1::ERROR_CODE_INTERNAL
                                                           : v1::ERROR_CODE_IO);
  e->set_message(std::string(status.message()));
  report.mutable_tensors();
  return report;
}

}  // namespace ckptscan::app
