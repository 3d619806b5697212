// Test-only: builds pickle::PickleFacts / StreamFacts by hand, the way the symbolic VM would,
// so rules can be tested without the VM. Offsets increase with every value, global and call in
// creation order, which is stream order.
//
//   FactsBuilder b;
//   NodeId sys = b.Global("posix", "system");
//   b.Reduce(sys, b.Tuple({b.Str("id")}));
//   pickle::StreamFacts facts = b.Stream();
#ifndef CKPTSCAN_RULES_FACTS_BUILDER_FOR_TEST_H_
#define CKPTSCAN_RULES_FACTS_BUILDER_FOR_TEST_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/pickle/facts.h"

namespace ckptscan::rules::testing {

class FactsBuilder {
 public:
  using NodeId = pickle::NodeId;

  explicit FactsBuilder(uint64_t first_offset = 2) : offset_(first_offset) {}

  NodeId None() { return Add(pickle::Node{}); }
  NodeId Bool(bool v) {
    pickle::Node n;
    n.kind = pickle::Kind::kBool;
    n.b = v;
    return Add(std::move(n));
  }
  NodeId Int(int64_t v) {
    pickle::Node n;
    n.kind = pickle::Kind::kInt;
    n.i = v;
    n.text = std::to_string(v);  // the VM keeps every int's decimal text
    return Add(std::move(n));
  }
  NodeId Float(double v) {
    pickle::Node n;
    n.kind = pickle::Kind::kFloat;
    n.f = v;
    return Add(std::move(n));
  }
  NodeId Str(std::string s) { return Text(pickle::Kind::kStr, std::move(s)); }
  NodeId Bytes(std::string s) { return Text(pickle::Kind::kBytes, std::move(s)); }
  NodeId ByteArray(std::string s) { return Text(pickle::Kind::kByteArray, std::move(s)); }
  NodeId Tuple(std::initializer_list<NodeId> items) {
    return Container(pickle::Kind::kTuple, items);
  }
  NodeId List(std::initializer_list<NodeId> items) { return Container(pickle::Kind::kList, items); }
  // k0, v0, k1, v1, ...
  NodeId Dict(std::initializer_list<NodeId> items) { return Container(pickle::Kind::kDict, items); }
  // The items of a container built above, to fill from a runtime list.
  std::vector<NodeId>& MutableItems(NodeId container) {
    return facts_.graph.nodes[container].items;
  }
  NodeId IntTuple(std::initializer_list<int64_t> values) {
    std::vector<NodeId> ids;
    for (int64_t v : values) ids.push_back(Int(v));
    pickle::Node n;
    n.kind = pickle::Kind::kTuple;
    n.items = std::move(ids);
    return Add(std::move(n));
  }

  // A GLOBAL (or STACK_GLOBAL/INST/EXT) reference. resolved_* default to module/name.
  NodeId Global(std::string module, std::string name, pickle::Via via = pickle::Via::kGlobal,
                std::string resolved_module = "", std::string resolved_name = "") {
    pickle::GlobalRef ref;
    ref.resolved_module = resolved_module.empty() ? module : std::move(resolved_module);
    ref.resolved_name = resolved_name.empty() ? name : std::move(resolved_name);
    ref.module = std::move(module);
    ref.name = std::move(name);
    ref.offset = offset_++;
    ref.via = via;
    ref.opcode = via == pickle::Via::kStackGlobal ? 0x93 : via == pickle::Via::kInst ? 'i' : 'c';
    return AddGlobal(std::move(ref));
  }
  // A STACK_GLOBAL whose module (and, with `name` empty, name) was computed at load time.
  NodeId Dynamic(std::string name = "") {
    pickle::GlobalRef ref;
    ref.via = pickle::Via::kDynamic;
    ref.module_computed = true;
    ref.name_computed = name.empty();
    ref.name = ref.resolved_name = std::move(name);
    ref.offset = offset_++;
    ref.opcode = 0x93;
    return AddGlobal(std::move(ref));
  }
  NodeId Ext(int64_t code) {
    pickle::GlobalRef ref;
    ref.via = pickle::Via::kExt;
    ref.ext_code = code;
    ref.offset = offset_++;
    ref.opcode = 0x82;  // EXT1
    return AddGlobal(std::move(ref));
  }

  // Call opcodes; each returns the kCall node pushed.
  NodeId Reduce(NodeId callee, NodeId args) {
    return Call(pickle::CallOp::kReduce, 'R', callee, args);
  }
  NodeId NewObj(NodeId cls, NodeId args) { return Call(pickle::CallOp::kNewObj, 0x81, cls, args); }
  NodeId Call(pickle::CallOp op, uint8_t opcode, NodeId callee, NodeId args,
              NodeId kwargs = pickle::kNoNode) {
    pickle::Node result;
    result.kind = pickle::Kind::kCall;
    result.ref = static_cast<uint32_t>(facts_.graph.calls.size());
    const NodeId id = Add(std::move(result));
    pickle::CallSite c;
    c.op = op;
    c.opcode = opcode;
    c.offset = offset_++;
    c.callee = callee;
    c.args = args;
    c.kwargs = kwargs;
    c.result = id;
    facts_.graph.calls.push_back(c);
    return id;
  }
  // BUILD / SETITEMS / APPENDS / ADDITEMS on a target that is not a plain container.
  // As the VM records them: the state on the target, and the call among its mutations.
  void Build(NodeId target, NodeId state) {
    if (target < facts_.graph.nodes.size()) facts_.graph.nodes[target].states.push_back(state);
    Mutate(pickle::CallOp::kBuild, 'b', target, state);
  }
  void SetItems(NodeId target, std::initializer_list<NodeId> kv) {
    Mutate(pickle::CallOp::kSetItems, 'u', target, Tuple(kv));
  }
  void Appends(NodeId target, std::initializer_list<NodeId> items) {
    Mutate(pickle::CallOp::kAppends, 'e', target, Tuple(items));
  }
  // BINPERSID ('Q') or PERSID ('P'); returns the kPersistent node.
  NodeId PersistentLoad(NodeId pid, uint8_t opcode = 'Q') {
    pickle::Node result;
    result.kind = pickle::Kind::kPersistent;
    result.ref = static_cast<uint32_t>(facts_.graph.calls.size());
    result.items = {pid};
    const NodeId id = Add(std::move(result));
    pickle::CallSite c;
    c.op = pickle::CallOp::kPersistentLoad;
    c.opcode = opcode;
    c.offset = offset_++;
    c.args = pid;
    c.result = id;
    facts_.graph.calls.push_back(c);
    return id;
  }
  // ('storage', torch.<cls>, key, 'cpu', numel) -> BINPERSID, as torch.save writes it.
  NodeId Storage(const std::string& cls, const std::string& key, int64_t numel) {
    NodeId g = Global("torch", cls);
    return PersistentLoad(Tuple({Str("storage"), g, Str(key), Str("cpu"), Int(numel)}));
  }

  // An int wider than 128 bits, as the VM keeps one read by LONG1/LONG4 ("<N-byte integer>").
  NodeId WideInt(uint64_t bytes) {
    pickle::Node n;
    n.kind = pickle::Kind::kInt;
    n.fits = false;
    n.text = "<" + std::to_string(bytes) + "-byte integer>";
    return Add(std::move(n));
  }
  // A str of `len` bytes of which the VM kept only `kept` (Limits::max_kept_string).
  NodeId LongStr(std::string kept, uint64_t len) {
    const NodeId id = Str(std::move(kept));
    facts_.graph.nodes[id].len = len;
    facts_.graph.nodes[id].truncated = true;
    return id;
  }

  pickle::PickleFacts& facts() { return facts_; }
  uint64_t offset() const { return offset_; }

  pickle::PickleFacts Pickle(NodeId root = pickle::kNoNode) {
    facts_.root = root;
    facts_.protocol = 2;
    facts_.end = offset_ + 1;
    return facts_;
  }
  pickle::StreamFacts Stream(NodeId root = pickle::kNoNode) {
    pickle::StreamFacts s;
    s.pickles.push_back(Pickle(root));
    s.trailing_offset = offset_ + 1;
    return s;
  }

 private:
  NodeId Add(pickle::Node n) {
    if (n.kind == pickle::Kind::kStr || n.kind == pickle::Kind::kBytes) n.data_offset = offset_;
    ++offset_;
    facts_.graph.nodes.push_back(std::move(n));
    return static_cast<NodeId>(facts_.graph.nodes.size() - 1);
  }
  NodeId AddGlobal(pickle::GlobalRef ref) {
    pickle::Node n;
    n.kind = pickle::Kind::kGlobal;
    n.ref = static_cast<uint32_t>(facts_.graph.globals.size());
    facts_.graph.globals.push_back(std::move(ref));
    facts_.graph.nodes.push_back(std::move(n));
    return static_cast<NodeId>(facts_.graph.nodes.size() - 1);
  }
  NodeId Text(pickle::Kind kind, std::string s) {
    pickle::Node n;
    n.kind = kind;
    n.len = s.size();
    n.text = std::move(s);
    return Add(std::move(n));
  }
  NodeId Container(pickle::Kind kind, std::initializer_list<NodeId> items) {
    pickle::Node n;
    n.kind = kind;
    n.items.assign(items.begin(), items.end());
    return Add(std::move(n));
  }
  void Mutate(pickle::CallOp op, uint8_t opcode, NodeId target, NodeId args) {
    pickle::CallSite c;
    c.op = op;
    c.opcode = opcode;
    c.offset = offset_++;
    c.callee = target;
    c.args = args;
    if (target < facts_.graph.nodes.size()) {
      facts_.graph.nodes[target].mutations.push_back(
          static_cast<uint32_t>(facts_.graph.calls.size()));
    }
    facts_.graph.calls.push_back(c);
  }

  uint64_t offset_;
  pickle::PickleFacts facts_;
};

}  // namespace ckptscan::rules::testing

#endif  // CKPTSCAN_RULES_FACTS_BUILDER_FOR_TEST_H_
