#include "rules/rule_set.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/catalogue.h"
#include "rules/facts_builder_for_test.h"

namespace ckptscan::rules {
namespace {

using ::ckptscan::rules::testing::FactsBuilder;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using NodeId = pickle::NodeId;

const RuleSet& Rules() { return *RuleSet::Default(); }

Evaluation Eval(const pickle::StreamFacts& facts, const RuleSet& rules = Rules()) {
  return rules.Evaluate(facts, "archive/data.pkl");
}

std::vector<std::string> Ids(const Evaluation& e) {
  std::vector<std::string> ids;
  for (const v1::Finding& f : e.findings) ids.push_back(f.rule_id());
  return ids;
}

// A finding's proto text, for failure messages.
std::string Dump(const Evaluation& e) {
  std::string out;
  for (const v1::Finding& f : e.findings) absl::StrAppend(&out, f.DebugString(), "\n");
  return out;
}

// ---------------------------------------------------------------------------------------------
// Loading rules: malformed input is rejected with a precise error.

// A rules text that must be refused, naming `message`.
void ExpectRefused(const std::string& text, const std::string& message) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromTextProto(text, "t.textproto");
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_THAT(r.status().message(), HasSubstr(message)) << text;
}

constexpr char kMinimalRules[] = R"pb(
  version: "test.1"
  allow {
    module: "collections"
    name: "OrderedDict"
    calls { op: CALL_REDUCE min_args: 0 max_args: 1 }
  }
  deny {
    module: "os"
    name: "*"
    category: CATEGORY_SHELL
    dangerous: true
    severity: SEVERITY_CRITICAL
    why: "os"
    source: "test"
  }
)pb";

// TextFormat takes any bytes in a string field; the binary form (and every proto3 reader)
// does not. Found by tests/fuzz/rules_fuzz.cc.
TEST(RuleSetLoadTest, NonUtf8StringIsRejectedAsInTheBinaryForm) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromTextProto(
      "version: \"x\"\nallow { module: \"collections\" name: \"Order\xf7\" \"Dict\" }\n",
      "utf8.textproto");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr("utf8.textproto"), HasSubstr("allow[0].name is not valid UTF-8")));
}

TEST(RuleSetLoadTest, SyntaxErrorIsRejectedWithOriginLineAndColumn) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto("version: \"x\"\nallow { module: \"a\" name: }\n", "bad.textproto");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("bad.textproto"), HasSubstr("2:")));
}

TEST(RuleSetLoadTest, DuplicateAllowEntryIsRejectedNamingBothEntries) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromTextProto(
      R"pb(version: "v"
           allow { module: "torch" name: "Size" }
           allow { module: "torch" name: "device" }
           allow { module: "torch" name: "Size" })pb",
      "dup.textproto");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr("dup.textproto"), HasSubstr("allow[2] (torch.Size)"),
                    HasSubstr("duplicate"), HasSubstr("allow[0]")));
}

TEST(RuleSetLoadTest, EmptyVersionIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto(R"pb(allow { module: "torch" name: "Size" })pb", "nover");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("nover"), HasSubstr("version is empty")));
}

TEST(RuleSetLoadTest, ShapeWithMinAboveMaxIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromTextProto(
      R"pb(version: "v"
           allow {
             module: "torch"
             name: "Size"
             calls { op: CALL_REDUCE min_args: 2 max_args: 1 }
           })pb",
      "shape");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("allow[0] (torch.Size) calls[0]"),
                                          HasSubstr("min_args 2 > max_args 1")));
}

TEST(RuleSetLoadTest, AllowEntryWithoutNameIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto(R"pb(version: "v"
                                  allow { module: "torch" })pb",
                             "noname");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("module and name are required"));
}

TEST(RuleSetLoadTest, WildcardAllowEntryIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto(R"pb(version: "v"
                                  allow { module: "torch" name: "*" })pb",
                             "star");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("exact"));
}

TEST(RuleSetLoadTest, DenyEntryWithEmptyNameIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromTextProto(
      R"pb(version: "v"
           deny { module: "os" category: CATEGORY_SHELL severity: SEVERITY_HIGH })pb",
      "denyname");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("deny[0]"), HasSubstr("name is empty")));
}

TEST(RuleSetLoadTest, DenyEntryWithoutCategoryIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto(R"pb(version: "v"
                                  deny { module: "os" name: "*" severity: SEVERITY_HIGH })pb",
                             "cat");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("category"));
}

TEST(RuleSetLoadTest, UnknownFieldIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromTextProto(R"pb(version: "v"
                                  allowlist { module: "x" name: "y" })pb",
                             "unk");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("allowlist"));
}

TEST(RuleSetLoadTest, ArgSpecWithoutKindsIsRejected) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromTextProto(
      R"pb(version: "v"
           allow {
             module: "torch"
             name: "Size"
             calls {
               op: CALL_REDUCE
               min_args: 1
               max_args: 1
               args {}
             }
           })pb",
      "argspec");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("any_of is empty"));
}

TEST(RuleSetLoadTest, OversizedTextIsResourceExhausted) {
  std::string big(RuleSet::kMaxRulesBytes + 1, ' ');
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromTextProto(big, "big");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(RuleSetLoadTest, MissingFileIsNotFound) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r =
      RuleSet::FromFile("/nonexistent/ckptscan/rules.textproto");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/ckptscan/rules.textproto"));
}

TEST(RuleSetLoadTest, DirectoryIsNotARulesFile) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromFile("/");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RuleSetLoadTest, FileIsLoadedAndErrorsNameThePath) {
  const std::string path = ::testing::TempDir() + "/rule_set_test_rules.textproto";
  {
    std::ofstream out(path);
    out << kMinimalRules;
  }
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->version(), "test.1");
  {
    std::ofstream out(path);
    out << "version: \"\"\n";
  }
  r = RuleSet::FromFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path));
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------------------------
// Evaluation with the default rules: adversarial cases first.

TEST(EvaluateTest, PosixSystemReduceIsDangerousShellWithCallSummary) {
  FactsBuilder b;
  NodeId sys = b.Global("posix", "system");
  b.Reduce(sys, b.Tuple({b.Str("id")}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(e.findings, SizeIs(1)) << Dump(e);  // one finding: the global carries the call
  const v1::Finding& f = e.findings[0];
  EXPECT_EQ(f.rule_id(), "global.denied.shell");
  EXPECT_EQ(f.category(), "shell");
  EXPECT_EQ(f.verdict(), v1::VERDICT_DANGEROUS);
  EXPECT_EQ(f.severity(), v1::SEVERITY_CRITICAL);
  EXPECT_EQ(f.global(), "posix.system");
  EXPECT_EQ(f.call(), "posix.system('id')");
  EXPECT_EQ(f.location().member(), "archive/data.pkl");
  EXPECT_EQ(f.location().offset(), 2u);
  EXPECT_EQ(f.location().opcode(), "GLOBAL");
  EXPECT_EQ(f.location().nested_depth(), 0u);
  EXPECT_THAT(f.message(), HasSubstr("Runs a shell command"));
}

TEST(EvaluateTest, BuiltinsEvalIsDangerousExec) {
  FactsBuilder b;
  b.Reduce(b.Global("builtins", "eval", pickle::Via::kStackGlobal),
           b.Tuple({b.Str("__import__('os').system('id')")}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.denied.exec")) << Dump(e);
  EXPECT_EQ(e.findings[0].location().opcode(), "STACK_GLOBAL");
}

TEST(EvaluateTest, Python2BuiltinNameResolvedToBuiltinsIsDangerous) {
  // GLOBAL '__builtin__ eval' at protocol 2: fix_imports resolves it to builtins.eval.
  FactsBuilder b;
  b.Reduce(b.Global("__builtin__", "eval", pickle::Via::kGlobal, "builtins", "eval"),
           b.Tuple({b.Str("1")}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.denied.exec"));
  EXPECT_EQ(e.findings[0].global(), "builtins.eval");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("written as __builtin__.eval"));
}

TEST(EvaluateTest, RawModuleNameIsGradedWhenResolutionHidesIt) {
  // The raw name is denied even if a (hypothetical) mapping resolved it to something unknown.
  FactsBuilder b;
  b.Global("__builtin__", "apply", pickle::Via::kGlobal, "mystery", "thing");
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  EXPECT_THAT(Ids(e), ElementsAre("global.denied.introspection"));
}

TEST(EvaluateTest, PathlibDottedOsSystemIsDangerousShell) {
  // Fickling GHSA-5j3x-jp52-966f: GLOBAL 'pathlib' 'os.system' reaches os.system.
  FactsBuilder b;
  b.Reduce(b.Global("pathlib", "os.system", pickle::Via::kStackGlobal), b.Tuple({b.Str("id")}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(e.findings, SizeIs(1)) << Dump(e);
  EXPECT_EQ(e.findings[0].rule_id(),
            "global.denied.shell");  // the worse of pathlib.* and os.system
  EXPECT_EQ(e.findings[0].global(), "pathlib.os.system");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("[matches os.system]"));
}

TEST(EvaluateTest, ExactDenyEntryExplainsBetterThanItsModuleWildcard) {
  FactsBuilder b;
  b.SetItems(b.Global("os", "environ"), {b.Str("LD_PRELOAD"), b.Str("/tmp/x.so")});
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.denied.process", "call.setitem")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("environment"));
  EXPECT_EQ(e.findings[1].call(), "os.environ.__setitem__('LD_PRELOAD', '/tmp/x.so')");
}

TEST(EvaluateTest, MildExactEntryNeverHidesADangerousWildcard) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = RuleSet::FromTextProto(
      R"pb(version: "v"
           deny {
             module: "evil"
             name: "*"
             category: CATEGORY_EXEC
             dangerous: true
             severity: SEVERITY_HIGH
             why: "w"
             source: "s"
           }
           deny {
             module: "evil"
             name: "harmless"
             category: CATEGORY_OTHER
             dangerous: false
             severity: SEVERITY_LOW
             why: "w"
             source: "s"
           })pb",
      "mild");
  ASSERT_TRUE(rules.ok()) << rules.status();
  FactsBuilder b;
  b.Global("evil", "harmless");
  Evaluation e = Eval(b.Stream(), **rules);
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  EXPECT_THAT(Ids(e), ElementsAre("global.denied.exec"));
}

TEST(EvaluateTest, NumpyAttributeChainToSysModulesIsDangerous) {
  // ModelScan #89: GLOBAL 'numpy' 'core._internal.sys.modules'.
  FactsBuilder b;
  b.Global("numpy", "core._internal.sys.modules", pickle::Via::kStackGlobal);
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.denied.import")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("sys.modules"));
}

TEST(EvaluateTest, NumpyBuiltinsDunderIsDangerous) {
  // ModelScan #330: numpy.__builtins__ then dict.get -> eval.
  FactsBuilder b;
  b.Global("numpy", "__builtins__", pickle::Via::kStackGlobal);
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  // __builtins__ is also a denied pseudo-module, reached as a qualname suffix.
  EXPECT_THAT(Ids(e), ElementsAre("global.denied.exec")) << Dump(e);
}

TEST(EvaluateTest, DangerousDunderOnUnlistedClassIsDangerous) {
  FactsBuilder b;
  b.Global("mypkg", "Foo.__init__.__globals__", pickle::Via::kStackGlobal);
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.dunder")) << Dump(e);
  EXPECT_EQ(e.findings[0].category(), "introspection");
}

TEST(EvaluateTest, HarmlessDunderIsSuspicious) {
  FactsBuilder b;
  b.Global("mypkg", "__version__", pickle::Via::kStackGlobal);
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  EXPECT_THAT(Ids(e), ElementsAre("global.dunder"));
}

TEST(EvaluateTest, UnknownClassIsSuspiciousUnlisted) {
  FactsBuilder b;
  NodeId obj = b.NewObj(b.Global("mypkg", "Foo"), b.Tuple({}));
  b.Build(obj, b.Dict({b.Str("x"), b.Int(1)}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  // One finding: neither the call nor the BUILD of a non-allowlisted class adds another.
  ASSERT_THAT(Ids(e), ElementsAre("global.unlisted")) << Dump(e);
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_MEDIUM);
  EXPECT_EQ(e.findings[0].global(), "mypkg.Foo");
  EXPECT_EQ(e.findings[0].call(), "mypkg.Foo.__new__()");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("not on the allowlist"));
}

TEST(EvaluateTest, NonDangerousDenyEntryOnlyMakesItSuspicious) {
  FactsBuilder b;
  b.Reduce(b.Global("getpass", "getuser"), b.Tuple({}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.denied.other"));
  EXPECT_EQ(e.findings[0].verdict(), v1::VERDICT_SUSPICIOUS);
}

TEST(EvaluateTest, SubmoduleOfDeniedModuleIsDenied) {
  // picklescan CVE-2025-10155..7: exact-module matching missed asyncio.unix_events.
  FactsBuilder b;
  b.Global("asyncio.base_events", "BaseEventLoop");
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  EXPECT_THAT(Ids(e), ElementsAre("global.denied.shell"));
}

TEST(EvaluateTest, BareDeniedNameInAnyModuleIsDenied) {
  FactsBuilder b;
  b.Global("numpy", "eval");
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.denied.exec"));
  EXPECT_THAT(e.findings[0].message(), HasSubstr("[matches *.eval]"));
}

TEST(EvaluateTest, DeniedModuleNameInsideAnotherModulePathIsNotThatModule) {
  // mypkg.os is a submodule of mypkg, not os: unlisted, not shell.
  FactsBuilder b;
  b.Global("mypkg.os", "helper");
  Evaluation e = Eval(b.Stream());
  EXPECT_THAT(Ids(e), ElementsAre("global.unlisted"));
}

TEST(EvaluateTest, ExtOpcodeIsSuspiciousAndNeverSafe) {
  FactsBuilder b;
  b.Reduce(b.Ext(0x42), b.Tuple({b.Str("id")}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("opcode.ext")) << Dump(e);
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_HIGH);
  EXPECT_EQ(e.findings[0].location().opcode(), "EXT1");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("66"));
  EXPECT_EQ(e.findings[0].call(), "<ext 66>('id')");
}

TEST(EvaluateTest, CallOfACallResultIsCallCallee) {
  // getattr-chain shape: (OrderedDict())('x'): the callee is not a named global.
  FactsBuilder b;
  NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
  b.Reduce(od, b.Tuple({b.Str("x")}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("call.callee")) << Dump(e);
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_HIGH);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("call of collections.OrderedDict"));
}

TEST(EvaluateTest, BytesIsSafeOnlyAsTheEmptyBytesOfOldProtocols) {
  FactsBuilder empty;
  empty.Reduce(empty.Global("builtins", "bytes"), empty.Tuple({}));
  EXPECT_EQ(Eval(empty.Stream()).verdict, v1::VERDICT_SAFE);
  // bytes(x) would iterate over x (or call its __bytes__/__index__): not a shape we allow.
  FactsBuilder arg;
  arg.Reduce(arg.Global("builtins", "bytes"), arg.Tuple({arg.Int(3)}));
  Evaluation e = Eval(arg.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  EXPECT_THAT(Ids(e), ElementsAre("call.shape")) << Dump(e);
}

TEST(EvaluateTest, AllowlistedOrderedDictWithWrongShapeIsCallShape) {
  FactsBuilder b;
  b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({b.Int(1), b.Int(2)}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("call.shape")) << Dump(e);
  const v1::Finding& f = e.findings[0];
  EXPECT_EQ(f.global(), "collections.OrderedDict");
  EXPECT_EQ(f.severity(), v1::SEVERITY_MEDIUM);
  EXPECT_EQ(f.location().opcode(), "REDUCE");
  EXPECT_THAT(f.message(),
              AllOf(HasSubstr("expected REDUCE([LIST|TUPLE])"), HasSubstr("got REDUCE(int, int)")));
}

TEST(EvaluateTest, AllowlistedCallWithWrongOpcodeIsCallShape) {
  FactsBuilder b;
  b.NewObj(b.Global("collections", "OrderedDict"), b.Tuple({}));
  Evaluation e = Eval(b.Stream());
  EXPECT_THAT(Ids(e), ElementsAre("call.shape"));
}

TEST(EvaluateTest, ReduceWhoseArgumentsAreNotATupleIsCallShape) {
  FactsBuilder b;
  b.Reduce(b.Global("collections", "OrderedDict"), b.List({}));
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("call.shape"));
  EXPECT_THAT(e.findings[0].message(), HasSubstr("not a tuple"));
}

TEST(EvaluateTest, DataOnlyGlobalThatIsCalledIsCallShape) {
  FactsBuilder b;
  b.Reduce(b.Global("torch", "float32"), b.Tuple({}));
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("call.shape"));
  EXPECT_THAT(e.findings[0].message(), HasSubstr("data only"));
}

TEST(EvaluateTest, ParameterOfSomethingThatIsNotATensorIsCallShape) {
  FactsBuilder b;
  NodeId hooks = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
  b.Reduce(b.Global("torch._utils", "_rebuild_parameter"),
           b.Tuple({b.Str("not a tensor"), b.Bool(true), hooks}));
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("call.shape")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("REDUCE(TENSOR, BOOL, DICT (empty))"));
}

TEST(EvaluateTest, BuildOnAGlobalIsDangerous) {
  // ModelScan #85: BUILD sets attributes on numpy.prod, read back later.
  FactsBuilder b;
  NodeId prod = b.Global("collections", "OrderedDict");  // allowlisted, still a class object
  b.Build(prod, b.Dict({b.Str("__reduce__"), b.Str("x")}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("call.build")) << Dump(e);
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_HIGH);
  EXPECT_EQ(e.findings[0].category(), "introspection");
  EXPECT_EQ(e.findings[0].location().opcode(), "BUILD");
}

TEST(EvaluateTest, BuildOnObjectThatIsNotABuildTargetIsSuspicious) {
  FactsBuilder b;
  NodeId size = b.Reduce(b.Global("torch", "Size"), b.Tuple({b.IntTuple({2, 3})}));
  b.Build(size, b.Dict({}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("call.build")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("torch.Size"));
}

TEST(EvaluateTest, SetItemsOnTargetThatIsNotAllowedIsSuspicious) {
  FactsBuilder b;
  NodeId size = b.Reduce(b.Global("torch", "Size"), b.Tuple({b.IntTuple({1})}));
  b.SetItems(size, {b.Str("k"), b.Int(1)});
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("call.setitem")) << Dump(e);
  EXPECT_EQ(e.findings[0].location().opcode(), "SETITEMS");
}

TEST(EvaluateTest, SetItemsOnAGlobalIsSuspiciousHigh) {
  FactsBuilder b;
  b.SetItems(b.Global("collections", "OrderedDict"), {b.Str("k"), b.Int(1)});
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("call.setitem"));
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_HIGH);
  EXPECT_EQ(e.findings[0].global(), "collections.OrderedDict");
}

TEST(EvaluateTest, AppendsOnTargetThatIsNotAllowedIsSuspicious) {
  FactsBuilder b;
  NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
  b.Appends(od, {b.Int(1)});
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  EXPECT_THAT(Ids(e), ElementsAre("call.append"));
}

TEST(EvaluateTest, TextPersidIsSuspicious) {
  FactsBuilder b;
  b.PersistentLoad(b.Str("0"), 'P');
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("persid.text"));
  EXPECT_EQ(e.findings[0].location().opcode(), "PERSID");
}

TEST(EvaluateTest, PersistentIdThatIsNotAStorageIsSuspicious) {
  // Legacy torch.save of a whole nn.Module: ('module', cls, source_file, source).
  FactsBuilder b;
  b.PersistentLoad(b.Tuple({b.Str("module"), b.Str("Net"), b.Str("net.py"), b.Str("...")}));
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("persid.shape")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("('module'"));
}

TEST(EvaluateTest, StoragePersistentIdNamingAnUnlistedClassIsReportedAsAGlobal) {
  FactsBuilder b;
  NodeId cls = b.Global("mypkg", "EvilStorage");
  b.PersistentLoad(b.Tuple({b.Str("storage"), cls, b.Str("0"), b.Str("cpu"), b.Int(1)}));
  Evaluation e = Eval(b.Stream());
  EXPECT_THAT(Ids(e), ElementsAre("global.unlisted"));
}

TEST(EvaluateTest, TrailingBytesAreSuspicious) {
  FactsBuilder b;
  pickle::StreamFacts s = b.Stream(b.None());
  s.trailing_offset = 40;
  s.trailing_bytes = 7;
  Evaluation e = Eval(s);
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  ASSERT_THAT(Ids(e), ElementsAre("stream.trailing"));
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_LOW);
  EXPECT_EQ(e.findings[0].location().offset(), 40u);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("7 bytes"));
}

TEST(EvaluateTest, NestedPickleOsSystemIsDangerousWithNestedDepth) {
  // Outer: a harmless bytes value that is itself a pickle calling os.system.
  FactsBuilder outer;
  NodeId blob = outer.Bytes("\x80\x02...");
  pickle::StreamFacts s = outer.Stream(blob);
  FactsBuilder inner(100);
  NodeId system = inner.Global("os", "system");
  inner.Reduce(system, inner.Tuple({inner.Str("id")}));
  pickle::PickleFacts nested = inner.Pickle();
  nested.depth = 1;
  nested.parent = 0;
  nested.parent_node = blob;
  s.pickles.push_back(nested);
  Evaluation e = Eval(s);
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_THAT(Ids(e), ElementsAre("global.denied.shell")) << Dump(e);
  EXPECT_EQ(e.findings[0].location().nested_depth(), 1u);
  EXPECT_EQ(e.findings[0].location().pickle_index(), 1u);
  EXPECT_EQ(e.findings[0].location().offset(), 100u);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("nested 1 level deep"));
}

TEST(EvaluateTest, FindingsAreInStreamOrderAcrossGlobalsAndCalls) {
  FactsBuilder b;
  b.Global("mypkg", "A");  // offset 2
  b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({b.Int(1), b.Int(2)}));
  b.Global("os", "system");
  Evaluation e = Eval(b.Stream());
  EXPECT_THAT(Ids(e), ElementsAre("global.unlisted", "call.shape", "global.denied.shell"));
  for (size_t i = 1; i < e.findings.size(); ++i) {
    EXPECT_LT(e.findings[i - 1].location().offset(), e.findings[i].location().offset());
  }
}

TEST(EvaluateTest, InconsistentFactsYieldOneScanErrorNotACrash) {
  // Facts cross a process boundary: ids out of range must never be dereferenced.
  FactsBuilder b;
  NodeId od = b.Global("collections", "OrderedDict");
  b.Reduce(od, 999'999);           // arguments out of range
  b.Reduce(123'456, b.Tuple({}));  // callee out of range
  b.Build(777'777, b.Dict({}));    // target out of range
  b.Reduce(b.Global("os", "system"), b.Tuple({b.Str("id")}));
  pickle::PickleFacts p = b.Pickle();
  pickle::Node bad_global;
  bad_global.kind = pickle::Kind::kGlobal;
  bad_global.ref = 4242;  // no such global
  p.graph.nodes.push_back(bad_global);
  pickle::Node bad_call;
  bad_call.kind = pickle::Kind::kCall;
  bad_call.ref = 4242;  // no such call site
  p.graph.nodes.push_back(bad_call);
  pickle::CallSite c;
  c.op = pickle::CallOp::kReduce;
  c.opcode = 'R';
  c.offset = 500;
  c.callee = static_cast<NodeId>(p.graph.nodes.size() - 2);
  c.args = static_cast<NodeId>(p.graph.nodes.size() - 1);  // a call node naming no call
  p.graph.calls.push_back(c);
  pickle::StreamFacts s;
  s.pickles.push_back(p);
  Evaluation e = Eval(s);
  // The dangerous global is still found (findings win over errors); the graph is reported
  // inconsistent once; call renderings are left out.
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  EXPECT_THAT(Ids(e), ElementsAre("scan.error", "global.denied.shell")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("inconsistent scan facts"));
  EXPECT_EQ(e.findings[1].call(), "");
}

TEST(EvaluateTest, UnknownCallOperationIsInconsistentFacts) {
  FactsBuilder b;
  b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
  pickle::PickleFacts p = b.Pickle();
  p.graph.calls[0].op = static_cast<pickle::CallOp>(200);
  pickle::StreamFacts s;
  s.pickles.push_back(p);
  Evaluation e = Eval(s);
  EXPECT_EQ(e.verdict, v1::VERDICT_ERROR);
  EXPECT_THAT(Ids(e), ElementsAre("scan.error"));
}

TEST(EvaluateTest, OverlongGlobalNameIsUnlistedWithoutGrading) {
  FactsBuilder b;
  std::string chain;
  for (int i = 0; i < 400; ++i) chain += "os.";
  chain += "system";
  b.Global("pathlib", chain, pickle::Via::kStackGlobal);
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("global.unlisted"));
  EXPECT_EQ(e.findings[0].severity(), v1::SEVERITY_HIGH);
  EXPECT_LT(e.findings[0].global().size(), 600u);  // names are cut for display
}

TEST(EvaluateTest, InvalidUtf8InNamesIsEscapedInFindings) {
  FactsBuilder b;
  b.Global("my\xffpkg", "F\xed\xa0\x80oo\n");  // 0xff, a lone surrogate, a newline
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(e.findings, SizeIs(1));
  EXPECT_EQ(e.findings[0].global(), "my\\xffpkg.F\\xed\\xa0\\x80oo\\n");
  std::string wire;
  EXPECT_TRUE(e.findings[0].SerializeToString(&wire));
  // Zip member names are arbitrary bytes too.
  Evaluation m = Rules().Evaluate(b.Stream(), "data\xff.pkl");
  ASSERT_THAT(m.findings, SizeIs(1));
  EXPECT_EQ(m.findings[0].location().member(), "data\\xff.pkl");
}

TEST(EvaluateTest, FindingsBeyondTheLimitCountTowardsTheVerdictButAreNotKept) {
  FactsBuilder b;
  for (size_t i = 0; i < RuleSet::kMaxFindings; ++i) b.Global("mypkg", "A");
  b.Global("os", "system");  // the only dangerous one, past the limit
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  ASSERT_EQ(e.findings.size(), RuleSet::kMaxFindings + 1);
  const v1::Finding& last = e.findings.back();
  EXPECT_EQ(last.rule_id(), "scan.findings_truncated");
  EXPECT_EQ(last.verdict(), v1::VERDICT_DANGEROUS);
  EXPECT_THAT(last.message(), HasSubstr("1 more findings"));
}

TEST(EvaluateTest, CustomCallSummarizerIsUsedAndItsOutputSanitized) {
  FactsBuilder b;
  NodeId system = b.Global("posix", "system");
  b.Reduce(system, b.Tuple({b.Str("id")}));
  Evaluation e =
      Rules().Evaluate(b.Stream(), "", [](const pickle::Graph&, const pickle::CallSite& c) {
        return absl::StrCat("call@", c.offset, "\n\xff");
      });
  ASSERT_THAT(e.findings, SizeIs(1));
  EXPECT_EQ(e.findings[0].call(), "call@6\\n\\xff");
}

// ---------------------------------------------------------------------------------------------
// Legitimate checkpoints: SAFE with zero findings.

// torch.save(model.state_dict()) as torch 1.13-2.x writes data.pkl.
pickle::StreamFacts TorchStateDict() {
  FactsBuilder b;
  NodeId od_cls = b.Global("collections", "OrderedDict");
  NodeId sd = b.Reduce(od_cls, b.Tuple({}));
  NodeId rebuild = b.Global("torch._utils", "_rebuild_tensor_v2");
  NodeId storage = b.Storage("FloatStorage", "0", 6);
  NodeId hooks = b.Reduce(od_cls, b.Tuple({}));  // memo: the same OrderedDict global
  NodeId weight = b.Reduce(rebuild, b.Tuple({storage, b.Int(0), b.IntTuple({2, 3}),
                                             b.IntTuple({3, 1}), b.Bool(false), hooks}));
  NodeId storage2 = b.Storage("FloatStorage", "1", 2);
  NodeId hooks2 = b.Reduce(od_cls, b.Tuple({}));
  NodeId bias = b.Reduce(rebuild, b.Tuple({storage2, b.Int(0), b.IntTuple({2}), b.IntTuple({1}),
                                           b.Bool(false), hooks2}));
  b.SetItems(sd, {b.Str("weight"), weight, b.Str("bias"), bias});
  NodeId meta = b.Reduce(od_cls, b.Tuple({}));
  b.SetItems(meta, {b.Str(""), b.Dict({b.Str("version"), b.Int(1)})});
  b.Build(sd, b.Dict({b.Str("_metadata"), meta}));
  return b.Stream(sd);
}

TEST(EvaluateSafeTest, TorchStateDictIsSafeWithZeroFindings) {
  Evaluation e = Eval(TorchStateDict());
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE);
  EXPECT_THAT(e.findings, IsEmpty()) << Dump(e);
}

TEST(EvaluateSafeTest, ParametersDtypesAndNewFormatsAreSafe) {
  FactsBuilder b;
  NodeId od = b.Global("collections", "OrderedDict");
  // nn.Parameter around a v3 (float8) tensor on an UntypedStorage.
  NodeId st = b.Storage("UntypedStorage", "0", 16);
  NodeId t = b.Reduce(b.Global("torch._utils", "_rebuild_tensor_v3"),
                      b.Tuple({st, b.Int(0), b.IntTuple({4, 4}), b.IntTuple({4, 1}), b.Bool(false),
                               b.Reduce(od, b.Tuple({})), b.Global("torch", "float8_e4m3fn")}));
  NodeId p = b.Reduce(b.Global("torch._utils", "_rebuild_parameter"),
                      b.Tuple({t, b.Bool(true), b.Reduce(od, b.Tuple({}))}));
  // Metadata seen next to weights: a device, a Size, a version string, an epoch.
  NodeId dev = b.Reduce(b.Global("torch", "device"), b.Tuple({b.Str("cuda"), b.Int(0)}));
  NodeId size = b.Reduce(b.Global("torch", "Size"), b.Tuple({b.IntTuple({4, 4})}));
  NodeId ver = b.Reduce(b.Global("torch.torch_version", "TorchVersion"), b.Tuple({b.Str("2.1.0")}));
  // Protocol-2 bytes and an optimizer-state defaultdict(dict).
  NodeId raw =
      b.Reduce(b.Global("_codecs", "encode"), b.Tuple({b.Str("\xc3\xbf"), b.Str("latin1")}));
  NodeId state =
      b.Reduce(b.Global("collections", "defaultdict"), b.Tuple({b.Global("builtins", "dict")}));
  b.SetItems(state, {b.Int(0), b.Dict({})});
  NodeId root = b.Dict({b.Str("p"), p, b.Str("dev"), dev, b.Str("size"), size, b.Str("ver"), ver,
                        b.Str("raw"), raw, b.Str("state"), state});
  Evaluation e = Eval(b.Stream(root));
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
  EXPECT_THAT(e.findings, IsEmpty()) << Dump(e);
}

// A codec name decides what _codecs.encode does: 'rot13' computes any text ('bf' -> 'os') and
// every other name imports an encodings module at load time. Only 'latin1', what _pickle.c
// writes for bytes at protocol < 3, is allowed; bytearray's encoding only 'latin-1'.
TEST(EvaluateTest, CodecNamesArePinnedToWhatPicklersWrite) {
  struct Case {
    const char* callee_module;
    const char* callee;
    const char* codec;
    v1::Verdict want;
  } cases[] = {
      {"_codecs", "encode", "latin1", v1::VERDICT_SAFE},
      {"_codecs", "encode", "rot13", v1::VERDICT_SUSPICIOUS},
      {"_codecs", "encode", "latin-1", v1::VERDICT_SUSPICIOUS},
      {"_codecs", "encode", "idna", v1::VERDICT_SUSPICIOUS},
      {"builtins", "bytearray", "latin-1", v1::VERDICT_SAFE},
      {"builtins", "bytearray", "rot13", v1::VERDICT_SUSPICIOUS},
  };
  for (const Case& c : cases) {
    FactsBuilder b;
    b.Reduce(b.Global(c.callee_module, c.callee), b.Tuple({b.Str("bf"), b.Str(c.codec)}));
    Evaluation e = Eval(b.Stream());
    EXPECT_EQ(e.verdict, c.want) << c.callee << " " << c.codec << Dump(e);
    if (c.want != v1::VERDICT_SAFE) {
      ASSERT_THAT(Ids(e), ElementsAre("call.shape")) << Dump(e);
      EXPECT_THAT(e.findings[0].message(), HasSubstr("'latin")) << Dump(e);
    }
  }
}

// Globals that the call invokes or instantiates are pinned to the ones picklers write there: any
// other allowlisted global would be called with arguments no shape checks.
TEST(EvaluateTest, GlobalsThatACallInvokesArePinned) {
  struct Case {
    const char* what;
    std::function<void(FactsBuilder&)> build;
    v1::Verdict want;
  } cases[] = {
      {"defaultdict(dict)",
       [](FactsBuilder& b) {
         b.Reduce(b.Global("collections", "defaultdict"), b.Tuple({b.Global("builtins", "dict")}));
       },
       v1::VERDICT_SAFE},
      {"defaultdict(torch.device): called for every missing key",
       [](FactsBuilder& b) {
         b.Reduce(b.Global("collections", "defaultdict"), b.Tuple({b.Global("torch", "device")}));
       },
       v1::VERDICT_SUSPICIOUS},
      {"_rebuild_from_type_v2(_codecs.encode, Tensor, ('bf', 'rot13'), None)",
       [](FactsBuilder& b) {
         b.Reduce(b.Global("torch._tensor", "_rebuild_from_type_v2"),
                  b.Tuple({b.Global("_codecs", "encode"), b.Global("torch", "Tensor"),
                           b.Tuple({b.Str("bf"), b.Str("rot13")}), b.None()}));
       },
       v1::VERDICT_SUSPICIOUS},
      {"__randomstate_ctor('MT19937', __bit_generator_ctor)",
       [](FactsBuilder& b) {
         b.Reduce(
             b.Global("numpy.random._pickle", "__randomstate_ctor"),
             b.Tuple({b.Str("MT19937"), b.Global("numpy.random._pickle", "__bit_generator_ctor")}));
       },
       v1::VERDICT_SAFE},
      {"__randomstate_ctor('f8', numpy.dtype): calls dtype('f8')",
       [](FactsBuilder& b) {
         b.Reduce(b.Global("numpy.random._pickle", "__randomstate_ctor"),
                  b.Tuple({b.Str("f8"), b.Global("numpy", "dtype")}));
       },
       v1::VERDICT_SUSPICIOUS},
      {"_reconstructor(Namespace, torch.device, None): calls torch.device.__new__",
       [](FactsBuilder& b) {
         b.Reduce(
             b.Global("copyreg", "_reconstructor"),
             b.Tuple({b.Global("argparse", "Namespace"), b.Global("torch", "device"), b.None()}));
       },
       v1::VERDICT_SUSPICIOUS},
  };
  for (const Case& c : cases) {
    FactsBuilder b;
    c.build(b);
    Evaluation e = Eval(b.Stream());
    EXPECT_EQ(e.verdict, c.want) << c.what << Dump(e);
    if (c.want != v1::VERDICT_SAFE) {
      EXPECT_THAT(Ids(e), ElementsAre("call.shape")) << c.what << Dump(e);
    }
  }
}

// torch calls every value of a tensor's backward hooks during backward; torch.save always writes
// them as an empty OrderedDict().
TEST(EvaluateTest, BackwardHooksMustBeEmpty) {
  for (bool with_hook : {false, true}) {
    FactsBuilder b;
    NodeId hooks = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
    if (with_hook) b.SetItems(hooks, {b.Int(0), b.Global("torch", "Tensor")});
    NodeId st = b.Storage("FloatStorage", "0", 2);
    b.Reduce(b.Global("torch._utils", "_rebuild_tensor_v2"),
             b.Tuple({st, b.Int(0), b.IntTuple({2}), b.IntTuple({1}), b.Bool(false), hooks}));
    Evaluation e = Eval(b.Stream());
    EXPECT_EQ(e.verdict, with_hook ? v1::VERDICT_SUSPICIOUS : v1::VERDICT_SAFE) << Dump(e);
    if (with_hook) {
      EXPECT_THAT(Ids(e), ::testing::Contains("call.shape")) << Dump(e);
    }
  }
}

// A pin on a kind the spec does not take would silently never apply.
TEST(RuleSetLoadTest, PinWithoutItsKindIsRejected) {
  struct Case {
    const char* spec;
    const char* message;
  } cases[] = {
      {R"pb(any_of: ARG_INT str_values: "x")pb", "str_values without ARG_STR"},
      {R"pb(any_of: ARG_STR global_values: "a.b")pb", "global_values without ARG_GLOBAL"},
      {R"pb(any_of: ARG_LIST empty: true)pb", "empty without ARG_DICT"},
  };
  for (const Case& c : cases) {
    ExpectRefused(
        absl::StrCat(R"pb(version: "v"
                          allow { module: "m" name: "f"
                                  calls { op: CALL_REDUCE min_args: 1 max_args: 1 args {)pb",
                     " ", c.spec, "} } }"),
        c.message);
  }
}

TEST(EvaluateSafeTest, NumpyArrayAndArgparseNamespaceAreSafe) {
  FactsBuilder b;
  // np.array pickled at protocol 2: _reconstruct(ndarray, (0,), _codecs.encode('b', 'latin1')).
  NodeId enc = b.Global("_codecs", "encode");
  NodeId arr = b.Reduce(b.Global("numpy.core.multiarray", "_reconstruct"),
                        b.Tuple({b.Global("numpy", "ndarray"), b.IntTuple({0}),
                                 b.Reduce(enc, b.Tuple({b.Str("b"), b.Str("latin1")}))}));
  NodeId dt =
      b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str("f8"), b.Bool(false), b.Bool(true)}));
  b.Build(dt, b.Tuple({b.Int(3), b.Str("<"), b.None(), b.None(), b.None(), b.Int(-1), b.Int(-1),
                       b.Int(0)}));
  b.Build(arr, b.Tuple({b.Int(1), b.IntTuple({3}), dt, b.Bool(false),
                        b.Bytes("123456781234567812345678")}));
  // args = parser.parse_args(): NEWOBJ Namespace() + BUILD.
  NodeId ns = b.NewObj(b.Global("argparse", "Namespace"), b.Tuple({}));
  b.Build(ns, b.Dict({b.Str("lr"), b.Float(0.1)}));
  Evaluation e = Eval(b.Stream(b.Tuple({arr, ns})));
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
  EXPECT_THAT(e.findings, IsEmpty()) << Dump(e);
}

// Shapes seen in real torch 1.13 / numpy 1.24 output (data.pkl of torch.save at protocols 1-5).
TEST(EvaluateSafeTest, ShapesSeenInRealTorchOutputAreSafe) {
  FactsBuilder b;
  NodeId enc = b.Global("_codecs", "encode");
  NodeId obj = b.Global("builtins", "object");
  // Protocol 2: bytearray(_codecs.encode('ab', 'latin1')).
  NodeId ba = b.Reduce(b.Global("builtins", "bytearray"),
                       b.Tuple({b.Reduce(enc, b.Tuple({b.Str("ab"), b.Str("latin1")}))}));
  // Protocol 5: numpy.core.numeric._frombuffer(bytearray, dtype('f4', ...), (2, 3), 'C').
  NodeId dt =
      b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str("f4"), b.Bool(false), b.Bool(true)}));
  NodeId arr =
      b.Reduce(b.Global("numpy.core.numeric", "_frombuffer"),
               b.Tuple({b.ByteArray(std::string(24, '\0')), dt, b.IntTuple({2, 3}), b.Str("C")}));
  // Protocol 1: copyreg._reconstructor(argparse.Namespace, object, None) + BUILD.
  NodeId ns = b.Reduce(b.Global("copyreg", "_reconstructor"),
                       b.Tuple({b.Global("argparse", "Namespace"), obj, b.None()}));
  b.Build(ns, b.Dict({b.Str("a"), b.Int(1)}));
  // A tensor with a Python attribute: _rebuild_from_type_v2(_rebuild_tensor_v2, Tensor, args,
  // state).
  NodeId od = b.Global("collections", "OrderedDict");
  NodeId st = b.Storage("FloatStorage", "0", 2);
  NodeId v2 = b.Global("torch._utils", "_rebuild_tensor_v2");
  NodeId args = b.Tuple(
      {st, b.Int(0), b.IntTuple({2}), b.IntTuple({1}), b.Bool(false), b.Reduce(od, b.Tuple({}))});
  NodeId attr = b.Reduce(
      b.Global("torch._tensor", "_rebuild_from_type_v2"),
      b.Tuple({v2, b.Global("torch", "Tensor"), args, b.Dict({b.Str("note"), b.Str("hi")})}));
  // torch 1.13 sparse CSR.
  NodeId layout = b.Reduce(b.Global("torch.serialization", "_get_layout"),
                           b.Tuple({b.Str("torch.sparse_csr")}));
  NodeId csr = b.Reduce(b.Global("torch._utils", "_rebuild_sparse_csr_tensor"),
                        b.Tuple({layout, b.Tuple({attr, attr, attr, b.IntTuple({2, 2})})}));
  Evaluation e = Eval(b.Stream(b.Tuple({ba, arr, ns, attr, csr})));
  EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
  EXPECT_THAT(e.findings, IsEmpty()) << Dump(e);
}

// BUILD states: each allowlisted build target accepts exactly the states its loader writes
// (numpy 1.24 / torch 1.13 / CPython 3.11 output); anything else is call.build_state.
struct StateCase {
  const char* name;
  std::function<void(FactsBuilder&)> build;
  bool safe;
};

NodeId Dtype(FactsBuilder& b, const char* code) {
  return b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str(code), b.Bool(false), b.Bool(true)}));
}
NodeId DtypeState(FactsBuilder& b, const char* order, int64_t elsize, int64_t align,
                  int64_t flags) {
  return b.Tuple({b.Int(3), b.Str(order), b.None(), b.None(), b.None(), b.Int(elsize), b.Int(align),
                  b.Int(flags)});
}
struct Field {
  const char* name;
  const char* code;
  int64_t offset;
};
// numpy < 1.19's form: numpy.dtype(code, 0, 1).
NodeId OldDtype(FactsBuilder& b, const char* code) {
  return b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str(code), b.Int(0), b.Int(1)}));
}
NodeId StructuredState(FactsBuilder& b, int64_t elsize, std::initializer_list<Field> fields,
                       int64_t flags, const char* extra_name = nullptr) {
  std::vector<NodeId> names, items;
  for (const Field& f : fields) {
    names.push_back(b.Str(f.name));
    items.push_back(b.Str(f.name));
    items.push_back(b.Tuple({Dtype(b, f.code), b.Int(f.offset)}));
  }
  if (extra_name != nullptr) names.push_back(b.Str(extra_name));
  NodeId names_tuple = b.Tuple({});
  NodeId fields_dict = b.Dict({});
  b.MutableItems(names_tuple) = names;
  b.MutableItems(fields_dict) = items;
  return b.Tuple({b.Int(3), b.Str("|"), b.None(), names_tuple, fields_dict, b.Int(elsize), b.Int(1),
                  b.Int(flags)});
}
void StructuredDtype(FactsBuilder& b, const char* code, int64_t elsize,
                     std::initializer_list<Field> fields, int64_t flags,
                     const char* extra_name = nullptr) {
  b.Build(Dtype(b, code), StructuredState(b, elsize, fields, flags, extra_name));
}
// A record array's dtype: numpy.dtype(numpy.record, False, True) (or numpy < 1.19's 0, 1) with
// a structured state.
NodeId RecordDtype(FactsBuilder& b, const char* module, bool old_args, int64_t elsize,
                   std::initializer_list<Field> fields, int64_t flags) {
  NodeId dt = b.Reduce(b.Global("numpy", "dtype"),
                       b.Tuple({b.Global(module, "record"), old_args ? b.Int(0) : b.Bool(false),
                                old_args ? b.Int(1) : b.Bool(true)}));
  b.Build(dt, StructuredState(b, elsize, fields, flags));
  return dt;
}
// _reconstruct(subtype, (0,), b'b') then BUILD (1, shape, dtype, False, data).
NodeId Reconstructed(FactsBuilder& b, NodeId subtype, NodeId dtype,
                     std::initializer_list<int64_t> shape, NodeId data) {
  NodeId arr = b.Reduce(b.Global("numpy.core.multiarray", "_reconstruct"),
                        b.Tuple({subtype, b.IntTuple({0}), b.Bytes("b")}));
  b.Build(arr, b.Tuple({b.Int(1), b.IntTuple(shape), dtype, b.Bool(false), data}));
  return arr;
}
NodeId NdArray(FactsBuilder& b) {
  NodeId arr = b.Reduce(b.Global("numpy.core.multiarray", "_reconstruct"),
                        b.Tuple({b.Global("numpy", "ndarray"), b.IntTuple({0}), b.Bytes("b")}));
  NodeId dt = Dtype(b, "u4");
  b.Build(dt, DtypeState(b, "<", -1, -1, 0));
  b.Build(arr, b.Tuple({b.Int(1), b.IntTuple({1}), dt, b.Bool(false), b.Bytes("abcd")}));
  return arr;
}
void ObjectArray(FactsBuilder& b, std::initializer_list<int64_t> shape, int items) {
  NodeId arr = b.Reduce(b.Global("numpy.core.multiarray", "_reconstruct"),
                        b.Tuple({b.Global("numpy", "ndarray"), b.IntTuple({0}), b.Bytes("b")}));
  NodeId dt = Dtype(b, "O8");
  b.Build(dt, DtypeState(b, "|", -1, -1, 63));
  NodeId list = b.List({});
  for (int i = 0; i < items; ++i) b.MutableItems(list).push_back(b.Int(i));
  b.Build(arr, b.Tuple({b.Int(1), b.IntTuple(shape), dt, b.Bool(false), list}));
}
NodeId RandomState(FactsBuilder& b) {
  return b.Reduce(
      b.Global("numpy.random._pickle", "__randomstate_ctor"),
      b.Tuple({b.Str("MT19937"), b.Global("numpy.random._pickle", "__bit_generator_ctor")}));
}
NodeId Mt19937State(FactsBuilder& b, int64_t pos) {
  return b.Dict({b.Str("bit_generator"), b.Str("MT19937"), b.Str("state"),
                 b.Dict({b.Str("key"), NdArray(b), b.Str("pos"), b.Int(pos)}), b.Str("has_gauss"),
                 b.Int(0), b.Str("gauss"), b.Float(0.0)});
}
NodeId PhiloxGenerator(FactsBuilder& b, int64_t buffer_pos) {
  NodeId g = b.Reduce(b.Global("numpy.random._pickle", "__bit_generator_ctor"),
                      b.Tuple({b.Str("Philox")}));
  b.Build(g, b.Dict({b.Str("bit_generator"), b.Str("Philox"), b.Str("state"),
                     b.Dict({b.Str("counter"), NdArray(b), b.Str("key"), NdArray(b)}),
                     b.Str("buffer"), NdArray(b), b.Str("buffer_pos"), b.Int(buffer_pos),
                     b.Str("has_uint32"), b.Int(0), b.Str("uinteger"), b.Int(0)}));
  return g;
}
NodeId Parameter(FactsBuilder& b) {
  NodeId st = b.Storage("FloatStorage", "0", 2);
  NodeId t = b.Reduce(b.Global("torch._utils", "_rebuild_tensor_v2"),
                      b.Tuple({st, b.Int(0), b.IntTuple({2}), b.IntTuple({1}), b.Bool(false),
                               b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}))}));
  return b.NewObj(b.Global("torch.nn.parameter", "Parameter"), b.Tuple({t, b.Bool(true)}));
}
NodeId JoblibWrapper(FactsBuilder& b, NodeId subclass) {
  NodeId w = b.NewObj(b.Global("joblib.numpy_pickle", "NumpyArrayWrapper"), b.Tuple({}));
  NodeId dt = Dtype(b, "f8");
  b.Build(dt, DtypeState(b, "<", -1, -1, 0));
  b.Build(w, b.Dict({b.Str("subclass"), subclass, b.Str("shape"), b.IntTuple({2}), b.Str("order"),
                     b.Str("C"), b.Str("dtype"), dt, b.Str("allow_mmap"), b.Bool(false),
                     b.Str("numpy_array_alignment_bytes"), b.Int(16)}));
  return w;
}

const StateCase kStateCases[] = {
    {"DtypeFloat64AsNumpyWritesIt",
     [](FactsBuilder& b) { b.Build(Dtype(b, "f8"), DtypeState(b, "<", -1, -1, 0)); }, true},
    {"DtypeFloat64WithTheObjectFlags",
     [](FactsBuilder& b) { b.Build(Dtype(b, "f8"), DtypeState(b, "<", -1, -1, 63)); }, false},
    {"DtypeObjectAsNumpyWritesIt",
     [](FactsBuilder& b) { b.Build(Dtype(b, "O8"), DtypeState(b, "|", -1, -1, 63)); }, true},
    {"DtypeObjectWithoutItsObjectFlags",
     [](FactsBuilder& b) { b.Build(Dtype(b, "O8"), DtypeState(b, "|", -1, -1, 0)); }, false},
    {"DtypeUnicodeAsNumpyWritesIt",
     [](FactsBuilder& b) { b.Build(Dtype(b, "U3"), DtypeState(b, "<", 12, 4, 8)); }, true},
    {"DtypeBytesWithTheObjectFlags",
     [](FactsBuilder& b) { b.Build(Dtype(b, "S8"), DtypeState(b, "|", 8, 1, 63)); }, false},
    {"DtypeBytesWhoseElsizeIsNotItsCode",
     [](FactsBuilder& b) { b.Build(Dtype(b, "S8"), DtypeState(b, "|", 4096, 1, 0)); }, false},
    {"DtypeStructuredAsNumpyWritesIt",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V12", 12, {{"a", "i4", 0}, {"b", "f8", 4}}, 16);
     },
     true},
    {"DtypeStructuredAlignedAsNumpyWritesIt",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V16", 16, {{"a", "i4", 0}, {"b", "f8", 8}}, -112);
     },
     true},
    {"DtypeStructuredFieldPastItsEnd",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V12", 12, {{"a", "i4", 0}, {"b", "f8", 8}}, 16);
     },
     false},
    {"DtypeStructuredElsizeLargerThanItsCode",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V4", 64, {{"a", "i4", 0}, {"b", "f8", 56}}, 16);
     },
     false},
    {"DtypeStructuredWithAnObjectField",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V8", 8, {{"a", "O8", 0}}, 16);
     },
     false},
    {"DtypeStructuredNameWithoutAField",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V8", 8, {{"a", "f8", 0}}, 16, /*extra_name=*/"b");
     },
     false},
    {"DtypeSizedCodeWithLettersAfterTheDigits",
     [](FactsBuilder& b) { b.Build(Dtype(b, "S8x"), DtypeState(b, "|", 8, 1, 0)); }, false},
    {"DtypeStructuredWithFields",
     [](FactsBuilder& b) {
       b.Build(Dtype(b, "V8"), b.Tuple({b.Int(3), b.Str("|"), b.None(), b.Tuple({b.Str("a")}),
                                        b.Dict({b.Str("a"), b.Tuple({Dtype(b, "O8"), b.Int(0)})}),
                                        b.Int(8), b.Int(1), b.Int(0)}));
     },
     false},
    {"DtypeDatetimeAsNumpyWritesIt",
     [](FactsBuilder& b) {
       b.Build(
           Dtype(b, "M8"),
           b.Tuple({b.Int(4), b.Str("<"), b.None(), b.None(), b.None(), b.Int(-1), b.Int(-1),
                    b.Int(0),
                    b.Tuple({b.Dict({}), b.Tuple({b.Bytes("s"), b.Int(1), b.Int(1), b.Int(1)})})}));
     },
     true},
    {"NdarrayAsNumpyWritesIt", [](FactsBuilder& b) { NdArray(b); }, true},
    {"NdarrayWhoseDtypeIsNotADtype",
     [](FactsBuilder& b) {
       NodeId arr =
           b.Reduce(b.Global("numpy.core.multiarray", "_reconstruct"),
                    b.Tuple({b.Global("numpy", "ndarray"), b.IntTuple({0}), b.Bytes("b")}));
       b.Build(arr,
               b.Tuple({b.Int(1), b.IntTuple({1}), b.Str("u4"), b.Bool(false), b.Bytes("abcd")}));
     },
     false},
    {"ObjectArrayWithAsManyItemsAsItsShape",
     [](FactsBuilder& b) {
       ObjectArray(b, {2, 2}, 4);
     },
     true},
    {"ObjectArrayWithFewerItemsThanItsShape", [](FactsBuilder& b) { ObjectArray(b, {100'000}, 1); },
     false},
    {"ZeroDimensionalObjectArrayWithNoItem", [](FactsBuilder& b) { ObjectArray(b, {}, 0); }, false},
    {"NumericArrayGivenAListOfItems",
     [](FactsBuilder& b) {
       NodeId arr =
           b.Reduce(b.Global("numpy.core.multiarray", "_reconstruct"),
                    b.Tuple({b.Global("numpy", "ndarray"), b.IntTuple({0}), b.Bytes("b")}));
       NodeId dt = Dtype(b, "f8");
       b.Build(dt, DtypeState(b, "<", -1, -1, 0));
       b.Build(arr, b.Tuple({b.Int(1), b.IntTuple({1}), dt, b.Bool(false), b.List({b.Int(1)})}));
     },
     false},
    {"StructuredDtypeThatContainsItself",
     [](FactsBuilder& b) {
       NodeId dt = Dtype(b, "V16");
       NodeId names = b.Tuple({b.Str("a")});
       NodeId fields = b.Dict({b.Str("a"), b.Tuple({dt, b.Int(0)})});
       b.Build(dt, b.Tuple({b.Int(3), b.Str("|"), b.None(), names, fields, b.Int(16), b.Int(1),
                            b.Int(16)}));
     },
     false},
    {"RandomStateAtTheEndOfItsKey",
     [](FactsBuilder& b) { b.Build(RandomState(b), Mt19937State(b, 624)); }, true},
    {"RandomStatePositionPastItsKey",
     [](FactsBuilder& b) { b.Build(RandomState(b), Mt19937State(b, 100'000)); }, false},
    {"RandomStateNegativePosition",
     [](FactsBuilder& b) { b.Build(RandomState(b), Mt19937State(b, -1)); }, false},
    {"PhiloxBufferPositionAsNumpyWritesIt", [](FactsBuilder& b) { PhiloxGenerator(b, 4); }, true},
    {"PhiloxBufferPositionBeforeItsBuffer", [](FactsBuilder& b) { PhiloxGenerator(b, -8); }, false},
    {"OrderedDictWithStateDictMetadata",
     [](FactsBuilder& b) {
       NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
       b.Build(od, b.Dict({b.Str("_metadata"),
                           b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}))}));
     },
     true},
    {"OrderedDictMetadataRepeatedWithABadLastValue",
     [](FactsBuilder& b) {
       NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
       b.Build(od, b.Dict({b.Str("_metadata"), b.Dict({}), b.Str("_metadata"), b.Int(1)}));
     },
     false},
    {"OrderedDictAttributeThatShadowsAMethod",
     [](FactsBuilder& b) {
       NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
       b.Build(od, b.Dict({b.Str("_metadata"), b.Dict({}), b.Str("keys"), b.Int(1)}));
     },
     false},
    {"ParameterStateAsTensorSetstateTakesIt",
     [](FactsBuilder& b) {
       NodeId p = Parameter(b);
       b.Build(p, b.Tuple({b.Bool(true), b.None(),
                           b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}))}));
     },
     true},
    {"ParameterLegacyStateThatCallsSet",
     [](FactsBuilder& b) {
       NodeId p = Parameter(b);
       b.Build(p, b.Tuple({b.Storage("FloatStorage", "1", 1), b.Int(0), b.IntTuple({4}),
                           b.IntTuple({1})}));
     },
     false},
    {"ReconstructedNamespaceDict",
     [](FactsBuilder& b) {
       NodeId ns = b.Reduce(
           b.Global("copyreg", "_reconstructor"),
           b.Tuple({b.Global("argparse", "Namespace"), b.Global("builtins", "object"), b.None()}));
       b.Build(ns, b.Dict({b.Str("lr"), b.Float(0.1)}));
     },
     true},
    {"ReconstructedCounterWithAttributes",
     [](FactsBuilder& b) {
       NodeId c = b.Reduce(
           b.Global("copyreg", "_reconstructor"),
           b.Tuple({b.Global("collections", "Counter"), b.Global("builtins", "dict"), b.Dict({})}));
       b.Build(c, b.Dict({b.Str("keys"), b.Int(1)}));
     },
     false},
    {"NamespaceWithANonStrKey",
     [](FactsBuilder& b) {
       NodeId ns = b.NewObj(b.Global("argparse", "Namespace"), b.Tuple({}));
       b.Build(ns, b.Dict({b.Int(1), b.Float(0.1)}));
     },
     false},
    {"JoblibWrapperAsJoblibWritesIt",
     [](FactsBuilder& b) { JoblibWrapper(b, b.Global("numpy", "ndarray")); }, true},
    {"JoblibWrapperWhoseSubclassIsAnotherClass",
     [](FactsBuilder& b) { JoblibWrapper(b, b.Global("collections", "OrderedDict")); }, false},
    {"JoblibWrapperOfAMatrixAsJoblib010WritesIt",
     [](FactsBuilder& b) { JoblibWrapper(b, b.Global("numpy.matrixlib.defmatrix", "matrix")); },
     true},
    {"JoblibWrapperOfAMatrixUnderNumpysName",
     [](FactsBuilder& b) { JoblibWrapper(b, b.Global("numpy", "matrix")); }, true},
    {"JoblibWrapperWhoseSubclassIsARecordArray",
     [](FactsBuilder& b) { JoblibWrapper(b, b.Global("numpy", "recarray")); }, false},
    // numpy < 1.19: numpy.dtype(code, 0, 1), and the same states.
    {"OldNumpyDtypeFloat64",
     [](FactsBuilder& b) { b.Build(OldDtype(b, "f8"), DtypeState(b, "<", -1, -1, 0)); }, true},
    {"OldNumpyDtypeObject",
     [](FactsBuilder& b) { b.Build(OldDtype(b, "O8"), DtypeState(b, "|", -1, -1, 63)); }, true},
    {"OldNumpyDtypeFloat64WithTheObjectFlags",
     [](FactsBuilder& b) { b.Build(OldDtype(b, "f8"), DtypeState(b, "<", -1, -1, 63)); }, false},
    {"OldNumpyDtypeObjectWithoutItsObjectFlags",
     [](FactsBuilder& b) { b.Build(OldDtype(b, "O8"), DtypeState(b, "|", -1, -1, 0)); }, false},
    {"OldNumpyStructuredDtypeWithNoFlags",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V12", 12, {{"a", "i4", 0}, {"b", "f8", 4}}, 0);
     },
     true},
    {"OldNumpyStructuredDtypeWithNoFlagsAndAnObjectField",
     [](FactsBuilder& b) {
       StructuredDtype(b, "V16", 16, {{"a", "O8", 0}, {"b", "f8", 8}}, 0);
     },
     false},
    {"MatrixAsNumpyWritesIt",
     [](FactsBuilder& b) {
       NodeId dt = OldDtype(b, "i8");
       b.Build(dt, DtypeState(b, "<", -1, -1, 0));
       Reconstructed(b, b.Global("numpy.matrixlib.defmatrix", "matrix"), dt, {1, 2},
                     b.Bytes(std::string(16, '\0')));
     },
     true},
    // numpy.rec arrays: a recarray of a record dtype (statsmodels' results, numpy 1.x and 2.x).
    {"RecordArrayAsOldNumpyWroteIt",
     [](FactsBuilder& b) {
       NodeId dt = RecordDtype(b, "numpy.core.records", /*old_args=*/true, 24,
                               {{"x", "f8", 0}, {"y", "f8", 8}, {"z", "f8", 16}}, 0);
       Reconstructed(b, b.Global("numpy.core.records", "recarray"), dt, {2},
                     b.Bytes(std::string(48, '\0')));
     },
     true},
    {"RecordArrayAsNumpyWritesIt",
     [](FactsBuilder& b) {
       NodeId dt =
           RecordDtype(b, "numpy", /*old_args=*/false, 12, {{"a", "i4", 0}, {"b", "f8", 4}}, 16);
       Reconstructed(b, b.Global("numpy", "recarray"), dt, {1}, b.Bytes(std::string(12, '\0')));
     },
     true},
    {"RecordArrayUnderNumpy2sModule",
     [](FactsBuilder& b) {
       NodeId dt = RecordDtype(b, "numpy._core.records", /*old_args=*/false, 16,
                               {{"a", "i4", 0}, {"b", "f8", 8}}, 144);
       Reconstructed(b, b.Global("numpy._core.records", "recarray"), dt, {1},
                     b.Bytes(std::string(16, '\0')));
     },
     true},
    {"RecordDtypeWithAnObjectField",
     [](FactsBuilder& b) {
       RecordDtype(b, "numpy", /*old_args=*/false, 16, {{"a", "O8", 0}, {"b", "f8", 8}}, 16);
     },
     false},
    {"RecordDtypeWithTheObjectFlags",
     [](FactsBuilder& b) {
       RecordDtype(b, "numpy", /*old_args=*/false, 8, {{"a", "f8", 0}}, 63);
     },
     false},
    {"RecordDtypeFieldPastItsElsize",
     [](FactsBuilder& b) {
       RecordDtype(b, "numpy", /*old_args=*/false, 8, {{"a", "f8", 0}, {"b", "f8", 8}}, 16);
     },
     false},
    {"RecordDtypeWithoutFields",
     [](FactsBuilder& b) {
       NodeId dt = b.Reduce(b.Global("numpy", "dtype"),
                            b.Tuple({b.Global("numpy", "record"), b.Bool(false), b.Bool(true)}));
       b.Build(dt, DtypeState(b, "|", 1 << 30, 1, 0));
     },
     false},
    {"RecordArrayGivenAListOfObjects",
     [](FactsBuilder& b) {
       NodeId dt = RecordDtype(b, "numpy", /*old_args=*/false, 8, {{"a", "f8", 0}}, 16);
       Reconstructed(b, b.Global("numpy", "recarray"), dt, {1}, b.List({b.Int(1)}));
     },
     false},
};

class BuildStateTest : public ::testing::TestWithParam<StateCase> {};

TEST_P(BuildStateTest, StateIsAcceptedOnlyWhenItsLoaderWritesIt) {
  FactsBuilder b;
  GetParam().build(b);
  Evaluation e = Eval(b.Stream());
  if (GetParam().safe) {
    EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << Dump(e);
    EXPECT_THAT(e.findings, IsEmpty()) << Dump(e);
  } else {
    EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
    EXPECT_THAT(Ids(e), ::testing::Contains("call.build_state")) << Dump(e);
  }
}

INSTANTIATE_TEST_SUITE_P(Default, BuildStateTest, ::testing::ValuesIn(kStateCases),
                         [](const ::testing::TestParamInfo<StateCase>& i) {
                           return std::string(i.param.name);
                         });

TEST(EvaluateTest, BuildStateMessageSaysWhatWasExpected) {
  FactsBuilder b;
  b.Build(Dtype(b, "f8"), DtypeState(b, "<", -1, -1, 63));
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("call.build_state")) << Dump(e);
  EXPECT_EQ(e.findings[0].global(), "numpy.dtype");
  EXPECT_THAT(e.findings[0].message(), HasSubstr("INT 0")) << Dump(e);
}

// _rebuild_from_type_v2(func, new_type, args, state) calls func(*args): that inner call is held
// to func's own shapes, and the state's setattr()s to str names with plain values.
TEST(EvaluateTest, AppliedRebuildFunctionMustMatchItsOwnShapes) {
  struct Case {
    const char* name;
    bool hooked;  // backward hooks in the inner _rebuild_tensor_v2 call
    bool object_attribute;
    bool safe;
  } cases[] = {{"plain", false, false, true},
               {"hooks inside the applied call", true, false, false},
               {"an object set as an attribute", false, true, false}};
  for (const Case& c : cases) {
    FactsBuilder b;
    NodeId hooks = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
    if (c.hooked) b.SetItems(hooks, {b.Int(0), b.Global("torch", "Tensor")});
    NodeId st = b.Storage("FloatStorage", "0", 2);
    NodeId args = b.Tuple({st, b.Int(0), b.IntTuple({2}), b.IntTuple({1}), b.Bool(false), hooks});
    NodeId value = c.object_attribute
                       ? b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}))
                       : b.Bool(true);
    b.Reduce(b.Global("torch._tensor", "_rebuild_from_type_v2"),
             b.Tuple({b.Global("torch._utils", "_rebuild_tensor_v2"),
                      b.Global("torch.nn.parameter", "Parameter"), args,
                      b.Dict({b.Str("tensor_model_parallel"), value})}));
    Evaluation e = Eval(b.Stream());
    if (c.safe) {
      EXPECT_EQ(e.verdict, v1::VERDICT_SAFE) << c.name << Dump(e);
    } else {
      EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << c.name << Dump(e);
      EXPECT_THAT(Ids(e), ::testing::Contains("call.shape")) << c.name << Dump(e);
    }
  }
}

TEST(EvaluateTest, AppliedCallWithTheWrongArgumentCountIsCallShape) {
  FactsBuilder b;
  b.Reduce(b.Global("torch._tensor", "_rebuild_from_type_v2"),
           b.Tuple({b.Global("torch._utils", "_rebuild_tensor_v2"), b.Global("torch", "Tensor"),
                    b.Tuple({b.Int(1)}), b.None()}));
  Evaluation e = Eval(b.Stream());
  ASSERT_THAT(Ids(e), ElementsAre("call.shape")) << Dump(e);
  EXPECT_THAT(e.findings[0].message(), HasSubstr("applies torch._utils._rebuild_tensor_v2"));
}

TEST(EvaluateTest, ParameterStateSetsOnlyPlainAttributes) {
  for (bool hook : {false, true}) {
    FactsBuilder b;
    NodeId empty = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
    NodeId st = b.Storage("FloatStorage", "0", 2);
    NodeId t =
        b.Reduce(b.Global("torch._utils", "_rebuild_tensor_v2"),
                 b.Tuple({st, b.Int(0), b.IntTuple({2}), b.IntTuple({1}), b.Bool(false), empty}));
    NodeId hooks = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
    b.SetItems(hooks, {b.Int(0), b.Global("torch", "Tensor")});
    b.Reduce(b.Global("torch._utils", "_rebuild_parameter_with_state"),
             b.Tuple({t, b.Bool(true), empty,
                      hook ? b.Dict({b.Str("_backward_hooks"), hooks})
                           : b.Dict({b.Str("partition_dim"), b.Int(0)})}));
    Evaluation e = Eval(b.Stream());
    EXPECT_EQ(e.verdict, hook ? v1::VERDICT_SUSPICIOUS : v1::VERDICT_SAFE) << Dump(e);
  }
}

// numpy < 1.19 wrote numpy.dtype(code, 0, 1) and numpy.dtype(numpy.record, 0, 1): exactly those
// ints. Any other int form (copy 0 shares numpy's descriptor), another scalar type in place of
// the code, or another subtype for _reconstruct is not a shape numpy writes.
TEST(EvaluateTest, OldNumpyDtypeArgumentsAreExactlyTheOnesItWrote) {
  struct Case {
    const char* name;
    std::function<NodeId(FactsBuilder&)> call;
  } cases[] = {
      {"copy 0",
       [](FactsBuilder& b) {
         return b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str("f8"), b.Int(0), b.Int(0)}));
       }},
      {"align 1",
       [](FactsBuilder& b) {
         return b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str("f8"), b.Int(1), b.Int(1)}));
       }},
      {"copy 2",
       [](FactsBuilder& b) {
         return b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str("f8"), b.Int(0), b.Int(2)}));
       }},
      {"a float align",
       [](FactsBuilder& b) {
         return b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str("f8"), b.Float(0), b.Int(1)}));
       }},
      {"ndarray for the code",
       [](FactsBuilder& b) {
         return b.Reduce(b.Global("numpy", "dtype"),
                         b.Tuple({b.Global("numpy", "ndarray"), b.Int(0), b.Int(1)}));
       }},
      {"a record array subtype for the code",
       [](FactsBuilder& b) {
         return b.Reduce(b.Global("numpy", "dtype"),
                         b.Tuple({b.Global("numpy", "recarray"), b.Bool(false), b.Bool(true)}));
       }},
      {"_reconstruct of a class that is not numpy's array",
       [](FactsBuilder& b) {
         return b.Reduce(
             b.Global("numpy.core.multiarray", "_reconstruct"),
             b.Tuple({b.Global("collections", "OrderedDict"), b.IntTuple({0}), b.Bytes("b")}));
       }},
      {"_reconstruct of numpy.record",
       [](FactsBuilder& b) {
         return b.Reduce(b.Global("numpy._core.multiarray", "_reconstruct"),
                         b.Tuple({b.Global("numpy", "record"), b.IntTuple({0}), b.Bytes("b")}));
       }},
  };
  for (const Case& c : cases) {
    FactsBuilder b;
    c.call(b);
    Evaluation e = Eval(b.Stream());
    EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << c.name << Dump(e);
    EXPECT_THAT(Ids(e), ::testing::Contains("call.shape")) << c.name << Dump(e);
  }
}

// numpy.matrix, numpy.recarray and numpy.record are data: called, they are not.
TEST(EvaluateTest, NumpyDataSubclassesAreNotCallable) {
  for (const auto& [module, name] : std::vector<std::pair<const char*, const char*>>{
           {"numpy", "matrix"}, {"numpy.core.records", "recarray"}, {"numpy", "record"}}) {
    FactsBuilder b;
    b.Reduce(b.Global(module, name), b.Tuple({b.Str("1 2; 3 4")}));
    Evaluation e = Eval(b.Stream());
    EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << name << Dump(e);
    EXPECT_THAT(Ids(e), ::testing::Contains("call.shape")) << name << Dump(e);
  }
}

// numpy.dtype(code, align, copy=False) returns numpy's shared descriptor: anything done to it
// (a BUILD, numpy...scalar() setting a size) changes every later dtype of that kind.
TEST(EvaluateTest, SharedDtypeDescriptorIsNeverSafe) {
  FactsBuilder b;
  NodeId dt =
      b.Reduce(b.Global("numpy", "dtype"), b.Tuple({b.Str("U0"), b.Bool(false), b.Bool(false)}));
  b.Reduce(b.Global("numpy.core.multiarray", "scalar"), b.Tuple({dt}));
  Evaluation e = Eval(b.Stream());
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS) << Dump(e);
  EXPECT_THAT(Ids(e), ::testing::Contains("call.shape")) << Dump(e);
}

// copyreg._reconstructor(cls, base, state) runs base.__init__ on a cls object: each class is
// pinned to its own base (dict.__init__ on an OrderedDict hides its items from iteration).
TEST(EvaluateTest, ReconstructorClassIsPairedWithItsBase) {
  struct Case {
    const char* cls_module;
    const char* cls_name;
    const char* base;
    bool safe;
  } cases[] = {{"argparse", "Namespace", "object", true},
               {"collections", "OrderedDict", "dict", false},
               {"argparse", "Namespace", "dict", false}};
  for (const Case& c : cases) {
    FactsBuilder b;
    b.Reduce(b.Global("copyreg", "_reconstructor"),
             b.Tuple({b.Global(c.cls_module, c.cls_name), b.Global("builtins", c.base),
                      c.safe ? b.None() : b.Dict({b.Str("hidden.weight"), b.Int(1)})}));
    Evaluation e = Eval(b.Stream());
    EXPECT_EQ(e.verdict, c.safe ? v1::VERDICT_SAFE : v1::VERDICT_SUSPICIOUS)
        << c.cls_name << " " << c.base << Dump(e);
  }
}

// Spec fields that would silently never apply, and build states without a build target.
TEST(RuleSetLoadTest, InvalidBuildStatesAndNestedSpecsAreRejected) {
  struct Case {
    const char* entry;
    const char* message;
  } cases[] = {
      {R"pb(build_states { state { any_of: ARG_DICT } })pb", "build_states without build_target"},
      {R"pb(build_target: true
            build_states { state { any_of: ARG_INT int_min: 2 int_max: 1 } })pb",
       "int_min 2 > int_max 1"},
      {R"pb(build_target: true
            build_states { state { any_of: ARG_STR int_min: 0 } })pb",
       "without ARG_INT"},
      {R"pb(build_target: true
            build_states {
              state {
                any_of: ARG_LIST
                items { any_of: ARG_INT }
              }
            })pb",
       "items without ARG_TUPLE"},
      {R"pb(build_target: true
            build_states {
              state {
                any_of: ARG_TUPLE
                keys {
                  key: "a"
                  value { any_of: ARG_INT }
                }
              }
            })pb",
       "keys without ARG_DICT"},
      {R"pb(build_target: true
            build_states { state { any_of: ARG_DICT str_keys: true empty: true } })pb",
       "exclude each other"},
      {R"pb(build_target: true
            build_states { state { any_of: ARG_CALL } })pb",
       "ARG_CALL without global_values"},
      {R"pb(build_target: true
            build_states {
              state {
                any_of: ARG_DICT
                values { any_of: ARG_INT }
              }
            })pb",
       "values without str_keys"},
      {R"pb(build_target: true
            build_states {
              state {
                any_of: ARG_DICT
                keys {
                  key: "a"
                  value { any_of: ARG_INT }
                }
                keys {
                  key: "a"
                  value { any_of: ARG_INT }
                }
              }
            })pb",
       "duplicate key 'a'"},
      {R"pb(build_target: true
            build_states {
              state {
                any_of: ARG_TUPLE
                items {
                  any_of: ARG_TUPLE
                  items {
                    any_of: ARG_TUPLE
                    items {
                      any_of: ARG_TUPLE
                      items {
                        any_of: ARG_TUPLE
                        items {
                          any_of: ARG_TUPLE
                          items {
                            any_of: ARG_TUPLE
                            items {
                              any_of: ARG_TUPLE
                              items {
                                any_of: ARG_TUPLE
                                items { any_of: ARG_TUPLE }
                              }
                            }
                          }
                        }
                      }
                    }
                  }
                }
              }
            })pb",
       "nested deeper than"},
  };
  for (const Case& c : cases) {
    ExpectRefused(absl::StrCat(R"pb(version: "v"
                                    allow { module: "m" name: "f"
                                            calls { op: CALL_REDUCE min_args: 0 max_args: 0 })pb",
                               " ", c.entry, "}"),
                  c.message);
  }
}

TEST(RuleSetLoadTest, ApplyNeedsAGlobalAndATupleArgument) {
  for (const char* shape : {
           R"pb(min_args: 2
                max_args: 2
                args { any_of: ARG_GLOBAL }
                args { any_of: ARG_TUPLE }
                applies { func: 0 args: 0 })pb",
           R"pb(min_args: 2
                max_args: 2
                args { any_of: ARG_ANY }
                args { any_of: ARG_TUPLE }
                applies { func: 0 args: 1 })pb",
           R"pb(min_args: 1
                max_args: 2
                args { any_of: ARG_GLOBAL }
                args { any_of: ARG_TUPLE }
                applies { func: 0 args: 1 })pb",
       }) {
    ExpectRefused(absl::StrCat(R"pb(version: "v"
                                    allow { module: "m" name: "f"
                                            calls { op: CALL_REDUCE)pb",
                               " ", shape, "} }"),
                  "applies needs");
  }
}

// ---------------------------------------------------------------------------------------------
// Rule ids and verdict arithmetic.

TEST(VerdictTest, WorseVerdictOrdersDangerousSuspiciousErrorSafe) {
  EXPECT_EQ(WorseVerdict(v1::VERDICT_SAFE, v1::VERDICT_ERROR), v1::VERDICT_ERROR);
  EXPECT_EQ(WorseVerdict(v1::VERDICT_ERROR, v1::VERDICT_SUSPICIOUS), v1::VERDICT_SUSPICIOUS);
  EXPECT_EQ(WorseVerdict(v1::VERDICT_DANGEROUS, v1::VERDICT_SUSPICIOUS), v1::VERDICT_DANGEROUS);
  EXPECT_EQ(WorseVerdict(v1::VERDICT_SUSPICIOUS, v1::VERDICT_ERROR), v1::VERDICT_SUSPICIOUS);
  EXPECT_EQ(WorseVerdict(v1::VERDICT_UNSPECIFIED, v1::VERDICT_SAFE), v1::VERDICT_SAFE);
  EXPECT_EQ(WorseVerdict(v1::VERDICT_SAFE, v1::VERDICT_UNSPECIFIED), v1::VERDICT_SAFE);
}

// One small stream per rule id the evaluator can emit.
std::vector<pickle::StreamFacts> EveryRuleScenario() {
  std::vector<pickle::StreamFacts> out;
  auto global = [&](const std::string& module, const std::string& name) {
    FactsBuilder b;
    b.Global(module, name, pickle::Via::kStackGlobal);
    out.push_back(b.Stream());
  };
  // One global per deny category.
  for (const auto& [module, name] :
       std::vector<std::pair<std::string, std::string>>{{"builtins", "eval"},
                                                        {"posix", "system"},
                                                        {"importlib", "import_module"},
                                                        {"shutil", "rmtree"},
                                                        {"socket", "socket"},
                                                        {"pickle", "loads"},
                                                        {"operator", "attrgetter"},
                                                        {"ctypes", "CDLL"},
                                                        {"pdb", "run"},
                                                        {"pip", "main"},
                                                        {"threading", "Thread"},
                                                        {"getpass", "getuser"}}) {
    global(module, name);
  }
  global("mypkg", "Foo");          // global.unlisted
  global("mypkg", "Foo.__doc__");  // global.dunder
  {
    FactsBuilder b;  // global.dynamic
    b.Dynamic("system");
    out.push_back(b.Stream());
  }
  {
    FactsBuilder b;  // opcode.ext
    b.Ext(1);
    out.push_back(b.Stream());
  }
  {
    FactsBuilder b;  // call.callee, call.shape, call.build, call.setitem, call.append
    NodeId od_cls = b.Global("collections", "OrderedDict");
    NodeId od = b.Reduce(od_cls, b.Tuple({}));
    b.Reduce(od, b.Tuple({}));
    b.Reduce(od_cls, b.Tuple({b.Int(1), b.Int(2)}));
    b.Build(od_cls, b.Dict({}));
    NodeId size = b.Reduce(b.Global("torch", "Size"), b.Tuple({b.IntTuple({1})}));
    b.SetItems(size, {b.Str("k"), b.Int(1)});
    b.Appends(od, {b.Int(1)});
    out.push_back(b.Stream());
  }
  {
    FactsBuilder b;  // call.cost
    b.Reduce(b.Global("fractions", "Fraction"), b.Tuple({b.Str("1e999999999")}));
    out.push_back(b.Stream());
  }
  {
    FactsBuilder b;  // call.build_state
    NodeId od = b.Reduce(b.Global("collections", "OrderedDict"), b.Tuple({}));
    b.Build(od, b.Dict({b.Str("keys"), b.Int(1)}));
    out.push_back(b.Stream());
  }
  {
    FactsBuilder b;  // persid.shape, persid.text, stream.trailing
    b.PersistentLoad(b.Tuple({b.Str("module")}));
    b.PersistentLoad(b.Str("0"), 'P');
    pickle::StreamFacts s = b.Stream();
    s.trailing_bytes = 1;
    out.push_back(s);
  }
  {
    FactsBuilder b;  // scan.error (inconsistent facts)
    b.Build(99'999, b.Dict({}));
    out.push_back(b.Stream());
  }
  {
    FactsBuilder b;  // scan.findings_truncated
    for (size_t i = 0; i <= RuleSet::kMaxFindings; ++i) b.Global("mypkg", "A");
    out.push_back(b.Stream());
  }
  return out;
}

TEST(CatalogueTest, EveryRuleIdTheEvaluatorEmitsIsInTheCatalogueAndViceVersa) {
  std::set<std::string> emitted;
  for (const pickle::StreamFacts& s : EveryRuleScenario()) {
    for (const v1::Finding& f : Eval(s).findings) emitted.insert(f.rule_id());
  }
  for (const std::string& id : emitted) {
    const RuleInfo* info = FindRule(id);
    ASSERT_NE(info, nullptr) << id;
    EXPECT_FALSE(info->title.empty()) << id;
    EXPECT_FALSE(info->help.empty()) << id;
  }
  // The pipeline, not the RuleSet, emits the sandbox's own finding (sandbox/run.h),
  // the findings of repository files (app/judge.h) and of file selection
  // (app/scan_set.h).
  const std::set<std::string> emitted_by_pipeline = {
      "sandbox.violation",      "template.sandbox_escape", "template.unverified",
      "template.syntax",        "repo.remote_code",        "repo.config_target",
      "repo.config_code",       "repo.yaml_python_tag",    "repo.yaml_tag",
      "repo.outside_reference", "file.unknown_format",     "manifest.unlisted",
      "scan.selection",         "scan.folder_link"};
  std::set<std::string> catalogued;
  for (const RuleInfo& r : Catalogue()) {
    // Container anomalies (container.*), Keras config, ONNX and joblib companion file findings
    // (keras.*, onnx.*, joblib.*) are emitted by the pipeline from the worker's facts.
    if (emitted_by_pipeline.count(std::string(r.id)) == 0 && r.id.substr(0, 10) != "container." &&
        r.id.substr(0, 6) != "keras." && r.id.substr(0, 5) != "onnx." &&
        r.id.substr(0, 7) != "joblib.") {
      catalogued.insert(std::string(r.id));
    }
  }
  EXPECT_EQ(emitted, catalogued);
}

TEST(CatalogueTest, CatalogueHasEveryDenyCategoryAndEveryStructuralRule) {
  std::vector<std::string> expected = {"global.unlisted",
                                       "global.dunder",
                                       "opcode.ext",
                                       "global.dynamic",
                                       "call.callee",
                                       "call.shape",
                                       "call.build",
                                       "call.build_state",
                                       "call.cost",
                                       "call.setitem",
                                       "call.append",
                                       "persid.shape",
                                       "persid.text",
                                       "stream.trailing",
                                       "scan.error",
                                       "scan.findings_truncated",
                                       "sandbox.violation",
                                       "template.sandbox_escape",
                                       "template.unverified",
                                       "template.syntax",
                                       "repo.remote_code",
                                       "repo.config_target",
                                       "repo.config_code",
                                       "repo.yaml_python_tag",
                                       "repo.yaml_tag",
                                       "repo.outside_reference",
                                       "file.unknown_format",
                                       "manifest.unlisted",
                                       "scan.selection",
                                       "scan.folder_link",
                                       "keras.lambda",
                                       "keras.function",
                                       "keras.dangerous_object",
                                       "keras.foreign_object",
                                       "keras.custom_object",
                                       "onnx.external_data_path",
                                       "onnx.custom_domain",
                                       "onnx.external_data",
                                       "joblib.companion_path",
                                       "joblib.companion_pickle",
                                       "joblib.companion_data"};
  for (const char* c : {"exec", "shell", "import", "filesystem", "network", "nested_loader",
                        "introspection", "ffi", "debug_profile", "packaging", "process", "other"}) {
    expected.push_back(absl::StrCat("global.denied.", c));
  }
  for (const char* kind : {"polyglot",
                           "torchscript",
                           "nested_archive",
                           "unreferenced_storage",
                           "unexpected_member",
                           "trailing_data",
                           "byteorder",
                           "prepended_data",
                           "appended_data",
                           "archive_comment",
                           "multiple_eocd",
                           "zip64_mismatch",
                           "central_directory_slack",
                           "gap",
                           "overlap",
                           "duplicate_name",
                           "duplicate_key",
                           "duplicate_tensor",
                           "case_collision",
                           "uppercase_name",
                           "odd_name",
                           "name_outside_prefix",
                           "unusual_flags",
                           "unsupported_method",
                           "local_header_mismatch",
                           "bad_local_header",
                           "malformed_extra_field",
                           "data_descriptor_mismatch",
                           "size_mismatch",
                           "directory_entry",
                           "deflated",
                           "not_compressed",
                           "inflate_mismatch",
                           "crc_mismatch",
                           "zipfile_view"}) {
    expected.push_back(absl::StrCat("container.", kind));
  }
  for (const std::string& id : expected) EXPECT_NE(FindRule(id), nullptr) << id;
  EXPECT_EQ(Catalogue().size(), expected.size());
  EXPECT_EQ(FindRule("no.such.rule"), nullptr);
  EXPECT_EQ(FindRule("scan.error")->verdict, v1::VERDICT_ERROR);
  EXPECT_EQ(FindRule("sandbox.violation")->verdict, v1::VERDICT_DANGEROUS);
}

}  // namespace
}  // namespace ckptscan::rules
