// The abstract values of the template evaluation (core/jinja/analyzer.h): what a Jinja
// expression may evaluate to, as a finite description.
//
// A Value is a union of possibilities: scalar kinds as bits (Undefined, None, booleans, any int,
// any float, any string of an origin, any JSON data, a value of unknown type, an object already
// reported), a few constants (strings and ints, at most kMaxConstants of each: more become "any")
// and references to objects in a Heap (lists, tuples, dicts, namespaces, macros, loop contexts,
// bound methods, Jinja's globals, cyclers, joiners, ranges, groupby groups).
//
// Origin says who chose a string the evaluation could not fold: the user's data (the messages
// and tools given at render time), the template itself (its own text, transformed in ways not
// folded), or the model's files (special tokens such as bos_token, which the same attacker
// writes). A name of template or token origin is attacker-chosen.
//
// Heap objects are immutable and hash-consed (one id per distinct object), so that equal
// values are equal ids and loop evaluation reaches a fixpoint; the state of namespaces lives in
// the evaluation's State, and a container a template mutates (list.append) is widened in place,
// once and for good. Value trees are shallow: objects refer to objects by id; no function here
// recurses on a value's depth.
//
// Thread-compatible: one Heap per evaluation.
#ifndef CKPTSCAN_CORE_JINJA_VALUES_H_
#define CKPTSCAN_CORE_JINJA_VALUES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ckptscan::jinja {

inline constexpr size_t kMaxConstants = 16;  // strings (and ints) a Value keeps before "any"
inline constexpr size_t kMaxObjects = 24;    // object ids a Value keeps before merging

enum class Origin : uint8_t { kData = 0, kTemplate = 1, kToken = 2 };

enum Bits : uint32_t {
  kUndefined = 1u << 0,
  kNone = 1u << 1,
  kTrue = 1u << 2,
  kFalse = 1u << 3,
  kAnyInt = 1u << 4,
  kFloat = 1u << 5,
  kAnyStr = 1u << 6,   // any string (origin in Value::origin)
  kJson = 1u << 7,     // any JSON value from the render context (dict, list, str, number...)
  kUnknown = 1u << 8,  // a value of unknown type (a call of something unknown)
  kOpaque = 1u << 9,   // an object outside data, already reported: no further findings
};

struct Value {
  uint32_t bits = 0;
  Origin origin = Origin::kData;  // of kAnyStr
  std::vector<std::string> strs;  // constant strings, sorted, unique
  std::vector<int64_t> ints;      // constant ints, sorted, unique
  std::vector<uint32_t> objs;     // heap ids, sorted, unique

  bool operator==(const Value& o) const = default;
  bool empty() const { return bits == 0 && strs.empty() && ints.empty() && objs.empty(); }
  bool MayBeStr() const { return (bits & (kAnyStr | kJson | kUnknown)) != 0 || !strs.empty(); }
  // A single constant string (and nothing else).
  const std::string* OnlyStr() const {
    return bits == 0 && ints.empty() && objs.empty() && strs.size() == 1 ? &strs[0] : nullptr;
  }
  const int64_t* OnlyInt() const {
    return bits == 0 && strs.empty() && objs.empty() && ints.size() == 1 ? &ints[0] : nullptr;
  }
};

Value Bits(uint32_t bits);
Value Undef();
Value NoneValue();
Value Bool(bool b);
Value AnyBool();
Value Int(int64_t i);
Value AnyInt();
Value Str(std::string s);
Value AnyStr(Origin origin);
Value Json();
Value Unknown();
Value Opaque();
Value Obj(uint32_t id);

enum class ObjKind : uint8_t {
  kList,
  kTuple,
  kDict,
  kNamespace,  // node: the creation site (its attributes live in State)
  kMacro,      // node: the macro; items: the enclosing scopes' values when defined (closure)
  kCaller,     // node: the call block; closure as kMacro
  kLoop,       // node: the for loop; items: [element, index0, length, previtem, nextitem, first, last]
  kMethod,     // name: the method; items[0]: the receiver
  kGlobal,     // name: range, dict, namespace, lipsum, cycler, joiner, raise_exception, strftime_now
  kCycler,     // items[0]: the items' join
  kJoiner,     // items[0]: the separator
  kRange,      // items: exact ints, or items[0] an int summary
  kGroup,      // groupby's (grouper, list)
};

struct HeapObj {
  ObjKind kind = ObjKind::kList;
  bool exact = false;              // list/tuple/range: items are the elements; dict: keys exact
  std::vector<Value> items;        // exact elements; or [element] / [key, value] summaries
  std::vector<std::string> keys;   // exact dict: its keys, parallel to items
  std::vector<std::string> names;  // kMacro/kCaller: the closure's variable names
  uint32_t node = UINT32_MAX;
  std::string name;
};

class Heap final {
 public:
  // The id of `obj` (an existing one when an equal object exists).
  uint32_t Intern(HeapObj obj);
  const HeapObj& Get(uint32_t id) const { return objs_[id]; }
  size_t size() const { return objs_.size(); }

  // A container the template mutated: from now on its elements also include `extra`, and it is
  // no longer exact.
  void Widen(uint32_t id, const Value& extra);
  const Value* Widened(uint32_t id) const;

 private:
  std::vector<HeapObj> objs_;
  absl::flat_hash_map<std::string, uint32_t> index_;
  std::map<uint32_t, Value> widened_;
};

// The union of a and b, with constants past kMaxConstants turned into "any" of their kind and
// object sets past kMaxObjects merged by kind.
Value Join(const Value& a, const Value& b, Heap& heap);

// a with every constant turned into "any" of its kind and every container into a summary of its
// elements (loop evaluation's widening: what still changes after a few rounds).
Value WidenValue(const Value& a, Heap& heap);

// Serialisation for hashing and equality (deterministic).
void AppendKey(const Value& v, std::string* out);

// A list (or tuple) of exactly these elements, or of unknown length with this element.
uint32_t MakeList(Heap& heap, std::vector<Value> items, bool tuple = false);
uint32_t MakeListOf(Heap& heap, Value element, bool tuple = false);
uint32_t MakeDict(Heap& heap, std::vector<std::string> keys, std::vector<Value> values);
uint32_t MakeDictOf(Heap& heap, Value key, Value value);

}  // namespace ckptscan::jinja

#endif  // CKPTSCAN_CORE_JINJA_VALUES_H_
