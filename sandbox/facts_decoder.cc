#include "sandbox/facts_decoder.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/pickle/graph_check.h"
#include "core/torch/tensors.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {
namespace {

namespace wv1 = ::ckptscan::worker::v1;
using pickle::CallOp;
using pickle::Kind;
using pickle::kNoNode;
using pickle::Via;
using pickle::VmError;

// ------------------------------------------------------------------ decode

// Where a decode error is, for its message.
std::string Where(size_t member, size_t pickle) {
  return absl::StrCat("member ", member, " pickle ", pickle, ": ");
}

absl::StatusOr<uint8_t> Byte(uint32_t v, const std::string& where, const char* what) {
  if (v > 0xff) {
    return absl::InvalidArgumentError(absl::StrCat(where, what, " ", v, " is not a byte"));
  }
  return static_cast<uint8_t>(v);
}

absl::StatusOr<VmError> DecodeVmError(const wv1::VmError& p, const std::string& where) {
  VmError e;
  if (p.code() > static_cast<uint32_t>(VmError::Code::kStricter)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "error code ", p.code(), " is not a VmError::Code"));
  }
  e.code = static_cast<VmError::Code>(p.code());
  e.message = p.message();
  e.offset = p.offset();
  absl::StatusOr<uint8_t> op = Byte(p.opcode(), where, "error opcode");
  if (!op.ok()) return op.status();
  e.opcode = *op;
  e.has_opcode = p.has_opcode();
  e.limit_name = p.limit_name();
  e.limit_value = p.limit_value();
  return e;
}

absl::Status DecodeGraph(const wv1::Graph& p, const std::string& where, pickle::Graph* g) {
  g->nodes.resize(static_cast<size_t>(p.nodes_size()));
  for (int i = 0; i < p.nodes_size(); ++i) {
    const wv1::Node& pn = p.nodes(i);
    pickle::Node& n = g->nodes[static_cast<size_t>(i)];
    if (pn.kind() > static_cast<uint32_t>(Kind::kBuffer)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "node ", i, ": kind ", pn.kind(), " is not a pickle::Kind"));
    }
    n.kind = static_cast<Kind>(pn.kind());
    n.b = pn.b();
    n.fits = pn.fits();
    n.i = static_cast<absl::int128>(absl::MakeUint128(pn.int_hi(), pn.int_lo()));
    n.f = pn.f();
    n.text = pn.text();
    n.len = pn.len();
    n.truncated = pn.truncated();
    n.data_offset = pn.data_offset();
    n.in_stream = pn.in_stream();
    n.items.assign(pn.items().begin(), pn.items().end());
    n.ref = pn.ref();
    n.states.assign(pn.states().begin(), pn.states().end());
    n.mutations.assign(pn.mutations().begin(), pn.mutations().end());
  }
  g->globals.resize(static_cast<size_t>(p.globals_size()));
  for (int i = 0; i < p.globals_size(); ++i) {
    const wv1::GlobalRef& pr = p.globals(i);
    pickle::GlobalRef& r = g->globals[static_cast<size_t>(i)];
    r.module = pr.module();
    r.name = pr.name();
    r.resolved_module = pr.resolved_module();
    r.resolved_name = pr.resolved_name();
    r.offset = pr.offset();
    absl::StatusOr<uint8_t> op = Byte(pr.opcode(), where, "global opcode");
    if (!op.ok()) return op.status();
    r.opcode = *op;
    if (pr.via() > static_cast<uint32_t>(Via::kDynamic)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "global ", i, ": via ", pr.via(), " is not a pickle::Via"));
    }
    r.via = static_cast<Via>(pr.via());
    r.ext_code = pr.ext_code();
    r.module_computed = pr.module_computed();
    r.name_computed = pr.name_computed();
  }
  g->calls.resize(static_cast<size_t>(p.calls_size()));
  for (int i = 0; i < p.calls_size(); ++i) {
    const wv1::CallSite& pc = p.calls(i);
    pickle::CallSite& c = g->calls[static_cast<size_t>(i)];
    if (pc.op() > static_cast<uint32_t>(CallOp::kPersistentLoad)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "call site ", i, ": op ", pc.op(), " is not a pickle::CallOp"));
    }
    c.op = static_cast<CallOp>(pc.op());
    c.offset = pc.offset();
    absl::StatusOr<uint8_t> op = Byte(pc.opcode(), where, "call opcode");
    if (!op.ok()) return op.status();
    c.opcode = *op;
    c.callee = pc.callee();
    c.args = pc.args();
    c.kwargs = pc.kwargs();
    c.result = pc.result();
  }
  if (std::optional<std::string> problem = pickle::FindInconsistency(*g)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "inconsistent graph: ", *problem));
  }
  return absl::OkStatus();
}

absl::Status DecodeStream(const wv1::StreamFacts& p, size_t member, pickle::StreamFacts* s) {
  s->pickles.resize(static_cast<size_t>(p.pickles_size()));
  for (int i = 0; i < p.pickles_size(); ++i) {
    const wv1::PickleFacts& pp = p.pickles(i);
    pickle::PickleFacts& f = s->pickles[static_cast<size_t>(i)];
    const std::string where = Where(member, static_cast<size_t>(i));
    f.start = pp.start();
    f.end = pp.end();
    f.protocol = pp.protocol();
    if (f.protocol < -1 || f.protocol > 0xff) {
      return absl::InvalidArgumentError(absl::StrCat(where, "protocol ", f.protocol));
    }
    f.opcodes = pp.opcodes();
    if (absl::Status st = DecodeGraph(pp.graph(), where, &f.graph); !st.ok()) return st;
    f.root = pp.root();
    if (f.root != kNoNode && f.root >= f.graph.nodes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "root node ", f.root, " of ", f.graph.nodes.size()));
    }
    if (pp.has_error()) {
      absl::StatusOr<VmError> e = DecodeVmError(pp.error(), where);
      if (!e.ok()) return e.status();
      f.error = *std::move(e);
    }
    f.depth = pp.depth();
    f.parent = pp.parent();
    f.parent_node = pp.parent_node();
    // Top-level pickles have no parent; a nested one is one level below an earlier pickle and
    // comes from one of its nodes (the VM appends nested pickles after their parents).
    if (f.depth == 0) {
      if (f.parent != -1 || f.parent_node != kNoNode) {
        return absl::InvalidArgumentError(absl::StrCat(where, "top-level pickle with a parent"));
      }
    } else {
      if (f.parent < 0 || f.parent >= i) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "parent pickle ", f.parent, " is not an earlier pickle"));
      }
      const pickle::PickleFacts& parent = s->pickles[static_cast<size_t>(f.parent)];
      if (parent.depth + 1 != f.depth) {
        return absl::InvalidArgumentError(absl::StrCat(where, "nested depth ", f.depth,
                                                       " under a pickle of depth ", parent.depth));
      }
      if (f.parent_node >= parent.graph.nodes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "parent node ", f.parent_node, " of ", parent.graph.nodes.size()));
      }
    }
  }
  s->trailing_offset = p.trailing_offset();
  s->trailing_bytes = p.trailing_bytes();
  if (p.has_stream_error()) {
    absl::StatusOr<VmError> e = DecodeVmError(p.stream_error(), Where(member, 0));
    if (!e.ok()) return e.status();
    s->stream_error = *std::move(e);
  }
  return absl::OkStatus();
}

// The codes a worker's reader produces (torch::ContainerError / StatusError, ToScanError).
// The others are the trusted side's to give (a timeout, a sandbox failure, a cancelled scan,
// a digest mismatch): a worker that claims one is refused, as is a number the enum lacks.
bool WorkerErrorCode(uint32_t code) {
  return code == v1::ERROR_CODE_MALFORMED || code == v1::ERROR_CODE_UNSUPPORTED ||
         code == v1::ERROR_CODE_LIMIT || code == v1::ERROR_CODE_NOT_PRESENT;
}

absl::StatusOr<v1::ScanError> DecodeScanError(const wv1::ScanError& p, size_t index) {
  if (!WorkerErrorCode(p.code())) {
    return absl::InvalidArgumentError(
        absl::StrCat("error ", index, ": code ", p.code(), " is not an error code a worker gives"));
  }
  v1::ScanError e;
  e.set_code(static_cast<v1::ErrorCode>(p.code()));
  e.set_message(p.message());
  if (p.has_location()) {
    v1::Location* l = e.mutable_location();
    l->set_member(p.location().member());
    l->set_offset(p.location().offset());
    l->set_opcode(p.location().opcode());
    l->set_pickle_index(p.location().pickle_index());
    l->set_nested_depth(p.location().nested_depth());
  }
  e.set_limit_name(p.limit_name());
  e.set_limit_value(p.limit_value());
  return e;
}

// ------------------------------------------------------------------ the value budget

// The frame comes from the jailed worker: untrusted. Before anything is parsed, every field of
// every message in it is checked against worker.proto (the generated descriptors) and what can
// cost far more decoded than on the wire is counted:
// - each element of a repeated message field is a value (a struct of ~100-200 bytes on this
//   side, from as little as 2 bytes on the wire);
// - each element of a repeated scalar field (packed or not) is a list item (a packed item is 1
//   wire byte and ~25 decoded, kListItemsPerValue to a value); a 64-bit one counts twice.
// A field number the schema does not have, or a known one with another wire type than the
// schema's, is refused: protobuf would keep it as an unknown field (~24 bytes decoded from 3 on
// the wire, counted nowhere: FactsCodecTest.FieldsOutsideTheSchemaAreRefusedBeforeAnythingIsBuilt),
// and our worker never writes one.
namespace pb = google::protobuf;

// One message type as the walk sees it: its fields by number (null: not in the schema).
struct WalkType {
  struct Field {
    const pb::FieldDescriptor* fd = nullptr;
    int next = -1;   // index of its message type in the walk's table; -1: not a message
    int weight = 0;  // a repeated scalar: list items per element
    pb::internal::WireFormatLite::WireType wire = pb::internal::WireFormatLite::WIRETYPE_VARINT;
  };
  std::vector<Field> by_number;
};

constexpr int kMaxSchemaDepth = 16;  // recursion follows the schema, never the input

// The walk's table, built once from the descriptors: index 0 is worker.v1.Result, then every
// message type reachable from it.
const std::vector<WalkType>& WalkTypes() {
  static const std::vector<WalkType>* const types = [] {
    auto* out = new std::vector<WalkType>;
    std::vector<const pb::Descriptor*> order = {wv1::Result::descriptor()};
    std::map<const pb::Descriptor*, int> index = {{order[0], 0}};
    for (size_t i = 0; i < order.size(); ++i) {
      WalkType t;
      for (int f = 0; f < order[i]->field_count(); ++f) {
        const pb::FieldDescriptor* fd = order[i]->field(f);
        WalkType::Field w;
        w.fd = fd;
        w.wire = pb::internal::WireFormatLite::WireTypeForFieldType(
            static_cast<pb::internal::WireFormatLite::FieldType>(fd->type()));
        if (fd->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
          const auto [it, added] =
              index.emplace(fd->message_type(), static_cast<int>(order.size()));
          if (added) order.push_back(fd->message_type());
          w.next = it->second;
        } else if (fd->is_repeated()) {
          const auto c = fd->cpp_type();
          w.weight = c == pb::FieldDescriptor::CPPTYPE_INT64 ||
                             c == pb::FieldDescriptor::CPPTYPE_UINT64 ||
                             c == pb::FieldDescriptor::CPPTYPE_DOUBLE
                         ? 2
                         : 1;
        }
        const size_t n = static_cast<size_t>(fd->number());
        if (t.by_number.size() <= n) t.by_number.resize(n + 1);
        t.by_number[n] = w;
      }
      out->push_back(std::move(t));
    }
    return out;
  }();
  return *types;
}

struct WireCount {
  uint64_t values = 0;
  uint64_t items = 0;
};

// Counts the elements of a packed field's payload (`length` bytes at `in`): for varints one per
// byte without the continuation bit, for fixed-size ones length / size. False if the payload is
// cut short, its last varint is unterminated, or its length is not a whole number of elements.
bool CountPacked(pb::io::CodedInputStream* in, const pb::FieldDescriptor* fd, uint32_t length,
                 int weight, uint64_t* items) {
  using pb::internal::WireFormatLite;
  const auto wire =
      WireFormatLite::WireTypeForFieldType(static_cast<WireFormatLite::FieldType>(fd->type()));
  if (wire != WireFormatLite::WIRETYPE_VARINT) {
    const uint32_t size = wire == WireFormatLite::WIRETYPE_FIXED64 ? 8 : 4;
    if (length % size != 0 || !in->Skip(static_cast<int>(length))) return false;
    *items += static_cast<uint64_t>(length / size) * static_cast<uint64_t>(weight);
    return true;
  }
  while (length > 0) {
    const void* data = nullptr;
    int size = 0;
    if (!in->GetDirectBufferPointer(&data, &size) || size <= 0) return false;
    const uint32_t n = std::min(length, static_cast<uint32_t>(size));
    const auto* bytes = static_cast<const uint8_t*>(data);
    for (uint32_t i = 0; i < n; ++i) {
      if ((bytes[i] & 0x80) == 0) *items += static_cast<uint64_t>(weight);
    }
    if (length == n && (bytes[n - 1] & 0x80) != 0) return false;
    in->Skip(static_cast<int>(n));
    length -= n;
  }
  return true;
}

// Checks and counts the message in `in` (walk type `type`, `depth` levels down); false on wire
// data that is malformed or not in the schema.
bool CountValues(pb::io::CodedInputStream* in, int type, int depth, WireCount* count) {
  using pb::internal::WireFormatLite;
  if (depth > kMaxSchemaDepth) return false;
  const WalkType& t = WalkTypes()[static_cast<size_t>(type)];
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return in->ConsumedEntireMessage() || in->BytesUntilLimit() == 0;
    const size_t number = WireFormatLite::GetTagFieldNumber(tag);
    if (number >= t.by_number.size() || t.by_number[number].fd == nullptr) return false;
    const WalkType::Field& f = t.by_number[number];
    const auto wire = WireFormatLite::GetTagWireType(tag);
    const auto declared = f.wire;
    if (f.weight > 0 && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        declared != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length) || !CountPacked(in, f.fd, length, f.weight, &count->items)) {
        return false;
      }
      continue;
    }
    if (wire != declared) return false;
    if (f.fd->is_repeated()) {
      if (f.weight > 0) {
        count->items += static_cast<uint64_t>(f.weight);  // one unpacked element
      } else {
        ++count->values;  // a message, string or bytes element
      }
    }
    if (f.next >= 0) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length)) return false;
      const auto limit = in->PushLimit(static_cast<int>(length));
      if (!CountValues(in, f.next, depth + 1, count) || in->BytesUntilLimit() != 0) return false;
      in->PopLimit(limit);
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return false;
    }
  }
}

absl::Status DecodeTorchFacts(const wv1::FileFacts& in, FileFacts* facts) {
  constexpr size_t kMaxDims = torch::kMaxTensorDims;
  for (const wv1::ContainerAnomaly& a : in.anomalies()) {
    // The category picks the rule family: only the ones a worker reports.
    const std::string& category = a.category();
    if (!category.empty() && category != "template" && category != "repo" && category != "keras" &&
        category != "onnx" && category != "joblib") {
      return absl::InvalidArgumentError("an anomaly of an unknown category");
    }
    facts->anomalies.push_back(torch::ContainerAnomaly{a.kind(), a.member(), a.offset(),
                                                       a.message(), a.must_flag(),
                                                       category.empty() ? "container" : category});
  }
  facts->storages.reserve(static_cast<size_t>(in.storages_size()));
  for (const wv1::StorageRef& p : in.storages()) {
    torch::StorageRef s;
    s.key = p.key();
    s.untyped = p.untyped();
    if (!p.dtype().empty()) {
      s.dtype = torch::DTypeFromName(p.dtype());
      if (s.dtype == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("storage: unknown dtype ", p.dtype()));
      }
    } else if (!s.untyped) {
      return absl::InvalidArgumentError("storage: typed storage without a dtype");
    }
    s.location = p.location();
    s.numel = p.numel();
    s.pid_offset = p.pid_offset();
    facts->storages.push_back(std::move(s));
  }
  if (in.storage_data_size() != 0 && in.storage_data_size() != in.storages_size()) {
    return absl::InvalidArgumentError("storage data does not match the storages");
  }
  for (int i = 0; i < in.storage_data_size(); ++i) {
    const wv1::StorageData& p = in.storage_data(i);
    facts->storage_data.push_back(
        torch::StorageData{p.key(), p.member(), p.offset(), p.nbytes(), p.stored()});
  }
  for (const wv1::TensorFact& p : in.tensors()) {
    torch::TensorFact t;
    t.name = p.name();
    if (p.kind() > static_cast<uint32_t>(torch::TensorFact::Kind::kOther)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor kind ", p.kind()));
    }
    t.kind = static_cast<torch::TensorFact::Kind>(p.kind());
    if (!p.dtype().empty()) {
      t.dtype = torch::DTypeFromName(p.dtype());
      if (t.dtype == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("tensor: unknown dtype ", p.dtype()));
      }
    }
    if (static_cast<size_t>(p.shape_size()) > kMaxDims || p.shape_size() != p.stride_size()) {
      return absl::InvalidArgumentError("tensor: shape and stride do not match");
    }
    t.shape.assign(p.shape().begin(), p.shape().end());
    t.stride.assign(p.stride().begin(), p.stride().end());
    t.storage_offset = p.storage_offset();
    t.storage = p.storage();
    if (t.storage < -1 || t.storage >= in.storages_size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor: storage index ", t.storage));
    }
    t.requires_grad = p.requires_grad();
    t.parameter = p.parameter();
    t.offset = p.offset();
    t.node = p.node();
    t.problem = p.problem();
    t.qscheme = p.qscheme();
    t.q_scale = p.q_scale();
    t.q_zero_point = p.q_zero_point();
    t.q_axis = p.q_axis();
    if (p.qchannel_size() != 0 &&
        (p.qchannel_size() != 2 || t.kind != torch::TensorFact::Kind::kQuantized)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor: ", p.qchannel_size(), " per-channel parameter tensors"));
    }
    for (int k = 0; k < p.qchannel_size(); ++k) {
      const wv1::ChannelTensor& q = p.qchannel(k);
      torch::TensorFact c;
      c.name = absl::StrCat(t.name, k == 0 ? ".scale" : ".zero_point");
      c.dtype = torch::DTypeFromName(q.dtype());
      if (c.dtype == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor: per-channel parameter of unknown dtype ", q.dtype()));
      }
      if (static_cast<size_t>(q.shape_size()) > kMaxDims || q.shape_size() != q.stride_size()) {
        return absl::InvalidArgumentError("tensor: per-channel shape and stride do not match");
      }
      c.shape.assign(q.shape().begin(), q.shape().end());
      c.stride.assign(q.stride().begin(), q.stride().end());
      c.storage_offset = q.storage_offset();
      c.storage = q.storage();
      if (c.storage < 0 || c.storage >= in.storages_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor: per-channel storage index ", c.storage));
      }
      c.offset = q.offset();
      c.node = q.node();
      t.qchannel.push_back(std::move(c));
    }
    facts->tensors.push_back(std::move(t));
  }
  if (static_cast<size_t>(in.other_values_size()) > torch::kMaxListedOtherValues ||
      static_cast<uint64_t>(in.other_values_size()) > in.other_values_total()) {
    return absl::InvalidArgumentError(absl::StrCat("other values: ", in.other_values_size(),
                                                   " listed of ", in.other_values_total()));
  }
  for (const wv1::OtherValue& p : in.other_values()) {
    facts->other_values.listed.push_back(torch::OtherValue{p.name(), p.type(), p.offset()});
  }
  facts->other_values.total = in.other_values_total();
  if (!in.shard_index() && (in.weight_map_size() != 0 || in.has_total_size())) {
    return absl::InvalidArgumentError("a weight map without a shard index");
  }
  facts->shard_index.present = in.shard_index();
  if (!in.quant_method().empty() && !torch::IsPlainQuantMethod(in.quant_method())) {
    return absl::InvalidArgumentError("quant_method is not a plain name");
  }
  facts->quant_method = in.quant_method();
  facts->shard_index.has_total_size = in.has_total_size();
  facts->shard_index.total_size = in.total_size();
  absl::flat_hash_set<std::string_view> names;
  if (in.has_safetensors()) {
    const wv1::SafetensorsFacts& p = in.safetensors();
    if (in.format() != "safetensors") {
      return absl::InvalidArgumentError("safetensors facts for a file of another format");
    }
    if (!p.valid() &&
        (p.tensors() != 0 || p.data_bytes() != 0 || p.header_length() != 0 || p.has_metadata())) {
      return absl::InvalidArgumentError("safetensors facts of a file that failed validation");
    }
    facts->safetensors = torch::SafetensorsFacts{p.valid(), p.tensors(), p.data_bytes(),
                                                 p.header_length(), p.has_metadata()};
  }
  facts->files_read = in.files_read();
  if (static_cast<size_t>(in.code_files_size()) > torch::kMaxCodeFiles ||
      (in.code_files_size() > 0 && in.format() != "torchscript")) {
    return absl::InvalidArgumentError("code files: too many, or for a file that is no TorchScript");
  }
  uint64_t code_bytes = 0;
  for (const wv1::CodeFileFacts& c : in.code_files()) {
    code_bytes += c.content().size();
    if (code_bytes > torch::kMaxCodeBytes || (!c.has_content() && !c.content().empty()) ||
        (c.has_content() && c.content().size() != c.nbytes())) {
      return absl::InvalidArgumentError("code files: content inconsistent with its size");
    }
    facts->code_files.push_back(
        torch::CodeFile{c.name(), c.offset(), c.nbytes(), c.has_content(), c.content()});
  }
  if (in.has_onnx()) {
    const wv1::OnnxFacts& o = in.onnx();
    if (in.format() != "onnx") return absl::InvalidArgumentError("ONNX facts for another format");
    if (!o.valid()) return absl::InvalidArgumentError("ONNX facts of a model that failed reading");
    facts->onnx = torch::OnnxFacts{true, o.ir_version(), o.nodes(), o.graphs(), o.tensors()};
  }
  if (in.has_gguf()) {
    const wv1::GgufFacts& g = in.gguf();
    if (in.format() != "gguf") return absl::InvalidArgumentError("GGUF facts for another format");
    if (!g.valid()) return absl::InvalidArgumentError("GGUF facts of a file that failed reading");
    if (g.tensors() != static_cast<uint64_t>(in.tensors_size())) {
      return absl::InvalidArgumentError("GGUF facts: tensor count differs from the tensors");
    }
    facts->gguf = torch::GgufFacts{true,         g.version(),   g.tensors(),
                                   g.kv_count(), g.alignment(), g.data_bytes()};
  }
  for (const wv1::ShardEntry& e : in.weight_map()) {
    if (!names.insert(e.name()).second) {
      return absl::InvalidArgumentError("weight map: a name twice");
    }
    if (absl::Status s = torch::CheckShardFileName(e.file()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("weight map: ", s.message()));
    }
    facts->shard_index.weight_map.emplace_back(e.name(), e.file());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FileFacts> DecodeFacts(const worker::v1::FileFacts& in) {
  FileFacts facts;
  facts.format = in.format();
  facts.errors.reserve(static_cast<size_t>(in.errors_size()));
  for (int i = 0; i < in.errors_size(); ++i) {
    absl::StatusOr<v1::ScanError> e = DecodeScanError(in.errors(i), static_cast<size_t>(i));
    if (!e.ok()) return e.status();
    facts.errors.push_back(*std::move(e));
  }
  facts.members.resize(static_cast<size_t>(in.members_size()));
  for (int i = 0; i < in.members_size(); ++i) {
    MemberFacts& m = facts.members[static_cast<size_t>(i)];
    m.member = in.members(i).member();
    m.alternative = in.members(i).alternative();
    if (absl::Status s = DecodeStream(in.members(i).stream(), static_cast<size_t>(i), &m.stream);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = DecodeTorchFacts(in, &facts); !s.ok()) return s;
  return facts;
}

namespace {

// DecodeResult: `owned`, when given, holds `payload` and is freed once it is parsed, so that the
// frame and the decoded structs are not alive at once.
absl::StatusOr<DecodedResult> Decode(std::string_view payload, std::string* owned,
                                     const DecodeLimits& limits) {
  if (payload.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError("result payload over kMaxFrameBytes");
  }
  // Count before building anything: the parse and the structs cost ~400 bytes per value and
  // ~25 per list item (kListItemsPerValue items are charged as one value).
  WireCount wire_count;
  google::protobuf::io::CodedInputStream wire(reinterpret_cast<const uint8_t*>(payload.data()),
                                              static_cast<int>(payload.size()));
  if (!CountValues(&wire, 0, 0, &wire_count)) {
    return absl::InvalidArgumentError("result frame is not a worker.v1.Result");
  }
  const uint64_t values = wire_count.values + ListItemValues(wire_count.items);
  const uint64_t max_values = std::min(limits.max_values, kMaxFrameValues);
  if (values > max_values) {
    return base::LimitError(
        absl::StrCat("result frame holds ", values, " values (", wire_count.values,
                     " elements and ", wire_count.items, " list items, ", kListItemsPerValue,
                     " to a value); the limit is ", max_values, " (max_frame_values)"),
        "max_frame_values", max_values);
  }
  if (limits.admit) {
    if (absl::Status s = limits.admit(payload.size(), values); !s.ok()) return s;
  }
  google::protobuf::Arena arena;
  auto* msg = google::protobuf::Arena::CreateMessage<wv1::Result>(&arena);
  if (!msg->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::InvalidArgumentError("result frame is not a worker.v1.Result");
  }
  if (owned != nullptr) std::string().swap(*owned);  // clear() would keep the capacity
  if (!msg->has_facts()) return absl::InvalidArgumentError("result frame has no facts");
  if (msg->trace().size() > kMaxTraceBytes) {
    return absl::InvalidArgumentError("result frame: listing over kMaxTraceBytes");
  }
  DecodedResult out;
  absl::StatusOr<FileFacts> facts = DecodeFacts(msg->facts());
  if (!facts.ok()) return facts.status();
  out.facts = *std::move(facts);
  out.layers = msg->layers();
  out.trace = msg->trace();
  out.trace_truncated = msg->trace_truncated();
  // Bounded by the frame cap; shown escaped by the caller's report text.
  out.convert_error = msg->convert_error().substr(0, 4096);
  return out;
}

}  // namespace

absl::StatusOr<DecodedResult> DecodeResult(std::string_view payload) {
  return Decode(payload, nullptr, DecodeLimits{});
}

absl::StatusOr<DecodedResult> DecodeResult(std::string* payload, const DecodeLimits& limits) {
  return Decode(*payload, payload, limits);
}

}  // namespace ckptscan::sandbox
