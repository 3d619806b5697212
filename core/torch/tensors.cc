#include "core/torch/tensors.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
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

bool AsIntList(const Graph& g, NodeId id, std::vector<int64_t>* out) {
  if (id >= g.nodes.size()) return false;
  const Node& n = g.nodes[id];
  if (n.kind != Kind::kTuple && n.kind != Kind::kList) return false;
  out->clear();
  for (NodeId item : n.items) {
    uint64_t v;
    if (!AsUInt(g, item, &v)) return false;
    out->push_back(static_cast<int64_t>(v));
  }
  return true;
}

std::string KeyText(const Graph& g, NodeId key) {
  if (key >= g.nodes.size()) return "?";
  const Node& n = g.nodes[key];
  switch (n.kind) {
    case Kind::kStr:
      return n.text;
    case Kind::kInt:
      return n.text;
    case Kind::kBool:
      return n.b ? "True" : "False";
    case Kind::kNone:
      return "None";
    default:
      return pickle::Summarize(g, key, 64);
  }
}

std::string Join(const std::string& prefix, std::string_view part) {
  if (prefix.empty()) return std::string(part);
  std::string out = prefix;
  out.push_back('.');
  out.append(part);
  return out;
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
  Extractor(const pickle::PickleFacts& p, const KeyedObjects* keyed)
      : p_(p), g_(p.graph), keyed_(keyed) {}

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
    if (p_.root != kNoNode) Walk();
    // Storages referenced anywhere else too (inside sparse or subclass tensors, or objects the
    // walk does not enter): torch loads every one of them.
    for (NodeId id = 0; id < g_.nodes.size(); ++id) {
      if (g_.nodes[id].kind == Kind::kPersistent) {
        uint64_t unused;
        (void)Storage(id, &unused);
      }
    }
    return std::move(out_);
  }

 private:
  struct Frame {
    NodeId node;
    std::string name;
  };

  // Items of a dict-like value, in order, with Python's overwrite rule for str/int keys.
  std::vector<std::pair<NodeId, NodeId>> DictItems(NodeId id) {
    std::vector<NodeId> flat;
    const Node& n = g_.nodes[id];
    if (n.kind == Kind::kDict) {
      flat = n.items;
    } else {
      // OrderedDict(...) / defaultdict(...) built by a call, filled by SETITEMS calls.
      const CallSite* c = CallOf(g_, id);
      if (c != nullptr) {
        const std::vector<NodeId>* args = ArgsOf(g_, *c);
        if (IsGlobal(GlobalOf(g_, c->callee), "collections", "OrderedDict") && args != nullptr &&
            args->size() == 1 && (*args)[0] < g_.nodes.size()) {
          // OrderedDict([(k, v), ...])
          for (NodeId pair : g_.nodes[(*args)[0]].items) {
            if (pair < g_.nodes.size() && g_.nodes[pair].kind == Kind::kTuple &&
                g_.nodes[pair].items.size() == 2) {
              flat.push_back(g_.nodes[pair].items[0]);
              flat.push_back(g_.nodes[pair].items[1]);
            }
          }
        }
      }
      for (uint32_t m : n.mutations) {
        if (m >= g_.calls.size() || g_.calls[m].op != CallOp::kSetItems) continue;
        NodeId a = g_.calls[m].args;
        if (a < g_.nodes.size()) {
          const std::vector<NodeId>& items = g_.nodes[a].items;
          flat.insert(flat.end(), items.begin(), items.end());
        }
      }
    }
    std::vector<std::pair<NodeId, NodeId>> out;
    absl::flat_hash_map<std::string, size_t> index;  // simple keys -> position in `out`
    for (size_t k = 0; k + 1 < flat.size(); k += 2) {
      NodeId key = flat[k];
      Kind kk = key < g_.nodes.size() ? g_.nodes[key].kind : Kind::kNone;
      if (kk == Kind::kStr || kk == Kind::kInt) {
        std::string simple =
            absl::StrCat(kk == Kind::kStr ? "s:" : "i:", base::AbslView(g_.nodes[key].text));
        auto [it, inserted] = index.emplace(simple, out.size());
        if (!inserted) {
          out[it->second].second = flat[k + 1];
          continue;
        }
      }
      out.emplace_back(key, flat[k + 1]);
    }
    return out;
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

  void Walk() {
    std::vector<Frame> stack;
    stack.push_back({p_.root, ""});
    absl::flat_hash_set<NodeId> seen_containers;
    while (!stack.empty()) {
      Frame f = std::move(stack.back());
      stack.pop_back();
      if (f.node >= g_.nodes.size()) continue;
      if (TryTensor(f.node, f.name)) continue;
      const Node& n = g_.nodes[f.node];
      bool dict = IsDictLike(f.node);
      bool seq = n.kind == Kind::kList || n.kind == Kind::kTuple;
      if (!dict && !seq) {
        Other(f.node, /*container=*/false, std::move(f.name));
        continue;
      }
      if (!seen_containers.insert(f.node).second) continue;
      size_t first = stack.size();
      if (dict) {
        for (const auto& [key, value] : DictItems(f.node)) {
          stack.push_back({value, Join(f.name, KeyText(g_, key))});
        }
      } else {
        for (size_t i = 0; i < n.items.size(); ++i) {
          stack.push_back({n.items[i], Join(f.name, absl::StrCat(i))});
        }
      }
      if (stack.size() == first) {
        Other(f.node, /*container=*/true, std::move(f.name));
        continue;
      }
      std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
    }
  }

  void Other(NodeId id, bool container, std::string name) {
    ++out_.other_values.total;
    if (out_.other_values.listed.size() < kMaxListedOtherValues) {
      out_.other_values.listed.push_back(DescribeOther(g_, id, container, std::move(name)));
    }
  }

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

  // Storage from a persistent id; returns its index or -1 (with a problem recorded).
  int32_t Storage(NodeId id, uint64_t* view_offset) {
    *view_offset = 0;
    if (id >= g_.nodes.size() || g_.nodes[id].kind != Kind::kPersistent ||
        g_.nodes[id].items.empty()) {
      return -1;
    }
    NodeId pid = g_.nodes[id].items[0];
    uint64_t at = PidOffset(id);
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
    if (pid >= g_.nodes.size() || g_.nodes[pid].kind != Kind::kTuple) {
      out_.problems.push_back(absl::StrFormat("persistent id at offset %d is not a tuple", at));
      return -1;
    }
    const std::vector<NodeId>& t = g_.nodes[pid].items;
    if (t.size() < 5 || t.size() > 6 || t[0] >= g_.nodes.size() ||
        g_.nodes[t[0]].kind != Kind::kStr || g_.nodes[t[0]].text != "storage") {
      out_.problems.push_back(
          absl::StrFormat("persistent id at offset %d is not ('storage', type, key, location, "
                          "numel[, view])",
                          at));
      return -1;
    }
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
    if (t.size() == 6 && g_.nodes[t[5]].kind != Kind::kNone) {
      // Legacy storage views: (view_key, offset, size) into the root storage.
      const Node& v = g_.nodes[t[5]];
      uint64_t off = 0, size = 0;
      if (v.kind != Kind::kTuple || v.items.size() != 3 || !AsUInt(g_, v.items[1], &off) ||
          !AsUInt(g_, v.items[2], &size) || off > s.numel || size > s.numel - off) {
        out_.problems.push_back(absl::StrFormat("malformed storage view at offset %d", at));
        return -1;
      }
      *view_offset = off;
    }
    for (size_t i = 0; i < out_.storages.size(); ++i) {
      const StorageRef& o = out_.storages[i];
      if (o.key == s.key) {
        if (o.dtype != s.dtype || o.numel != s.numel || o.untyped != s.untyped) {
          out_.problems.push_back(absl::StrFormat(
              "storage '%s' is referenced with two different types or sizes (offset %d)",
              base::AbslView(s.key), at));
          return -1;
        }
        return static_cast<int32_t>(i);
      }
    }
    out_.storages.push_back(std::move(s));
    return static_cast<int32_t>(out_.storages.size() - 1);
  }

  // If `id` is a tensor rebuild call (or, keyed, a persistent id), records it under `name`
  // and returns true.
  bool TryTensor(NodeId id, const std::string& name) {
    if (keyed_ != nullptr && g_.nodes[id].kind == Kind::kPersistent) {
      std::string unused;  // unresolvable ids are reported once, by Run
      const KeyedObjects::Entry* e = Resolve(id, &unused);
      if (e != nullptr && e->tensor) {
        TensorFact t = keyed_->tensors[e->index];
        t.name = name;
        t.node = id;
        out_.tensors.push_back(std::move(t));
      }
      return true;  // a tensor, a storage, or a module class: nothing to walk into
    }
    const CallSite* c = CallOf(g_, id);
    if (c == nullptr || c->op != CallOp::kReduce) return false;
    const GlobalRef* f = GlobalOf(g_, c->callee);
    if (f == nullptr) return false;
    const std::vector<NodeId>* args = ArgsOf(g_, *c);
    TensorFact t;
    t.name = name;
    t.offset = c->offset;
    t.node = id;
    if (f->resolved_module == "torch._tensor" && f->resolved_name == "_rebuild_from_type_v2") {
      // (func, new_type, args, state): func(*args), then the subclass.
      if (args == nullptr || args->size() != 4)
        return Problem(t, "malformed _rebuild_from_type_v2");
      const GlobalRef* inner = GlobalOf(g_, (*args)[0]);
      const GlobalRef* type = GlobalOf(g_, (*args)[1]);
      NodeId inner_args = (*args)[2];
      if (inner == nullptr || inner_args >= g_.nodes.size() ||
          g_.nodes[inner_args].kind != Kind::kTuple) {
        return Problem(t, "malformed _rebuild_from_type_v2");
      }
      bool ok = Rebuild(*inner, &g_.nodes[inner_args].items, &t);
      if (IsGlobal(type, "torch.nn.parameter", "Parameter")) t.parameter = true;
      if (ok && !IsGlobal(type, "torch", "Tensor") && !t.parameter) {
        t.problem = "a tensor subclass: " +
                    (type ? type->resolved_module + "." + type->resolved_name : std::string("?"));
      }
      out_.tensors.push_back(std::move(t));
      return true;
    }
    if (f->resolved_module != "torch._utils") return false;
    if (f->resolved_name == "_rebuild_parameter" ||
        f->resolved_name == "_rebuild_parameter_with_state") {
      if (args == nullptr || args->size() < 2) return Problem(t, "malformed " + f->resolved_name);
      const CallSite* data = CallOf(g_, (*args)[0]);
      const GlobalRef* df = data ? GlobalOf(g_, data->callee) : nullptr;
      if (data == nullptr || df == nullptr || !Rebuild(*df, ArgsOf(g_, *data), &t)) {
        if (t.problem.empty()) t.problem = "Parameter data is not a rebuilt tensor";
      }
      t.parameter = true;
      t.offset = c->offset;
      const Node& rg = g_.nodes[(*args)[1]];
      t.requires_grad = rg.kind == Kind::kBool && rg.b;
      out_.tensors.push_back(std::move(t));
      return true;
    }
    if (!Rebuild(*f, args, &t) && t.problem.empty()) return false;
    out_.tensors.push_back(std::move(t));
    return true;
  }

  bool Problem(TensorFact& t, std::string why) {
    t.kind = TensorFact::Kind::kOther;
    t.problem = std::move(why);
    out_.tensors.push_back(std::move(t));
    return true;
  }

  // Fills `t` from a torch._utils rebuild call; false (with t->problem set when it was a
  // rebuild function at all) when it cannot be described.
  bool Rebuild(const GlobalRef& f, const std::vector<NodeId>* args, TensorFact* t) {
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
    uint64_t view_offset = 0;
    t->storage = Storage(a[0], &view_offset);
    uint64_t offset = 0;
    if (t->storage < 0 || !AsUInt(g_, a[1], &offset) || !AsIntList(g_, a[2], &t->shape) ||
        !AsIntList(g_, a[3], &t->stride) || t->shape.size() != t->stride.size() ||
        t->shape.size() > kMaxTensorDims) {
      t->kind = TensorFact::Kind::kOther;
      t->problem =
          t->shape.size() > kMaxTensorDims && t->shape.size() == t->stride.size()
              ? absl::StrFormat("%d dimensions (at most %d)", t->shape.size(), kMaxTensorDims)
              : "storage, offset, size or stride is malformed";
      // What was parsed before the failure is not a shape: the facts carry none (the
      // trusted side refuses a tensor whose sizes and strides differ in number).
      t->shape.clear();
      t->stride.clear();
      return false;
    }
    if (!base::CheckedAdd(offset, view_offset, &t->storage_offset)) {
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
      // Metadata (conj/neg bits, python attributes): an empty dict changes nothing.
      NodeId m = a.back();
      if (m >= g_.nodes.size() || g_.nodes[m].kind != Kind::kDict || !g_.nodes[m].items.empty()) {
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
    const char* const kParamNames[] = {".scale", ".zero_point"};
    for (size_t k = 0; k < 2; ++k) {
      const CallSite* c = CallOf(g_, it[1 + k]);
      const GlobalRef* f =
          c != nullptr && c->op == CallOp::kReduce ? GlobalOf(g_, c->callee) : nullptr;
      TensorFact sub;
      sub.name = absl::StrCat(t->name, kParamNames[k]);
      if (f == nullptr || f->resolved_module != "torch._utils" ||
          (f->resolved_name != "_rebuild_tensor_v2" && f->resolved_name != "_rebuild_tensor_v3" &&
           f->resolved_name != "_rebuild_tensor")) {
        return fail(absl::StrCat("per-channel ", k == 0 ? "scales" : "zero_points",
                                 " are not a plain tensor"));
      }
      sub.offset = c->offset;
      sub.node = it[1 + k];
      if (!Rebuild(*f, ArgsOf(g_, *c), &sub) || !sub.problem.empty()) {
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
  TensorExtraction out_;
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

TensorExtraction ExtractTensors(const pickle::PickleFacts& p, const KeyedObjects* keyed) {
  return Extractor(p, keyed).Run();
}

}  // namespace ckptscan::torch
