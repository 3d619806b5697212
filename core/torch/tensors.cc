#include "core/torch/tensors.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/strings.h"

namespace ckptscan::torch {
namespace {

using pickle::CallOp;
using pickle::CallSite;
using pickle::GlobalRef;
using pickle::Graph;
using pickle::Kind;
using pickle::kNoNode;
using pickle::Node;
using pickle::NodeId;

struct NamedDType {
  std::string_view storage_class;
  DTypeInfo info;
};

// torch/storage.py _dtype_to_storage_type_map plus safetensors' names (safetensors src/tensor.rs
// Dtype).
constexpr NamedDType kStorageClasses[] = {
    {"DoubleStorage", {"float64", 8, "F64"}},
    {"FloatStorage", {"float32", 4, "F32"}},
    {"HalfStorage", {"float16", 2, "F16"}},
    {"BFloat16Storage", {"bfloat16", 2, "BF16"}},
    {"LongStorage", {"int64", 8, "I64"}},
    {"IntStorage", {"int32", 4, "I32"}},
    {"ShortStorage", {"int16", 2, "I16"}},
    {"CharStorage", {"int8", 1, "I8"}},
    {"ByteStorage", {"uint8", 1, "U8"}},
    {"BoolStorage", {"bool", 1, "BOOL"}},
    {"ComplexFloatStorage", {"complex64", 8, "C64"}},
    {"ComplexDoubleStorage", {"complex128", 16, ""}},
    {"QInt8Storage", {"qint8", 1, ""}},
    {"QUInt8Storage", {"quint8", 1, ""}},
    {"QInt32Storage", {"qint32", 4, ""}},
    {"QUInt4x2Storage", {"quint4x2", 1, "", 2}},
    {"QUInt2x4Storage", {"quint2x4", 1, "", 4}},
};

struct DTypeAlias {
  std::string_view name;
  std::string_view canonical;
};
// Attribute names of torch dtypes (torch.float is torch.float32, …) and the dtypes that only
// UntypedStorage + _rebuild_tensor_v3 carry.
constexpr DTypeAlias kAliases[] = {
    {"float", "float32"}, {"double", "float64"}, {"half", "float16"},     {"long", "int64"},
    {"int", "int32"},     {"short", "int16"},    {"cfloat", "complex64"}, {"cdouble", "complex128"},
};
constexpr DTypeInfo kExtraDTypes[] = {
    {"float8_e5m2", 1, "F8_E5M2"}, {"float8_e4m3fn", 1, "F8_E4M3"},
    {"uint16", 2, "U16"},          {"uint32", 4, "U32"},
    {"uint64", 8, "U64"},          {"complex32", 4, ""},
};

bool IsTorchModule(const GlobalRef& g) {
  return g.resolved_module == "torch" || g.resolved_module == "torch.cuda" ||
         g.resolved_module == "torch.storage";
}

const GlobalRef* GlobalOf(const Graph& g, NodeId id) {
  if (id == kNoNode || id >= g.nodes.size()) return nullptr;
  const Node& n = g.nodes[id];
  if (n.kind != Kind::kGlobal || n.ref >= g.globals.size()) return nullptr;
  return &g.globals[n.ref];
}

bool IsGlobal(const GlobalRef* g, std::string_view module, std::string_view name) {
  return g != nullptr && g->resolved_module == module && g->resolved_name == name;
}

const CallSite* CallOf(const Graph& g, NodeId id) {
  if (id == kNoNode || id >= g.nodes.size()) return nullptr;
  const Node& n = g.nodes[id];
  if (n.kind != Kind::kCall || n.ref >= g.calls.size()) return nullptr;
  return &g.calls[n.ref];
}

// The positional arguments of a call: the items of its args tuple.
const std::vector<NodeId>* ArgsOf(const Graph& g, const CallSite& c) {
  if (c.args == kNoNode || c.args >= g.nodes.size()) return nullptr;
  const Node& a = g.nodes[c.args];
  return a.kind == Kind::kTuple ? &a.items : nullptr;
}

bool AsUInt(const Graph& g, NodeId id, uint64_t* out) {
  if (id >= g.nodes.size()) return false;
  const Node& n = g.nodes[id];
  if (n.kind != Kind::kInt || !n.fits || n.i < 0 || n.i > absl::int128(INT64_MAX)) return false;
  *out = static_cast<uint64_t>(n.i);
  return true;
}

// A list, dict or set that a call took as an argument at offset `at` (a call copies it, or
// reads it then): whether the call saw what the graph holds. Items put in after `at`, items
// replaced (SETITEM on a list is a call on it) or a BUILD state mean it saw something else.
bool UnchangedSince(const Node& n, uint64_t at) {
  if (n.kind != Kind::kList && n.kind != Kind::kDict && n.kind != Kind::kSet) return true;
  return n.filled_at < at && n.mutations.empty() && n.states.empty();
}

// The ints of a tuple (or a list unchanged since `at`, when the call read it).
bool AsIntList(const Graph& g, NodeId id, uint64_t at, std::vector<int64_t>* out) {
  if (id >= g.nodes.size()) return false;
  const Node& n = g.nodes[id];
  if (n.kind != Kind::kTuple && n.kind != Kind::kList) return false;
  if (!UnchangedSince(n, at)) return false;
  out->clear();
  for (NodeId item : n.items) {
    uint64_t v;
    if (!AsUInt(g, item, &v)) return false;
    out->push_back(static_cast<int64_t>(v));
  }
  return true;
}

std::string Int128Text(absl::int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  absl::uint128 u = negative ? -absl::uint128(v) : absl::uint128(v);
  std::string digits;
  while (u != 0) {
    digits.push_back(static_cast<char>('0' + static_cast<int>(absl::Uint128Low64(u % 10))));
    u /= 10;
  }
  if (negative) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

// torch.torch_version.TorchVersion(s): a str subclass whose hash is str's and whose == finds it
// equal to s (torch/torch_version.py: a Version comparison, or str's when s is no version),
// built by REDUCE or NEWOBJ of the class with (s,), or copyreg._reconstructor(TorchVersion,
// str, s). Its str node, or nullptr for anything else.
const Node* TorchVersionText(const Graph& g, NodeId id) {
  const CallSite* c = CallOf(g, id);
  if (c == nullptr || !g.nodes[id].states.empty() || !g.nodes[id].mutations.empty()) {
    return nullptr;
  }
  const std::vector<NodeId>* args = ArgsOf(g, *c);
  const GlobalRef* f = GlobalOf(g, c->callee);
  NodeId text = kNoNode;
  if (IsGlobal(f, "torch.torch_version", "TorchVersion") && args != nullptr && args->size() == 1 &&
      (c->op == CallOp::kReduce || c->op == CallOp::kNewObj)) {
    text = (*args)[0];
  } else if (IsGlobal(f, "copyreg", "_reconstructor") && c->op == CallOp::kReduce &&
             args != nullptr && args->size() == 3 &&
             IsGlobal(GlobalOf(g, (*args)[0]), "torch.torch_version", "TorchVersion") &&
             IsGlobal(GlobalOf(g, (*args)[1]), "builtins", "str")) {
    text = (*args)[2];
  }
  if (text >= g.nodes.size() || g.nodes[text].kind != Kind::kStr) return nullptr;
  return &g.nodes[text];
}

// A dict key as Python's dict tells keys apart (hash, then ==): True == 1 == 1.0, False == 0 ==
// 0.0 == -0.0, 'w' == TorchVersion('w'); a NaN is equal only to itself (the same object).
struct KeyIdentity {
  enum class Type : uint8_t { kStr, kNumber, kFloat, kNone, kObject };
  Type type = Type::kNone;
  std::string_view text;    // kStr: the value (a view into the graph)
  absl::int128 number = 0;  // kNumber: bool, int and integral float, exactly
  uint64_t bits = 0;        // kFloat: the double's bits; kObject: the node

  bool operator==(const KeyIdentity& o) const {
    return type == o.type && text == o.text && number == o.number && bits == o.bits;
  }
  template <typename H>
  friend H AbslHashValue(H h, const KeyIdentity& k) {
    return H::combine(std::move(h), k.type, k.text, absl::Int128High64(k.number),
                      absl::Int128Low64(k.number), k.bits);
  }
};

// Python's identity of dict key `id`, or false (with `why`) for a key this model does not
// cover: a str longer than what the VM keeps (its tail is unknown), an int wider than 128 bits,
// bytes, tuples, objects.
bool ModelKey(const Graph& g, NodeId id, KeyIdentity* out, std::string* why) {
  if (id >= g.nodes.size()) {
    *why = "a key is missing";
    return false;
  }
  const Node& n = g.nodes[id];
  const Node* text = n.kind == Kind::kStr ? &n : TorchVersionText(g, id);
  if (text != nullptr) {
    if (text->truncated) {
      *why = absl::StrFormat("a key of %d bytes is longer than the %d the scan keeps", text->len,
                             text->text.size());
      return false;
    }
    *out = KeyIdentity{KeyIdentity::Type::kStr, text->text, 0, 0};
    return true;
  }
  switch (n.kind) {
    case Kind::kNone:
      *out = KeyIdentity{KeyIdentity::Type::kNone, {}, 0, 0};
      return true;
    case Kind::kBool:
      *out = KeyIdentity{KeyIdentity::Type::kNumber, {}, n.b ? 1 : 0, 0};
      return true;
    case Kind::kInt:
      if (!n.fits) {
        *why = "a key is an int wider than 128 bits";
        return false;
      }
      *out = KeyIdentity{KeyIdentity::Type::kNumber, {}, n.i, 0};
      return true;
    case Kind::kFloat: {
      const double f = n.f;
      if (std::isnan(f)) {
        *out = KeyIdentity{KeyIdentity::Type::kObject, {}, 0, id};
        return true;
      }
      // An integral float equals the int of the same value; within +-2^127 that int is an
      // int128 (a wider one is refused above, so nothing else can equal it).
      constexpr double kTwo127 = 170141183460469231731687303715884105728.0;
      if (std::isfinite(f) && std::trunc(f) == f && f > -kTwo127 && f < kTwo127) {
        *out = KeyIdentity{KeyIdentity::Type::kNumber, {}, absl::int128(f), 0};
        return true;
      }
      *out = KeyIdentity{KeyIdentity::Type::kFloat, {}, 0, std::bit_cast<uint64_t>(f)};
      return true;
    }
    default:
      *why = absl::StrCat("a key is a ", pickle::KindName(n.kind));
      return false;
  }
}

// str(key) of a key ModelKey covers; for any other, a summary (the tensors under it are not
// converted, so it is only shown).
std::string KeyName(const Graph& g, NodeId key) {
  if (key >= g.nodes.size()) return "?";
  const Node& n = g.nodes[key];
  if (const Node* text = TorchVersionText(g, key); text != nullptr) return text->text;
  switch (n.kind) {
    case Kind::kStr:
      return n.text;
    case Kind::kInt:
      return n.fits ? Int128Text(n.i) : n.text;
    case Kind::kBool:
      return n.b ? "True" : "False";
    case Kind::kNone:
      return "None";
    case Kind::kFloat:
      return PythonFloatRepr(n.f);
    default:
      return pickle::Summarize(g, key, 64);
  }
}

// Whether setattr(tensor, name, value) leaves the tensor's data as it was: a name that
// torch.Tensor and torch.nn.Parameter do not define lands in the instance __dict__.
constexpr std::string_view kTensorAttributes[] = {
#include "core/torch/tensor_attributes.inc"
};

static_assert(std::is_sorted(std::begin(kTensorAttributes), std::end(kTensorAttributes)));

bool IsInertStateName(const Node& name) {
  if (name.kind != Kind::kStr || name.truncated) return false;
  const std::string_view s = name.text;
  if (s.size() >= 4 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__") return false;
  return !std::binary_search(std::begin(kTensorAttributes), std::end(kTensorAttributes), s);
}

// Why torch's setattr of `state` on a rebuilt tensor (torch._utils._set_obj_state; torch
// 1.13's _rebuild_from_type_v2 for a Parameter) would change the tensor or fail, or "" when
// every name is inert: None, a dict of str names, or a (dict, slots) pair of such dicts or
// None.
std::string StateProblem(const Graph& g, NodeId state) {
  if (state >= g.nodes.size()) return "its state is missing";
  const Node& s = g.nodes[state];
  if (s.kind == Kind::kNone) return "";
  std::vector<NodeId> dicts;
  if (s.kind == Kind::kDict) {
    dicts.push_back(state);
  } else if (s.kind == Kind::kTuple && s.items.size() == 2) {
    dicts = s.items;
  } else {
    return "its state is neither a dict nor a (dict, slots) pair";
  }
  for (NodeId d : dicts) {
    const Node& n = g.nodes[d];
    if (n.kind == Kind::kNone) continue;
    if (n.kind != Kind::kDict) return "its state is neither a dict nor a (dict, slots) pair";
    for (size_t k = 0; k < n.items.size(); k += 2) {
      const Node& name = g.nodes[n.items[k]];
      if (!IsInertStateName(name)) {
        return name.kind == Kind::kStr
                   ? absl::StrCat("its state sets '", base::AbslView(base::Escaped(name.text)),
                                  "', an attribute of torch.Tensor: torch.load's setattr of it "
                                  "changes or replaces the tensor")
                   : "its state names an attribute by something other than a str";
      }
    }
  }
  return "";
}

// Gradients: torch.load sets requires_grad, which only floating point and complex tensors take
// (any other dtype fails to load).
bool CanRequireGrad(const DTypeInfo* d) {
  if (d == nullptr) return false;
  const std::string_view n = d->name;
  return n.substr(0, 5) == "float" || n == "bfloat16" || n.substr(0, 7) == "complex";
}

// What a value that is not walked into is, for the list of values a conversion leaves out.
OtherValue DescribeOther(const Graph& g, NodeId id, bool container, std::string name) {
  OtherValue v;
  v.name = std::move(name);
  const Node& n = g.nodes[id];
  if (const GlobalRef* f = GlobalOf(g, id); f != nullptr) {
    v.type = absl::StrCat("global ", base::AbslView(f->resolved_module), ".",
                          base::AbslView(f->resolved_name));
    v.offset = f->offset;
    return v;
  }
  if (const CallSite* c = CallOf(g, id); c != nullptr) {
    const GlobalRef* f = GlobalOf(g, c->callee);
    v.type = f == nullptr ? "object"
                          : absl::StrCat(base::AbslView(f->resolved_module), ".",
                                         base::AbslView(f->resolved_name));
    if (container) v.type += " (empty)";
    v.offset = c->offset;
    return v;
  }
  switch (n.kind) {
    case Kind::kNone:
      v.type = "None";
      break;
    case Kind::kBool:
      v.type = "bool";
      break;
    case Kind::kInt:
      v.type = "int";
      break;
    case Kind::kFloat:
      v.type = "float";
      break;
    case Kind::kStr:
      v.type = "str";
      break;
    case Kind::kBytes:
      v.type = "bytes";
      break;
    case Kind::kByteArray:
      v.type = "bytearray";
      break;
    case Kind::kTuple:
      v.type = "tuple (empty)";
      break;
    case Kind::kList:
      v.type = "list (empty)";
      break;
    case Kind::kDict:
      v.type = "dict (empty)";
      break;
    case Kind::kSet:
      v.type = "set";
      break;
    case Kind::kFrozenSet:
      v.type = "frozenset";
      break;
    case Kind::kPersistent:
      v.type = "persistent id";
      break;
    default:
      v.type = pickle::KindName(n.kind);
      break;
  }
  return v;
}
class Extractor {
 public:
  Extractor(const pickle::PickleFacts& p, const KeyedObjects* keyed, PersistentIds ids)
      : p_(p), g_(p.graph), keyed_(keyed), ids_(ids) {}

  TensorExtraction Run() && {
    if (keyed_ != nullptr) {
      out_.storages = keyed_->storages;
      if (p_.root != kNoNode) Walk();
      // torch's persistent_load runs for every persistent id, reached or not.
      for (NodeId id = 0; id < g_.nodes.size(); ++id) {
        if (g_.nodes[id].kind != Kind::kPersistent) continue;
        std::string why;
        if (Resolve(id, &why) == nullptr && !why.empty()) out_.problems.push_back(why);
      }
      return std::move(out_);
    }
    if (ids_ == PersistentIds::kLegacy) ResolveLegacyViews();
    if (p_.root != kNoNode) Walk();
    // Storages referenced anywhere else too (inside sparse or subclass tensors, or objects the
    // walk does not enter): torch loads every one of them.
    for (NodeId id = 0; id < g_.nodes.size(); ++id) {
      if (g_.nodes[id].kind == Kind::kPersistent) (void)Storage(id);
    }
    RefuseChangedStorages();
    return std::move(out_);
  }

 private:
  // A step of a key path: a dict key (its first key object) or a list or tuple index.
  struct PathStep {
    int32_t parent;  // -1: the root
    NodeId key;      // kNoNode: an index
    uint64_t index;
  };
  struct Frame {
    NodeId node;
    int32_t path;      // index into paths_, -1 for the root
    uint32_t problem;  // index into frame_problems_, 0 for none
    bool exit;         // leaving `node` (it is no longer on the current path)
  };

  // ---- dicts: their items as Python holds them ----

  struct DictView {
    std::vector<std::pair<NodeId, NodeId>> items;  // (first key object, last value), in order
    std::string problem;                           // not "": the keys or the items are not modelled
  };

  // A dict, OrderedDict, defaultdict or Counter: its items as Python's dict keeps them. The
  // key/value pairs are applied in order as SETITEM applies them: a key equal to one before it
  // (ModelKey) replaces that value and keeps the first key object, which names it.
  DictView DictItems(NodeId id) {
    DictView v;
    std::vector<NodeId> flat;
    const Node& n = g_.nodes[id];
    if (n.kind == Kind::kDict) {
      flat = n.items;
      if (!n.states.empty() || !n.mutations.empty()) v.problem = "a dict with a BUILD state";
    } else if (!CallItems(id, &flat, &v.problem)) {
      // Not modelled: every value inside is still walked, so that its tensors are listed under
      // the problem (named by position).
      const CallSite* c = CallOf(g_, id);
      const std::vector<NodeId>* args = c != nullptr ? ArgsOf(g_, *c) : nullptr;
      if (args != nullptr) {
        for (NodeId a : *args) v.items.emplace_back(kNoNode, a);
      }
      for (uint32_t m : n.mutations) {
        if (m >= g_.calls.size() || g_.calls[m].op == CallOp::kBuild ||
            g_.calls[m].args >= g_.nodes.size()) {
          continue;
        }
        for (NodeId x : g_.nodes[g_.calls[m].args].items) v.items.emplace_back(kNoNode, x);
      }
      return v;
    }
    absl::flat_hash_map<KeyIdentity, size_t> index;  // key -> position in v.items
    for (size_t k = 0; k + 1 < flat.size(); k += 2) {
      KeyIdentity key;
      std::string why;
      if (!ModelKey(g_, flat[k], &key, &why)) {
        // Kept apart: its tensors are listed, under this problem.
        if (v.problem.empty()) {
          v.problem = absl::StrCat(why,
                                   ", which the conversion does not model as Python's dict "
                                   "compares and names keys");
        }
        v.items.emplace_back(flat[k], flat[k + 1]);
        continue;
      }
      auto [it, inserted] = index.emplace(key, v.items.size());
      if (inserted) {
        v.items.emplace_back(flat[k], flat[k + 1]);
      } else {
        v.items[it->second].second = flat[k + 1];
      }
    }
    return v;
  }

  // The key/value sequence of an OrderedDict, defaultdict or Counter call: its argument's
  // items (copied when the call ran), then the SETITEMS applied to it. False with `why` when
  // it is built another way.
  bool CallItems(NodeId id, std::vector<NodeId>* flat, std::string* why) {
    const Node& n = g_.nodes[id];
    const CallSite* c = CallOf(g_, id);
    const GlobalRef* f = c != nullptr ? GlobalOf(g_, c->callee) : nullptr;
    const std::vector<NodeId>* args = c != nullptr ? ArgsOf(g_, *c) : nullptr;
    const std::string type = f != nullptr ? absl::StrCat(base::AbslView(f->resolved_module), ".",
                                                         base::AbslView(f->resolved_name))
                                          : "?";
    if (c == nullptr || args == nullptr || c->op != CallOp::kReduce) {
      *why = absl::StrCat(type, " not built by a call with an argument tuple");
      return false;
    }
    auto changed = [&] {
      *why = absl::StrCat("the argument of ", type,
                          " changes after the call copied it: the dict holds what it was then");
      return false;
    };
    if (IsGlobal(f, "collections", "OrderedDict")) {
      // OrderedDict(iterable): each item unpacks into (key, value).
      if (args->size() > 1) {
        *why = "OrderedDict called with more than one argument";
        return false;
      }
      if (args->size() == 1) {
        const Node& a = g_.nodes[(*args)[0]];
        if (a.kind != Kind::kList && a.kind != Kind::kTuple) {
          *why = "OrderedDict of something else than a list or tuple of pairs";
          return false;
        }
        if (!UnchangedSince(a, c->offset)) return changed();
        for (NodeId pair : a.items) {
          const Node& p = g_.nodes[pair];
          if ((p.kind != Kind::kTuple && p.kind != Kind::kList) || p.items.size() != 2) {
            *why = "OrderedDict of an item that is not a 2-item tuple or list";
            return false;
          }
          if (!UnchangedSince(p, c->offset)) return changed();
          flat->push_back(p.items[0]);
          flat->push_back(p.items[1]);
        }
      }
      // BUILD sets instance attributes (state_dict()._metadata), not items; a name that shadows
      // a method (items, keys) would change what iterating it gives.
      for (NodeId s : n.states) {
        const Node& st = g_.nodes[s];
        if (st.kind != Kind::kDict) {
          *why = "an OrderedDict with a BUILD state that is not a dict";
          return false;
        }
        for (size_t k = 0; k < st.items.size(); k += 2) {
          const Node& name = g_.nodes[st.items[k]];
          if (name.kind != Kind::kStr || name.text != "_metadata") {
            *why = "an OrderedDict whose BUILD state sets another attribute than _metadata";
            return false;
          }
        }
      }
    } else if (IsGlobal(f, "collections", "Counter")) {
      // Counter(mapping) copies a dict's items into an empty Counter (dict.update).
      if (args->size() > 1 || (args->size() == 1 && g_.nodes[(*args)[0]].kind != Kind::kDict)) {
        *why = "Counter of something else than a dict";
        return false;
      }
      if (args->size() == 1) {
        const Node& d = g_.nodes[(*args)[0]];
        if (!UnchangedSince(d, c->offset)) return changed();
        *flat = d.items;
      }
    } else if (IsGlobal(f, "collections", "defaultdict")) {
      if (args->size() > 1) {  // defaultdict(factory, mapping) copies the mapping
        *why = "defaultdict called with more than its factory";
        return false;
      }
    } else {
      *why = absl::StrCat(type, " is not a dict type the conversion models");
      return false;
    }
    if (!n.states.empty() && !IsGlobal(f, "collections", "OrderedDict")) {
      *why = absl::StrCat(type, " with a BUILD state");
      return false;
    }
    for (uint32_t m : n.mutations) {
      if (m < g_.calls.size() && g_.calls[m].op == CallOp::kBuild) continue;  // n.states
      if (m >= g_.calls.size() || g_.calls[m].op != CallOp::kSetItems ||
          g_.calls[m].args >= g_.nodes.size()) {
        *why = absl::StrCat(type, " changed by something else than SETITEMS");
        return false;
      }
      const std::vector<NodeId>& items = g_.nodes[g_.calls[m].args].items;
      flat->insert(flat->end(), items.begin(), items.end());
    }
    return true;
  }

  bool IsDictLike(NodeId id) {
    const Node& n = g_.nodes[id];
    if (n.kind == Kind::kDict) return true;
    const CallSite* c = CallOf(g_, id);
    if (c == nullptr) return false;
    const GlobalRef* f = GlobalOf(g_, c->callee);
    return IsGlobal(f, "collections", "OrderedDict") || IsGlobal(f, "collections", "defaultdict") ||
           IsGlobal(f, "collections", "Counter");
  }

  // ---- the walk ----

  // Every path from the root, as torch.load's caller walks the result: a container reached by
  // two paths is walked under each (its tensors have both names), one on the current path
  // again holds itself (its tensors' names are endless: refused). Explicit stacks only.
  void Walk() {
    std::vector<Frame> stack;
    stack.push_back({p_.root, -1, 0, false});
    absl::flat_hash_set<NodeId> on_path;
    uint64_t steps = 0;
    const uint64_t max_steps = g_.nodes.size() + kMaxRewalkSteps;
    while (!stack.empty() && !stopped_) {
      Frame f = stack.back();
      stack.pop_back();
      if (f.exit) {
        on_path.erase(f.node);
        continue;
      }
      if (++steps > max_steps) {
        out_.problems.push_back(
            absl::StrFormat("the value graph has more key paths than a walk of %d steps reaches "
                            "(kMaxRewalkSteps: containers shared by many paths)",
                            max_steps));
        return;
      }
      if (f.node >= g_.nodes.size()) continue;
      if (TryTensor(f.node, f.path, f.problem)) continue;
      const Node& n = g_.nodes[f.node];
      const bool dict = IsDictLike(f.node);
      const bool seq = n.kind == Kind::kList || n.kind == Kind::kTuple;
      if (!dict && !seq) {
        Other(f.node, /*container=*/false, f.path);
        continue;
      }
      if (on_path.contains(f.node)) {
        Endless(f);
        continue;
      }
      uint32_t problem = f.problem;
      auto add_problem = [&](std::string why) {
        if (problem != 0) return;
        frame_problems_.push_back(absl::StrCat("its name is not certain: ", why));
        problem = static_cast<uint32_t>(frame_problems_.size() - 1);
      };
      const size_t first = stack.size();
      stack.push_back({f.node, f.path, 0, true});
      if (dict) {
        DictView v = DictItems(f.node);
        if (!v.problem.empty()) add_problem(std::move(v.problem));
        for (size_t i = 0; i < v.items.size(); ++i) {
          const auto& [key, value] = v.items[i];
          paths_.push_back({f.path, key, i});
          stack.push_back({value, static_cast<int32_t>(paths_.size() - 1), problem, false});
        }
      } else {
        if (!n.mutations.empty() || !n.states.empty()) {
          add_problem("a list changed by SETITEM or BUILD");
        }
        for (size_t i = 0; i < n.items.size(); ++i) {
          paths_.push_back({f.path, kNoNode, i});
          stack.push_back({n.items[i], static_cast<int32_t>(paths_.size() - 1), problem, false});
        }
      }
      if (stack.size() == first + 1) {
        stack.pop_back();
        Other(f.node, /*container=*/true, f.path);
        continue;
      }
      on_path.insert(f.node);
      std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(first + 1), stack.end());
    }
  }

  // The dotted name of `path`, or false when the names would pass kMaxTensorNameBytes (the
  // walk stops with a problem).
  bool Name(int32_t path, std::string* out) {
    out->clear();
    std::vector<int32_t> chain;
    for (int32_t p = path; p >= 0; p = paths_[static_cast<size_t>(p)].parent) chain.push_back(p);
    for (size_t i = chain.size(); i-- > 0;) {
      const PathStep& s = paths_[static_cast<size_t>(chain[i])];
      const std::string part = s.key == kNoNode ? absl::StrCat(s.index) : KeyName(g_, s.key);
      if (part.size() + 1 > kMaxTensorNameBytes - name_bytes_ - out->size()) {
        if (!stopped_) {
          out_.problems.push_back(absl::StrFormat(
              "tensor names take more than %d bytes (kMaxTensorNameBytes)", kMaxTensorNameBytes));
        }
        stopped_ = true;
        return false;
      }
      if (!out->empty() || i + 1 < chain.size()) out->push_back('.');
      out->append(part);
    }
    name_bytes_ += out->size();
    return true;
  }

  // A container on the current path again: it holds itself, so every tensor inside has
  // endless names. Listed as a tensor that cannot be converted, when there is a tensor inside.
  void Endless(const Frame& f) {
    if (!HoldsTensor(f.node)) return;
    TensorFact t;
    t.kind = TensorFact::Kind::kOther;
    t.node = f.node;
    if (!Name(f.path, &t.name)) return;
    t.problem =
        "a container here holds itself: the tensors inside it have endless names, which no "
        "conversion writes";
    out_.tensors.push_back(std::move(t));
  }

  // Whether a tensor is reachable from container `id` through containers (each looked at once).
  bool HoldsTensor(NodeId id) {
    std::vector<NodeId> stack = {id};
    absl::flat_hash_set<NodeId> seen = {id};
    while (!stack.empty()) {
      const NodeId x = stack.back();
      stack.pop_back();
      if (IsTensorCall(x) || (keyed_ != nullptr && g_.nodes[x].kind == Kind::kPersistent)) {
        return true;
      }
      const Node& n = g_.nodes[x];
      std::vector<NodeId> next = n.items;
      if (IsDictLike(x) && n.kind != Kind::kDict) {
        std::string unused;
        (void)CallItems(x, &next, &unused);
      }
      for (NodeId c : next) {
        if (c < g_.nodes.size() && seen.insert(c).second) stack.push_back(c);
      }
    }
    return false;
  }

  void Other(NodeId id, bool container, int32_t path) {
    ++out_.other_values.total;
    if (out_.other_values.listed.size() >= kMaxListedOtherValues) return;
    std::string name;
    if (!Name(path, &name)) return;
    out_.other_values.listed.push_back(DescribeOther(g_, id, container, std::move(name)));
  }

  // ---- persistent ids and storages ----

  uint64_t PidOffset(NodeId id) const {
    return g_.nodes[id].ref < g_.calls.size() ? g_.calls[g_.nodes[id].ref].offset : 0;
  }

  // int(pid) for the pid kinds we model exactly: int, bool, and a str of ASCII decimal digits
  // (optional surrounding whitespace, sign, single underscores between digits).
  static bool PlainKey(const Node& pid, int64_t* key) {
    if (pid.kind == Kind::kBool) {
      *key = pid.b ? 1 : 0;
      return true;
    }
    if (pid.kind == Kind::kInt) {
      if (!pid.fits || pid.i < absl::int128(INT64_MIN) || pid.i > absl::int128(INT64_MAX)) {
        return false;
      }
      *key = static_cast<int64_t>(pid.i);
      return true;
    }
    if (pid.kind != Kind::kStr || pid.truncated) return false;
    std::string_view s = pid.text;
    auto space = [](char c) {
      return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
    };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    bool negative = false;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
      negative = s[0] == '-';
      s.remove_prefix(1);
    }
    if (s.empty() || s.front() == '_' || s.back() == '_') return false;
    absl::int128 v = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '_') {
        if (s[i + 1] == '_') return false;
        continue;
      }
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
      if (v > absl::int128(INT64_MAX) + 1) return false;
    }
    if (negative) v = -v;
    if (v < absl::int128(INT64_MIN) || v > absl::int128(INT64_MAX)) return false;
    *key = static_cast<int64_t>(v);
    return true;
  }

  // Keyed mode: what persistent id `id` names; nullptr for a module-class tuple (no `why`) or
  // when it cannot be resolved (`why` says so, as torch would fail).
  const KeyedObjects::Entry* Resolve(NodeId id, std::string* why) {
    const Node& n = g_.nodes[id];
    const uint64_t at = PidOffset(id);
    if (n.items.empty() || n.items[0] >= g_.nodes.size()) {
      *why = absl::StrFormat("persistent id at offset %d has no value", at);
      return nullptr;
    }
    const Node& pid = g_.nodes[n.items[0]];
    if (pid.kind == Kind::kTuple) return nullptr;  // (module class, source file, source)
    int64_t key;
    if (!PlainKey(pid, &key)) {
      *why = absl::StrFormat(
          "persistent id at offset %d is not a key we can look up exactly (int or decimal str)",
          at);
      return nullptr;
    }
    auto it = keyed_->by_key.find(key);
    if (it == keyed_->by_key.end()) {
      *why = absl::StrFormat(
          "persistent id at offset %d names key %d, which no tensor or storage has (torch: "
          "KeyError)",
          at, key);
      return nullptr;
    }
    return &it->second;
  }

  // The ('storage', type, key, location, numel[, view]) tuple of persistent id `id`, or nullptr
  // when it is not one (a problem says why).
  const std::vector<NodeId>* PidTuple(NodeId id) {
    if (id >= g_.nodes.size() || g_.nodes[id].kind != Kind::kPersistent ||
        g_.nodes[id].items.empty()) {
      return nullptr;
    }
    const NodeId pid = g_.nodes[id].items[0];
    const uint64_t at = PidOffset(id);
    if (pid >= g_.nodes.size() || g_.nodes[pid].kind != Kind::kTuple) {
      out_.problems.push_back(absl::StrFormat("persistent id at offset %d is not a tuple", at));
      return nullptr;
    }
    const std::vector<NodeId>& t = g_.nodes[pid].items;
    // torch.load's zip path unpacks exactly (type, key, location, numel) after 'storage'; its
    // legacy path takes the view too (torch/serialization.py, persistent_load).
    const size_t want = ids_ == PersistentIds::kLegacy ? 6 : 5;
    if (t.size() != want || t[0] >= g_.nodes.size() || g_.nodes[t[0]].kind != Kind::kStr ||
        g_.nodes[t[0]].text != "storage") {
      out_.problems.push_back(absl::StrFormat(
          "persistent id at offset %d is not ('storage', type, key, location, numel%s)", at,
          ids_ == PersistentIds::kLegacy ? ", view" : ""));
      return nullptr;
    }
    return &t;
  }

  // Legacy checkpoints: torch's persistent_load keeps storages and storage views in one dict,
  // by key (torch/serialization.py _legacy_load, 1.13 and 2.6): a root key makes the storage
  // once; a view key (view_key, offset, size) makes a slice of its root the first time, and any
  // later persistent id with that key gets that same object back, whatever offset and size it
  // names; a view key equal to a root key gets the root. Resolved here in the order torch
  // calls persistent_load (the order of the ids in the stream), before the walk.
  struct LegacyView {
    std::string root;     // the root storage's key
    uint64_t offset = 0;  // elements of `dtype`
    uint64_t size = 0;
    bool whole = true;  // the root itself (no slice)
    const DTypeInfo* dtype = nullptr;
    std::string problem;
    NodeId maker = kNoNode;  // the first persistent id of the root key
  };
  void ResolveLegacyViews() {
    struct Cached {
      LegacyView view;
      bool is_view = false;
    };
    absl::flat_hash_map<std::string, Cached> objects;
    absl::flat_hash_map<std::string, uint64_t> numel_of;  // root key -> numel (first seen)
    for (NodeId id = 0; id < g_.nodes.size(); ++id) {
      if (g_.nodes[id].kind != Kind::kPersistent || g_.nodes[id].items.empty()) continue;
      const NodeId pid = g_.nodes[id].items[0];
      if (pid >= g_.nodes.size() || g_.nodes[pid].kind != Kind::kTuple) continue;
      const std::vector<NodeId>& t = g_.nodes[pid].items;
      if (t.size() != 6 || g_.nodes[t[2]].kind != Kind::kStr || g_.nodes[t[2]].truncated) {
        continue;  // Storage() reports it
      }
      LegacyView& r = legacy_[id];
      const GlobalRef* type = GlobalOf(g_, t[1]);
      const DTypeInfo* dtype = type != nullptr && IsTorchModule(*type)
                                   ? DTypeFromStorageClass(type->resolved_name)
                                   : nullptr;
      uint64_t numel = 0;
      const std::string& key = g_.nodes[t[2]].text;
      if (dtype == nullptr || !AsUInt(g_, t[4], &numel)) continue;  // Storage() reports it
      auto root = objects.find(key);
      if (root == objects.end()) {
        root = objects.emplace(key, Cached{LegacyView{key, 0, numel, true, dtype, "", id}, false})
                   .first;
        numel_of.emplace(key, numel);
      } else if (root->second.is_view) {
        r.problem = absl::StrFormat(
            "storage key '%s' is the key of a storage view made before it: torch.load takes "
            "that view for the storage",
            base::AbslView(base::Escaped(key)));
        continue;
      }
      r = root->second.view;
      const Node& v = g_.nodes[t[5]];
      if (v.kind == Kind::kNone) continue;
      uint64_t off = 0, size = 0;
      if (v.kind != Kind::kTuple || v.items.size() != 3 ||
          g_.nodes[v.items[0]].kind != Kind::kStr || g_.nodes[v.items[0]].truncated ||
          !AsUInt(g_, v.items[1], &off) || !AsUInt(g_, v.items[2], &size)) {
        r.problem = "a storage view that is not (str key, offset, size)";
        continue;
      }
      const std::string& view_key = g_.nodes[v.items[0]].text;
      auto cached = objects.find(view_key);
      if (cached != objects.end()) {
        r = cached->second.view;  // the object made first, whatever this id says
        if (r.dtype != dtype) {
          r.problem = absl::StrFormat(
              "storage view key '%s' is reused for another storage type: torch.load returns "
              "the view it made first",
              base::AbslView(base::Escaped(view_key)));
        }
        continue;
      }
      const uint64_t root_numel = numel_of[key];
      if (off > root_numel || size > root_numel - off) {
        r.problem = "a storage view past the end of its storage";
        continue;
      }
      LegacyView made{key, off, size, false, dtype, "", root->second.view.maker};
      objects.emplace(view_key, Cached{made, true});
      r = made;
    }
  }

  // A tensor's storage: its index in out_.storages, and where in it the storage object the
  // rebuild function gets begins and how many elements of its dtype it has.
  struct StorageUse {
    int32_t index = -1;
    uint64_t offset = 0;
    bool view = false;
    uint64_t view_numel = 0;
  };

  // The storage persistent id `id` names: its root storage (recorded once per key), and in a
  // legacy file the view torch's cache gives for it. Index -1 with a problem when it cannot be
  // described.
  StorageUse Storage(NodeId id) {
    StorageUse use;
    use.index = RootStorage(id);
    if (use.index < 0 || keyed_ != nullptr || ids_ != PersistentIds::kLegacy) return use;
    const uint64_t at = PidOffset(id);
    auto it = legacy_.find(id);
    if (it == legacy_.end() || !it->second.problem.empty()) {
      out_.problems.push_back(
          absl::StrFormat("storage reference at offset %d: %s", at,
                          it == legacy_.end() ? std::string("malformed")
                                              : base::StdView(base::Escaped(it->second.problem))));
      use.index = -1;
      return use;
    }
    const LegacyView& v = it->second;
    if (v.maker != id) use.index = RootStorage(v.maker);  // the object torch made for the key
    use.offset = v.offset;
    use.view = !v.whole;
    use.view_numel = v.size;
    return use;
  }

  // The index in out_.storages of the storage that persistent id `id` names by its own key
  // (recorded once per key), or -1 with a problem.
  int32_t RootStorage(NodeId id) {
    if (id >= g_.nodes.size() || g_.nodes[id].kind != Kind::kPersistent ||
        g_.nodes[id].items.empty()) {
      return -1;
    }
    const uint64_t at = PidOffset(id);
    if (keyed_ != nullptr) {
      std::string why;
      const KeyedObjects::Entry* e = Resolve(id, &why);
      if (e == nullptr || e->tensor) {
        out_.problems.push_back(
            absl::StrFormat("persistent id at offset %d does not name a storage", at));
        return -1;
      }
      return static_cast<int32_t>(e->index);
    }
    const std::vector<NodeId>* pid = PidTuple(id);
    if (pid == nullptr) return -1;
    const std::vector<NodeId>& t = *pid;
    const GlobalRef* type = GlobalOf(g_, t[1]);
    StorageRef s;
    s.pid_offset = at;
    if (type != nullptr && IsTorchModule(*type) && type->resolved_name == "UntypedStorage") {
      s.untyped = true;
    } else if (type != nullptr && IsTorchModule(*type)) {
      s.dtype = DTypeFromStorageClass(type->resolved_name);
    }
    if (!s.untyped && s.dtype == nullptr) {
      out_.problems.push_back(absl::StrFormat("unknown storage type at offset %d", at));
      return -1;
    }
    if (t[2] >= g_.nodes.size() || g_.nodes[t[2]].kind != Kind::kStr || g_.nodes[t[2]].truncated ||
        t[3] >= g_.nodes.size() || g_.nodes[t[3]].kind != Kind::kStr ||
        !AsUInt(g_, t[4], &s.numel)) {
      out_.problems.push_back(absl::StrFormat("malformed storage reference at offset %d", at));
      return -1;
    }
    s.key = g_.nodes[t[2]].text;
    s.location = g_.nodes[t[3]].text;
    auto [it, inserted] = storage_index_.emplace(s.key, static_cast<int32_t>(out_.storages.size()));
    if (!inserted) {
      const StorageRef& o = out_.storages[static_cast<size_t>(it->second)];
      if (o.dtype != s.dtype || o.numel != s.numel || o.untyped != s.untyped) {
        out_.problems.push_back(absl::StrFormat(
            "storage '%s' is referenced with two different types or sizes (offset %d)",
            base::AbslView(s.key), at));
        return -1;
      }
      return it->second;
    }
    out_.storages.push_back(std::move(s));
    return it->second;
  }

  // ---- tensors ----

  // Whether `id` is the result of a call that makes a tensor (a rebuild function, Parameter).
  bool IsTensorCall(NodeId id) {
    const CallSite* c = CallOf(g_, id);
    const GlobalRef* f = c != nullptr ? GlobalOf(g_, c->callee) : nullptr;
    if (f == nullptr) return false;
    return (f->resolved_module == "torch._utils" && f->resolved_name.rfind("_rebuild", 0) == 0) ||
           IsGlobal(f, "torch._tensor", "_rebuild_from_type_v2") ||
           IsGlobal(f, "torch.nn.parameter", "Parameter");
  }

  // If `id` is a tensor rebuild call (or, keyed, a persistent id), records it under `path`
  // (with `problem`, when the path's names are not certain) and returns true.
  bool TryTensor(NodeId id, int32_t path, uint32_t problem) {
    TensorFact t;
    if (keyed_ != nullptr && g_.nodes[id].kind == Kind::kPersistent) {
      std::string unused;  // unresolvable ids are reported once, by Run
      const KeyedObjects::Entry* e = Resolve(id, &unused);
      if (e == nullptr || !e->tensor) return true;  // a storage or a module class
      t = keyed_->tensors[e->index];
    } else {
      const CallSite* c = CallOf(g_, id);
      if (c == nullptr || (c->op != CallOp::kReduce && c->op != CallOp::kNewObj)) return false;
      const GlobalRef* f = GlobalOf(g_, c->callee);
      if (f == nullptr) return false;
      t.offset = c->offset;
      if (!Describe(*c, *f, &t)) return false;
      if (t.problem.empty()) t.problem = ChangedObject(id);
      if (t.problem.empty() && t.requires_grad && t.kind == TensorFact::Kind::kDense &&
          !CanRequireGrad(t.dtype)) {
        t.problem =
            "it requires grad, which only floating point and complex tensors can "
            "(torch.load fails on it)";
      }
    }
    t.node = id;
    if (!Name(path, &t.name)) return true;
    for (size_t k = 0; k < t.qchannel.size(); ++k) {
      t.qchannel[k].name = absl::StrCat(t.name, k == 0 ? ".scale" : ".zero_point");
    }
    if (problem != 0 && t.problem.empty()) t.problem = frame_problems_[problem];
    out_.tensors.push_back(std::move(t));
    return true;
  }

  // Fills `t` from a call that makes a tensor; false when `f` makes none.
  bool Describe(const CallSite& c, const GlobalRef& f, TensorFact* t) {
    const std::vector<NodeId>* args = ArgsOf(g_, c);
    auto problem = [&](std::string why) {
      t->kind = TensorFact::Kind::kOther;
      t->problem = std::move(why);
      return true;
    };
    if (IsGlobal(&f, "torch.nn.parameter", "Parameter")) {
      // Parameter(data=None, requires_grad=True): NEWOBJ (torch's weights_only loader) or a
      // call; no data is torch.empty(0), which has no storage to convert.
      t->parameter = true;
      if (args == nullptr || args->empty() || args->size() > 2) {
        return problem("Parameter without its data");
      }
      if (!Data((*args)[0], t)) return true;
      t->requires_grad = true;
      if (args->size() == 2) {
        const Node& rg = g_.nodes[(*args)[1]];
        if (rg.kind != Kind::kBool) return problem("Parameter's requires_grad is not a bool");
        t->requires_grad = rg.b;
      }
      // Tensor.__setstate__ of a (requires_grad, _, backward_hooks) state sets only those.
      for (NodeId s : g_.nodes[c.result].states) {
        const Node& st = g_.nodes[s];
        if (st.kind != Kind::kTuple || st.items.size() != 3 ||
            g_.nodes[st.items[0]].kind != Kind::kBool) {
          return problem("Parameter with a BUILD state other than (requires_grad, _, hooks)");
        }
        t->requires_grad = g_.nodes[st.items[0]].b;
      }
      return true;
    }
    if (c.op != CallOp::kReduce) {
      if (f.resolved_module == "torch._utils" ||
          IsGlobal(&f, "torch._tensor", "_rebuild_from_type_v2")) {
        return problem(absl::StrCat(base::AbslView(f.resolved_name), " made by NEWOBJ"));
      }
      return false;
    }
    if (IsGlobal(&f, "torch._tensor", "_rebuild_from_type_v2")) {
      // (func, new_type, args, state): func(*args), retyped, then its state set with setattr.
      if (args == nullptr || args->size() != 4) return problem("malformed _rebuild_from_type_v2");
      const GlobalRef* inner = GlobalOf(g_, (*args)[0]);
      const GlobalRef* type = GlobalOf(g_, (*args)[1]);
      const NodeId inner_args = (*args)[2];
      if (inner == nullptr || inner_args >= g_.nodes.size() ||
          g_.nodes[inner_args].kind != Kind::kTuple) {
        return problem("malformed _rebuild_from_type_v2");
      }
      const bool ok = Rebuild(*inner, &g_.nodes[inner_args].items, c.offset, t);
      if (!ok && t->problem.empty()) t->problem = "_rebuild_from_type_v2 of no tensor";
      if (IsGlobal(type, "torch.nn.parameter", "Parameter")) t->parameter = true;
      if (t->problem.empty() && !IsGlobal(type, "torch", "Tensor") && !t->parameter) {
        t->problem = "a tensor subclass: " +
                     (type ? type->resolved_module + "." + type->resolved_name : std::string("?"));
      }
      if (t->problem.empty()) t->problem = StateProblem(g_, (*args)[3]);
      return true;
    }
    if (f.resolved_module != "torch._utils") return false;
    if (f.resolved_name == "_rebuild_parameter" ||
        f.resolved_name == "_rebuild_parameter_with_state") {
      const bool with_state = f.resolved_name == "_rebuild_parameter_with_state";
      t->parameter = true;
      if (args == nullptr || args->size() != (with_state ? 4u : 3u)) {
        return problem("malformed " + f.resolved_name);
      }
      if (!Data((*args)[0], t)) return true;
      const Node& rg = g_.nodes[(*args)[1]];
      t->requires_grad = rg.kind == Kind::kBool && rg.b;
      if (rg.kind != Kind::kBool) return problem("Parameter's requires_grad is not a bool");
      if (with_state && t->problem.empty()) t->problem = StateProblem(g_, (*args)[3]);
      return true;
    }
    if (!Rebuild(f, args, c.offset, t) && t->problem.empty()) return false;
    return true;
  }

  // A Parameter's data: a plain rebuilt tensor (a rebuild call that no pickle opcode changed
  // afterwards). False with t->problem otherwise.
  bool Data(NodeId data, TensorFact* t) {
    const CallSite* dc = CallOf(g_, data);
    const GlobalRef* df = dc != nullptr ? GlobalOf(g_, dc->callee) : nullptr;
    const bool parameter = t->parameter;
    if (dc == nullptr || df == nullptr || dc->op != CallOp::kReduce ||
        !Rebuild(*df, ArgsOf(g_, *dc), dc->offset, t)) {
      if (t->problem.empty()) t->problem = "Parameter data is not a rebuilt tensor";
      t->kind = TensorFact::Kind::kOther;
      return false;
    }
    t->parameter = parameter;
    if (t->problem.empty()) t->problem = ChangedObject(data);
    return true;
  }

  // Why the tensor object `id` is not what its rebuild call made, or "": a BUILD state
  // (Tensor.__setstate__ calls set_ or sets .data) or SETITEM/APPENDS on it (tensor[k] = v
  // writes its storage). A Parameter's 3-item state is read in Describe.
  std::string ChangedObject(NodeId id) {
    const Node& n = g_.nodes[id];
    for (uint32_t m : n.mutations) {
      if (m < g_.calls.size() && g_.calls[m].op != CallOp::kBuild) {
        return "the pickle assigns into the tensor (SETITEM) after making it";
      }
    }
    const CallSite* c = CallOf(g_, id);
    const bool parameter_class =
        c != nullptr && IsGlobal(GlobalOf(g_, c->callee), "torch.nn.parameter", "Parameter");
    if (!n.states.empty() && !parameter_class) {
      return "the pickle sets the tensor's state (BUILD) after making it";
    }
    return "";
  }

  // After the walk: a pickle that writes a storage's data while it loads (a tensor's state
  // setting 'real', SETITEM on a tensor, a BUILD) changes every tensor on that storage. Each
  // call that makes a tensor is looked at, reached by the walk or not: the unpickler runs them
  // all.
  void RefuseChangedStorages() {
    absl::flat_hash_set<std::string> keys;
    bool unknown = false;
    std::string why;
    for (const CallSite& c : g_.calls) {
      if ((c.op != CallOp::kReduce && c.op != CallOp::kNewObj) || c.result >= g_.nodes.size() ||
          !IsTensorCall(c.result)) {
        continue;
      }
      const GlobalRef* f = GlobalOf(g_, c.callee);
      const std::vector<NodeId>* args = ArgsOf(g_, c);
      std::string problem = ChangedObject(c.result);
      if (problem.empty() && args != nullptr && args->size() == 4 &&
          (IsGlobal(f, "torch._utils", "_rebuild_parameter_with_state") ||
           IsGlobal(f, "torch._tensor", "_rebuild_from_type_v2"))) {
        problem = StateProblem(g_, (*args)[3]);
      }
      if (problem.empty()) continue;
      if (why.empty()) why = problem;
      std::string key;
      if (StorageKeyOf(c.result, &key)) {
        keys.insert(std::move(key));
      } else {
        unknown = true;
      }
    }
    if (why.empty()) return;
    const std::string message =
        absl::StrCat("the pickle changes tensor data while it loads, on this tensor's storage",
                     unknown ? " or one it cannot tell" : "", " (", why, ")");
    auto taint = [&](TensorFact& t) {
      if (!t.problem.empty() || t.storage < 0) return;
      if (unknown || keys.contains(out_.storages[static_cast<size_t>(t.storage)].key)) {
        t.problem = message;
      }
    };
    for (TensorFact& t : out_.tensors) {
      taint(t);
      for (TensorFact& q : t.qchannel) {
        taint(q);
        if (!q.problem.empty() && t.problem.empty()) t.problem = message;
      }
    }
  }

  // The storage key (the root key of a legacy view) under tensor call `id`, following a
  // Parameter's data and _rebuild_from_type_v2's arguments.
  bool StorageKeyOf(NodeId id, std::string* key) {
    for (int hops = 0; hops < 4; ++hops) {
      const CallSite* c = CallOf(g_, id);
      const GlobalRef* f = c != nullptr ? GlobalOf(g_, c->callee) : nullptr;
      const std::vector<NodeId>* args = c != nullptr ? ArgsOf(g_, *c) : nullptr;
      if (f == nullptr || args == nullptr || args->empty()) return false;
      if (IsGlobal(f, "torch._tensor", "_rebuild_from_type_v2")) {
        if (args->size() != 4 || g_.nodes[(*args)[2]].kind != Kind::kTuple ||
            g_.nodes[(*args)[2]].items.empty()) {
          return false;
        }
        id = g_.nodes[(*args)[2]].items[0];
      } else {
        id = (*args)[0];
      }
      const Node& n = g_.nodes[id];
      if (n.kind == Kind::kPersistent && !n.items.empty()) {
        const Node& pid = g_.nodes[n.items[0]];
        if (pid.kind != Kind::kTuple || pid.items.size() < 3 ||
            g_.nodes[pid.items[2]].kind != Kind::kStr) {
          return false;
        }
        *key = g_.nodes[pid.items[2]].text;
        return true;
      }
    }
    return false;
  }

  // Fills `t` from a torch._utils rebuild call whose arguments were read at offset `at`; false
  // (with t->problem set when it was a rebuild function at all) when it cannot be described.
  bool Rebuild(const GlobalRef& f, const std::vector<NodeId>* args, uint64_t at, TensorFact* t) {
    const std::string& fn = f.resolved_name;
    if (f.resolved_module != "torch._utils") return false;
    bool v2 = fn == "_rebuild_tensor_v2", v3 = fn == "_rebuild_tensor_v3";
    bool v1 = fn == "_rebuild_tensor", q = fn == "_rebuild_qtensor";
    if (fn == "_rebuild_sparse_tensor" || fn == "_rebuild_sparse_csr_tensor" ||
        fn == "_rebuild_nested_tensor") {
      t->kind = TensorFact::Kind::kSparse;
      t->problem = fn.substr(1) + ": sparse and nested tensors have no safetensors form";
      return false;
    }
    if (fn == "_rebuild_meta_tensor_no_storage") {
      t->kind = TensorFact::Kind::kMeta;
      t->problem = "a meta tensor has no data";
      return false;
    }
    if (!v1 && !v2 && !v3 && !q) {
      if (fn.rfind("_rebuild", 0) == 0) {
        t->kind = TensorFact::Kind::kOther;
        t->problem = fn + " is not a plain tensor";
        return false;
      }
      return false;
    }
    size_t min = v1 ? 4 : v2 ? 6 : v3 ? 7 : 7;
    size_t max = v1 ? 4 : v2 ? 7 : v3 ? 8 : 7;
    if (args == nullptr || args->size() < min || args->size() > max) {
      t->kind = TensorFact::Kind::kOther;
      t->problem = absl::StrFormat("%s called with %d arguments", base::AbslView(fn),
                                   args ? args->size() : 0);
      return false;
    }
    const std::vector<NodeId>& a = *args;
    const StorageUse use = Storage(a[0]);
    t->storage = use.index;
    uint64_t offset = 0;
    if (t->storage < 0 || !AsUInt(g_, a[1], &offset) || !AsIntList(g_, a[2], at, &t->shape) ||
        !AsIntList(g_, a[3], at, &t->stride) || t->shape.size() != t->stride.size() ||
        t->shape.size() > kMaxTensorDims) {
      t->kind = TensorFact::Kind::kOther;
      t->problem =
          t->shape.size() > kMaxTensorDims && t->shape.size() == t->stride.size()
              ? absl::StrFormat("%d dimensions (at most %d)", t->shape.size(), kMaxTensorDims)
              : "storage, offset, size or stride is malformed (or a list of them changed after "
                "the call read it)";
      // What was parsed before the failure is not a shape: the facts carry none (the
      // trusted side refuses a tensor whose sizes and strides differ in number).
      t->shape.clear();
      t->stride.clear();
      return false;
    }
    if (!base::CheckedAdd(offset, use.offset, &t->storage_offset)) {
      t->problem = "storage offset overflows";
      return false;
    }
    const StorageRef& s = out_.storages[static_cast<size_t>(t->storage)];
    t->dtype = s.dtype;
    if (v3) {
      const GlobalRef* dt = GlobalOf(g_, a[6]);
      const DTypeInfo* d =
          dt && dt->resolved_module == "torch" ? DTypeFromName(dt->resolved_name) : nullptr;
      if (d == nullptr) {
        t->problem = "_rebuild_tensor_v3 without a known dtype";
        return false;
      }
      t->dtype = d;
    } else if (s.untyped) {
      t->problem = "an untyped storage without a dtype";
      return false;
    }
    if (use.view) {
      // torch sets the tensor on the view's own bytes, and refuses one that reaches past them.
      TensorFact within = *t;
      within.storage_offset = offset;
      StorageRef view = s;
      view.numel = use.view_numel;
      if (!CheckBounds(within, StorageElements(within, view)).ok()) {
        t->problem = "it reaches past its storage view (torch.load fails on it)";
        return false;
      }
    }
    if (s.location == "meta") {
      // torch.load without map_location restores it on the meta device: no data.
      t->problem = "its storage's location is 'meta': torch.load gives a tensor without data";
    }
    if (!v1) {
      size_t rg = q ? 5 : 4;
      const Node& r = g_.nodes[a[rg]];
      t->requires_grad = r.kind == Kind::kBool && r.b;
    }
    if (q) {
      t->kind = TensorFact::Kind::kQuantized;
      Quantizer(a[4], t);
      return true;
    }
    if ((v2 && a.size() == 7) || (v3 && a.size() == 8)) {
      // Metadata (conj/neg bits, python attributes): None or an empty dict changes nothing.
      NodeId m = a.back();
      const bool none = m < g_.nodes.size() && g_.nodes[m].kind == Kind::kNone;
      if (!none &&
          (m >= g_.nodes.size() || g_.nodes[m].kind != Kind::kDict || !g_.nodes[m].items.empty()) &&
          t->problem.empty()) {
        t->problem = "tensor metadata (conjugate/negative bits) is not supported";
      }
    }
    return true;
  }

  // _rebuild_qtensor's quantizer_params, as torch.save writes them (torch/_tensor.py
  // _reduce_ex_internal) and _rebuild_qtensor reads them (torch/_utils.py):
  // (torch.per_tensor_affine, scale: float, zero_point: int) or (torch.per_channel_affine,
  // scales, zero_points, axis: int) with scales and zero_points tensors (float64 and int64; float32
  // and float32 for per_channel_affine_float_qparams, which is saved under the per_channel_affine
  // tag). Anything else leaves t->problem saying why the tensor is not converted; nested tensors
  // are rebuilt one level deep only (a qtensor's parameters are plain tensors).
  void Quantizer(NodeId params, TensorFact* t) {
    auto fail = [&](std::string why) {
      t->qchannel.clear();
      t->problem = absl::StrCat("quantized tensor: ", why);
    };
    if (t->dtype != nullptr && t->dtype->per_byte > 1) {
      return fail(absl::StrCat(base::AbslView(t->dtype->name),
                               " packs several elements per byte; it is not converted"));
    }
    const Node* p = params < g_.nodes.size() ? &g_.nodes[params] : nullptr;
    if (p == nullptr || p->kind != Kind::kTuple || p->items.empty()) {
      return fail("quantizer_params is not a tuple");
    }
    const GlobalRef* scheme = GlobalOf(g_, p->items[0]);
    if (scheme == nullptr || scheme->resolved_module != "torch") {
      return fail("quantizer_params does not start with a torch qscheme");
    }
    t->qscheme = scheme->resolved_name;
    const std::vector<NodeId>& it = p->items;
    if (t->qscheme == "per_tensor_affine") {
      const Node* scale = it.size() == 3 && it[1] < g_.nodes.size() ? &g_.nodes[it[1]] : nullptr;
      const Node* zp = it.size() == 3 && it[2] < g_.nodes.size() ? &g_.nodes[it[2]] : nullptr;
      if (scale == nullptr || scale->kind != Kind::kFloat || zp == nullptr ||
          zp->kind != Kind::kInt || !zp->fits || zp->i < absl::int128(INT64_MIN) ||
          zp->i > absl::int128(INT64_MAX)) {
        return fail("per_tensor_affine parameters are not (qscheme, float scale, int zero_point)");
      }
      t->q_scale = scale->f;
      t->q_zero_point = static_cast<int64_t>(zp->i);
      if (absl::Status s = CheckQuantized(*t); !s.ok()) fail(std::string(s.message()));
      return;
    }
    if (t->qscheme != "per_channel_affine" && t->qscheme != "per_channel_affine_float_qparams") {
      return fail(absl::StrCat("qscheme torch.", t->qscheme, " is not converted"));
    }
    uint64_t axis = 0;
    if (it.size() != 4 || !AsUInt(g_, it[3], &axis) || axis >= t->shape.size()) {
      return fail("per-channel parameters are not (qscheme, scales, zero_points, axis in range)");
    }
    t->q_axis = static_cast<int64_t>(axis);
    for (size_t k = 0; k < 2; ++k) {
      const CallSite* c = CallOf(g_, it[1 + k]);
      const GlobalRef* f =
          c != nullptr && c->op == CallOp::kReduce ? GlobalOf(g_, c->callee) : nullptr;
      TensorFact sub;
      if (f == nullptr || f->resolved_module != "torch._utils" ||
          (f->resolved_name != "_rebuild_tensor_v2" && f->resolved_name != "_rebuild_tensor_v3" &&
           f->resolved_name != "_rebuild_tensor")) {
        return fail(absl::StrCat("per-channel ", k == 0 ? "scales" : "zero_points",
                                 " are not a plain tensor"));
      }
      sub.offset = c->offset;
      sub.node = it[1 + k];
      if (!Rebuild(*f, ArgsOf(g_, *c), c->offset, &sub) || !sub.problem.empty()) {
        return fail(absl::StrCat("per-channel ", k == 0 ? "scales" : "zero_points", ": ",
                                 sub.problem.empty() ? "malformed" : sub.problem));
      }
      t->qchannel.push_back(std::move(sub));
    }
    if (absl::Status s = CheckQuantized(*t); !s.ok()) fail(std::string(s.message()));
  }

  const pickle::PickleFacts& p_;
  const Graph& g_;
  const KeyedObjects* keyed_;
  const PersistentIds ids_;
  TensorExtraction out_;
  absl::flat_hash_map<NodeId, LegacyView> legacy_;           // legacy persistent ids, resolved
  absl::flat_hash_map<std::string, int32_t> storage_index_;  // key -> index in out_.storages
  std::vector<PathStep> paths_;
  std::vector<std::string> frame_problems_ = {""};  // [0]: none
  uint64_t name_bytes_ = 0;                         // bytes of the names made so far
  bool stopped_ = false;                            // a limit stopped the walk
};

}  // namespace

const DTypeInfo* DTypeFromStorageClass(std::string_view qualname) {
  for (const NamedDType& d : kStorageClasses) {
    if (d.storage_class == qualname) return &d.info;
  }
  return nullptr;
}

const DTypeInfo* DTypeFromSafetensors(std::string_view name) {
  if (name.empty()) return nullptr;
  for (const NamedDType& d : kStorageClasses) {
    if (d.info.safetensors == name) return &d.info;
  }
  for (const DTypeInfo& d : kExtraDTypes) {
    if (d.safetensors == name) return &d;
  }
  return nullptr;
}

const DTypeInfo* DTypeFromName(std::string_view name) {
  for (const DTypeAlias& a : kAliases) {
    if (a.name == name) name = a.canonical;
  }
  for (const NamedDType& d : kStorageClasses) {
    if (d.info.name == name) return &d.info;
  }
  for (const DTypeInfo& d : kExtraDTypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string_view QuantizedDataDtype(const DTypeInfo* dtype) {
  if (dtype == nullptr || dtype->per_byte != 1) return {};
  if (dtype->name == "qint8") return "I8";
  if (dtype->name == "quint8") return "U8";
  if (dtype->name == "qint32") return "I32";
  return {};
}

absl::Status CheckQuantized(const TensorFact& t) {
  auto refuse = [](std::string why) { return absl::FailedPreconditionError(std::move(why)); };
  if (t.kind != TensorFact::Kind::kQuantized) return refuse("not a quantized tensor");
  if (QuantizedDataDtype(t.dtype).empty()) {
    return refuse(absl::StrCat(t.dtype ? base::AbslView(t.dtype->name) : "an unknown dtype",
                               " has no integer form that safetensors holds"));
  }
  if (t.requires_grad) {
    return refuse("it requires grad, which no integer tensor can (torch.load fails on it)");
  }
  if (t.qscheme == "per_tensor_affine") {
    if (!t.qchannel.empty()) return refuse("per_tensor_affine with per-channel parameters");
    return absl::OkStatus();
  }
  if (t.qscheme != "per_channel_affine" && t.qscheme != "per_channel_affine_float_qparams") {
    return refuse(absl::StrCat("qscheme torch.", base::AbslView(t.qscheme), " is not converted"));
  }
  if (t.qchannel.size() != 2 || t.q_axis < 0 || static_cast<uint64_t>(t.q_axis) >= t.shape.size()) {
    return refuse("per-channel parameters are incomplete or the axis is outside the shape");
  }
  const int64_t channels = t.shape[static_cast<size_t>(t.q_axis)];
  for (size_t k = 0; k < 2; ++k) {
    const TensorFact& c = t.qchannel[k];
    if (c.dtype == nullptr || c.shape.size() != 1 || c.shape[0] != channels || !c.problem.empty()) {
      return refuse(absl::StrFormat("per-channel %s must have shape [%d] (the size of axis %d)",
                                    k == 0 ? "scales" : "zero_points", channels, t.q_axis));
    }
  }
  // What torch.save writes (q_per_channel_scales / _zero_points): float64 scales with int64
  // zero points (per_channel_affine), or float32 with float32 (_float_qparams). torch converts
  // any other pair when it loads, so its values would not be the saved ones: refused.
  const std::string_view scales = t.qchannel[0].dtype->name;
  const std::string_view zeros = t.qchannel[1].dtype->name;
  if (!(scales == "float64" && zeros == "int64") && !(scales == "float32" && zeros == "float32")) {
    return refuse(absl::StrCat("per-channel scales and zero points are ", base::AbslView(scales),
                               " and ", base::AbslView(zeros),
                               "; torch.save writes float64 with int64, or float32 with float32"));
  }
  return absl::OkStatus();
}

uint64_t TensorFact::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || !base::CheckedMul<uint64_t>(n, static_cast<uint64_t>(d), &n)) return UINT64_MAX;
  }
  return n;
}

uint64_t ElementsIn(uint64_t bytes, const DTypeInfo* dtype) {
  if (dtype == nullptr || dtype->size == 0) return bytes;
  uint64_t n = bytes == UINT64_MAX ? UINT64_MAX : bytes / dtype->size;
  // Packed sub-byte dtypes: each byte holds per_byte elements (torch 2.6:
  // quantize_per_tensor(arange(5), 1.0, 0, torch.quint4x2) has a 3-byte storage).
  if (dtype->per_byte > 1 && !base::CheckedMul<uint64_t>(n, dtype->per_byte, &n)) {
    return UINT64_MAX;
  }
  return n;
}

uint64_t StorageElements(const TensorFact& t, const StorageRef& s) {
  if (t.dtype == nullptr) return s.numel;
  uint64_t bytes = s.numel;
  if (!s.untyped && s.dtype != nullptr &&
      !base::CheckedMul<uint64_t>(s.numel, s.dtype->size, &bytes)) {
    bytes = UINT64_MAX;
  }
  return ElementsIn(bytes, t.dtype);
}

absl::Status CheckStorageBounds(const TensorFact& t, const std::vector<StorageRef>& storages) {
  auto one = [&](const TensorFact& x) {
    if (x.storage < 0) return absl::OkStatus();
    if (static_cast<size_t>(x.storage) >= storages.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor '%s': no storage %d", base::AbslView(x.name), x.storage));
    }
    return CheckBounds(x, StorageElements(x, storages[static_cast<size_t>(x.storage)]));
  };
  if (absl::Status s = one(t); !s.ok()) return s;
  for (const TensorFact& c : t.qchannel) {
    if (absl::Status s = one(c); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckBounds(const TensorFact& t, uint64_t storage_numel) {
  if (t.shape.size() != t.stride.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor '%s': %d sizes but %d strides",
                                                      base::AbslView(t.name), t.shape.size(),
                                                      t.stride.size()));
  }
  uint64_t last = t.storage_offset;  // index of the last element
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < 0 || t.stride[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor '%s': negative size or stride", base::AbslView(t.name)));
    }
    if (t.shape[i] == 0) {
      if (t.storage_offset > storage_numel) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tensor '%s': offset %d is past its storage of %d elements",
                            base::AbslView(t.name), t.storage_offset, storage_numel));
      }
      return absl::OkStatus();
    }
  }
  for (size_t i = 0; i < t.shape.size(); ++i) {
    uint64_t step;
    if (!base::CheckedMul<uint64_t>(static_cast<uint64_t>(t.shape[i] - 1),
                                    static_cast<uint64_t>(t.stride[i]), &step) ||
        !base::CheckedAdd(last, step, &last)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor '%s': extent overflows", base::AbslView(t.name)));
    }
  }
  if (last >= storage_numel) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': element %d is past its storage of %d elements",
                        base::AbslView(t.name), last, storage_numel));
  }
  return absl::OkStatus();
}

TensorExtraction ExtractTensors(const pickle::PickleFacts& p, const KeyedObjects* keyed,
                                PersistentIds ids) {
  return Extractor(p, keyed, ids).Run();
}

std::string PythonFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // The shortest digits that read back to v, the nearest to it among those (as CPython's
  // dtoa mode 0): "-d.ddde+XX".
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  std::string out;
  if (!s.empty() && s[0] == '-') {
    out.push_back('-');
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::string_view x = s.substr(e + 1);
  if (!x.empty() && x[0] == '+') x.remove_prefix(1);
  (void)std::from_chars(x.data(), x.data() + x.size(), exponent);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  // CPython's float_repr_style 'short': fixed notation when -4 < decpt <= 16, decpt being
  // where the decimal point falls after the first `decpt` digits.
  const int decpt = exponent + 1;
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
             digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (n > 1) out += "." + digits.substr(1);
  const int power = decpt - 1;
  out += power < 0 ? "e-" : "e+";
  const std::string p = std::to_string(power < 0 ? -power : power);
  if (p.size() < 2) out.push_back('0');
  out += p;
  return out;
}

}  // namespace ckptscan::torch
