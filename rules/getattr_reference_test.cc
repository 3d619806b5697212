// getattr references: builtins.getattr(G, 'NAME') on a global G imported by name, with a
// constant public name, is judged as the name G.NAME (how Python 3.11 pickles an Enum member);
// every other getattr stays DANGEROUS.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/facts_builder_for_test.h"
#include "rules/rule_set.h"

namespace ckptscan::rules {
namespace {

using ::ckptscan::rules::testing::FactsBuilder;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using NodeId = pickle::NodeId;
using pickle::Via;

constexpr char kDigest[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr char kModule[] = "ckpt_fixture_args";

std::vector<std::string> Ids(const Evaluation& e) {
  std::vector<std::string> ids;
  for (const v1::Finding& f : e.findings) ids.push_back(f.rule_id());
  return ids;
}

std::vector<std::string> Globals(const Evaluation& e) {
  std::vector<std::string> names;
  for (const v1::Finding& f : e.findings) names.push_back(f.global());
  return names;
}

std::string Dump(const Evaluation& e) {
  std::string out;
  for (const v1::Finding& f : e.findings) absl::StrAppend(&out, f.DebugString(), "\n");
  return out;
}

// The default rules with an overlay of `--allow` names and `overlay_text` entries.
std::shared_ptr<const RuleSet> Allowing(const std::vector<std::string>& names,
                                        const std::string& overlay_text = "") {
  absl::StatusOr<v1::RuleSet> overlay = RuleSet::ParseOverlayText(overlay_text, "site.textproto");
  EXPECT_TRUE(overlay.ok()) << overlay.status();
  if (!overlay.ok()) return nullptr;
  for (const std::string& n : names) {
    absl::StatusOr<v1::AllowedGlobal> a = RuleSet::TrustedName(n);
    EXPECT_TRUE(a.ok()) << n << ": " << a.status();
    if (a.ok()) *overlay->add_allow() = *a;
  }
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::WithOverlay(*RuleSet::Default(), *overlay, kDigest, "--allow");
  EXPECT_TRUE(rules.ok()) << rules.status();
  return rules.ok() ? *rules : nullptr;
}

Evaluation Eval(const pickle::StreamFacts& facts,
                const std::shared_ptr<const RuleSet>& rules = RuleSet::Default()) {
  if (rules == nullptr) return Evaluation{{}, v1::VERDICT_ERROR};
  return rules->Evaluate(facts, "archive/data.pkl");
}

// builtins.getattr as protocol 2 writes it: GLOBAL '__builtin__ getattr', which fix_imports
// resolves to builtins.getattr.
NodeId Getattr(FactsBuilder& b) {
  return b.Global("__builtin__", "getattr", Via::kGlobal, "builtins", "getattr");
}

NodeId Class(FactsBuilder& b, const std::string& name) { return b.Global(kModule, name); }

// Enum.__reduce_ex__ on Python 3.11: REDUCE getattr (cls, 'NAME').
NodeId Member(FactsBuilder& b, NodeId getattr, NodeId cls, const std::string& name) {
  return b.Reduce(getattr, b.Tuple({cls, b.Str(name)}));
}

// getattr(ckpt_fixture_args.<cls>, '<member>') with a getattr of its own.
NodeId Reference(FactsBuilder& b, const std::string& cls, const std::string& member) {
  return Member(b, Getattr(b), Class(b, cls), member);
}

// The default rules with the two flags the findings of Reference(cls, member) print.
std::shared_ptr<const RuleSet> AllowingMember(const std::string& cls, const std::string& member) {
  return Allowing({absl::StrCat(kModule, ".", cls), absl::StrCat(kModule, ":", cls, ".", member)});
}

// ckpt_fixture_args.Factory.create(1), reached by getattr.
pickle::StreamFacts CalledFactory() {
  FactsBuilder b;
  b.Reduce(Reference(b, "Factory", "create"), b.Tuple({b.Int(1)}));
  return b.Stream();
}

// A TrainingArguments-like dataclass as protocol 2 writes it: NEWOBJ Args () and BUILD with its
// __dict__, two enum members sharing one memoized getattr.
pickle::StreamFacts TrainingArgs() {
  FactsBuilder b;
  const NodeId args = b.NewObj(Class(b, "TrainingArguments"), b.Tuple({}));
  const NodeId getattr = Getattr(b);
  const NodeId steps = Member(b, getattr, Class(b, "IntervalStrategy"), "STEPS");
  const NodeId linear = Member(b, getattr, Class(b, "SchedulerType"), "LINEAR");
  b.Build(args, b.Dict({b.Str("eval_strategy"), steps, b.Str("lr_scheduler_type"), linear,
                        b.Str("save_strategy"), steps}));
  return b.Stream(args);
}

const std::vector<std::string> kAllFlags = {
    "ckpt_fixture_args.TrainingArguments", "ckpt_fixture_args.IntervalStrategy",
    "ckpt_fixture_args.SchedulerType", "ckpt_fixture_args:IntervalStrategy.STEPS",
    "ckpt_fixture_args:SchedulerType.LINEAR"};

TEST(GetattrReferenceTest, EnumMemberIsSuspiciousAndNamedAsTheMember) {
  Evaluation e = Eval(TrainingArgs());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
  EXPECT_THAT(Ids(e), Not(Contains(HasSubstr("denied")))) << Dump(e);
  EXPECT_THAT(Globals(e), Contains("ckpt_fixture_args.IntervalStrategy.STEPS")) << Dump(e);
  EXPECT_THAT(Globals(e), Contains("ckpt_fixture_args.SchedulerType.LINEAR")) << Dump(e);
}

TEST(GetattrReferenceTest, EnumMemberFindingPrintsTheFlagThatAllowsIt) {
  Evaluation e = Eval(TrainingArgs());
  bool found = false;
  for (const v1::Finding& f : e.findings) {
    if (f.global() != "ckpt_fixture_args.IntervalStrategy.STEPS") continue;
    found = true;
    EXPECT_EQ(f.rule_id(), "global.unlisted");
    EXPECT_EQ(f.verdict(), v1::VERDICT_SUSPICIOUS);
    EXPECT_EQ(f.location().opcode(), "REDUCE");
    EXPECT_THAT(f.message(), HasSubstr("--allow ckpt_fixture_args:IntervalStrategy.STEPS"));
    EXPECT_THAT(f.message(), HasSubstr("getattr"));
  }
  EXPECT_TRUE(found) << Dump(e);
}

TEST(GetattrReferenceTest, EnumMembersWithEveryPrintedFlagAreSafe) {
  Evaluation e = Eval(TrainingArgs(), Allowing(kAllFlags));
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
  EXPECT_THAT(e.findings, IsEmpty()) << Dump(e);
}

TEST(GetattrReferenceTest, PrintedFlagClearsThatMemberOnly) {
  std::vector<std::string> flags = kAllFlags;
  flags.pop_back();  // SchedulerType.LINEAR stays unlisted
  Evaluation e = Eval(TrainingArgs(), Allowing(flags));
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
  EXPECT_THAT(Globals(e), ElementsAre("ckpt_fixture_args.SchedulerType.LINEAR")) << Dump(e);
}

// `--allow m.Class.NAME` splits at the last dot: the module m.Class, another import than the
// attribute of m's class. The hint prints the form that names the member.
TEST(GetattrReferenceTest, DottedFlagNamesAnotherModuleAndClearsNothing) {
  std::vector<std::string> flags = kAllFlags;
  flags.back() = "ckpt_fixture_args.SchedulerType.LINEAR";
  Evaluation e = Eval(TrainingArgs(), Allowing(flags));
  EXPECT_THAT(Globals(e), ElementsAre("ckpt_fixture_args.SchedulerType.LINEAR")) << Dump(e);
}

TEST(GetattrReferenceTest, OverlayEntryForTheDottedQualnameClearsTheMember) {
  std::vector<std::string> flags = kAllFlags;
  flags.pop_back();
  Evaluation e = Eval(
      TrainingArgs(),
      Allowing(flags, R"pb(allow { module: "ckpt_fixture_args" name: "SchedulerType.LINEAR" })pb"));
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
}

// Protocol 4: STACK_GLOBAL ('builtins', 'getattr') and STACK_GLOBAL for the class.
TEST(GetattrReferenceTest, StackGlobalGetattrIsAReferenceToo) {
  FactsBuilder b;
  const NodeId getattr = b.Global("builtins", "getattr", Via::kStackGlobal);
  Member(b, getattr, b.Global(kModule, "IntervalStrategy", Via::kStackGlobal), "STEPS");
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
  EXPECT_THAT(Globals(e), ElementsAre("ckpt_fixture_args.IntervalStrategy",
                                      "ckpt_fixture_args.IntervalStrategy.STEPS"))
      << Dump(e);
  EXPECT_EQ(Eval(b.Stream(), AllowingMember("IntervalStrategy", "STEPS")).verdict,
            v1::VERDICT_SAFE);
}

// A reference whose value is called is a call of that name: an unlisted one is never SAFE, an
// allowlisted one is held to its entry's call shapes.
TEST(GetattrReferenceTest, CalledUnlistedReferenceIsSuspicious) {
  Evaluation e = Eval(CalledFactory(), Allowing({"ckpt_fixture_args.Factory"}));
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
  ASSERT_THAT(Globals(e), ElementsAre("ckpt_fixture_args.Factory.create")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("and calls it"));
  EXPECT_EQ(e.findings[0].call(), "builtins.getattr(ckpt_fixture_args.Factory, 'create')(1)");
}

TEST(GetattrReferenceTest, CalledReferenceAllowedAsDataIsACallShapeFinding) {
  Evaluation e = Eval(
      CalledFactory(),
      Allowing({"ckpt_fixture_args.Factory"},
               R"pb(allow { module: "ckpt_fixture_args" name: "Factory.create" tensor: true })pb"));
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
  ASSERT_THAT(Ids(e), ElementsAre("call.shape")) << Dump(e);
  EXPECT_EQ(e.findings[0].global(), "ckpt_fixture_args.Factory.create");
}

TEST(GetattrReferenceTest, CalledReferenceTrustedByAllowIsSafe) {
  Evaluation e = Eval(CalledFactory(), AllowingMember("Factory", "create"));
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
}

// A reference's value is a shared object (a class attribute, an enum member): BUILD on it is
// setattr on shared code, as BUILD on a global is, whatever the allowlist says.
TEST(GetattrReferenceTest, BuildOnAnAllowedReferenceIsDangerous) {
  FactsBuilder b;
  b.Build(Reference(b, "IntervalStrategy", "STEPS"), b.Dict({b.Str("_value_"), b.Str("x")}));
  Evaluation e = Eval(b.Stream(), AllowingMember("IntervalStrategy", "STEPS"));
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS) << Dump(e);
  ASSERT_THAT(Ids(e), ElementsAre("call.build")) << Dump(e);
  EXPECT_EQ(e.findings[0].global(), "ckpt_fixture_args.IntervalStrategy.STEPS");
}

TEST(GetattrReferenceTest, SetItemsOnAnAllowedReferenceIsFlagged) {
  FactsBuilder b;
  b.SetItems(Reference(b, "Registry", "TABLE"), {b.Str("k"), b.Int(1)});
  Evaluation e = Eval(b.Stream(), AllowingMember("Registry", "TABLE"));
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
  ASSERT_THAT(Ids(e), ElementsAre("call.setitem")) << Dump(e);
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_HIGH);
}

// As an argument, a reference is the global it names: it matches ARG_GLOBAL, pinned by name.
TEST(GetattrReferenceTest, ReferenceIsAGlobalArgument) {
  FactsBuilder b;
  b.Reduce(
      b.Global("torch._utils", "_rebuild_meta_tensor_no_storage"),
      b.Tuple({Reference(b, "Dtypes", "F32"), b.IntTuple({2}), b.IntTuple({1}), b.Bool(false)}));
  Evaluation e = Eval(b.Stream(), AllowingMember("Dtypes", "F32"));
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
}

// ---------------------------------------------------------------------------------------------
// Every other getattr is judged as before: builtins.getattr is denied (DANGEROUS).

struct DangerousCase {
  const char* name;
  std::function<void(FactsBuilder&)> build;
};

const DangerousCase kDangerousCases[] = {
    {"AttributeOfADeniedModuleReachedThroughAnotherModule",
     [](FactsBuilder& b) { Member(b, Getattr(b), b.Global("subprocess", "os"), "system"); }},
    {"AttributeOfAModuleDeniedWholeReachedThroughAnAllowedOne",
     [](FactsBuilder& b) { Member(b, Getattr(b), b.Global("pathlib", "os"), "getcwd"); }},
    {"DeniedAttributeOfAnUnlistedModule", [](FactsBuilder& b) { Reference(b, "helpers", "eval"); }},
    {"AttributeOfAMildlyDeniedGlobal",
     [](FactsBuilder& b) { Member(b, Getattr(b), b.Global("builtins", "dir"), "x"); }},
    {"AttributeOfAGlobalWithADunder",
     [](FactsBuilder& b) { Reference(b, "Cls.__version__", "x"); }},
    {"DeniedTargetCalledWithArguments",
     [](FactsBuilder& b) {
       const NodeId system = Member(b, Getattr(b), b.Global("pathlib", "os"), "system");
       b.Reduce(system, b.Tuple({b.Str("id")}));
     }},
    {"NameBuiltByACall",
     [](FactsBuilder& b) {
       const NodeId name =
           b.Reduce(b.Global("_codecs", "encode"), b.Tuple({b.Str("flfgrz"), b.Str("rot13")}));
       b.Reduce(Getattr(b), b.Tuple({Class(b, "IntervalStrategy"), name}));
     }},
    {"DunderName", [](FactsBuilder& b) { Reference(b, "IntervalStrategy", "__class__"); }},
    {"PrivateName", [](FactsBuilder& b) { Reference(b, "IntervalStrategy", "_private"); }},
    {"DottedName", [](FactsBuilder& b) { Reference(b, "IntervalStrategy", "a.b"); }},
    {"EmptyName", [](FactsBuilder& b) { Reference(b, "IntervalStrategy", ""); }},
    {"TruncatedName",
     [](FactsBuilder& b) {
       b.Reduce(Getattr(b), b.Tuple({Class(b, "IntervalStrategy"), b.LongStr("STEPS", 1 << 20)}));
     }},
    {"GetattrOfGetattr",
     [](FactsBuilder& b) {
       const NodeId getattr = Getattr(b);
       const NodeId inner = Member(b, getattr, Class(b, "Outer"), "Inner");
       Member(b, getattr, inner, "X");
     }},
    {"GetattrOfGetattrImportedTwice",
     [](FactsBuilder& b) {
       const NodeId inner = Reference(b, "Outer", "Inner");
       Member(b, Getattr(b), inner, "X");
     }},
    {"AttributeOfGetattrItself", [](FactsBuilder& b) { Member(b, Getattr(b), Getattr(b), "x"); }},
    {"ThreeArguments",
     [](FactsBuilder& b) {
       b.Reduce(Getattr(b), b.Tuple({Class(b, "IntervalStrategy"), b.Str("STEPS"), b.None()}));
     }},
    {"OneArgument",
     [](FactsBuilder& b) { b.Reduce(Getattr(b), b.Tuple({Class(b, "IntervalStrategy")})); }},
    {"CalledByNewObj",
     [](FactsBuilder& b) {
       b.NewObj(Getattr(b), b.Tuple({Class(b, "IntervalStrategy"), b.Str("STEPS")}));
     }},
    {"SharedGetattrAlsoPassedAsAValue",
     [](FactsBuilder& b) {
       const NodeId getattr = Getattr(b);
       Member(b, getattr, Class(b, "IntervalStrategy"), "STEPS");
       b.List({getattr});
     }},
    {"GetattrReturnedByThePickle",
     [](FactsBuilder& b) {
       const NodeId getattr = Getattr(b);
       Member(b, getattr, Class(b, "IntervalStrategy"), "STEPS");
       b.facts().root = getattr;
     }},
    {"FirstArgumentImportedByExt",
     [](FactsBuilder& b) { Member(b, Getattr(b), b.Ext(7), "STEPS"); }},
    {"FirstArgumentOfAComputedImport",
     [](FactsBuilder& b) { Member(b, Getattr(b), b.Dynamic("IntervalStrategy"), "STEPS"); }},
    {"NameOverTheGradingLimit",
     [](FactsBuilder& b) { Reference(b, "IntervalStrategy", std::string(600, 'A')); }},
};

class GetattrStaysDangerousTest : public ::testing::TestWithParam<DangerousCase> {};

TEST_P(GetattrStaysDangerousTest, GetattrIsDeniedAsBefore) {
  FactsBuilder b;
  GetParam().build(b);
  pickle::StreamFacts facts = b.Stream(b.facts().root);
  // Whatever else is trusted, getattr's own denial decides.
  Evaluation e = Eval(facts, Allowing(kAllFlags));
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS) << Dump(e);
  EXPECT_THAT(Ids(e), Contains("global.denied.introspection")) << Dump(e);
  EXPECT_THAT(Globals(e), Contains("builtins.getattr")) << Dump(e);
}

INSTANTIATE_TEST_SUITE_P(Default, GetattrStaysDangerousTest, ::testing::ValuesIn(kDangerousCases),
                         [](const ::testing::TestParamInfo<DangerousCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace ckptscan::rules
