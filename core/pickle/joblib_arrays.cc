// joblib's inline arrays on the value graph (joblib 1.2 NumpyUnpickler.load_build, numpy
// 1.24): which BUILDs make joblib read an array from the stream, and what it reads.
#include "core/pickle/joblib_arrays.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/pickle/joblib_companions.h"
#include "core/pickle/vm_internal.h"

namespace ckptscan::pickle::internal {

absl::Status JoblibNotModelled(std::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("joblib array: ", base::AbslView(why), kJoblibReadsOn));
}

namespace {

// joblib checks isinstance(stack[-1], (NumpyArrayWrapper, NDArrayWrapper)) after every
// BUILD, however the object was made. The one construction modelled is what joblib.dump
// writes: NEWOBJ of NumpyArrayWrapper with no arguments, then one BUILD with a dict state.
// Any other object that could be a placeholder stops the reading (Stricter): reading on
// would skip bytes differently from joblib.
class Placeholders final {
 public:
  explicit Placeholders(const Graph& g) : g_(g) {}

  static bool IsJoblibClass(const GlobalRef& g) {
    return g.resolved_module == "joblib.numpy_pickle" ||
           g.resolved_module == "joblib.numpy_pickle_compat" ||
           g.resolved_module == "sklearn.externals.joblib.numpy_pickle" ||
           g.resolved_module == "sklearn.externals.joblib.numpy_pickle_compat";
  }
  bool IsJoblibClassNode(NodeId id) const {
    const Node& n = N(id);
    if (n.kind != Kind::kGlobal) return false;
    if (n.ref >= g_.globals.size()) return true;
    const GlobalRef& g = g_.globals[n.ref];
    return g.via == Via::kExt || g.via == Via::kDynamic || IsJoblibClass(g);
  }
  // The call site that made `inst`, or nullptr when `inst` is not a call's result.
  const CallSite* MadeBy(NodeId inst) const {
    const Node& n = N(inst);
    if (n.kind != Kind::kCall || n.ref >= g_.calls.size()) return nullptr;
    return &g_.calls[n.ref];
  }
  bool IsJoblibWrapper(NodeId inst) const {
    const CallSite* c = MadeBy(inst);
    if (c == nullptr || c->callee == kNoNode || N(c->callee).kind != Kind::kGlobal) return false;
    const GlobalRef& g = g_.globals[N(c->callee).ref];
    return g.resolved_module == "joblib.numpy_pickle" && g.resolved_name == "NumpyArrayWrapper";
  }
  // An NDArrayWrapper or ZNDArrayWrapper as joblib 0.9 wrote it: NEWOBJ with no arguments,
  // then this one BUILD with a dict state. joblib reads its array from a file beside the
  // pickle (joblib_companions.h), nothing from the stream.
  bool IsCompanionWrapper(NodeId inst, NodeId state) const {
    const CallSite* c = MadeBy(inst);
    if (c == nullptr || c->callee == kNoNode || N(c->callee).kind != Kind::kGlobal ||
        N(c->callee).ref >= g_.globals.size() ||
        !IsJoblibCompanionWrapper(g_.globals[N(c->callee).ref])) {
      return false;
    }
    return c->op == CallOp::kNewObj && c->args != kNoNode && N(c->args).kind == Kind::kTuple &&
           N(c->args).items.empty() && N(inst).states.size() == 1 && N(state).kind == Kind::kDict;
  }
  // A call's result that was made by calling something other than a named global (a class
  // built at load time, e.g. by type(...)).
  bool IsComputedClass(NodeId id) const {
    const CallSite* c = MadeBy(id);
    return c != nullptr && (c->callee == kNoNode || N(c->callee).kind != Kind::kGlobal);
  }
  // Whether the object BUILD just set `state` on may be a joblib placeholder in a form this
  // model does not follow.
  bool MayBeOtherPlaceholder(NodeId inst, NodeId state) const {
    // A slot state sets attributes with setattr: `__class__` turns any plain object into one.
    const Node& s = N(state);
    if (s.kind == Kind::kTuple && s.items.size() == 2) {
      const Node& slots = N(s.items[1]);
      if (IsOpaque(slots.kind)) return true;
      if (slots.kind == Kind::kDict) {
        for (size_t i = 0; i < slots.items.size(); i += 2) {
          const Node& k = N(slots.items[i]);
          if (k.kind != Kind::kStr || k.text == "__class__") return true;
        }
      }
    }
    if (IsOpaque(s.kind)) return true;
    const CallSite* c = MadeBy(inst);
    if (c == nullptr) return N(inst).kind != Kind::kGlobal;  // persistent ids, buffers
    // A class computed at load time (type(...) subclasses, getattr chains), a placeholder
    // class called any way, or passed to a constructor (copyreg._reconstructor, __newobj__).
    if (IsComputedClass(inst) || IsJoblibClassNode(c->callee)) return true;
    if (c->args != kNoNode) {
      const Node& a = N(c->args);
      if (IsOpaque(a.kind)) return true;
      for (NodeId item : a.items) {
        if (IsJoblibClassNode(item) || IsComputedClass(item)) return true;
      }
    }
    return false;
  }

  // The value of `key` in a plain dict node, or kNoNode.
  NodeId DictValue(NodeId dict, std::string_view key) const {
    const Node& d = N(dict);
    NodeId found = kNoNode;
    for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
      const Node& k = N(d.items[i]);
      if (k.kind == Kind::kStr && k.text == key) found = d.items[i + 1];  // last one wins
    }
    return found;
  }

  // What numpy 1.24 makes of numpy.dtype(code, align, copy) followed by __setstate__(state):
  // the item size and whether the array holds Python objects (dtype.hasobject).
  struct ArrayDtype {
    uint64_t itemsize = 0;
    bool has_object = false;
  };
  absl::StatusOr<ArrayDtype> JoblibDtype(NodeId dtype) const {
    const CallSite* dc = MadeBy(dtype);
    if (dc == nullptr || dc->callee == kNoNode || N(dc->callee).kind != Kind::kGlobal) {
      return JoblibNotModelled("dtype is not a numpy.dtype(...) call");
    }
    const GlobalRef& callee = g_.globals[N(dc->callee).ref];
    if (callee.resolved_name != "dtype" ||
        (callee.resolved_module != "numpy" && callee.resolved_module != "numpy.core.multiarray")) {
      return JoblibNotModelled("dtype is not a numpy.dtype(...) call");
    }
    const Node& dn = N(dtype);
    if (dc->args == kNoNode || N(dc->args).kind != Kind::kTuple || N(dc->args).items.size() != 3 ||
        N(N(dc->args).items[0]).kind != Kind::kStr || dn.states.size() != 1) {
      return JoblibNotModelled("dtype is not numpy.dtype(code, align, copy) with one state");
    }
    const Node& copy = N(N(dc->args).items[2]);
    if (copy.kind != Kind::kBool && copy.kind != Kind::kInt) {
      return JoblibNotModelled("dtype's copy argument is not a bool");
    }
    const bool copied = copy.kind == Kind::kBool ? copy.b : copy.i != 0;
    // The codes dtype.__reduce__ writes: kind and item size (numpy's builtin types on 64-bit
    // Linux), or S/U/V with their size in the state.
    const std::string& code = N(N(dc->args).items[0]).text;
    static constexpr std::pair<std::string_view, uint64_t> kSized[] = {
        {"b1", 1},   {"i1", 1},   {"i2", 2}, {"i4", 4}, {"i8", 8}, {"u1", 1},   {"u2", 2},
        {"u4", 4},   {"u8", 8},   {"f2", 2}, {"f4", 4}, {"f8", 8}, {"f16", 16}, {"c8", 8},
        {"c16", 16}, {"c32", 32}, {"O8", 8}, {"M8", 8}, {"m8", 8}};
    ArrayDtype out;
    bool flexible = false;
    for (const auto& [c, size] : kSized) {
      if (code == c) out.itemsize = size;
    }
    if (out.itemsize == 0) {
      flexible = !code.empty() && (code[0] == 'S' || code[0] == 'U' || code[0] == 'V') &&
                 code.size() <= 11 && code.find_first_not_of("0123456789", 1) == std::string::npos;
      if (!flexible)
        return JoblibNotModelled(
            absl::StrCat("dtype code '", base::Escaped(std::string_view(code).substr(0, 32)), "'"));
    }
    const bool object_kind = code == "O8";
    if (!copied) {
      // numpy hands back its builtin descriptor, on which __setstate__ changes nothing.
      if (flexible) return JoblibNotModelled("a flexible dtype with copy=False");
      out.has_object = object_kind;
      return out;
    }
    const Node& st = N(dn.states[0]);
    if (st.kind != Kind::kTuple || (st.items.size() != 8 && st.items.size() != 9)) {
      return JoblibNotModelled("dtype state is not numpy's 8- or 9-tuple");
    }
    const Node& version = N(st.items[0]);
    const Node& subarray = N(st.items[2]);
    const Node& fields = N(st.items[4]);
    const Node& elsize = N(st.items[5]);
    const Node& flags = N(st.items[7]);
    if (version.kind != Kind::kInt || !version.fits || flags.kind != Kind::kInt || !flags.fits ||
        subarray.kind != Kind::kNone) {
      return JoblibNotModelled(
          "dtype state with a version, subarray or flags numpy does not write");
    }
    if (version.i >= 3) {
      out.has_object = (flags.i & 1) != 0;  // NPY_ITEM_HASOBJECT, as the state says
    } else {
      if (fields.kind != Kind::kNone)
        return JoblibNotModelled("fields in a dtype state before version 3");
      out.has_object = flags.i != 0 || object_kind;
    }
    if (flexible) {
      // Only flexible types take their size from the state.
      if (elsize.kind != Kind::kInt || !elsize.fits || elsize.i <= 0 || elsize.i >= (1 << 30) ||
          (code[0] == 'U' && elsize.i % 4 != 0)) {
        return JoblibNotModelled("a flexible dtype whose state has no usable size");
      }
      out.itemsize = static_cast<uint64_t>(elsize.i);
    }
    return out;
  }

  // The array joblib reads after the BUILD of the NumpyArrayWrapper `inst` with `state`.
  absl::StatusOr<JoblibInlineArray> JoblibArray(NodeId inst, NodeId state) const {
    const CallSite* made = MadeBy(inst);
    if (made->op != CallOp::kNewObj || made->args == kNoNode ||
        N(made->args).kind != Kind::kTuple || !N(made->args).items.empty()) {
      return JoblibNotModelled("a placeholder made otherwise than by NEWOBJ with no arguments");
    }
    if (N(inst).states.size() != 1) {
      return JoblibNotModelled("a second BUILD on a placeholder (joblib reads another array)");
    }
    if (N(state).kind != Kind::kDict)
      return JoblibNotModelled("the placeholder's state is not a dict");
    NodeId shape = DictValue(state, "shape");
    NodeId dtype = DictValue(state, "dtype");
    NodeId align = DictValue(state, "numpy_array_alignment_bytes");
    NodeId allow_mmap = DictValue(state, "allow_mmap");
    if (shape == kNoNode || N(shape).kind != Kind::kTuple || dtype == kNoNode) {
      return JoblibNotModelled("shape or dtype missing");
    }
    JoblibInlineArray out;
    for (NodeId d : N(shape).items) {
      const Node& v = N(d);
      if (v.kind != Kind::kInt || !v.fits || v.i < 0 || v.i > absl::int128(INT64_MAX) ||
          !base::CheckedMul(out.count, static_cast<uint64_t>(v.i), &out.count)) {
        return JoblibNotModelled("a dimension is not a small non-negative int");
      }
    }
    CKPT_ASSIGN_OR_RETURN(ArrayDtype dt, JoblibDtype(dtype));
    out.has_object = dt.has_object;
    out.itemsize = dt.itemsize;
    out.mapped_too = allow_mmap != kNoNode && N(allow_mmap).kind != Kind::kNone &&
                     !(N(allow_mmap).kind == Kind::kBool && !N(allow_mmap).b);
    out.aligned = align != kNoNode && N(align).kind != Kind::kNone;
    return out;
  }

 private:
  const Node& N(NodeId id) const { return g_.nodes[id]; }

  const Graph& g_;
};

}  // namespace

absl::StatusOr<std::optional<JoblibInlineArray>> JoblibAfterBuild(const Graph& g, NodeId inst,
                                                                  NodeId state) {
  Placeholders p(g);
  if (p.IsJoblibWrapper(inst)) {
    CKPT_ASSIGN_OR_RETURN(JoblibInlineArray array, p.JoblibArray(inst, state));
    return array;
  }
  if (p.IsCompanionWrapper(inst, state)) return std::nullopt;
  if (p.MayBeOtherPlaceholder(inst, state)) {
    return JoblibNotModelled(
        "BUILD on an object that may be a joblib placeholder, made in a way ckptscan does not "
        "model");
  }
  return std::nullopt;
}

}  // namespace ckptscan::pickle::internal
