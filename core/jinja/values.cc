#include "core/jinja/values.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ckptscan::jinja {
namespace {

template <typename T>
void Unite(std::vector<T>* a, const std::vector<T>& b) {
  if (b.empty()) return;
  std::vector<T> out;
  out.reserve(a->size() + b.size());
  std::set_union(a->begin(), a->end(), b.begin(), b.end(), std::back_inserter(out));
  *a = std::move(out);
}

}  // namespace

Value Bits(uint32_t bits) {
  Value v;
  v.bits = bits;
  return v;
}
Value Undef() { return Bits(kUndefined); }
Value NoneValue() { return Bits(kNone); }
Value Bool(bool b) { return Bits(b ? kTrue : kFalse); }
Value AnyBool() { return Bits(kTrue | kFalse); }
Value Int(int64_t i) {
  Value v;
  v.ints = {i};
  return v;
}
Value AnyInt() { return Bits(kAnyInt); }
Value Str(std::string s) {
  Value v;
  v.strs.push_back(std::move(s));
  return v;
}
Value AnyStr(Origin origin) {
  Value v = Bits(kAnyStr);
  v.origin = origin;
  return v;
}
Value Json() { return Bits(kJson); }
Value Unknown() { return Bits(kUnknown); }
Value Opaque() { return Bits(kOpaque); }
Value Obj(uint32_t id) {
  Value v;
  v.objs = {id};
  return v;
}

void AppendKey(const Value& v, std::string* out) {
  absl::StrAppend(out, "<", v.bits, ",", static_cast<int>(v.origin), "|");
  for (const std::string& s : v.strs) absl::StrAppend(out, s.size(), ":", s, ";");
  out->push_back('|');
  for (int64_t i : v.ints) absl::StrAppend(out, i, ";");
  out->push_back('|');
  for (uint32_t o : v.objs) absl::StrAppend(out, o, ";");
  out->push_back('>');
}

uint32_t Heap::Intern(HeapObj obj) {
  std::string key;
  absl::StrAppend(&key, static_cast<int>(obj.kind), ",", obj.exact, ",", obj.node, ",",
                  obj.name.size(), ":", obj.name, "[");
  for (const Value& v : obj.items) AppendKey(v, &key);
  key.push_back(']');
  for (const std::string& k : obj.keys) absl::StrAppend(&key, k.size(), ":", k, ";");
  key.push_back('/');
  for (const std::string& k : obj.names) absl::StrAppend(&key, k.size(), ":", k, ";");
  auto [it, inserted] = index_.try_emplace(std::move(key), static_cast<uint32_t>(objs_.size()));
  if (inserted) objs_.push_back(std::move(obj));
  return it->second;
}

void Heap::Widen(uint32_t id, const Value& extra) {
  auto [it, inserted] = widened_.try_emplace(id, extra);
  if (!inserted) it->second = Join(it->second, extra, *this);
}

const Value* Heap::Widened(uint32_t id) const {
  auto it = widened_.find(id);
  return it == widened_.end() ? nullptr : &it->second;
}

uint32_t MakeList(Heap& heap, std::vector<Value> items, bool tuple) {
  HeapObj o;
  o.kind = tuple ? ObjKind::kTuple : ObjKind::kList;
  o.exact = true;
  o.items = std::move(items);
  return heap.Intern(std::move(o));
}

uint32_t MakeListOf(Heap& heap, Value element, bool tuple) {
  HeapObj o;
  o.kind = tuple ? ObjKind::kTuple : ObjKind::kList;
  o.items.push_back(std::move(element));
  return heap.Intern(std::move(o));
}

uint32_t MakeDict(Heap& heap, std::vector<std::string> keys, std::vector<Value> values) {
  HeapObj o;
  o.kind = ObjKind::kDict;
  o.exact = true;
  o.keys = std::move(keys);
  o.items = std::move(values);
  return heap.Intern(std::move(o));
}

uint32_t MakeDictOf(Heap& heap, Value key, Value value) {
  HeapObj o;
  o.kind = ObjKind::kDict;
  o.items = {std::move(key), std::move(value)};
  return heap.Intern(std::move(o));
}

namespace {

// The union of two values without merging objects (the shallow part of Join).
void UniteShallow(Value* a, const Value& b) {
  if (b.bits & kAnyStr) {
    a->origin = (a->bits & kAnyStr) ? std::max(a->origin, b.origin) : b.origin;
  }
  a->bits |= b.bits;
  Unite(&a->strs, b.strs);
  Unite(&a->ints, b.ints);
  Unite(&a->objs, b.objs);
}

// Constants past the cap, or absorbed by "any", become "any" of their kind. Constant strings
// are the template's own text: turned into "any", they keep that origin.
void Normalize(Value* v) {
  if (!v->strs.empty() && ((v->bits & kAnyStr) || v->strs.size() > kMaxConstants)) {
    v->origin = (v->bits & kAnyStr) ? std::max(v->origin, Origin::kTemplate) : Origin::kTemplate;
    v->bits |= kAnyStr;
    v->strs.clear();
  }
  if (!v->ints.empty() && ((v->bits & kAnyInt) || v->ints.size() > kMaxConstants)) {
    v->bits |= kAnyInt;
    v->ints.clear();
  }
}

// The element summary of a container object (lists, tuples, ranges: their elements; dicts:
// [keys, values]), including what the template added by mutating it.
void Summary(const HeapObj& o, const Value* widened, Value* element, Value* value) {
  if (o.kind == ObjKind::kDict) {
    if (o.exact) {
      for (const std::string& k : o.keys) UniteShallow(element, Str(k));
      for (const Value& v : o.items) UniteShallow(value, v);
    } else if (o.items.size() == 2) {
      UniteShallow(element, o.items[0]);
      UniteShallow(value, o.items[1]);
    }
  } else {
    for (const Value& v : o.items) UniteShallow(element, v);
  }
  if (widened != nullptr) {
    UniteShallow(element, *widened);
    if (o.kind == ObjKind::kDict) UniteShallow(value, *widened);
  }
}

// Too many object ids: containers of one kind merge into one summary container, one level
// deep (nested ids past the cap become "unknown", which is never SAFE).
void MergeObjects(Value* v, Heap& heap) {
  if (v->objs.size() <= kMaxObjects) return;
  std::vector<uint32_t> keep;
  Value elem[3], val;  // list, tuple, dict keys
  bool any[3] = {false, false, false};
  for (uint32_t id : v->objs) {
    const HeapObj& o = heap.Get(id);
    const int slot = o.kind == ObjKind::kList    ? 0
                     : o.kind == ObjKind::kTuple ? 1
                     : o.kind == ObjKind::kDict  ? 2
                                                 : -1;
    if (slot < 0) {
      keep.push_back(id);
      continue;
    }
    any[slot] = true;
    Summary(o, heap.Widened(id), &elem[slot], &val);
  }
  for (Value* e : {&elem[0], &elem[1], &elem[2], &val}) {
    Normalize(e);
    if (e->objs.size() > kMaxObjects) {
      e->objs.clear();
      e->bits |= kUnknown;
    }
  }
  if (any[0]) keep.push_back(MakeListOf(heap, elem[0]));
  if (any[1]) keep.push_back(MakeListOf(heap, elem[1], /*tuple=*/true));
  if (any[2]) keep.push_back(MakeDictOf(heap, elem[2], val));
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  v->objs = std::move(keep);
  if (v->objs.size() > kMaxObjects) {
    v->objs.clear();
    v->bits |= kUnknown;
  }
}

}  // namespace

Value Join(const Value& a, const Value& b, Heap& heap) {
  Value out = a;
  UniteShallow(&out, b);
  Normalize(&out);
  MergeObjects(&out, heap);
  return out;
}

Value WidenValue(const Value& a, Heap& heap) {
  Value out = a;
  if (!out.strs.empty()) {
    out.origin = (out.bits & kAnyStr) ? std::max(out.origin, Origin::kTemplate)
                                      : Origin::kTemplate;
    out.bits |= kAnyStr;
    out.strs.clear();
  }
  if (!out.ints.empty()) {
    out.bits |= kAnyInt;
    out.ints.clear();
  }
  std::vector<uint32_t> objs;
  for (uint32_t id : out.objs) {
    const HeapObj& o = heap.Get(id);
    if (o.kind != ObjKind::kList && o.kind != ObjKind::kTuple && o.kind != ObjKind::kDict) {
      objs.push_back(id);
      continue;
    }
    Value elem, val;
    Summary(o, heap.Widened(id), &elem, &val);
    for (Value* e : {&elem, &val}) {
      if (!e->strs.empty()) {
        e->origin = Origin::kTemplate;
        e->bits |= kAnyStr;
        e->strs.clear();
      }
      if (!e->ints.empty()) {
        e->bits |= kAnyInt;
        e->ints.clear();
      }
      if (e->objs.size() > kMaxObjects) {
        e->objs.clear();
        e->bits |= kUnknown;
      }
    }
    objs.push_back(o.kind == ObjKind::kDict ? MakeDictOf(heap, elem, val)
                                            : MakeListOf(heap, elem, o.kind == ObjKind::kTuple));
  }
  std::sort(objs.begin(), objs.end());
  objs.erase(std::unique(objs.begin(), objs.end()), objs.end());
  out.objs = std::move(objs);
  MergeObjects(&out, heap);
  return out;
}

}  // namespace ckptscan::jinja
