#include "core/onnx/onnx_check.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "onnx/onnx.pb.h"

namespace ckptscan::onnx_check {
namespace {

using base::AbslView;

bool IsStandardDomain(std::string_view d) {
  return d.empty() || d == "ai.onnx" || d == "ai.onnx.ml" || d == "ai.onnx.preview.training";
}

// A decimal integer as Python's int() of ONNX's external-data values reads a plain one: digits
// only (no sign: negative values are refused), at most 2^63-1.
bool ParseCount(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = v;
  return true;
}

// Why a location may leave the model's folder, or "".
std::string_view EscapingLocation(std::string_view loc) {
  if (loc.find('\0') != std::string_view::npos) return "holds a NUL";
  if (loc.find('\\') != std::string_view::npos) return "holds a backslash";
  if (!loc.empty() && loc[0] == '/') return "is absolute";
  if (loc.size() >= 2 && loc[1] == ':') return "names a drive";
  size_t start = 0;
  while (start <= loc.size()) {
    const size_t slash = loc.find('/', start);
    const std::string_view part =
        loc.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part == "..") return "climbs out with \"..\"";
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return "";
}

class Walker {
 public:
  Walker(const Limits& limits, Model* model) : limits_(limits), model_(model) {}

  absl::Status Walk(const onnx::ModelProto& m) {
    for (const onnx::FunctionProto& f : m.functions()) {
      local_functions_.insert({f.domain(), f.name()});
    }
    pending_.push_back(
        {&m.graph(), 0, absl::StrCat("graph ", AbslView(base::Quoted(m.graph().name())))});
    for (int i = 0; i < m.training_info_size(); ++i) {
      const onnx::TrainingInfoProto& t = m.training_info(i);
      if (t.has_initialization()) {
        pending_.push_back(
            {&t.initialization(), 0, absl::StrCat("training_info ", i, " initialization")});
      }
      if (t.has_algorithm()) {
        pending_.push_back({&t.algorithm(), 0, absl::StrCat("training_info ", i, " algorithm")});
      }
    }
    for (const onnx::FunctionProto& f : m.functions()) {
      const std::string where = absl::StrCat("function ", AbslView(base::Quoted(f.domain())), ".",
                                             AbslView(base::Quoted(f.name())));
      for (const onnx::NodeProto& n : f.node()) CKPT_RETURN_IF_ERROR(Node(n, where, 0));
    }
    while (!pending_.empty()) {
      Pending p = std::move(pending_.back());
      pending_.pop_back();
      CKPT_RETURN_IF_ERROR(Graph(*p.graph, p.depth, p.where));
    }
    for (const auto& [domain, nodes] : custom_) {
      model_->findings.push_back(Finding{
          "custom_domain", nodes.second,
          absl::StrCat(nodes.first, " node(s) of operator domain ", AbslView(base::Quoted(domain)),
                       " (this one is the first): not ONNX's own operators nor a function of "
                       "the model; a runtime runs them with operators that native libraries "
                       "register")});
    }
    return absl::OkStatus();
  }

 private:
  struct Pending {
    const onnx::GraphProto* graph;
    uint32_t depth;
    std::string where;
  };

  absl::Status Graph(const onnx::GraphProto& g, uint32_t depth, const std::string& where) {
    if (depth > limits_.max_graph_depth) {
      return base::LimitError(absl::StrCat(where, ": graphs nested deeper than ",
                                           limits_.max_graph_depth, " (max_graph_depth)"),
                              "max_graph_depth", limits_.max_graph_depth);
    }
    ++model_->graphs;
    for (const onnx::TensorProto& t : g.initializer()) {
      CKPT_RETURN_IF_ERROR(Tensor(t, [&] {
        return absl::StrCat(where, ", initializer ", AbslView(base::Quoted(t.name())));
      }));
    }
    for (const onnx::SparseTensorProto& s : g.sparse_initializer()) {
      CKPT_RETURN_IF_ERROR(Sparse(s, absl::StrCat(where, ", sparse initializer")));
    }
    for (const onnx::NodeProto& n : g.node()) CKPT_RETURN_IF_ERROR(Node(n, where, depth));
    return absl::OkStatus();
  }

  absl::Status Node(const onnx::NodeProto& n, const std::string& where, uint32_t depth) {
    if (++model_->nodes > limits_.max_nodes) {
      return base::LimitError(absl::StrCat("more than ", limits_.max_nodes, " nodes (max_nodes)"),
                              "max_nodes", limits_.max_nodes);
    }
    // Where-strings are built only when something needs them (a model may hold a million
    // nodes, almost all with plain attributes).
    const auto here = [&] {
      return absl::StrCat(where, ", node ", AbslView(base::Quoted(n.name())), " (",
                          AbslView(base::Quoted(n.op_type())), ")");
    };
    if (!IsStandardDomain(n.domain()) && !local_functions_.count({n.domain(), n.op_type()})) {
      auto it = custom_.find(n.domain());
      if (it == custom_.end()) it = custom_.emplace(n.domain(), std::make_pair(0, here())).first;
      ++it->second.first;
    }
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (!a.has_t() && a.tensors_size() == 0 && !a.has_sparse_tensor() &&
          a.sparse_tensors_size() == 0 && !a.has_g() && a.graphs_size() == 0) {
        continue;
      }
      const std::string at = absl::StrCat(here(), ", attribute ", AbslView(base::Quoted(a.name())));
      const auto at_fn = [&] { return at; };
      if (a.has_t()) CKPT_RETURN_IF_ERROR(Tensor(a.t(), at_fn));
      for (const onnx::TensorProto& t : a.tensors()) CKPT_RETURN_IF_ERROR(Tensor(t, at_fn));
      if (a.has_sparse_tensor()) CKPT_RETURN_IF_ERROR(Sparse(a.sparse_tensor(), at));
      for (const onnx::SparseTensorProto& s : a.sparse_tensors()) {
        CKPT_RETURN_IF_ERROR(Sparse(s, at));
      }
      if (a.has_g()) pending_.push_back({&a.g(), depth + 1, at});
      for (const onnx::GraphProto& g : a.graphs()) pending_.push_back({&g, depth + 1, at});
    }
    return absl::OkStatus();
  }

  absl::Status Sparse(const onnx::SparseTensorProto& s, const std::string& where) {
    if (s.has_values()) {
      CKPT_RETURN_IF_ERROR(Tensor(s.values(), [&] { return absl::StrCat(where, " values"); }));
    }
    if (s.has_indices()) {
      CKPT_RETURN_IF_ERROR(Tensor(s.indices(), [&] { return absl::StrCat(where, " indices"); }));
    }
    return absl::OkStatus();
  }

  absl::Status Tensor(const onnx::TensorProto& t, const std::function<std::string()>& where_fn) {
    if (++model_->tensors > limits_.max_tensors) {
      return base::LimitError(
          absl::StrCat("more than ", limits_.max_tensors, " tensors (max_tensors)"), "max_tensors",
          limits_.max_tensors);
    }
    const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    if (!external && t.external_data_size() == 0) return absl::OkStatus();
    const std::string where = where_fn();
    // onnx's external_data_helper reads every key onto an ExternalDataInfo; the location is
    // joined to the model's folder and opened.
    std::string location;
    bool has_location = false;
    uint64_t offset = 0, length = 0;
    bool has_length = false;
    bool seen_location = false, seen_offset = false, seen_length = false;
    for (const onnx::StringStringEntryProto& e : t.external_data()) {
      // A key given twice: onnx keeps the last copy, another reader may keep the first, and
      // only one of them would be judged.
      bool* seen = e.key() == "location" ? &seen_location
                   : e.key() == "offset" ? &seen_offset
                   : e.key() == "length" ? &seen_length
                                         : nullptr;
      if (seen != nullptr && std::exchange(*seen, true)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": external data ", AbslView(e.key()),
                         " given twice (readers keep different copies)"));
      }
      if (e.key() == "location") {
        location = e.value();
        has_location = true;
      } else if (e.key() == "offset" || e.key() == "length") {
        uint64_t v = 0;
        if (!ParseCount(e.value(), &v)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": external data ", AbslView(e.key()), " ", AbslView(base::Quoted(e.value())),
              " is not a non-negative decimal integer below 2^63"));
        }
        if (e.key() == "offset") {
          offset = v;
        } else {
          length = v;
          has_length = true;
        }
      }
    }
    if (!external) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       ": external_data entries on a tensor whose data_location is not "
                       "EXTERNAL (readers disagree on where its data is)"));
    }
    if (!has_location || location.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": external data without a location"));
    }
    // onnxruntime reads the range with 64-bit signed offsets.
    uint64_t end = 0;
    if (has_length && (!base::CheckedAdd<uint64_t>(offset, length, &end) ||
                       end > static_cast<uint64_t>(INT64_MAX))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": external data offset + length overflows a 64-bit offset"));
    }
    if (const std::string_view why = EscapingLocation(location); !why.empty()) {
      model_->findings.push_back(Finding{
          "external_data_path", where,
          absl::StrCat("external data location ", AbslView(base::Quoted(location)), " ",
                       AbslView(why),
                       ": onnx.load reads the file it names, which may lie outside the model's "
                       "folder (CVE-2022-25882, CVE-2024-27318)")});
    } else if (external_files_.insert(location).second) {
      model_->findings.push_back(
          Finding{"external_data", where,
                  absl::StrCat("tensor data is read from ", AbslView(base::Quoted(location)),
                               " beside the model (not part of this scan)")});
    }
    return absl::OkStatus();
  }

  const Limits& limits_;
  Model* model_;
  std::vector<Pending> pending_;
  std::set<std::pair<std::string, std::string>> local_functions_;
  std::map<std::string, std::pair<uint64_t, std::string>> custom_;  // domain -> (nodes, first)
  std::set<std::string> external_files_;
};

}  // namespace

bool LooksLikeModel(std::string_view data) {
  // Field 1 (ir_version), wire type 0 (varint): tag byte 0x08, then a varint of at most 10
  // bytes (onnx decodes any value; the differential found a large one).
  if (data.size() < 2 || data[0] != '\x08') return false;
  for (size_t i = 1; i < data.size() && i <= 10; ++i) {
    if (static_cast<uint8_t>(data[i]) < 0x80) return true;
  }
  return false;
}

absl::StatusOr<Model> Read(std::string_view data, const Limits& limits) {
  if (data.size() > limits.max_model_bytes) {
    const std::string message = absl::StrCat("a model of ", data.size(), " bytes is over ",
                                             limits.max_model_bytes, " (max_model_bytes)");
    return base::LimitError(message, "max_model_bytes", limits.max_model_bytes);
  }
  onnx::ModelProto m;
  if (!m.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
    return absl::InvalidArgumentError(
        "not a valid ONNX ModelProto (protobuf decoding failed: truncated, malformed or nested "
        "deeper than protobuf's recursion limit)");
  }
  if (!m.has_graph()) return absl::InvalidArgumentError("an ONNX ModelProto without a graph");
  Model model;
  model.ir_version = m.ir_version();
  Walker w(limits, &model);
  absl::Status s = w.Walk(m);
  if (!s.ok()) return s;
  return model;
}

}  // namespace ckptscan::onnx_check
