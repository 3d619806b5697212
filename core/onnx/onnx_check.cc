#include "core/onnx/onnx_check.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"
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

// onnxruntime's marker for initializers already in its memory
// (core/framework/tensorprotoutils.h): a tensor whose location is exactly this has its
// `offset` taken as an address in the runtime's own process, read `length` bytes from.
constexpr std::string_view kOrtMemoryAddressLocation = "*/_ORT_MEM_ADDR_/*";

// Why a location may leave the model's folder, or "".
std::string_view EscapingLocation(std::string_view loc) {
  if (loc == kOrtMemoryAddressLocation) {
    return "is onnxruntime's in-memory marker, whose offset the runtime reads as an address in "
           "its own memory";
  }
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

// Protobuf's default recursion limit: the deepest nesting of messages and groups its decoder
// accepts (io::CodedInputStream, ParseContext).
constexpr size_t kMaxProtobufNesting = 100;

// Reads a varint of at most `max_bytes` bytes at *pos, as protobuf's decoder does (a varint
// whose last allowed byte still has the continuation bit is malformed).
bool Varint(std::string_view d, size_t* pos, uint64_t* out, size_t max_bytes = 10) {
  uint64_t v = 0;
  for (size_t i = 0; i < max_bytes; ++i) {
    if (*pos >= d.size()) return false;
    const uint8_t b = static_cast<uint8_t>(d[(*pos)++]);
    if (i < 10) v |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
    if (b < 0x80) {
      *out = v;
      return true;
    }
  }
  return false;
}

// Walks the whole model, every message in it, on an explicit stack (one frame per nesting
// level: protobuf bounded the nesting while decoding).
class Walker {
 public:
  Walker(const Limits& limits, Model* model) : limits_(limits), model_(model) {}

  absl::Status Walk(const onnx::ModelProto& m) {
    for (const onnx::FunctionProto& f : m.functions()) {
      local_functions_.insert({f.domain(), f.name(), f.overload()});
    }
    CKPT_RETURN_IF_ERROR(Push(m, nullptr, -1));
    while (!stack_.empty()) {
      const Child next = NextChild(stack_.back());
      if (next.msg == nullptr) {
        stack_.pop_back();
        continue;
      }
      CKPT_RETURN_IF_ERROR(Push(*next.msg, next.via, next.index));
    }
    for (const auto& [domain, nodes] : custom_) {
      model_->findings.push_back(Finding{
          "custom_domain", nodes.second,
          absl::StrCat(nodes.first, " node(s) of operator domain ", AbslView(base::Quoted(domain)),
                       " (this one is the first): not ONNX's own operators nor a function of "
                       "the model; a runtime runs them with operators that native libraries "
                       "register")});
    }
    if (unknown_total_ > 0) {
      model_->unverified = absl::InvalidArgumentError(absl::StrCat(
          unknown_total_, " field(s) that onnx 1.17's schema does not know, e.g. ",
          AbslView(unknown_first_),
          ": not verified (a later onnx or onnxruntime may read them, a tensor's external data "
          "among them)"));
    }
    return absl::OkStatus();
  }

 private:
  using Message = google::protobuf::Message;
  using FieldDescriptor = google::protobuf::FieldDescriptor;

  struct Frame {
    const Message* msg;
    const FieldDescriptor* via;  // the parent's field that holds it; nullptr for the model
    int index;                   // its position in that field when repeated, else -1
    uint32_t graphs;             // GraphProto frames from the root to this one, itself included
    std::vector<const FieldDescriptor*> fields;  // its message fields that are set
    size_t field = 0;                            // the field being descended into
    int item = 0;                                // the next item of it, when repeated
  };

  struct Child {
    const Message* msg = nullptr;
    const FieldDescriptor* via = nullptr;
    int index = -1;
  };

  // The next message below `f` to visit (msg nullptr when all were).
  static Child NextChild(Frame& f) {
    const google::protobuf::Reflection* r = f.msg->GetReflection();
    while (f.field < f.fields.size()) {
      const FieldDescriptor* d = f.fields[f.field];
      if (!d->is_repeated()) {
        ++f.field;
        return Child{&r->GetMessage(*f.msg, d), d, -1};
      }
      if (f.item < r->FieldSize(*f.msg, d)) {
        const int i = f.item++;
        return Child{&r->GetRepeatedMessage(*f.msg, d, i), d, i};
      }
      ++f.field;
      f.item = 0;
    }
    return Child{};
  }

  absl::Status Push(const Message& m, const FieldDescriptor* via, int index) {
    const google::protobuf::Descriptor* type = m.GetDescriptor();
    const uint32_t graphs = (stack_.empty() ? 0 : stack_.back().graphs) +
                            (type == onnx::GraphProto::descriptor() ? 1 : 0);
    stack_.push_back(Frame{&m, via, index, graphs, {}, 0, 0});
    const google::protobuf::Reflection* r = m.GetReflection();
    if (const google::protobuf::UnknownFieldSet& u = r->GetUnknownFields(m); !u.empty()) {
      if (unknown_total_ == 0) {
        unknown_first_ = absl::StrCat(AbslView(Where()), ": field ", u.field(0).number());
      }
      unknown_total_ += static_cast<uint64_t>(u.field_count());
    }
    if (type == onnx::GraphProto::descriptor()) {
      if (graphs > limits_.max_graph_depth + 1) {
        return base::LimitError(absl::StrCat(Where(), ": graphs nested deeper than ",
                                             limits_.max_graph_depth, " (max_graph_depth)"),
                                "max_graph_depth", limits_.max_graph_depth);
      }
      ++model_->graphs;
    } else if (type == onnx::NodeProto::descriptor()) {
      CKPT_RETURN_IF_ERROR(Node(*google::protobuf::DynamicCastToGenerated<onnx::NodeProto>(&m)));
    } else if (type == onnx::TensorProto::descriptor()) {
      CKPT_RETURN_IF_ERROR(
          Tensor(*google::protobuf::DynamicCastToGenerated<onnx::TensorProto>(&m)));
    }
    std::vector<const FieldDescriptor*> set;
    r->ListFields(m, &set);
    for (const FieldDescriptor* d : set) {
      if (d->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) stack_.back().fields.push_back(d);
    }
    return absl::OkStatus();
  }

  // "graph \"main\" > node[3] \"If_0\" (If) > attribute[0] \"then_branch\" > g ...": the path
  // of the message on top of the stack, built only when a finding or an error needs it.
  std::string Where() const {
    std::string out;
    for (const Frame& f : stack_) {
      if (f.via == nullptr) continue;
      if (!out.empty()) out += " > ";
      absl::StrAppend(&out, AbslView(f.via->name()));
      if (f.index >= 0) absl::StrAppend(&out, "[", f.index, "]");
      const google::protobuf::Descriptor* type = f.msg->GetDescriptor();
      const FieldDescriptor* name = type->FindFieldByName("name");
      const google::protobuf::Reflection* r = f.msg->GetReflection();
      if (name != nullptr && name->type() == FieldDescriptor::TYPE_STRING &&
          r->HasField(*f.msg, name)) {
        absl::StrAppend(&out, " ", AbslView(base::Quoted(r->GetString(*f.msg, name))));
      }
      if (type == onnx::NodeProto::descriptor()) {
        absl::StrAppend(
            &out, " (",
            AbslView(base::Quoted(
                google::protobuf::DynamicCastToGenerated<onnx::NodeProto>(f.msg)->op_type())),
            ")");
      }
    }
    return out.empty() ? "model" : out;
  }

  absl::Status Node(const onnx::NodeProto& n) {
    if (++model_->nodes > limits_.max_nodes) {
      return base::LimitError(absl::StrCat("more than ", limits_.max_nodes, " nodes (max_onnx_nodes)"),
                              "max_onnx_nodes", limits_.max_nodes);
    }
    // A node calls a model-local function by domain, name and overload (IR version 10).
    if (!IsStandardDomain(n.domain()) &&
        !local_functions_.count({n.domain(), n.op_type(), n.overload()})) {
      auto it = custom_.find(n.domain());
      if (it == custom_.end()) it = custom_.emplace(n.domain(), std::make_pair(0, Where())).first;
      ++it->second.first;
    }
    return absl::OkStatus();
  }

  absl::Status Tensor(const onnx::TensorProto& t) {
    if (++model_->tensors > limits_.max_tensors) {
      return base::LimitError(
          absl::StrCat("more than ", limits_.max_tensors, " tensors (max_onnx_tensors)"), "max_onnx_tensors",
          limits_.max_tensors);
    }
    const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    if (!external && t.external_data_size() == 0) return absl::OkStatus();
    const std::string where = Where();
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
      model_->findings.push_back(
          Finding{"external_data_path", where,
                  absl::StrCat("external data location ", AbslView(base::Quoted(location)), " ",
                               AbslView(why),
                               ": onnx.load and onnxruntime read the file it names, which may lie "
                               "outside the model's folder (CVE-2022-25882, CVE-2024-27318)")});
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
  std::vector<Frame> stack_;
  std::set<std::tuple<std::string, std::string, std::string>> local_functions_;
  std::map<std::string, std::pair<uint64_t, std::string>> custom_;  // domain -> (nodes, first)
  std::set<std::string> external_files_;
  uint64_t unknown_total_ = 0;
  std::string unknown_first_;
};

}  // namespace

bool LooksLikeModel(std::string_view data) {
  // Field 1 (ir_version), wire type 0 (varint): tag byte 0x08, then a varint of at most 10
  // bytes (onnx decodes any value; the differential found a large one). What protobuf writes.
  if (data.size() >= 2 && data[0] == '\x08') {
    for (size_t i = 1; i < data.size() && i <= 10; ++i) {
      if (static_cast<uint8_t>(data[i]) < 0x80) return true;
    }
  }
  // Any other field order: the whole top level must be protobuf fields, as the decoder reads
  // them (tags of at most 5 bytes, field numbers from 1, wire types 0 to 5, lengths within the
  // bytes and below 2^31, groups closed by their own end tag), and one of them must carry a
  // graph or a function, the parts a runtime reads other files for.
  size_t pos = 0;
  std::vector<uint64_t> groups;
  bool carrier = false;
  while (pos < data.size()) {
    uint64_t tag = 0;
    if (!Varint(data, &pos, &tag, /*max_bytes=*/5) || tag > UINT32_MAX) return false;
    const uint64_t field = tag >> 3;
    if (field == 0) return false;
    uint64_t v = 0;
    switch (tag & 7) {
      case 0:
        if (!Varint(data, &pos, &v)) return false;
        break;
      case 1:
        if (data.size() - pos < 8) return false;
        pos += 8;
        break;
      case 2:
        if (!Varint(data, &pos, &v, 5) || v > INT32_MAX || v > data.size() - pos) return false;
        pos += v;
        if (groups.empty() && (field == onnx::ModelProto::kGraphFieldNumber ||
                               field == onnx::ModelProto::kTrainingInfoFieldNumber ||
                               field == onnx::ModelProto::kFunctionsFieldNumber)) {
          carrier = true;
        }
        break;
      case 3:
        if (groups.size() >= kMaxProtobufNesting) return false;
        groups.push_back(field);
        break;
      case 4:
        if (groups.empty() || groups.back() != field) return false;
        groups.pop_back();
        break;
      case 5:
        if (data.size() - pos < 4) return false;
        pos += 4;
        break;
      default:
        return false;
    }
  }
  return groups.empty() && carrier;
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
  Model model;
  model.ir_version = m.ir_version();
  Walker w(limits, &model);
  CKPT_RETURN_IF_ERROR(w.Walk(m));
  if (!m.has_graph()) {
    // What no runtime loads, whatever else it holds; the fields it does not know are named too.
    model.unverified = absl::InvalidArgumentError(
        model.unverified.ok()
            ? std::string("an ONNX ModelProto without a graph")
            : absl::StrCat("an ONNX ModelProto without a graph; ", model.unverified.message()));
  }
  return model;
}

}  // namespace ckptscan::onnx_check
