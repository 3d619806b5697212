// The evaluation's cost bounds: how much work an allowed call or BUILD makes its loader do
// (ArgSpec's max_bytes, max_int_bits, max_elements, max_sized_bytes, number_text; CallShape's
// check; RuleSet's cost_budget). A value over a bound still matches its spec; the call is
// rule call.cost (ERROR) instead of SAFE.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "rules/rule_evaluate_run.h"

namespace ckptscan::rules {
namespace {

// Bits of |v| for an int128.
uint64_t Bits(absl::int128 v) {
  absl::uint128 m = v < 0 ? absl::uint128(-(v + 1)) + 1 : absl::uint128(v);
  uint64_t bits = 0;
  while (m != 0) {
    m >>= 1;
    ++bits;
  }
  return bits;
}

// An upper bound of the bits of an int's magnitude, from what the facts keep of it, or nullopt
// when they do not say (an int written as text longer than the VM keeps).
std::optional<uint64_t> IntBits(const pickle::Node& n) {
  if (n.fits) return Bits(n.i);
  // LONG1/LONG4: the VM keeps "<N-byte integer>" (two's complement: at most 8N bits).
  absl::string_view t = n.text;
  if (absl::ConsumePrefix(&t, "<") && absl::ConsumeSuffix(&t, "-byte integer>")) {
    uint64_t bytes = 0;
    if (absl::SimpleAtoi(t, &bytes) && bytes <= UINT64_MAX / 8) return 8 * bytes;
    return std::nullopt;
  }
  // INT/LONG text: its digits as written (any base up to 16: at most 4 bits a digit), unless
  // the VM cut it ("...").
  if (absl::EndsWith(n.text, "...")) return std::nullopt;
  return 4 * static_cast<uint64_t>(n.text.size());
}

// The product of a shape's dims, saturated at UINT64_MAX; nullopt when a dim is negative or
// wider than 64 bits (the loader refuses such a shape before it allocates).
std::optional<uint64_t> Elements(const pickle::Graph& g, const pickle::Node& shape) {
  uint64_t product = 1;
  bool zero = false;
  for (pickle::NodeId d : shape.items) {
    const pickle::Node* dim = internal::NodeAt(g, d);
    if (dim == nullptr || dim->kind != Kind::kInt || !dim->fits || dim->i < 0 ||
        dim->i > absl::int128(INT64_MAX)) {
      return std::nullopt;
    }
    const uint64_t v = static_cast<uint64_t>(dim->i);
    if (v == 0) zero = true;
    product = (v != 0 && product > UINT64_MAX / v) ? UINT64_MAX : product * v;
  }
  return zero ? 0 : product;
}

}  // namespace

void RuleSet::Impl::Run::CheckCost(const Node& n, int kind, const v1::ArgSpec& spec) {
  const auto hit = [&](std::string what, absl::string_view field, uint64_t bound,
                       absl::string_view why) {
    cost_hits_.push_back(CostHit{arg_index_, std::move(what), std::string(field),
                                 absl::StrCat(bound), std::string(why)});
  };
  switch (kind) {
    case v1::ARG_STR:
    case v1::ARG_BYTES:
      if (spec.has_max_bytes() && n.len > spec.max_bytes()) {
        hit(absl::StrCat("a ", pickle::KindName(n.kind), " of ", n.len, " bytes"), "max_bytes",
            spec.max_bytes(), "the loader parses or copies it whole");
      }
      if (kind == v1::ARG_STR && spec.has_max_sized_bytes()) {
        for (const std::string& p : spec.str_sized_prefixes()) {
          if (n.truncated || !SizedCode(n.text, p)) continue;
          uint64_t count = 0;
          for (char ch : absl::string_view(n.text).substr(p.size())) {
            count = count * 10 + static_cast<uint64_t>(ch - '0');  // at most 9 digits
          }
          const uint64_t bytes = count * (p == "U" ? 4 : 1);
          if (bytes > spec.max_sized_bytes()) {
            hit(absl::StrCat("the dtype code '", n.text, "', items of ", bytes, " bytes"),
                "max_sized_bytes", spec.max_sized_bytes(),
                "numpy keeps an item's size in a C int: a larger one wraps around to a negative "
                "size, and numpy reads and writes out of bounds with it (numpy 1.24's scalar() "
                "crashes on 'U536870912')");
          }
        }
      }
      if (kind == v1::ARG_STR && spec.has_number_text()) NumberTextCost(n, spec.number_text());
      return;
    case v1::ARG_INT:
      if (spec.has_max_int_bits()) {
        const std::optional<uint64_t> bits = IntBits(n);
        if (!bits.has_value() || *bits > spec.max_int_bits()) {
          hit(bits.has_value() ? absl::StrCat("an int of up to ", *bits, " bits")
                               : std::string("an int too wide for the scan facts to measure"),
              "max_int_bits", spec.max_int_bits(),
              "the loader's arithmetic on it (a gcd, a division) takes time that grows with the "
              "square of its size");
        }
      }
      return;
    case v1::ARG_INT_TUPLE:
      if (spec.has_max_elements()) {
        const std::optional<uint64_t> elements = Elements(*g_, n);
        if (elements.has_value() && *elements > spec.max_elements()) {
          hit(absl::StrCat(
                  "a shape of ",
                  *elements == UINT64_MAX ? std::string("2^64 or more") : absl::StrCat(*elements),
                  " elements"),
              "max_elements", spec.max_elements(),
              "the loader allocates that many elements before it reads any data");
        }
      }
      return;
    default:
      return;
  }
}

void RuleSet::Impl::Run::NumberTextCost(const Node& n, const v1::NumberText& bounds) {
  const auto hit = [&](std::string what, absl::string_view field, uint64_t bound,
                       absl::string_view why) {
    cost_hits_.push_back(CostHit{arg_index_, std::move(what), std::string(field),
                                 absl::StrCat(bound), std::string(why)});
  };
  const bool ascii = std::all_of(n.text.begin(), n.text.end(),
                                 [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (n.truncated || !ascii) {
    hit(n.truncated ? absl::StrCat("a number text of ", n.len, " bytes")
                    : std::string("a number text with characters outside ASCII"),
        "number_text", 0,
        "Python reads digits of every script in it, which the scan does not measure");
    return;
  }
  // The longest run of digits, and the exponent's digits after the first 'e' or 'E' (its
  // sign, underscores and leading zeros aside).
  uint64_t run = 0, longest = 0;
  size_t i = 0;
  for (; i < n.text.size() && n.text[i] != 'e' && n.text[i] != 'E'; ++i) {
    run = (n.text[i] >= '0' && n.text[i] <= '9') ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  if (bounds.has_max_digits() && longest > bounds.max_digits()) {
    hit(absl::StrCat("a number text with ", longest, " digits in a row"), "number_text.max_digits",
        bounds.max_digits(),
        "the loader converts each run of digits to an int, in time that grows with the square "
        "of its length");
  }
  if (i == n.text.size() || !bounds.has_max_exponent()) return;
  uint64_t exponent = 0;
  bool saturated = false;
  for (++i; i < n.text.size(); ++i) {
    const char c = n.text[i];
    if (c < '0' || c > '9') continue;
    if (exponent > (UINT64_MAX - 9) / 10) {
      saturated = true;
      break;
    }
    exponent = exponent * 10 + static_cast<uint64_t>(c - '0');
  }
  if (saturated || exponent > bounds.max_exponent()) {
    hit(saturated ? std::string("a number text with an exponent of 20 digits or more")
                  : absl::StrCat("a number text with an exponent of ", exponent),
        "number_text.max_exponent", bounds.max_exponent(),
        "fractions.Fraction computes 10**exponent and then a gcd with it: hours of CPU and "
        "gigabytes for an exponent of 10^9");
  }
}

void RuleSet::Impl::Run::CallCheckCost(v1::CallCheck check, const std::vector<NodeId>& args) {
  if (check != v1::CALL_CHECK_QTENSOR_ALLOCATION) return;
  // (storage, storage_offset, size, stride, ...): the storage is a persistent load of
  // ('storage', class, key, location, numel).
  arg_index_ = 2;
  const auto hit = [&](std::string what) {
    cost_hits_.push_back(CostHit{
        2, std::move(what), "check CALL_CHECK_QTENSOR_ALLOCATION", "its storage's element count",
        "torch allocates the quantized tensor's whole size before it views the storage"});
  };
  const Node* storage = args.empty() ? nullptr : internal::NodeAt(*g_, args[0]);
  const Node* size = args.size() < 3 ? nullptr : internal::NodeAt(*g_, args[2]);
  if (storage == nullptr || size == nullptr || storage->kind != Kind::kPersistent ||
      storage->items.empty()) {
    return;  // the shape did not match these kinds
  }
  const Node* pid = internal::NodeAt(*g_, storage->items[0]);
  const Node* numel = pid != nullptr && pid->kind == Kind::kTuple && pid->items.size() >= 5
                          ? internal::NodeAt(*g_, pid->items[4])
                          : nullptr;
  if (numel == nullptr || numel->kind != Kind::kInt || !numel->fits || numel->i < 0) {
    hit("a quantized tensor whose storage does not state its element count");
    return;
  }
  // The storage's element count is in bytes for the sub-byte dtypes, each byte holding two
  // (quint4x2) or four (quint2x4) of the tensor's elements.
  absl::int128 capacity = numel->i;
  const Node* cls = internal::NodeAt(*g_, pid->items[1]);
  if (cls != nullptr && cls->kind == Kind::kGlobal) {
    const std::string name = internal::GlobalName(*g_, *cls);
    if (absl::EndsWith(name, "QUInt4x2Storage")) capacity *= 2;
    if (absl::EndsWith(name, "QUInt2x4Storage")) capacity *= 4;
  }
  const std::optional<uint64_t> elements = Elements(*g_, *size);
  if (elements.has_value() && absl::int128(*elements) > capacity) {
    hit(absl::StrCat(
        "a quantized tensor of ",
        *elements == UINT64_MAX ? std::string("2^64 or more") : absl::StrCat(*elements),
        " elements over a storage of ", static_cast<uint64_t>(numel->i)));
  }
}

uint64_t RuleSet::Impl::Run::ArgumentUnits(NodeId id, int depth) const {
  const Node* n = internal::NodeAt(*g_, id);
  if (n == nullptr) return 0;
  switch (n->kind) {
    case Kind::kStr:
    case Kind::kBytes:
    case Kind::kByteArray:
      return n->len;
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kDict:
    case Kind::kSet:
    case Kind::kFrozenSet: {
      uint64_t units = n->items.size();
      if (depth < 1) {
        for (NodeId item : n->items) units = SaturatingAdd(units, ArgumentUnits(item, depth + 1));
      }
      return units;
    }
    default:
      return 0;
  }
}

void RuleSet::Impl::Run::CountArguments(const CallSite& c) {
  const v1::RuleSet& rules = rules_.proto;
  if (!rules.has_cost_budget() || !rules.cost_budget().has_max_repeated_argument_units() ||
      pickle_ == nullptr || budget_reported_) {
    return;
  }
  // The call's arguments tuple (or the BUILD state) and what is directly in it.
  const Node* args = internal::NodeAt(*g_, c.args);
  if (args == nullptr) return;
  uint64_t units = 0;
  if (args->kind == Kind::kTuple && c.op != CallOp::kBuild) {
    for (NodeId item : args->items) units = SaturatingAdd(units, ArgumentUnits(item, 0));
  } else {
    units = ArgumentUnits(c.args, 0);
  }
  argument_units_ = SaturatingAdd(argument_units_, units);
  const uint64_t size = pickle_->end > pickle_->start ? pickle_->end - pickle_->start : 0;
  const uint64_t allowed = SaturatingAdd(size, rules.cost_budget().max_repeated_argument_units());
  if (argument_units_ <= allowed) return;
  budget_reported_ = true;
  v1::Finding* f = Add("call.cost", v1::VERDICT_ERROR, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
  if (f == nullptr) return;
  f->set_category("other");
  f->set_call(Summary(c));
  SetMessage(f,
             absl::StrCat("the allowed calls of this pickle, up to this one, hand their callables ",
                          argument_units_, " bytes and items of arguments, over the pickle's own ",
                          size, " bytes plus ", rules.cost_budget().max_repeated_argument_units(),
                          " (rules field cost_budget.max_repeated_argument_units): values the memo "
                          "shares are parsed or copied again at every call; not verified"));
}

uint64_t RuleSet::Impl::Run::SaturatingAdd(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void RuleSet::Impl::Run::CostFinding(const CallSite& c, const std::string& name) {
  if (cost_hits_.empty()) return;
  const CostHit& h = cost_hits_.front();
  v1::Finding* f = Add("call.cost", v1::VERDICT_ERROR, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
  if (f == nullptr) return;
  f->set_category("other");
  f->set_global(name);
  f->set_call(Summary(c));
  const std::string where =
      h.arg < 0 ? std::string("'s BUILD state") : absl::StrCat(" argument ", h.arg + 1);
  SetMessage(f,
             absl::StrCat(name, where, ": ", h.what, " is over the bound of ", h.bound,
                          " (rules field ", h.field, "): ", h.why, "; the file is not verified"));
}

}  // namespace ckptscan::rules
