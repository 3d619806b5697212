#include "core/jinja/evaluator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"

namespace ckptscan::jinja {
namespace {

constexpr size_t kPathBytes = 60;  // the expression's text quoted in a finding
constexpr uint32_t kExactRounds = 3;  // summary loop rounds joined before widening
constexpr uint32_t kMaxRounds = 8;    // rounds before what still changes becomes unknown

bool IsSpecialToken(std::string_view name) {
  return name == "bos_token" || name == "eos_token" || name == "unk_token" ||
         name == "sep_token" || name == "pad_token" || name == "cls_token" ||
         name == "mask_token";
}

}  // namespace

// ---- state --------------------------------------------------------------------------------

Value Evaluator::ContextValue(const std::string& name) const {
  static constexpr std::string_view kGlobals[] = {
      "range", "dict", "namespace", "lipsum", "cycler", "joiner", "raise_exception",
      "strftime_now", "self"};
  for (std::string_view g : kGlobals) {
    if (name == g) {
      HeapObj o;
      o.kind = ObjKind::kGlobal;
      o.name = name;
      return Obj(heap_.Intern(std::move(o)));
    }
  }
  if (IsSpecialToken(name)) {
    Value v = AnyStr(Origin::kToken);
    v.bits |= kNone | kUndefined;
    return v;
  }
  if (name == "additional_special_tokens") {
    Value v = Obj(MakeListOf(heap_, AnyStr(Origin::kToken)));
    v.bits |= kUndefined;
    return v;
  }
  if (name == "loop" || name == "caller" || name == "varargs" || name == "kwargs") {
    return Undef();
  }
  Value v = Json();
  v.bits |= kUndefined;
  return v;
}

Value Evaluator::Lookup(const State& s, const std::string& name, size_t below) const {
  for (size_t i = std::min(below, s.scopes.size()); i-- > 0;) {
    auto it = s.scopes[i].vars.find(name);
    if (it != s.scopes[i].vars.end()) return it->second;
  }
  return ContextValue(name);
}

Evaluator::State Evaluator::Join(const State& a, const State& b) {
  if (b.dead) return a;
  if (a.dead) return b;
  State out = a;
  const size_t n = std::min(a.scopes.size(), b.scopes.size());
  out.scopes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    auto& vars = out.scopes[i].vars;
    for (auto& [name, v] : vars) {
      auto it = b.scopes[i].vars.find(name);
      v = ValueJoin(v, it != b.scopes[i].vars.end() ? it->second : Lookup(b, name, i));
    }
    for (const auto& [name, v] : b.scopes[i].vars) {
      if (vars.count(name) == 0) vars[name] = ValueJoin(v, Lookup(a, name, i));
    }
  }
  for (const auto& [id, attrs] : b.ns) {
    auto it = out.ns.find(id);
    if (it == out.ns.end()) {
      out.ns[id] = attrs;
      continue;
    }
    for (auto& [k, v] : it->second) {
      auto other = attrs.find(k);
      v = ValueJoin(v, other != attrs.end() ? other->second : Undef());
    }
    for (const auto& [k, v] : attrs) {
      if (it->second.count(k) == 0) it->second[k] = ValueJoin(v, Undef());
    }
  }
  for (size_t i = 0; i < out.captures.size() && i < b.captures.size(); ++i) {
    out.captures[i] = ValueJoin(out.captures[i], b.captures[i]);
  }
  out.dead = false;
  return out;
}

Evaluator::State Evaluator::Widen(const State& old, const State& next) {
  State out = next;
  for (size_t i = 0; i < out.scopes.size() && i < old.scopes.size(); ++i) {
    for (auto& [name, v] : out.scopes[i].vars) {
      auto it = old.scopes[i].vars.find(name);
      if (it == old.scopes[i].vars.end() || !(it->second == v)) v = WidenValue(v, heap_);
    }
  }
  for (auto& [id, attrs] : out.ns) {
    auto o = old.ns.find(id);
    for (auto& [k, v] : attrs) {
      if (o == old.ns.end() || o->second.count(k) == 0 || !(o->second.at(k) == v)) {
        v = WidenValue(v, heap_);
      }
    }
  }
  for (size_t i = 0; i < out.captures.size() && i < old.captures.size(); ++i) {
    if (!(out.captures[i] == old.captures[i])) {
      out.captures[i] = WidenValue(out.captures[i], heap_);
    }
  }
  return out;
}

void Evaluator::Bind(uint32_t target, const Value& v) {
  std::vector<std::pair<uint32_t, Value>> work = {{target, v}};
  while (!work.empty()) {
    auto [t, value] = std::move(work.back());
    work.pop_back();
    const Node& n = tree_.nodes[t];
    if (n.kind == NodeKind::kName) {
      st_.scopes.back().vars[n.text] = value;
    } else if (n.kind == NodeKind::kNSRef) {
      const Value ns = Lookup(n.text);
      std::vector<uint32_t> spaces;
      for (uint32_t id : ns.objs) {
        if (heap_.Get(id).kind == ObjKind::kNamespace) spaces.push_back(id);
      }
      const bool strong = spaces.size() == 1 && ns.bits == 0 && ns.strs.empty() &&
                          ns.ints.empty() && ns.objs.size() == 1;
      for (uint32_t id : spaces) {
        auto& attrs = st_.ns[id];
        auto it = attrs.find(n.text2);
        attrs[n.text2] = strong || it == attrs.end() ? value : ValueJoin(it->second, value);
      }
    } else if (n.kind == NodeKind::kTuple) {
      const Elements e = Iterate(value);
      for (size_t i = 0; i < n.list.size(); ++i) {
        work.emplace_back(n.list[i], e.exact && e.items.size() == n.list.size()
                                         ? e.items[i]
                                         : ValueJoin(e.element, Undef()));
      }
    }
  }
}

void Evaluator::Emit(const Value& v) {
  if (st_.captures.empty() || st_.dead) return;
  st_.captures.back() = Concat(st_.captures.back(), v);
}

// ---- findings -----------------------------------------------------------------------------

std::string Evaluator::Path(uint32_t node) const {
  const Node& n = tree_.nodes[node];
  const uint32_t end = std::max(n.end, n.offset);
  std::string_view s = text_.substr(std::min<size_t>(n.offset, text_.size()),
                                    std::min<size_t>(end, text_.size()) -
                                        std::min<size_t>(n.offset, text_.size()));
  std::string out = "\"";
  if (s.size() > kPathBytes) {
    size_t cut = kPathBytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    base::AppendEscaped(&out, s.substr(0, cut), {.escape_invisible = true});
    out += "...";
  } else {
    base::AppendEscaped(&out, s, {.escape_invisible = true});
  }
  out += '"';
  return out;
}

void Evaluator::Report(uint32_t offset, uint8_t envs, Severity severity,
                       std::string_view construct, std::string message) {
  if (envs == 0) return;
  auto key = std::make_tuple(offset, std::string(construct), severity);
  auto it = findings_.find(key);
  if (it != findings_.end()) {
    it->second.envs |= envs;
    return;
  }
  Finding f;
  f.offset = offset;
  f.envs = envs;
  f.severity = severity;
  f.construct = std::string(construct);
  f.message = std::move(message);
  findings_.emplace(std::move(key), std::move(f));
}

// ---- tasks --------------------------------------------------------------------------------

void Evaluator::PushExpr(uint32_t node, bool callee) {
  Task t{TaskKind::kExpr};
  t.node = node;
  t.vbase = vals_.size();
  t.callee = callee;
  tasks_.push_back(t);
}

void Evaluator::PushStmts(uint32_t node, int which) {
  Task t{TaskKind::kStmts};
  t.node = node;
  t.aux = static_cast<uint32_t>(which);
  t.vbase = vals_.size();
  tasks_.push_back(t);
}

Value Evaluator::PopValue() {
  Value v = std::move(vals_.back());
  vals_.pop_back();
  return v;
}

absl::Status Evaluator::Step() {
  Task& t = tasks_.back();
  switch (t.kind) {
    case TaskKind::kExpr:
      return StepExpr(t);
    case TaskKind::kStmts: {
      const Node& n = tree_.nodes[t.node];
      const std::vector<uint32_t>& list = t.aux == 0 ? n.list : t.aux == 1 ? n.list2 : n.list3;
      if (st_.dead || t.index >= list.size()) {
        tasks_.pop_back();
        return absl::OkStatus();
      }
      const uint32_t child = list[t.index++];
      Task s{TaskKind::kStmt};
      s.node = child;
      s.vbase = vals_.size();
      const NodeKind kind = tree_.nodes[child].kind;
      if (kind == NodeKind::kIf) s.kind = TaskKind::kIf;
      if (kind == NodeKind::kFor) s.kind = TaskKind::kFor;
      tasks_.push_back(s);
      return absl::OkStatus();
    }
    case TaskKind::kStmt:
      return StepStmt(t);
    case TaskKind::kIf:
      return StepIf(t);
    case TaskKind::kFor:
      return StepFor(t);
    case TaskKind::kInvoke:
    case TaskKind::kUncalled:
      return StepInvoke(t);
  }
  return absl::OkStatus();
}

absl::Status Evaluator::StepExpr(Task& t) {
  const uint32_t id = t.node;
  const Node& n = tree_.nodes[id];
  if (t.step == 0) {
    // Siblings are queued together but run one after another: a task's values start where the
    // stack is when it runs, above the values of the siblings that ran before it.
    t.vbase = vals_.size();
    std::vector<std::pair<uint32_t, bool>> kids;  // (node, callee)
    switch (n.kind) {
      case NodeKind::kTuple:
      case NodeKind::kList:
      case NodeKind::kConcat:
        for (uint32_t c : n.list) kids.emplace_back(c, false);
        break;
      case NodeKind::kDict:
        for (uint32_t p : n.list) {
          kids.emplace_back(tree_.nodes[p].a, false);
          kids.emplace_back(tree_.nodes[p].b, false);
        }
        break;
      case NodeKind::kCompare:
        kids.emplace_back(n.a, false);
        for (uint32_t o : n.list) kids.emplace_back(tree_.nodes[o].a, false);
        break;
      case NodeKind::kGetitem: {
        kids.emplace_back(n.a, false);
        const Node& key = tree_.nodes[n.b];
        if (key.kind == NodeKind::kSlice) {
          for (uint32_t part : {key.a, key.b, key.c}) {
            if (part != kNoNode) kids.emplace_back(part, false);
          }
        } else {
          kids.emplace_back(n.b, false);
        }
        break;
      }
      case NodeKind::kCall:
      case NodeKind::kFilter:
      case NodeKind::kTest:
        if (n.a != kNoNode) kids.emplace_back(n.a, n.kind == NodeKind::kCall);
        for (uint32_t c : n.list) kids.emplace_back(c, false);
        for (uint32_t k : n.list2) kids.emplace_back(tree_.nodes[k].a, false);
        if (n.b != kNoNode) kids.emplace_back(n.b, false);
        if (n.c != kNoNode) kids.emplace_back(n.c, false);
        break;
      case NodeKind::kConst:
      case NodeKind::kName:
      case NodeKind::kTemplateData:
      case NodeKind::kNSRef:
        break;
      default:
        for (uint32_t c : {n.a, n.b, n.c}) {
          if (c != kNoNode) kids.emplace_back(c, false);
        }
        break;
    }
    t.step = 1;
    if (n.kind == NodeKind::kFilter && n.a == kNoNode) {  // a filter or set block's filter
      vals_.push_back(injected_value_);
    }
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) PushExpr(it->first, it->second);
    return absl::OkStatus();
  }
  const size_t base = t.vbase;
  const bool callee = t.callee;
  std::vector<Value> v(std::make_move_iterator(vals_.begin() + base),
                       std::make_move_iterator(vals_.end()));
  if (t.step == 2) {  // a call's direct result and its bodies' results
    vals_.resize(base);
    Value r;
    for (const Value& x : v) r = ValueJoin(r, x);
    tasks_.pop_back();
    vals_.push_back(std::move(r));
    return absl::OkStatus();
  }
  vals_.resize(base);
  Value r;
  const auto args_of = [&](size_t first) {
    Args a;
    size_t i = first;
    for (size_t k = 0; k < n.list.size(); ++k) a.pos.push_back(v[i++]);
    for (uint32_t kw : n.list2) a.kw.emplace_back(tree_.nodes[kw].text, v[i++]);
    if (n.b != kNoNode) a.star = v[i++];
    if (n.c != kNoNode) a.starstar = v[i++];
    return a;
  };
  switch (n.kind) {
    case NodeKind::kConst:
      switch (n.const_type) {
        case ConstType::kNone:
          r = NoneValue();
          break;
        case ConstType::kBool:
          r = Bool(n.flag);
          break;
        case ConstType::kInt:
          r = Int(n.integer);
          break;
        case ConstType::kBigInt:
          r = AnyInt();
          break;
        case ConstType::kFloat:
          r = Bits(kFloat);
          break;
        case ConstType::kStr:
          r = n.text.size() <= limits_.max_string_bytes ? Str(n.text)
                                                        : AnyStr(Origin::kTemplate);
          break;
      }
      break;
    case NodeKind::kTemplateData:
      r = ValueJoin(Str(n.text), Str(n.text2));
      break;
    case NodeKind::kName:
      r = Lookup(n.text);
      break;
    case NodeKind::kTuple:
    case NodeKind::kList:
      r = Obj(MakeList(heap_, std::move(v), n.kind == NodeKind::kTuple));
      break;
    case NodeKind::kDict: {
      std::vector<std::string> keys;
      std::vector<Value> values;
      bool exact = true;
      Value key_any, val_any;
      for (size_t i = 0; i + 1 < v.size(); i += 2) {
        key_any = ValueJoin(key_any, v[i]);
        val_any = ValueJoin(val_any, v[i + 1]);
        const std::string* k = v[i].OnlyStr();
        if (k == nullptr) {
          exact = false;
          continue;
        }
        auto it = std::find(keys.begin(), keys.end(), *k);
        if (it != keys.end()) {
          values[it - keys.begin()] = v[i + 1];
        } else {
          keys.push_back(*k);
          values.push_back(v[i + 1]);
        }
      }
      r = Obj(exact ? MakeDict(heap_, std::move(keys), std::move(values))
                    : MakeDictOf(heap_, key_any, val_any));
      break;
    }
    case NodeKind::kCondExpr:
      r = ValueJoin(v[1], v.size() > 2 ? v[2] : Undef());
      if (std::optional<bool> c = Truth(v[0]); c.has_value()) {
        r = *c ? v[1] : (v.size() > 2 ? v[2] : Undef());
      }
      break;
    case NodeKind::kAnd:
    case NodeKind::kOr: {
      const std::optional<bool> c = Truth(v[0]);
      const bool is_and = n.kind == NodeKind::kAnd;
      if (c.has_value()) {
        r = (*c == is_and) ? v[1] : v[0];
      } else {
        r = ValueJoin(v[0], v[1]);
      }
      break;
    }
    case NodeKind::kNot: {
      const std::optional<bool> c = Truth(v[0]);
      r = c.has_value() ? Bool(!*c) : AnyBool();
      break;
    }
    case NodeKind::kNeg:
    case NodeKind::kPos:
      r = BinOp(n.kind == NodeKind::kNeg ? Tok::kSub : Tok::kAdd, Int(0), v[0]);
      break;
    case NodeKind::kBinOp:
      r = BinOp(n.op, v[0], v[1]);
      break;
    case NodeKind::kConcat:
      r = Str("");
      for (const Value& x : v) r = Concat(r, x);
      break;
    case NodeKind::kCompare: {
      r = AnyBool();
      if (n.list.size() == 1 && (tree_.nodes[n.list[0]].cmp == CompareOp::kEq ||
                                 tree_.nodes[n.list[0]].cmp == CompareOp::kNe)) {
        const std::string* a = v[0].OnlyStr();
        const std::string* b = v[1].OnlyStr();
        const int64_t* x = v[0].OnlyInt();
        const int64_t* y = v[1].OnlyInt();
        const bool eq = tree_.nodes[n.list[0]].cmp == CompareOp::kEq;
        if (a != nullptr && b != nullptr) r = Bool((*a == *b) == eq);
        if (x != nullptr && y != nullptr) r = Bool((*x == *y) == eq);
      }
      break;
    }
    case NodeKind::kGetattr:
      r = AccessName(v[0], n.text, Via::kAttr, id, callee);
      break;
    case NodeKind::kGetitem: {
      const Node& key = tree_.nodes[n.b];
      if (key.kind == NodeKind::kSlice) {
        size_t i = 1;
        Value parts[3] = {NoneValue(), NoneValue(), NoneValue()};
        const uint32_t nodes[3] = {key.a, key.b, key.c};
        for (int k = 0; k < 3; ++k) {
          if (nodes[k] != kNoNode) parts[k] = v[i++];
        }
        r = Slice(v[0], parts[0], parts[1], parts[2]);
      } else {
        r = Access(v[0], v[1], Via::kItem, id, callee);
      }
      break;
    }
    case NodeKind::kFilter:
      r = Filter(n.text, v[0], args_of(1), id);
      break;
    case NodeKind::kTest:
      r = Test(n.text, v[0], args_of(1), id);
      break;
    case NodeKind::kCall: {
      Args a = args_of(1);
      tasks_.back().step = 2;
      ExpandCall(id, v[0], a, base);
      return absl::OkStatus();
    }
    case NodeKind::kKeyword:
      r = v[0];
      break;
    default:
      r = Unknown();
      break;
  }
  tasks_.pop_back();
  vals_.push_back(std::move(r));
  return absl::OkStatus();
}

bool Evaluator::ExpandCall(uint32_t node, const Value& callee, const Args& args, size_t base) {
  (void)base;
  Value direct = callee;
  std::vector<uint32_t> bodies;
  direct.objs.clear();
  for (uint32_t id : callee.objs) {
    const HeapObj& o = heap_.Get(id);
    if (o.kind == ObjKind::kMacro || o.kind == ObjKind::kCaller ||
        (o.kind == ObjKind::kLoop && tree_.nodes[o.node].flag)) {
      bodies.push_back(id);
    } else {
      direct.objs.push_back(id);
    }
  }
  vals_.push_back(direct.empty() ? Value{} : Call(direct, args, node));
  for (uint32_t id : bodies) {
    Pending p;
    p.obj = id;
    p.node = node;
    p.args = args;
    pending_.push_back(std::move(p));
    Task t{TaskKind::kInvoke};
    t.node = node;
    t.aux = static_cast<uint32_t>(pending_.size() - 1);
    t.vbase = vals_.size();
    tasks_.push_back(t);
  }
  return !bodies.empty();
}

absl::Status Evaluator::StepStmt(Task& t) {
  const uint32_t id = t.node;
  const Node& n = tree_.nodes[id];
  switch (n.kind) {
    case NodeKind::kOutput:
      if (t.step == 0) {
        t.step = 1;
        for (auto it = n.list.rbegin(); it != n.list.rend(); ++it) {
          if (tree_.nodes[*it].kind != NodeKind::kTemplateData) PushExpr(*it);
        }
        return absl::OkStatus();
      } else {
        size_t i = t.vbase;
        for (uint32_t c : n.list) {
          const Node& child = tree_.nodes[c];
          if (child.kind == NodeKind::kTemplateData) {
            Emit(ValueJoin(Str(child.text), Str(child.text2)));
          } else {
            Emit(ToStr(vals_[i++]));
          }
        }
        vals_.resize(t.vbase);
      }
      break;
    case NodeKind::kAssign:
      if (t.step == 0) {
        t.step = 1;
        PushExpr(n.b);
        return absl::OkStatus();
      } else {
        const Value v = PopValue();
        Bind(n.a, v);
      }
      break;
    case NodeKind::kAssignBlock:
    case NodeKind::kFilterBlock:
      if (t.step == 0) {
        t.step = 1;
        st_.captures.push_back(Str(""));
        st_.scopes.emplace_back();
        PushStmts(id, 0);
        return absl::OkStatus();
      } else if (t.step == 1) {
        st_.scopes.pop_back();
        Value body = st_.captures.empty() ? AnyStr(Origin::kTemplate) : st_.captures.back();
        if (!st_.captures.empty()) st_.captures.pop_back();
        const uint32_t filter = n.kind == NodeKind::kAssignBlock ? n.b : n.a;
        if (filter != kNoNode) {
          t.step = 2;
          injected_value_ = body;
          PushExpr(filter);
          return absl::OkStatus();
        }
        if (n.kind == NodeKind::kAssignBlock) Bind(n.a, body);
      } else {
        const Value v = PopValue();
        if (n.kind == NodeKind::kAssignBlock) {
          Bind(n.a, v);
        } else {
          Emit(ToStr(v));
        }
      }
      break;
    case NodeKind::kMacro: {
      HeapObj o;
      o.kind = ObjKind::kMacro;
      o.node = id;
      std::map<std::string, Value> closure;
      for (size_t i = 1; i < st_.scopes.size(); ++i) {
        for (const auto& [k, v] : st_.scopes[i].vars) closure[k] = v;
      }
      for (auto& [k, v] : closure) {
        o.names.push_back(k);
        o.items.push_back(std::move(v));
      }
      const uint32_t obj = heap_.Intern(std::move(o));
      if (std::find(defined_.begin(), defined_.end(), obj) == defined_.end()) {
        defined_.push_back(obj);
      }
      st_.scopes.back().vars[n.text] = Obj(obj);
      break;
    }
    case NodeKind::kCallBlock: {
      const Node& call = tree_.nodes[n.a];
      if (t.step == 0) {
        t.step = 1;
        std::vector<uint32_t> kids = {call.a};
        kids.insert(kids.end(), call.list.begin(), call.list.end());
        for (uint32_t k : call.list2) kids.push_back(tree_.nodes[k].a);
        if (call.b != kNoNode) kids.push_back(call.b);
        if (call.c != kNoNode) kids.push_back(call.c);
        for (auto it = kids.rbegin(); it != kids.rend(); ++it) PushExpr(*it, it == kids.rend() - 1);
        return absl::OkStatus();
      }
      if (t.step == 1) {
        std::vector<Value> v(std::make_move_iterator(vals_.begin() + t.vbase),
                             std::make_move_iterator(vals_.end()));
        vals_.resize(t.vbase);
        Args a;
        size_t i = 1;
        for (size_t k = 0; k < call.list.size(); ++k) a.pos.push_back(v[i++]);
        for (uint32_t kw : call.list2) a.kw.emplace_back(tree_.nodes[kw].text, v[i++]);
        if (call.b != kNoNode) a.star = v[i++];
        if (call.c != kNoNode) a.starstar = v[i++];
        HeapObj o;
        o.kind = ObjKind::kCaller;
        o.node = id;
        std::map<std::string, Value> closure;
        for (size_t s = 1; s < st_.scopes.size(); ++s) {
          for (const auto& [k, val] : st_.scopes[s].vars) closure[k] = val;
        }
        for (auto& [k, val] : closure) {
          o.names.push_back(k);
          o.items.push_back(std::move(val));
        }
        const uint32_t caller = heap_.Intern(std::move(o));
        if (std::find(defined_.begin(), defined_.end(), caller) == defined_.end()) {
          defined_.push_back(caller);
        }
        a.kw.emplace_back("caller", Obj(caller));
        t.step = 2;
        const size_t base = vals_.size();
        Task& self = tasks_.back();
        self.vbase = base;
        ExpandCall(n.a, v[0], a, base);
        return absl::OkStatus();
      }
      Value r;
      for (size_t i = t.vbase; i < vals_.size(); ++i) r = ValueJoin(r, vals_[i]);
      vals_.resize(t.vbase);
      Emit(ToStr(r));
      break;
    }
    case NodeKind::kWith:
      if (t.step == 0) {
        t.step = 1;
        for (auto it = n.list3.rbegin(); it != n.list3.rend(); ++it) PushExpr(*it);
        return absl::OkStatus();
      } else if (t.step == 1) {
        std::vector<Value> v(std::make_move_iterator(vals_.begin() + t.vbase),
                             std::make_move_iterator(vals_.end()));
        vals_.resize(t.vbase);
        st_.scopes.emplace_back();
        for (size_t i = 0; i < n.list2.size() && i < v.size(); ++i) Bind(n.list2[i], v[i]);
        t.step = 2;
        PushStmts(id, 0);
        return absl::OkStatus();
      } else {
        st_.scopes.pop_back();
      }
      break;
    case NodeKind::kBlock:
    case NodeKind::kGeneration:
    case NodeKind::kScope:
      if (t.step == 0 && n.kind == NodeKind::kScope) {
        t.step = 1;
        PushExpr(n.a);
        return absl::OkStatus();
      }
      if (t.step <= 1) {
        if (n.kind == NodeKind::kScope) vals_.resize(t.vbase);
        t.step = 2;
        st_.scopes.emplace_back();
        PushStmts(id, 0);
        return absl::OkStatus();
      }
      st_.scopes.pop_back();
      break;
    case NodeKind::kExtends:
    case NodeKind::kInclude:
    case NodeKind::kImport:
    case NodeKind::kFromImport:
      if (t.step == 0) {
        t.step = 1;
        PushExpr(n.a);
        return absl::OkStatus();
      } else {
        vals_.resize(t.vbase);
        const char* what = n.kind == NodeKind::kExtends   ? "extends"
                           : n.kind == NodeKind::kInclude ? "include"
                           : n.kind == NodeKind::kImport  ? "import"
                                                          : "from ... import";
        Report(n.offset, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "template_load",
               absl::StrCat("{% ", what, " %} loads another template (", Path(n.a),
                            "): a chat template has none to load, and what a loader would "
                            "give is not scanned"));
        if (n.kind == NodeKind::kImport) st_.scopes.back().vars[n.text] = Opaque();
        for (const auto& [name, alias] : n.names) st_.scopes.back().vars[alias] = Opaque();
      }
      break;
    case NodeKind::kBreak:
    case NodeKind::kContinue:
      if (!loops_.empty() && (loop_frames_.empty() || loops_.size() > loop_frames_.back())) {
        Loop& l = loops_.back();
        State s = st_;
        (n.kind == NodeKind::kBreak ? l.breaks : l.continues).push_back(std::move(s));
        st_.dead = true;
      }
      break;
    default:
      break;
  }
  tasks_.pop_back();
  return absl::OkStatus();
}

// An if with its elifs and else: each test in the state the previous ones left, each body from
// there, the states at the ends of the branches joined (a branch whose test is always false is
// not taken; an always-true test ends the chain).
absl::Status Evaluator::StepIf(Task& t) {
  const Node& root = tree_.nodes[t.node];
  const auto test_of = [&](uint32_t k) {
    return k == 0 ? root.a : tree_.nodes[root.list2[k - 1]].a;
  };
  const auto body_of = [&](uint32_t k) { return k == 0 ? t.node : root.list2[k - 1]; };
  const uint32_t branches = 1 + static_cast<uint32_t>(root.list2.size());
  switch (t.step) {
    case 0: {
      State acc = st_;
      acc.dead = true;  // the join's identity
      saved_.push_back(std::move(acc));
      t.aux = static_cast<uint32_t>(saved_.size() - 1);
      t.index = 0;
      t.step = 1;
      PushExpr(test_of(0));
      return absl::OkStatus();
    }
    case 1: {
      const std::optional<bool> truth = Truth(PopValue());
      saved_.push_back(st_);  // the fall-through
      t.step = 3;
      if (truth.has_value() && *truth) saved_.back().dead = true;
      if (!truth.has_value() || *truth) {
        t.step = 2;
        PushStmts(body_of(t.index), 0);
      }
      return absl::OkStatus();
    }
    case 2:
      saved_[t.aux] = Join(saved_[t.aux], st_);
      [[fallthrough]];
    case 3:
      st_ = std::move(saved_.back());
      saved_.pop_back();
      if (++t.index < branches && !st_.dead) {
        t.step = 1;
        PushExpr(test_of(t.index));
        return absl::OkStatus();
      }
      if (!root.list3.empty() && !st_.dead) {
        t.step = 4;
        PushStmts(t.node, 2);
        return absl::OkStatus();
      }
      [[fallthrough]];
    case 4:
      st_ = Join(saved_[t.aux], st_);
      saved_.pop_back();
      tasks_.pop_back();
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Evaluator::StepFor(Task& t) {
  const uint32_t id = t.node;
  const Node& n = tree_.nodes[id];
  if (t.step == 0) {
    t.step = 1;
    PushExpr(n.b);
    return absl::OkStatus();
  }
  if (t.step == 1) {
    Loop l;
    l.elements = Iterate(PopValue());
    const uint64_t count = l.elements.items.size();
    l.unroll = l.elements.exact && unrolled_ + count <= limits_.max_loop_unroll;
    if (l.unroll) unrolled_ += count;
    l.may_be_empty = !l.elements.exact || count == 0 || n.c != kNoNode;
    saved_.push_back(st_);
    l.pre = saved_.size() - 1;
    st_.scopes.emplace_back();
    l.in = saved_.size();
    saved_.push_back(st_);
    loops_.push_back(std::move(l));
    t.aux = static_cast<uint32_t>(loops_.size() - 1);
    t.step = 2;
  }
  Loop& l = loops_[t.aux];
  const size_t depth = saved_[l.pre].scopes.size() + 1;
  switch (t.step) {
    case 2: {  // an iteration starts
      const uint32_t count = static_cast<uint32_t>(l.elements.items.size());
      if (l.unroll && l.k >= count) {
        t.step = 9;
        return absl::OkStatus();
      }
      HeapObj loop;
      loop.kind = ObjKind::kLoop;
      loop.node = id;
      Value element;
      if (l.unroll) {
        element = l.elements.items[l.k];
        loop.items = {element,
                      Int(l.k),
                      Int(count),
                      l.k > 0 ? l.elements.items[l.k - 1] : Undef(),
                      l.k + 1 < count ? l.elements.items[l.k + 1] : Undef(),
                      Bool(l.k == 0),
                      Bool(l.k + 1 == count)};
      } else {
        saved_[l.in] = st_;
        element = l.elements.element;
        const Value maybe = ValueJoin(element, Undef());
        loop.items = {element, AnyInt(),  l.elements.exact ? Int(count) : AnyInt(),
                      maybe,   maybe,     AnyBool(),
                      AnyBool()};
      }
      st_.scopes.back().vars["loop"] = Obj(heap_.Intern(std::move(loop)));
      Bind(n.a, element);
      if (n.c != kNoNode) {
        t.step = 3;
        PushExpr(n.c);
        return absl::OkStatus();
      }
      t.step = 4;
      return absl::OkStatus();
    }
    case 3: {  // the loop's test
      const std::optional<bool> truth = Truth(PopValue());
      if (!truth.has_value() || !*truth) l.skipped = st_;
      if (truth.has_value() && !*truth) {
        st_.dead = true;
        t.step = 5;
        return absl::OkStatus();
      }
      t.step = 4;
      return absl::OkStatus();
    }
    case 4:
      t.step = 5;
      PushStmts(id, 0);
      return absl::OkStatus();
    case 5: {  // an iteration ends
      State end = std::move(st_);
      for (State& c : l.continues) {
        c.scopes.resize(depth);
        end = Join(end, c);
      }
      l.continues.clear();
      if (l.skipped.has_value()) {
        end = Join(end, *l.skipped);
        l.skipped.reset();
      }
      end.scopes.resize(std::min(end.scopes.size(), depth));
      if (l.unroll) {
        st_ = std::move(end);
        ++l.k;
        t.step = 2;
        return absl::OkStatus();
      }
      State next = Join(saved_[l.in], end);
      if (l.k >= kExactRounds) next = Widen(saved_[l.in], next);
      if (next == saved_[l.in] || l.k >= kMaxRounds) {
        if (!(next == saved_[l.in])) {
          // Still changing: whatever changes becomes unknown (never SAFE when used as a name).
          for (size_t i = 0; i < next.scopes.size(); ++i) {
            for (auto& [k, v] : next.scopes[i].vars) {
              auto it = saved_[l.in].scopes[i].vars.find(k);
              if (it == saved_[l.in].scopes[i].vars.end() || !(it->second == v)) v = Unknown();
            }
          }
          for (auto& [nsid, attrs] : next.ns) {
            for (auto& [k, v] : attrs) v = ValueJoin(v, Unknown());
          }
        }
        st_ = std::move(next);
        t.step = 9;
        return absl::OkStatus();
      }
      st_ = std::move(next);
      ++l.k;
      t.step = 2;
      return absl::OkStatus();
    }
    case 9: {  // the loop ends: breaks joined, its scope dropped, else from the state before
      State post = std::move(st_);
      for (State& b : l.breaks) {
        b.scopes.resize(depth);
        post = Join(post, b);
      }
      post.scopes.resize(depth - 1);
      if (l.may_be_empty && !n.list2.empty()) {
        saved_[l.in] = std::move(post);
        st_ = saved_[l.pre];
        t.step = 10;
        PushStmts(id, 1);
        return absl::OkStatus();
      }
      st_ = std::move(post);
      saved_.resize(l.pre);
      loops_.pop_back();
      tasks_.pop_back();
      return absl::OkStatus();
    }
    case 10: {  // the else block ran
      st_ = Join(saved_[l.in], st_);
      saved_.resize(l.pre);
      loops_.pop_back();
      tasks_.pop_back();
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// A macro's, a caller's or a recursive loop's body, for one call: memoised by the arguments
// and the state they see, re-entered only with other arguments (a recursive call with the same
// ones gives an unknown string of the template's making).
absl::Status Evaluator::StepInvoke(Task& t) {
  Pending& p = pending_[t.aux];
  const HeapObj obj = heap_.Get(p.obj);  // a copy: the heap grows below
  const Node& def = tree_.nodes[obj.node];
  const bool loop = obj.kind == ObjKind::kLoop;
  // Parameters: names and defaults (aligned to the end), or the recursive loop's iterable.
  const std::vector<uint32_t> no_params;
  const std::vector<uint32_t>& params = loop ? no_params : def.list2;
  const std::vector<uint32_t>& defaults = loop ? no_params : def.list3;
  const size_t first_default = params.size() - defaults.size();
  switch (t.step) {
    case 0: {
      std::string key;
      absl::StrAppend(&key, p.obj, "(");
      for (const Value& v : p.args.pos) AppendKey(v, &key);
      for (const auto& [k, v] : p.args.kw) {
        absl::StrAppend(&key, k, "=");
        AppendKey(v, &key);
      }
      if (p.args.star.has_value()) AppendKey(*p.args.star, &key);
      if (p.args.starstar.has_value()) AppendKey(*p.args.starstar, &key);
      key += ")";
      for (const auto& [id, attrs] : st_.ns) {
        absl::StrAppend(&key, id, "{");
        for (const auto& [k, v] : attrs) {
          absl::StrAppend(&key, k, ":");
          AppendKey(v, &key);
        }
        key += "}";
      }
      for (const auto& [k, v] : st_.scopes[0].vars) {
        absl::StrAppend(&key, k, ":");
        AppendKey(v, &key);
      }
      if (auto it = memo_.find(key); it != memo_.end()) {
        st_.ns = it->second.second;
        vals_.push_back(it->second.first);
        pending_.pop_back();
        tasks_.pop_back();
        return absl::OkStatus();
      }
      if (in_progress_.count(key) > 0) {
        vals_.push_back(AnyStr(Origin::kTemplate));
        pending_.pop_back();
        tasks_.pop_back();
        return absl::OkStatus();
      }
      if (depth_ >= limits_.max_call_depth) {
        return base::LimitError(
            absl::StrCat("macro calls nested more than ", limits_.max_call_depth, " deep"),
            "max_call_depth", limits_.max_call_depth);
      }
      in_progress_.insert(key);
      p.memo = std::move(key);
      invoked_.insert(obj.node);
      ++depth_;
      saved_.push_back(st_);
      p.saved = saved_.size() - 1;
      // The body's scopes: the template's (as it is now), the closure, the parameters.
      State body;
      body.scopes.push_back(st_.scopes[0]);
      Scope closure;
      for (size_t i = 0; i < obj.names.size(); ++i) closure.vars[obj.names[i]] = obj.items[i];
      body.scopes.push_back(std::move(closure));
      body.scopes.emplace_back();
      body.ns = std::move(st_.ns);
      body.captures.push_back(Str(""));
      st_ = std::move(body);
      loop_frames_.push_back(loops_.size());
      if (loop) {
        // loop(iterable): the loop's body again over the new elements, its output the value.
        const Value it = p.args.pos.empty() ? Undef() : p.args.pos[0];
        vals_.push_back(it);
        Task f{TaskKind::kFor};
        f.node = obj.node;
        f.step = 1;
        f.vbase = vals_.size() - 1;
        t.step = 3;
        tasks_.push_back(f);
        return absl::OkStatus();
      }
      // Arguments past the parameters: varargs and kwargs.
      std::vector<Value> extra;
      for (size_t i = params.size(); i < p.args.pos.size(); ++i) extra.push_back(p.args.pos[i]);
      std::vector<std::string> extra_keys;
      std::vector<Value> extra_values;
      Value caller = Undef();
      for (const auto& [k, v] : p.args.kw) {
        if (k == "caller") {
          caller = v;
          continue;
        }
        bool is_param = false;
        for (uint32_t prm : params) is_param = is_param || tree_.nodes[prm].text == k;
        if (!is_param) {
          extra_keys.push_back(k);
          extra_values.push_back(v);
        }
      }
      Value varargs = Obj(MakeList(heap_, std::move(extra), /*tuple=*/true));
      Value kwargs = Obj(MakeDict(heap_, std::move(extra_keys), std::move(extra_values)));
      if (p.args.star.has_value()) varargs = ValueJoin(varargs, Obj(MakeListOf(heap_, Json())));
      if (p.args.starstar.has_value()) {
        kwargs = ValueJoin(kwargs, Obj(MakeDictOf(heap_, AnyStr(Origin::kData), Json())));
      }
      auto& vars = st_.scopes.back().vars;
      vars["varargs"] = varargs;
      vars["kwargs"] = kwargs;
      vars["caller"] = caller;
      p.param = 0;
      t.step = 1;
      return absl::OkStatus();
    }
    case 2: {  // a default's value
      st_.scopes.back().vars[tree_.nodes[params[p.param]].text] = PopValue();
      ++p.param;
      t.step = 1;
    }
      [[fallthrough]];
    case 1:
      while (p.param < params.size()) {
        const std::string& name = tree_.nodes[params[p.param]].text;
        const Value* kw = p.args.Kw(name);
        Value v;
        if (p.param < p.args.pos.size()) {
          v = p.args.pos[p.param];
        } else if (kw != nullptr) {
          v = *kw;
        } else if (p.param >= first_default) {
          t.step = 2;
          PushExpr(defaults[p.param - first_default]);
          return absl::OkStatus();
        } else {
          v = Undef();
        }
        if (p.args.star.has_value() && p.param >= p.args.pos.size() && kw == nullptr) {
          v = ValueJoin(v, Json());
        }
        st_.scopes.back().vars[name] = std::move(v);
        ++p.param;
      }
      t.step = 3;
      PushStmts(obj.node, 0);
      return absl::OkStatus();
    case 3: {
      Value result = st_.captures.empty() ? AnyStr(Origin::kTemplate) : st_.captures.back();
      if (result.empty()) result = Str("");
      State caller = std::move(saved_[p.saved]);
      saved_.resize(p.saved);
      caller.ns = std::move(st_.ns);
      caller.dead = caller.dead || st_.dead;
      st_ = std::move(caller);
      loop_frames_.pop_back();
      --depth_;
      in_progress_.erase(p.memo);
      memo_[p.memo] = {result, st_.ns};
      const bool uncalled = t.kind == TaskKind::kUncalled;
      pending_.pop_back();
      tasks_.pop_back();
      if (!uncalled) vals_.push_back(std::move(result));
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Analysis> Evaluator::Run() {
  if (tree_.nodes.empty()) return Analysis{};
  st_.scopes.emplace_back();
  PushStmts(0, 0);
  size_t next_uncalled = 0;
  State final_state;
  bool have_final = false;
  while (true) {
    while (!tasks_.empty()) {
      if (++steps_ > limits_.max_eval_steps) {
        return base::LimitError(absl::StrCat("a template whose evaluation takes more than ",
                                             limits_.max_eval_steps, " steps"),
                                "max_eval_steps", limits_.max_eval_steps);
      }
      absl::Status s = Step();
      if (!s.ok()) return s;
    }
    if (!have_final) {
      final_state = st_;
      have_final = true;
    }
    // Macros and call blocks whose body never ran: once, as a call without arguments would
    // run it (defaults bound), from the template's final state.
    while (next_uncalled < defined_.size() &&
           invoked_.count(heap_.Get(defined_[next_uncalled]).node) > 0) {
      ++next_uncalled;
    }
    if (next_uncalled >= defined_.size()) break;
    st_ = final_state;
    st_.dead = false;
    st_.captures.clear();
    Pending p;
    p.obj = defined_[next_uncalled++];
    p.node = heap_.Get(p.obj).node;
    pending_.push_back(std::move(p));
    Task t{TaskKind::kUncalled};
    t.node = pending_.back().node;
    t.aux = static_cast<uint32_t>(pending_.size() - 1);
    t.vbase = vals_.size();
    tasks_.push_back(t);
  }
  Analysis out;
  for (auto& [key, f] : findings_) out.findings.push_back(std::move(f));
  std::stable_sort(out.findings.begin(), out.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.offset < b.offset; });
  out.names.assign(names_.begin(), names_.end());
  out.unresolved = unresolved_;
  return out;
}

absl::StatusOr<Analysis> Analyze(std::string_view text, const Tree& tree, const Limits& limits) {
  return Evaluator(text, tree, limits).Run();
}

}  // namespace ckptscan::jinja
