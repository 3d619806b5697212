#include "sandbox/worker/facts_encoder.h"

#include <cstdint>

#include "sandbox/protocol.h"

namespace ckptscan::sandbox {
namespace {

namespace wv1 = ::ckptscan::worker::v1;
using pickle::VmError;

// ------------------------------------------------------------------ encode

void EncodeVmError(const VmError& e, wv1::VmError* out) {
  out->set_code(static_cast<uint32_t>(e.code));
  out->set_message(e.message);
  out->set_offset(e.offset);
  out->set_opcode(e.opcode);
  out->set_has_opcode(e.has_opcode);
  out->set_limit_name(e.limit_name);
  out->set_limit_value(e.limit_value);
}

void EncodeGraph(const pickle::Graph& g, wv1::Graph* out) {
  out->mutable_nodes()->Reserve(static_cast<int>(g.nodes.size()));
  for (const pickle::Node& n : g.nodes) {
    wv1::Node* p = out->add_nodes();
    p->set_kind(static_cast<uint32_t>(n.kind));
    p->set_b(n.b);
    p->set_fits(n.fits);
    p->set_int_lo(absl::Uint128Low64(static_cast<absl::uint128>(n.i)));
    p->set_int_hi(absl::Uint128High64(static_cast<absl::uint128>(n.i)));
    p->set_f(n.f);
    p->set_text(n.text);
    p->set_len(n.len);
    p->set_truncated(n.truncated);
    p->set_data_offset(n.data_offset);
    p->set_in_stream(n.in_stream);
    p->mutable_items()->Add(n.items.begin(), n.items.end());
    p->set_ref(n.ref);
    p->mutable_states()->Add(n.states.begin(), n.states.end());
    p->mutable_mutations()->Add(n.mutations.begin(), n.mutations.end());
  }
  for (const pickle::GlobalRef& r : g.globals) {
    wv1::GlobalRef* p = out->add_globals();
    p->set_module(r.module);
    p->set_name(r.name);
    p->set_resolved_module(r.resolved_module);
    p->set_resolved_name(r.resolved_name);
    p->set_offset(r.offset);
    p->set_opcode(r.opcode);
    p->set_via(static_cast<uint32_t>(r.via));
    p->set_ext_code(r.ext_code);
    p->set_module_computed(r.module_computed);
    p->set_name_computed(r.name_computed);
  }
  for (const pickle::CallSite& c : g.calls) {
    wv1::CallSite* p = out->add_calls();
    p->set_op(static_cast<uint32_t>(c.op));
    p->set_offset(c.offset);
    p->set_opcode(c.opcode);
    p->set_callee(c.callee);
    p->set_args(c.args);
    p->set_kwargs(c.kwargs);
    p->set_result(c.result);
  }
}

void EncodeScanError(const v1::ScanError& e, wv1::ScanError* out) {
  out->set_code(static_cast<uint32_t>(e.code()));
  out->set_message(e.message());
  if (e.has_location()) {
    wv1::Location* l = out->mutable_location();
    l->set_member(e.location().member());
    l->set_offset(e.location().offset());
    l->set_opcode(e.location().opcode());
    l->set_pickle_index(e.location().pickle_index());
    l->set_nested_depth(e.location().nested_depth());
  }
  out->set_limit_name(e.limit_name());
  out->set_limit_value(e.limit_value());
}

void EncodeTensor(const torch::TensorFact& t, wv1::TensorFact* p) {
  p->set_name(t.name);
  p->set_kind(static_cast<uint32_t>(t.kind));
  if (t.dtype != nullptr) p->set_dtype(std::string(t.dtype->name));
  p->mutable_shape()->Add(t.shape.begin(), t.shape.end());
  p->mutable_stride()->Add(t.stride.begin(), t.stride.end());
  p->set_storage_offset(t.storage_offset);
  p->set_storage(t.storage);
  p->set_requires_grad(t.requires_grad);
  p->set_parameter(t.parameter);
  p->set_offset(t.offset);
  p->set_node(t.node);
  p->set_problem(t.problem);
  p->set_qscheme(t.qscheme);
  p->set_q_scale(t.q_scale);
  p->set_q_zero_point(t.q_zero_point);
  p->set_q_axis(t.q_axis);
  for (const torch::TensorFact& c : t.qchannel) {
    wv1::ChannelTensor* q = p->add_qchannel();
    if (c.dtype != nullptr) q->set_dtype(std::string(c.dtype->name));
    q->mutable_shape()->Add(c.shape.begin(), c.shape.end());
    q->mutable_stride()->Add(c.stride.begin(), c.stride.end());
    q->set_storage_offset(c.storage_offset);
    q->set_storage(c.storage);
    q->set_offset(c.offset);
    q->set_node(c.node);
  }
}

}  // namespace

void EncodeFacts(const FileFacts& facts, worker::v1::FileFacts* out) {
  out->set_format(facts.format);
  for (const v1::ScanError& e : facts.errors) EncodeScanError(e, out->add_errors());
  for (const MemberFacts& m : facts.members) {
    wv1::MemberFacts* pm = out->add_members();
    pm->set_member(m.member);
    pm->set_alternative(m.alternative);
    wv1::StreamFacts* ps = pm->mutable_stream();
    for (const pickle::PickleFacts& f : m.stream.pickles) {
      wv1::PickleFacts* pp = ps->add_pickles();
      pp->set_start(f.start);
      pp->set_end(f.end);
      pp->set_protocol(f.protocol);
      pp->set_opcodes(f.opcodes);
      EncodeGraph(f.graph, pp->mutable_graph());
      pp->set_root(f.root);
      if (f.error.has_value()) EncodeVmError(*f.error, pp->mutable_error());
      pp->set_depth(f.depth);
      pp->set_parent(f.parent);
      pp->set_parent_node(f.parent_node);
    }
    ps->set_trailing_offset(m.stream.trailing_offset);
    ps->set_trailing_bytes(m.stream.trailing_bytes);
    if (m.stream.stream_error.has_value()) {
      EncodeVmError(*m.stream.stream_error, ps->mutable_stream_error());
    }
  }
  for (const torch::ContainerAnomaly& a : facts.anomalies) {
    wv1::ContainerAnomaly* p = out->add_anomalies();
    p->set_kind(a.kind);
    p->set_member(a.member);
    p->set_offset(a.offset);
    p->set_message(a.message);
    p->set_must_flag(a.must_flag);
    if (a.category != "container") p->set_category(a.category);
  }
  for (const torch::TensorFact& t : facts.tensors) EncodeTensor(t, out->add_tensors());
  for (const torch::StorageRef& s : facts.storages) {
    wv1::StorageRef* p = out->add_storages();
    p->set_key(s.key);
    if (s.dtype != nullptr) p->set_dtype(std::string(s.dtype->name));
    p->set_untyped(s.untyped);
    p->set_location(s.location);
    p->set_numel(s.numel);
    p->set_pid_offset(s.pid_offset);
  }
  for (const torch::OtherValue& v : facts.other_values.listed) {
    wv1::OtherValue* p = out->add_other_values();
    p->set_name(v.name);
    p->set_type(v.type);
    p->set_offset(v.offset);
  }
  out->set_other_values_total(facts.other_values.total);
  out->set_shard_index(facts.shard_index.present);
  out->set_quant_method(facts.quant_method);
  out->set_has_total_size(facts.shard_index.has_total_size);
  out->set_total_size(facts.shard_index.total_size);
  for (const auto& [name, file] : facts.shard_index.weight_map) {
    wv1::ShardEntry* e = out->add_weight_map();
    e->set_name(name);
    e->set_file(file);
  }
  out->set_files_read(facts.files_read);
  for (const torch::CodeFile& c : facts.code_files) {
    wv1::CodeFileFacts* p = out->add_code_files();
    p->set_name(c.name);
    p->set_offset(c.offset);
    p->set_nbytes(c.nbytes);
    p->set_has_content(c.has_content);
    p->set_content(c.content);
  }
  if (facts.onnx.valid) {
    wv1::OnnxFacts* o = out->mutable_onnx();
    o->set_valid(true);
    o->set_ir_version(facts.onnx.ir_version);
    o->set_nodes(facts.onnx.nodes);
    o->set_graphs(facts.onnx.graphs);
    o->set_tensors(facts.onnx.tensors);
  }
  if (facts.gguf.valid) {
    wv1::GgufFacts* g = out->mutable_gguf();
    g->set_valid(true);
    g->set_version(facts.gguf.version);
    g->set_tensors(facts.gguf.tensors);
    g->set_kv_count(facts.gguf.kv_count);
    g->set_alignment(facts.gguf.alignment);
    g->set_data_bytes(facts.gguf.data_bytes);
  }
  if (facts.safetensors.valid) {
    wv1::SafetensorsFacts* p = out->mutable_safetensors();
    p->set_valid(true);
    p->set_tensors(facts.safetensors.tensors);
    p->set_data_bytes(facts.safetensors.data_bytes);
    p->set_header_length(facts.safetensors.header_length);
    p->set_has_metadata(facts.safetensors.has_metadata);
  }
  for (const torch::StorageData& d : facts.storage_data) {
    wv1::StorageData* p = out->add_storage_data();
    p->set_key(d.key);
    p->set_member(d.member);
    p->set_offset(d.offset);
    p->set_nbytes(d.nbytes);
    p->set_stored(d.stored);
  }
}

uint64_t CountFrameValues(const FileFacts& facts) {
  uint64_t n = facts.errors.size() + facts.members.size() + facts.anomalies.size() +
               facts.tensors.size() + facts.storages.size() + facts.storage_data.size() +
               facts.other_values.listed.size() + facts.shard_index.weight_map.size();
  uint64_t items = 0;
  for (const torch::TensorFact& t : facts.tensors) {
    items += 2 * (t.shape.size() + t.stride.size());
    n += t.qchannel.size();
    for (const torch::TensorFact& c : t.qchannel) items += 2 * (c.shape.size() + c.stride.size());
  }
  for (const MemberFacts& m : facts.members) {
    n += m.stream.pickles.size();
    for (const pickle::PickleFacts& p : m.stream.pickles) {
      n += p.graph.nodes.size() + p.graph.globals.size() + p.graph.calls.size();
      for (const pickle::Node& node : p.graph.nodes) {
        items += node.items.size() + node.states.size() + node.mutations.size();
      }
    }
  }
  return n + ListItemValues(items);
}

}  // namespace ckptscan::sandbox
