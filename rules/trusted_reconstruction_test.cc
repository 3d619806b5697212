// A class the user trusts (--allow) rebuilt the way protocols 0 and 1 pickle plain objects:
// copyreg._reconstructor(C, builtins.object, None), then BUILD with its __dict__. That is
// object.__new__(C), what NEWOBJ of C does at protocol 2, so the trust of C covers it; any other
// _reconstructor call keeps its pinned shapes.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/facts_builder_for_test.h"
#include "rules/rule_set.h"

namespace ckptscan::rules {
namespace {

using ::ckptscan::rules::testing::FactsBuilder;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using NodeId = pickle::NodeId;

constexpr char kDigest[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::shared_ptr<const RuleSet> Allowing(const std::vector<std::string>& names) {
  v1::RuleSet overlay;
  for (const std::string& n : names) {
    absl::StatusOr<v1::AllowedGlobal> a = RuleSet::TrustedName(n);
    EXPECT_TRUE(a.ok()) << a.status();
    if (a.ok()) *overlay.add_allow() = *a;
  }
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::WithOverlay(*RuleSet::Default(), overlay, kDigest, "--allow");
  EXPECT_TRUE(rules.ok()) << rules.status();
  return rules.ok() ? *rules : nullptr;
}

std::vector<std::string> Ids(const Evaluation& e) {
  std::vector<std::string> ids;
  for (const v1::Finding& f : e.findings) ids.push_back(f.rule_id());
  return ids;
}

struct Shape {
  std::string cls = "Atom";
  std::string base_module = "__builtin__";  // protocol 0/1 write Python 2 names
  std::string base_name = "object";
  bool none_state = true;
};

// _reconstructor(chempy.<cls>, <base>, None) then BUILD {'name': 'C1', 'bonds': [1, 2]}.
pickle::StreamFacts Reconstructed(const Shape& s) {
  FactsBuilder b;
  const NodeId recon = b.Global("copy_reg", "_reconstructor", pickle::Via::kGlobal, "copyreg",
                                "_reconstructor");
  const NodeId cls = b.Global("chempy", s.cls);
  const std::string resolved = s.base_module == "__builtin__" ? "builtins" : s.base_module;
  const NodeId base = b.Global(s.base_module, s.base_name, pickle::Via::kGlobal, resolved,
                               s.base_name);
  const NodeId obj =
      b.Reduce(recon, b.Tuple({cls, base, s.none_state ? b.None() : b.Dict({})}));
  b.Build(obj, b.Dict({b.Str("name"), b.Str("C1"), b.Str("bonds"), b.List({b.Int(1), b.Int(2)})}));
  return b.Stream(obj);
}

TEST(TrustedReconstructionTest, WithoutTheFlagTheClassIsUnlistedAndTheShapesDoNotMatch) {
  const Evaluation e = RuleSet::Default()->Evaluate(Reconstructed({}), "atom.pkl");
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  EXPECT_THAT(Ids(e), ElementsAre("global.unlisted", "call.shape", "call.build_state"));
}

TEST(TrustedReconstructionTest, TheClassTheUserTrustsIsRebuiltWithItsState) {
  const Evaluation e = Allowing({"chempy.Atom"})->Evaluate(Reconstructed({}), "atom.pkl");
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE);
  EXPECT_THAT(e.findings, IsEmpty());
}

TEST(TrustedReconstructionTest, OtherShapesOfTheCallStayPinned) {
  const std::shared_ptr<const RuleSet> rules = Allowing({"chempy.Atom"});
  // Another base: base.__new__(C, state) and base.__init__(obj, state) run.
  Shape dict_base;
  dict_base.base_name = "dict";
  // A state for the base's constructor.
  Shape with_state;
  with_state.none_state = false;
  for (const Shape& s : {dict_base, with_state}) {
    const Evaluation e = rules->Evaluate(Reconstructed(s), "atom.pkl");
    EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
    EXPECT_THAT(Ids(e), ElementsAre("call.shape", "call.build_state"));
  }
  // Another class than the one trusted: still unlisted, and its rebuild not accepted.
  Shape other;
  other.cls = "Bond";
  const Evaluation e = rules->Evaluate(Reconstructed(other), "bond.pkl");
  EXPECT_THAT(Ids(e), ElementsAre("global.unlisted", "call.shape", "call.build_state"));
}

TEST(TrustedReconstructionTest, WhatTheStateHoldsIsStillJudged) {
  // The trust covers the BUILD, not what its state calls: posix.system in it stays DANGEROUS.
  FactsBuilder b;
  const NodeId recon = b.Global("copy_reg", "_reconstructor", pickle::Via::kGlobal, "copyreg",
                                "_reconstructor");
  const NodeId base =
      b.Global("__builtin__", "object", pickle::Via::kGlobal, "builtins", "object");
  const NodeId obj = b.Reduce(recon, b.Tuple({b.Global("chempy", "Atom"), base, b.None()}));
  const NodeId run = b.Reduce(b.Global("posix", "system"), b.Tuple({b.Str("true")}));
  b.Build(obj, b.Dict({b.Str("name"), run}));
  const Evaluation e = Allowing({"chempy.Atom"})->Evaluate(b.Stream(obj), "atom.pkl");
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  EXPECT_THAT(Ids(e), ElementsAre("global.denied.shell"));
}

TEST(TrustedReconstructionTest, AnEntryThatPinsItsCallsIsNotTrustedThatWay) {
  // An overlay entry with call shapes of its own is not a bare name: it means what it says.
  absl::StatusOr<v1::RuleSet> overlay = RuleSet::ParseOverlayText(
      "allow { module: \"chempy\" name: \"Atom\" calls { op: CALL_REDUCE min_args: 0 "
      "max_args: 0 } }",
      "site.textproto");
  ASSERT_TRUE(overlay.ok()) << overlay.status();
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::WithOverlay(*RuleSet::Default(), *overlay, kDigest, "site.textproto");
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Evaluation e = (*rules)->Evaluate(Reconstructed({}), "atom.pkl");
  EXPECT_THAT(Ids(e), ElementsAre("call.shape", "call.build_state"));
}

}  // namespace
}  // namespace ckptscan::rules
