// The cost bounds of the rules (ArgSpec's max_bytes, max_int_bits, max_elements,
// max_sized_bytes, number_text; CallShape's check; RuleSet's cost_budget) and of the default
// rules' entries: a call of the allowed shape whose arguments would cost its loader hours or
// gigabytes is call.cost (ERROR), never SAFE.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/facts_builder_for_test.h"
#include "rules/rule_set.h"

namespace ckptscan::rules {
namespace {

using ::ckptscan::rules::testing::FactsBuilder;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using NodeId = pickle::NodeId;

Evaluation Eval(const pickle::StreamFacts& facts, const RuleSet& rules = *RuleSet::Default()) {
  return rules.Evaluate(facts, "data.pkl");
}

std::vector<std::string> Ids(const Evaluation& e) {
  std::vector<std::string> ids;
  for (const v1::Finding& f : e.findings) ids.push_back(f.rule_id());
  return ids;
}

// The evaluation of one call of module.name with `args` (built by `make`).
template <typename Make>
Evaluation EvalCall(const std::string& module, const std::string& name, Make make) {
  FactsBuilder b;
  const NodeId callee = b.Global(module, name);
  b.Reduce(callee, make(b));
  return Eval(b.Stream());
}

Evaluation Fraction(const std::string& text) {
  return EvalCall("fractions", "Fraction", [&](FactsBuilder& b) { return b.Tuple({b.Str(text)}); });
}

// The one finding is call.cost (ERROR) and its message names `field`.
void ExpectCost(const Evaluation& e, const std::string& field) {
  ASSERT_THAT(Ids(e), ElementsAre("call.cost"));
  EXPECT_EQ(e.verdict, v1::VERDICT_ERROR);
  EXPECT_THAT(e.findings[0].message(), HasSubstr(absl::StrCat("rules field ", field)));
}

void ExpectSafe(const Evaluation& e) {
  EXPECT_THAT(Ids(e), IsEmpty());
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE);
}

TEST(CostBoundsTest, AFractionWithAHugeExponentIsErrorNotSafe) {
  const Evaluation e = Fraction("1e999999999");
  ExpectCost(e, "number_text.max_exponent");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("fractions.Fraction argument 1"));
  EXPECT_THAT(e.findings[0].message(), HasSubstr("an exponent of 999999999"));
}

// Every way Python's Fraction (3.11 to 3.13) spells an exponent is measured.
TEST(CostBoundsTest, FractionExponentsAreMeasuredHoweverTheyAreWritten) {
  for (const std::string& text : std::vector<std::string>{
           "1e-999999999", "1E" + std::string(40, '0') + "999999999", "  1.5e999999999\n",
           "1e999_999_999", "1e99999999999999999999999", "-7/1e999999"}) {
    SCOPED_TRACE(text);
    ExpectCost(Fraction(text), "number_text.max_exponent");
  }
  // Digits of another script are digits to Python's \d and int(): not measured, not passed.
  ExpectCost(Fraction("1e\xd9\xa9\xd9\xa9\xd9\xa9\xd9\xa9\xd9\xa9"), "number_text");
  for (const char* text : {"3/7", "-1.5", "1e4300", "1E-4300", "0", "  2/3  "}) {
    SCOPED_TRACE(text);
    ExpectSafe(Fraction(text));
  }
}

TEST(CostBoundsTest, FractionDigitRunsStopAtIntsLimit) {
  ExpectCost(Fraction(std::string(4301, '1')), "number_text.max_digits");
  ExpectSafe(Fraction(std::string(4300, '1') + "/" + std::string(4300, '7')));
  // A text the VM kept only in part cannot be measured: over the bound.
  FactsBuilder b;
  b.Reduce(b.Global("fractions", "Fraction"), b.Tuple({b.LongStr("1", 1 << 20)}));
  const Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_ERROR);
}

TEST(CostBoundsTest, FractionOfWideIntsIsErrorForItsGcd) {
  ExpectCost(EvalCall("fractions", "Fraction",
                      [](FactsBuilder& b) {
                        return b.Tuple({b.WideInt((1 << 17) + 9), b.Int(3)});
                      }),
             "max_int_bits");
  ExpectSafe(EvalCall("fractions", "Fraction", [](FactsBuilder& b) {
    return b.Tuple({b.WideInt(1 << 17), b.Int(3)});  // 2^20 bits: at the bound
  }));
  ExpectSafe(EvalCall("fractions", "Fraction", [](FactsBuilder& b) {
    return b.Tuple({b.Int(3), b.Int(7)});
  }));
}

TEST(CostBoundsTest, RangeOfWideIntsIsErrorForItsLengthsDivision) {
  ExpectCost(EvalCall("builtins", "range",
                      [](FactsBuilder& b) {
                        return b.Tuple({b.Int(0), b.WideInt(8193), b.Int(1)});
                      }),
             "max_int_bits");
  ExpectSafe(EvalCall("builtins", "range", [](FactsBuilder& b) {
    return b.Tuple({b.Int(0), b.WideInt(8192), b.Int(3)});
  }));
}

TEST(CostBoundsTest, LongTextForDecimalAndDeviceIsError) {
  ExpectCost(EvalCall("decimal", "Decimal",
                      [](FactsBuilder& b) { return b.Tuple({b.LongStr("9", 65537)}); }),
             "max_bytes");
  ExpectSafe(EvalCall("decimal", "Decimal", [](FactsBuilder& b) {
    return b.Tuple({b.Str("-1.5E+999999999999999999")});  // libmpdec keeps the exponent
  }));
  ExpectCost(
      EvalCall("torch", "device",
               [](FactsBuilder& b) { return b.Tuple({b.Str("cuda:" + std::string(5000, '1'))}); }),
      "max_bytes");
  ExpectSafe(EvalCall("torch", "device", [](FactsBuilder& b) {
    return b.Tuple({b.Str("cuda"), b.Int(0)});
  }));
}

// bytearray(n) allocates n zero bytes, bytearray(range(...)) iterates it: neither is an
// argument bytearray's own pickling writes.
TEST(CostBoundsTest, BytearrayTakesOnlyTheTextOrBytesItCopies) {
  EXPECT_THAT(Ids(EvalCall("builtins", "bytearray",
                           [](FactsBuilder& b) { return b.Tuple({b.Int(int64_t{1} << 36)}); })),
              ElementsAre("call.shape"));
  FactsBuilder b;
  const NodeId range = b.Reduce(b.Global("builtins", "range"),
                                b.Tuple({b.Int(0), b.Int(int64_t{1} << 40), b.Int(1)}));
  b.Reduce(b.Global("builtins", "bytearray"), b.Tuple({range}));
  EXPECT_THAT(Ids(Eval(b.Stream())), ElementsAre("call.shape"));
  ExpectSafe(
      EvalCall("builtins", "bytearray", [](FactsBuilder& b) { return b.Tuple({b.Bytes("abc")}); }));
  ExpectSafe(EvalCall("builtins", "bytearray", [](FactsBuilder& b) {
    return b.Tuple({b.Str("\xc3\xbf"), b.Str("latin-1")});
  }));
  FactsBuilder c;
  const NodeId enc =
      c.Reduce(c.Global("_codecs", "encode"), c.Tuple({c.Str("abc"), c.Str("latin1")}));
  c.Reduce(c.Global("builtins", "bytearray"), c.Tuple({enc}));
  ExpectSafe(Eval(c.Stream()));
}

TEST(CostBoundsTest, NumpyReconstructAllocatesNothingBeforeItsState) {
  for (const char* module : {"numpy.core.multiarray", "numpy._core.multiarray"}) {
    ExpectCost(EvalCall(module, "_reconstruct",
                        [](FactsBuilder& b) {
                          return b.Tuple({b.Global("numpy", "ndarray"),
                                          b.IntTuple({int64_t{1} << 40}), b.Bytes("b")});
                        }),
               "max_elements");
    ExpectSafe(EvalCall(module, "_reconstruct", [](FactsBuilder& b) {
      return b.Tuple({b.Global("numpy", "ndarray"), b.IntTuple({0}), b.Bytes("b")});
    }));
  }
  // A product past 2^64 is measured, not wrapped.
  ExpectCost(
      EvalCall("numpy.core.multiarray", "_reconstruct",
               [](FactsBuilder& b) {
                 return b.Tuple({b.Global("numpy", "ndarray"),
                                 b.IntTuple({int64_t{1} << 32, int64_t{1} << 32}), b.Bytes("b")});
               }),
      "max_elements");
}

NodeId Dtype(FactsBuilder& b, const std::string& code) {
  return b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str(code), b.Bool(false), b.Bool(true)}));
}

// numpy 1.24 keeps an item's size in a C int: 'U999999999' wraps negative, and scalar() on it
// crashes the loading process.
TEST(CostBoundsTest, ANumpyItemSizePastACIntIsError) {
  for (const char* code : {"U999999999", "U536870912"}) {
    SCOPED_TRACE(code);
    FactsBuilder b;
    b.Reduce(b.Global("numpy.core.multiarray", "scalar"),
             b.Tuple({Dtype(b, code), b.Bytes("abcd")}));
    ExpectCost(Eval(b.Stream()), "max_sized_bytes");
  }
  for (const char* code : {"U536870911", "V999999999", "S999999999", "U3", "f8"}) {
    SCOPED_TRACE(code);
    FactsBuilder b;
    Dtype(b, code);
    ExpectSafe(Eval(b.Stream()));
  }
}

TEST(CostBoundsTest, ANumpyScalarComesWithItsBytes) {
  FactsBuilder b;
  b.Reduce(b.Global("numpy.core.multiarray", "scalar"), b.Tuple({Dtype(b, "V999999999")}));
  EXPECT_THAT(Ids(Eval(b.Stream())), ElementsAre("call.shape"));
}

Evaluation Qtensor(int64_t numel, std::initializer_list<int64_t> size,
                   std::initializer_list<int64_t> stride,
                   const std::string& storage_class = "QInt8Storage") {
  FactsBuilder b;
  const NodeId storage = b.Storage(storage_class, "0", numel);
  const NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
  b.Reduce(b.Global("torch._utils", "_rebuild_qtensor"),
           b.Tuple({storage, b.Int(0), b.IntTuple(size), b.IntTuple(stride),
                    b.Tuple({b.Global("torch", "per_tensor_affine"), b.Float(0.5), b.Int(0)}),
                    b.Bool(false), od}));
  return Eval(b.Stream());
}

// torch._empty_affine_quantized(size) comes before set_: the whole size is allocated even when
// a stride of 0 keeps the tensor inside a one-element storage.
TEST(CostBoundsTest, AQuantizedTensorLargerThanItsStorageIsError) {
  const Evaluation e = Qtensor(1, {int64_t{1} << 36}, {0});
  ExpectCost(e, "check CALL_CHECK_QTENSOR_ALLOCATION");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("68719476736 elements over a storage of 1"));
  ExpectSafe(Qtensor(12, {3, 4}, {4, 1}));
  ExpectSafe(Qtensor(12, {0}, {1}));
}

// The sub-byte dtypes' storages count bytes, each holding two (quint4x2) or four (quint2x4)
// elements: torch 2.6 writes a 0-d view of such a tensor over its whole storage.
TEST(CostBoundsTest, ASubByteQuantizedTensorFillsItsStorageBytes) {
  ExpectSafe(Qtensor(3, {6}, {1}, "QUInt4x2Storage"));
  ExpectSafe(Qtensor(3, {12}, {1}, "QUInt2x4Storage"));
  ExpectCost(Qtensor(3, {7}, {1}, "QUInt4x2Storage"), "check CALL_CHECK_QTENSOR_ALLOCATION");
  ExpectCost(Qtensor(3, {13}, {1}, "QUInt2x4Storage"), "check CALL_CHECK_QTENSOR_ALLOCATION");
  ExpectCost(Qtensor(3, {6}, {1}, "QUInt8Storage"), "check CALL_CHECK_QTENSOR_ALLOCATION");
}

TEST(CostBoundsTest, AQuantizedTensorWhoseStorageStatesNoSizeIsError) {
  FactsBuilder b;
  const NodeId storage = b.PersistentLoad(
      b.Tuple({b.Str("storage"), b.Global("torch", "QInt8Storage"), b.Str("0"), b.Str("cpu")}));
  const NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
  b.Reduce(b.Global("torch._utils", "_rebuild_qtensor"),
           b.Tuple({storage, b.Int(0), b.IntTuple({4}), b.IntTuple({1}),
                    b.Tuple({b.Global("torch", "per_tensor_affine"), b.Float(0.5), b.Int(0)}),
                    b.Bool(false), od}));
  ExpectCost(Eval(b.Stream()), "check CALL_CHECK_QTENSOR_ALLOCATION");
}

// One value the memo shares, handed to a call again and again: each call pays, the file once.
TEST(CostBoundsTest, ASharedArgumentRepeatedPastTheBudgetIsErrorOnce) {
  FactsBuilder b;
  const NodeId text = b.Str(std::string(60000, '7'));
  const NodeId decimal = b.Global("decimal", "Decimal");
  const NodeId args = b.Tuple({text});
  for (int k = 0; k < 1200; ++k) b.Reduce(decimal, args);
  const Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("call.cost"));
  EXPECT_EQ(e.verdict, v1::VERDICT_ERROR);
  EXPECT_THAT(e.findings[0].message(),
              HasSubstr("rules field cost_budget.max_repeated_argument_units"));
  FactsBuilder few;
  const NodeId t2 = few.Str(std::string(60000, '7'));
  const NodeId d2 = few.Global("decimal", "Decimal");
  const NodeId a2 = few.Tuple({t2});
  for (int k = 0; k < 10; ++k) few.Reduce(d2, a2);
  ExpectSafe(Eval(few.Stream()));
}

TEST(CostBoundsTest, ContainerItemsCountTowardsTheBudget) {
  FactsBuilder b;
  std::vector<NodeId> ints;
  for (int k = 0; k < 65536; ++k) ints.push_back(b.Int(k));
  const NodeId list = b.List({});
  b.MutableItems(list) = ints;
  const NodeId set = b.Global("builtins", "set");
  const NodeId args = b.Tuple({list});
  for (int k = 0; k < 1100; ++k) b.Reduce(set, args);
  ExpectCost(Eval(b.Stream()), "cost_budget.max_repeated_argument_units");
}

// ---- custom rules: the fields' semantics and their validation

constexpr char kRulesHead[] = R"pb(
  version: "test.1"
)pb";

std::shared_ptr<const RuleSet> Rules(const std::string& allow) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto(absl::StrCat(kRulesHead, allow), "t.textproto");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : nullptr;
}

void ExpectRefused(const std::string& allow, const std::string& message) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto(absl::StrCat(kRulesHead, allow), "t.textproto");
  ASSERT_FALSE(r.ok()) << allow;
  EXPECT_THAT(r.status().message(), HasSubstr(message));
}

TEST(CostBoundsTest, BoundsAreRefusedWhereTheyCannotApply) {
  ExpectRefused(R"pb(allow {
                       module: "m"
                       name: "f"
                       calls {
                         op: CALL_REDUCE
                         max_args: 1
                         args {
                           any_of: [ ARG_STR, ARG_ANY ]
                           max_bytes: 4
                         }
                       }
                     })pb",
                "beside ARG_ANY");
  ExpectRefused(R"pb(allow {
                       module: "m"
                       name: "f"
                       calls {
                         op: CALL_REDUCE
                         max_args: 1
                         args { any_of: ARG_INT max_bytes: 4 }
                       }
                     })pb",
                "max_bytes without ARG_STR or ARG_BYTES");
  ExpectRefused(R"pb(allow {
                       module: "m"
                       name: "f"
                       calls {
                         op: CALL_REDUCE
                         max_args: 1
                         args { any_of: ARG_STR max_int_bits: 4 }
                       }
                     })pb",
                "max_int_bits without ARG_INT");
  ExpectRefused(R"pb(allow {
                       module: "m"
                       name: "f"
                       calls {
                         op: CALL_REDUCE
                         max_args: 1
                         args { any_of: ARG_TUPLE max_elements: 4 }
                       }
                     })pb",
                "max_elements without ARG_INT_TUPLE");
  ExpectRefused(R"pb(allow {
                       module: "m"
                       name: "f"
                       calls {
                         op: CALL_REDUCE
                         max_args: 1
                         args { any_of: ARG_STR max_sized_bytes: 4 }
                       }
                     })pb",
                "max_sized_bytes without str_sized_prefixes");
  ExpectRefused(R"pb(allow {
                       module: "m"
                       name: "f"
                       calls {
                         op: CALL_REDUCE
                         max_args: 1
                         args {
                           any_of: ARG_BYTES
                           number_text {}
                         }
                       }
                     })pb",
                "number_text without ARG_STR");
  ExpectRefused(R"pb(allow {
                       module: "m"
                       name: "f"
                       calls { op: CALL_REDUCE max_args: 1 check: 7 }
                     })pb",
                "unknown check 7");
}

// A bound passed inside an alternative that fails belongs to no match: the shape that does
// match decides.
TEST(CostBoundsTest, ABoundPassedInAFailedAttemptDoesNotLeak) {
  std::shared_ptr<const RuleSet> rules = Rules(R"pb(allow {
                                                      module: "m"
                                                      name: "f"
                                                      calls {
                                                        op: CALL_REDUCE
                                                        min_args: 1
                                                        max_args: 1
                                                        args {
                                                          any_of: ARG_TUPLE
                                                          items { any_of: ARG_STR max_bytes: 1 }
                                                          items { any_of: ARG_INT }
                                                        }
                                                      }
                                                      calls {
                                                        op: CALL_REDUCE
                                                        min_args: 1
                                                        max_args: 1
                                                        args { any_of: ARG_TUPLE }
                                                      }
                                                    })pb");
  ASSERT_NE(rules, nullptr);
  FactsBuilder b;
  b.Reduce(b.Global("m", "f"), b.Tuple({b.Tuple({b.Str("long"), b.Str("x")})}));
  ExpectSafe(Eval(b.Stream(), *rules));
  FactsBuilder c;
  c.Reduce(c.Global("m", "f"), c.Tuple({c.Tuple({c.Str("long"), c.Int(1)})}));
  ExpectCost(Eval(c.Stream(), *rules), "max_bytes");
}

TEST(CostBoundsTest, ABuildStateOverABoundIsError) {
  std::shared_ptr<const RuleSet> rules = Rules(R"pb(allow {
                                                      module: "m"
                                                      name: "C"
                                                      calls { op: CALL_NEWOBJ max_args: 0 }
                                                      build_target: true
                                                      build_states {
                                                        state {
                                                          any_of: ARG_DICT
                                                          keys {
                                                            key: "s"
                                                            value { any_of: ARG_STR max_bytes: 3 }
                                                          }
                                                        }
                                                      }
                                                    })pb");
  ASSERT_NE(rules, nullptr);
  FactsBuilder b;
  const NodeId obj = b.NewObj(b.Global("m", "C"), b.Tuple({}));
  b.Build(obj, b.Dict({b.Str("s"), b.Str("four")}));
  const Evaluation e = Eval(b.Stream(), *rules);
  ExpectCost(e, "max_bytes");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("m.C's BUILD state"));
}

TEST(CostBoundsTest, RulesWithoutABudgetHaveNone) {
  std::shared_ptr<const RuleSet> rules = Rules(R"pb(allow {
                                                      module: "m"
                                                      name: "f"
                                                      calls { op: CALL_REDUCE max_args: 1 }
                                                    })pb");
  ASSERT_NE(rules, nullptr);
  FactsBuilder b;
  const NodeId args = b.Tuple({b.Str(std::string(1 << 20, 'x'))});
  const NodeId f = b.Global("m", "f");
  for (int k = 0; k < 100; ++k) b.Reduce(f, args);
  ExpectSafe(Eval(b.Stream(), *rules));
}

TEST(CostBoundsTest, AnOverlayCannotChangeTheBudget) {
  absl::StatusOr<v1::RuleSet> overlay =
      RuleSet::ParseOverlayText("cost_budget { max_repeated_argument_units: 1 }", "o.textproto");
  ASSERT_TRUE(overlay.ok()) << overlay.status();
  absl::StatusOr<std::shared_ptr<const RuleSet>> merged =
      RuleSet::WithOverlay(*RuleSet::Default(), *overlay, "sha", "o.textproto");
  ASSERT_FALSE(merged.ok());
  EXPECT_THAT(merged.status().message(), HasSubstr("cost_budget"));
}

}  // namespace
}  // namespace ckptscan::rules
