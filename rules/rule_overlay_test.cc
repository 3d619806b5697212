// A local overlay (RuleSet::WithOverlay, --allow NAME) and variadic call shapes (`rest`).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/facts_builder_for_test.h"
#include "rules/rule_set.h"

namespace ckptscan::rules {
namespace {

using ::ckptscan::rules::testing::FactsBuilder;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kDigest[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string Ids(const Evaluation& e) {
  std::string ids;
  for (const v1::Finding& f : e.findings)
    absl::StrAppend(&ids, ids.empty() ? "" : ",", f.rule_id());
  return ids;
}

std::string Messages(const Evaluation& e) {
  std::string out;
  for (const v1::Finding& f : e.findings) absl::StrAppend(&out, f.message(), "\n");
  return out;
}

// The default rules with `--allow` of each name.
absl::StatusOr<std::shared_ptr<const RuleSet>> WithAllowed(const std::vector<std::string>& names) {
  v1::RuleSet overlay;
  for (const std::string& n : names) {
    absl::StatusOr<v1::AllowedGlobal> a = RuleSet::TrustedName(n);
    if (!a.ok()) return a.status();
    *overlay.add_allow() = *a;
  }
  return RuleSet::WithOverlay(*RuleSet::Default(), overlay, kDigest, "--allow");
}

// A user's dataclass as pickle writes it: NEWOBJ cls () then BUILD with its __dict__.
pickle::StreamFacts UserObject(const std::string& module, const std::string& name,
                               bool payload_in_state = false) {
  FactsBuilder b;
  const auto obj = b.NewObj(b.Global(module, name, pickle::Via::kStackGlobal), b.Tuple({}));
  const auto value = payload_in_state
                         ? b.Reduce(b.Global("posix", "system", pickle::Via::kStackGlobal),
                                    b.Tuple({b.Str("true")}))
                         : b.Float(0.001);
  b.Build(obj, b.Dict({b.Str("lr"), value}));
  return b.Stream(obj);
}

TEST(TrustedNameTest, SplitsAtTheLastDotOrAtAColon) {
  absl::StatusOr<v1::AllowedGlobal> a = RuleSet::TrustedName("mypkg.config.RunConfig");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->module(), "mypkg.config");
  EXPECT_EQ(a->name(), "RunConfig");
  EXPECT_TRUE(a->build_target());
  a = RuleSet::TrustedName("mypkg.config:Outer.Inner");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->module(), "mypkg.config");
  EXPECT_EQ(a->name(), "Outer.Inner");
}

TEST(TrustedNameTest, MalformedNamesAreRefusedWithTheExpectedForm) {
  for (const char* bad : {"RunConfig", ".RunConfig", "mypkg.", "my pkg.C", "mypkg.*", "*.eval",
                          "mypkg:", ":C", "a..b.C", "a:b:C", ""}) {
    absl::StatusOr<v1::AllowedGlobal> a = RuleSet::TrustedName(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(a.status().message(), HasSubstr("MODULE.NAME")) << bad;
  }
  EXPECT_FALSE(RuleSet::TrustedName(absl::StrCat("m.", std::string(600, 'x'))).ok());
}

TEST(OverlayTest, AllowedUserClassIsSafeAndOtherwiseSuspiciousWithTheHint) {
  const pickle::StreamFacts facts = UserObject("train", "RunConfig");
  Evaluation plain = RuleSet::Default()->Evaluate(facts, "");
  EXPECT_EQ(plain.verdict, v1::VERDICT_SUSPICIOUS) << Ids(plain);
  EXPECT_THAT(Messages(plain), HasSubstr("--allow train.RunConfig"));

  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = WithAllowed({"train.RunConfig"});
  ASSERT_TRUE(rules.ok()) << rules.status();
  Evaluation allowed = (*rules)->Evaluate(facts, "");
  EXPECT_EQ(allowed.verdict, v1::VERDICT_SAFE) << Ids(allowed) << "\n" << Messages(allowed);
}

TEST(OverlayTest, AllowedClassStillHasItsArgumentsAndStateJudged) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = WithAllowed({"train.RunConfig"});
  ASSERT_TRUE(rules.ok()) << rules.status();
  Evaluation e = (*rules)->Evaluate(UserObject("train", "RunConfig", true), "");
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS) << Ids(e);
}

// An overlay file's entry that names only the global means what `--allow` means: the class
// may be called and given state (its arguments still judged). An entry that pins a shape keeps
// exactly that shape.
TEST(OverlayTest, BareOverlayEntryMeansWhatAllowMeans) {
  absl::StatusOr<v1::RuleSet> overlay = RuleSet::ParseOverlayText(
      R"pb(allow { module: "train" name: "RunConfig" })pb", "site.textproto");
  ASSERT_TRUE(overlay.ok()) << overlay.status();
  absl::StatusOr<v1::AllowedGlobal> flag = RuleSet::TrustedName("train.RunConfig");
  ASSERT_TRUE(flag.ok());
  const v1::AllowedGlobal& entry = overlay->allow(0);
  EXPECT_EQ(entry.calls_size(), flag->calls_size());
  EXPECT_TRUE(entry.build_target() && entry.setitem_target() && entry.append_target());
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::WithOverlay(*RuleSet::Default(), *overlay, kDigest, "site.textproto");
  ASSERT_TRUE(rules.ok()) << rules.status();
  Evaluation called = (*rules)->Evaluate(UserObject("train", "RunConfig"), "");
  EXPECT_EQ(called.verdict, v1::VERDICT_SAFE) << Ids(called) << "\n" << Messages(called);
  Evaluation payload = (*rules)->Evaluate(UserObject("train", "RunConfig", true), "");
  EXPECT_EQ(payload.verdict, v1::VERDICT_DANGEROUS) << Ids(payload);

  overlay = RuleSet::ParseOverlayText(
      R"pb(allow { module: "train" name: "RunConfig" tensor: true })pb", "site.textproto");
  ASSERT_TRUE(overlay.ok()) << overlay.status();
  EXPECT_EQ(overlay->allow(0).calls_size(), 0);
  rules = RuleSet::WithOverlay(*RuleSet::Default(), *overlay, kDigest, "site.textproto");
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_NE((*rules)->Evaluate(UserObject("train", "RunConfig"), "").verdict, v1::VERDICT_SAFE);
}

TEST(OverlayTest, VersionNamesTheBaseRulesAndTheOverlayDigest) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = WithAllowed({"train.RunConfig"});
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ((*rules)->version(),
            absl::StrCat(RuleSet::Default()->version(), "+overlay-sha256-", kDigest));
  EXPECT_EQ((*rules)->proto().allow_size(), RuleSet::Default()->proto().allow_size() + 1);
}

TEST(OverlayTest, NamesTheRulesGradeDangerousAreRefusedNamingTheEntry) {
  for (const char* name :
       {"posix.system", "builtins.eval", "os.system", "mypkg:os.system", "subprocess.Popen",
        "mypkg.Cls:__globals__", "uuid.getnode", "pathlib._local:Path.write_text"}) {
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules = WithAllowed({name});
    ASSERT_FALSE(rules.ok()) << name;
    EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(rules.status().message(), HasSubstr("allow[0]")) << name;
    EXPECT_THAT(rules.status().message(), HasSubstr("an overlay cannot allow this name")) << name;
  }
}

TEST(OverlayTest, SuspiciousNamesMayBeAllowed) {
  // Graded SUSPICIOUS by the built-in rules (not DANGEROUS): the user's decision.
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      WithAllowed({"uuid.uuid4", "torch.nn.modules.linear.Linear"});
  EXPECT_TRUE(rules.ok()) << rules.status();
}

TEST(OverlayTest, BuiltInEntriesCannotBeChangedAndRepeatsAreRefused) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = WithAllowed({"collections.OrderedDict"});
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(rules.status().message(), HasSubstr("already allowlisted"));
  rules = WithAllowed({"train.RunConfig", "train.RunConfig"});
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(rules.status().message(), HasSubstr("allow[1] (train.RunConfig): duplicate"));
}

TEST(OverlayTest, OverlayTextAddsDenyEntriesAndValidatesItsOwn) {
  absl::StatusOr<v1::RuleSet> overlay = RuleSet::ParseOverlayText(
      R"pb(deny {
             module: "train"
             name: "evil"
             category: CATEGORY_SHELL
             dangerous: true
             severity: SEVERITY_HIGH
             why: "site policy"
           })pb",
      "site.textproto");
  ASSERT_TRUE(overlay.ok()) << overlay.status();
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::WithOverlay(*RuleSet::Default(), *overlay, kDigest, "site.textproto");
  ASSERT_TRUE(rules.ok()) << rules.status();
  FactsBuilder b;
  b.Global("train", "evil", pickle::Via::kStackGlobal);
  EXPECT_EQ((*rules)->Evaluate(b.Stream(), "").verdict, v1::VERDICT_DANGEROUS);

  overlay = RuleSet::ParseOverlayText(R"pb(allow { module: "train" name: "*" })pb", "site");
  ASSERT_TRUE(overlay.ok());
  rules = RuleSet::WithOverlay(*RuleSet::Default(), *overlay, kDigest, "site");
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(rules.status().message(), HasSubstr("rules site: allow[0]"));

  EXPECT_FALSE(RuleSet::ParseOverlayText("allow { modul: \"x\" }", "site").ok());
}

// The flag a SUSPICIOUS finding suggests is one the overlay accepts, and it clears exactly that
// finding: a hint that named the wrong split (a dotted qualname) or a name the overlay refuses
// would leave the user stuck.
TEST(OverlayTest, TheSuggestedAllowFlagIsAcceptedAndMakesTheFileSafe) {
  for (const auto& [module, name] :
       std::vector<std::pair<std::string, std::string>>{{"train.config", "RunConfig"},
                                                        {"train", "Outer.Inner"},
                                                        {"uuid", "uuid4"},
                                                        {"torch.nn.modules.linear", "Linear"}}) {
    FactsBuilder b;
    const auto obj = b.Reduce(b.Global(module, name, pickle::Via::kStackGlobal), b.Tuple({}));
    const pickle::StreamFacts facts = b.Stream(obj);
    Evaluation plain = RuleSet::Default()->Evaluate(facts, "");
    ASSERT_EQ(plain.verdict, v1::VERDICT_SUSPICIOUS) << module << " " << name;
    const std::string text = Messages(plain);
    const size_t at = text.find("--allow ");
    ASSERT_NE(at, std::string::npos) << text;
    const size_t begin = at + 8;
    const std::string flag = text.substr(begin, text.find(' ', begin) - begin);
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules = WithAllowed({flag});
    ASSERT_TRUE(rules.ok()) << flag << ": " << rules.status();
    Evaluation allowed = (*rules)->Evaluate(facts, "");
    EXPECT_EQ(allowed.verdict, v1::VERDICT_SAFE) << flag << "\n" << Messages(allowed);
  }
}

TEST(OverlayTest, DangerousFindingsOfferNoAllowHint) {
  FactsBuilder b;
  b.Reduce(b.Global("posix", "system", pickle::Via::kStackGlobal), b.Tuple({b.Str("true")}));
  Evaluation e = RuleSet::Default()->Evaluate(b.Stream(), "");
  EXPECT_EQ(e.verdict, v1::VERDICT_DANGEROUS);
  EXPECT_THAT(Messages(e), Not(HasSubstr("--allow")));
}

TEST(OverlayTest, WholeModuleClassesSayHowToSaveInstead) {
  FactsBuilder b;
  b.Global("torch.nn.modules.linear", "Linear", pickle::Via::kStackGlobal);
  Evaluation e = RuleSet::Default()->Evaluate(b.Stream(), "");
  EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
  EXPECT_THAT(Messages(e), HasSubstr("state_dict()"));
  EXPECT_THAT(Messages(e), HasSubstr("--allow torch.nn.modules.linear.Linear"));
}

// A rules or overlay path swapped for a FIFO (a hostile local user, between two reloads of the
// daemon) must be refused at once, not block the reload until someone writes to it.
TEST(OverlayFileTest, AFifoIsRefusedWithoutBlocking) {
  const std::string dir = ::testing::TempDir() + "/overlay_fifo_XXXXXX";
  std::vector<char> tmpl(dir.begin(), dir.end());
  tmpl.push_back('\0');
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string fifo = std::string(tmpl.data()) + "/overlay.textproto";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto overlay = std::async(std::launch::async, [&] { return RuleSet::ReadOverlayFile(fifo); });
  auto rules = std::async(std::launch::async, [&] { return RuleSet::FromFile(fifo); });
  const bool overlay_done = overlay.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  const bool rules_done = rules.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!overlay_done || !rules_done) {
    // Unblock the readers so the test can end, then fail.
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  ASSERT_TRUE(overlay_done) << "reading a FIFO overlay blocked";
  ASSERT_TRUE(rules_done) << "reading a FIFO rules file blocked";
  absl::StatusOr<v1::RuleSet> o = overlay.get();
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("not a regular file"));
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = rules.get();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not a regular file"));
  ::unlink(fifo.c_str());
  ::rmdir(tmpl.data());
}

// ---- `rest`: every argument past the listed ones must match it.

constexpr char kVariadic[] = R"pb(
  version: "t.1"
  allow {
    module: "pathlib"
    name: "PurePosixPath"
    calls {
      op: CALL_REDUCE
      min_args: 0
      max_args: 8
      rest { any_of: ARG_STR }
    }
    note: "test"
  }
)pb";

TEST(RestArgsTest, EveryFurtherArgumentMustMatch) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::FromTextProto(kVariadic, "t.textproto");
  ASSERT_TRUE(rules.ok()) << rules.status();
  {
    FactsBuilder b;
    const auto p = b.Reduce(b.Global("pathlib", "PurePosixPath", pickle::Via::kStackGlobal),
                            b.Tuple({b.Str("/"), b.Str("data"), b.Str("x")}));
    EXPECT_EQ((*rules)->Evaluate(b.Stream(p), "").verdict, v1::VERDICT_SAFE);
  }
  {
    FactsBuilder b;
    const auto p = b.Reduce(b.Global("pathlib", "PurePosixPath", pickle::Via::kStackGlobal),
                            b.Tuple({b.Str("/"), b.Int(3)}));
    Evaluation e = (*rules)->Evaluate(b.Stream(p), "");
    EXPECT_EQ(e.verdict, v1::VERDICT_SUSPICIOUS);
    EXPECT_EQ(Ids(e), "call.shape");
    EXPECT_THAT(Messages(e), HasSubstr("got REDUCE(str, int)"));
    EXPECT_THAT(Messages(e), HasSubstr("[STR], [STR]"));
  }
}

TEST(RestArgsTest, RestWithNoPositionLeftIsRefused) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = RuleSet::FromTextProto(
      R"pb(version: "t.1"
           allow {
             module: "m"
             name: "f"
             calls {
               op: CALL_REDUCE
               min_args: 1
               max_args: 1
               args { any_of: ARG_INT }
               rest { any_of: ARG_STR }
             }
             note: "test"
           })pb",
      "t.textproto");
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(rules.status().message(), HasSubstr("rest is set but max_args 1"));
}

}  // namespace
}  // namespace ckptscan::rules
