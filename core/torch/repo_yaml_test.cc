#include "core/torch/repo_yaml.h"

#include <string>
#include <string_view>
#include <vector>

#include "base/limit_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::torch {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

YamlScan Scan(std::string_view text, const YamlLimits& limits = {}) {
  YamlScan s = ScanYaml(text, limits);
  EXPECT_TRUE(s.status.ok()) << s.status;
  return s;
}

// What each reported tag resolves to ("" for an undefined handle), "py:" before python ones.
std::vector<std::string> Tags(std::string_view text) {
  std::vector<std::string> out;
  for (const YamlTag& t : Scan(text).tags) out.push_back((t.python ? "py:" : "") + t.resolved);
  return out;
}

std::vector<std::string> Targets(std::string_view text) {
  std::vector<std::string> out;
  for (const YamlTarget& t : Scan(text).targets) out.push_back(t.value);
  return out;
}

constexpr std::string_view kApply = "tag:yaml.org,2002:python/object/apply:os.getpid";
constexpr std::string_view kPyName = "py:tag:yaml.org,2002:python/name:os.getcwd";

// --- Python tags, in every spelling PyYAML resolves.

TEST(RepoYamlTest, SecondaryHandlePythonTag) {
  const YamlScan s = Scan("a: 1\nb: !!python/object/apply:os.getpid []\n");
  ASSERT_EQ(s.tags.size(), 1u);
  EXPECT_TRUE(s.tags[0].python);
  EXPECT_EQ(s.tags[0].written, "!!python/object/apply:os.getpid");
  EXPECT_EQ(s.tags[0].resolved, kApply);
  EXPECT_EQ(s.tags[0].offset, 8u);
  EXPECT_EQ(s.tags[0].line, 2u);
}

TEST(RepoYamlTest, VerbatimPythonTag) {
  EXPECT_THAT(Tags("x: !<tag:yaml.org,2002:python/name:os.getcwd> ''\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, PercentEscapedPythonTag) {
  EXPECT_THAT(Tags("x: !!%70ython/name:os.getcwd ''\n"), ElementsAre(kPyName));
  EXPECT_THAT(Tags("x: !<tag:yaml.org,2002:%70ython%2Fname:os.getcwd> ''\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, NamedHandleFromTagDirective) {
  EXPECT_THAT(Tags("%TAG !py! tag:yaml.org,2002:python/\n---\nx: !py!name:os.getcwd ''\n"),
              ElementsAre(kPyName));
}

TEST(RepoYamlTest, PrimaryHandleRedefined) {
  EXPECT_THAT(Tags("%TAG ! tag:yaml.org,2002:\n---\nx: !python/name:os.getcwd ''\n"),
              ElementsAre(kPyName));
}

TEST(RepoYamlTest, SecondaryHandleRedefined) {
  EXPECT_THAT(Tags("%TAG !! tag:yaml.org,2002:python/\n---\nx: !!name:os.getcwd ''\n"),
              ElementsAre(kPyName));
}

TEST(RepoYamlTest, PercentEscapedDirectivePrefix) {
  EXPECT_THAT(Tags("%TAG !e! tag:yaml.org,2002:%70ython/\n---\nx: !e!name:os.getcwd ''\n"),
              ElementsAre(kPyName));
}

TEST(RepoYamlTest, TagInFlowSequenceEndsAtComma) {
  EXPECT_THAT(Tags("x: [!!python/name:os.getcwd, 1]\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, TagAfterTabIsRead) {  // libyaml takes a tab after ':'
  EXPECT_THAT(Tags("x:\t!!python/name:os.getcwd ''\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, RepeatedTagIsOneEntryCounted) {
  const YamlScan s = Scan("- !!python/name:os.getcwd ''\n- !!python/name:os.getcwd ''\n");
  ASSERT_EQ(s.tags.size(), 1u);
  EXPECT_EQ(s.tags[0].count, 2u);
}

// --- Other tags.

TEST(RepoYamlTest, StandardTagsAreNotReported) {
  EXPECT_THAT(Tags("a: !!str 1\nb: !!int '2'\nc: ! x\nd: !<tag:yaml.org,2002:float> 1\n"
                   "e: !!map {}\nf: !!binary aGk=\ng: !!set {a}\n"),
              IsEmpty());
}

TEST(RepoYamlTest, LocalAndForeignTagsAreReported) {
  EXPECT_THAT(Tags("a: !Ref x\nb: !!foo y\nc: !<tag:example.com,2000:t> z\n"),
              ElementsAre("!Ref", "tag:yaml.org,2002:foo", "tag:example.com,2000:t"));
}

TEST(RepoYamlTest, UndefinedHandleIsReported) {
  const YamlScan s = Scan("a: !e!x y\n");
  ASSERT_EQ(s.tags.size(), 1u);
  EXPECT_FALSE(s.tags[0].python);
  EXPECT_EQ(s.tags[0].resolved, "");
  EXPECT_EQ(s.tags[0].written, "!e!x");
}

// --- Where no tag is: comments, quotes, block scalars.

TEST(RepoYamlTest, TagsInCommentsQuotesAndBlockScalarsAreText) {
  EXPECT_THAT(Tags("# !!python/name:os.getcwd\na: \"!!python/name:os.getcwd\"\n"
                   "b: '!!python/name:os.getcwd'\nc: |\n  !!python/name:os.getcwd\n"
                   "  more !!python/name:os.getcwd\nd: >-\n  !x\ne: 1 # !y\n"),
              IsEmpty());
}

TEST(RepoYamlTest, MultiLineQuotedScalarsAreText) {
  EXPECT_THAT(Tags("a: \"x\n  !!python/name:os.getcwd\n  y\"\nb: 'it''s\n  !z'\n"), IsEmpty());
}

// --- Evasions: what a line-based reading gets wrong.

TEST(RepoYamlTest, LineSeparatorEndsAComment) {
  // U+2028 and NEL are line breaks to PyYAML.
  EXPECT_THAT(Tags("a: 1 # c\xe2\x80\xa8"
                   "b: !!python/name:os.getcwd ''\n"),
              ElementsAre(kPyName));
  EXPECT_THAT(Tags("a: 1 # c\xc2\x85"
                   "b: !!python/name:os.getcwd ''\n"),
              ElementsAre(kPyName));
  EXPECT_THAT(Tags("a: 1 # c\rb: !!python/name:os.getcwd ''\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, QuoteInsidePlainScalarOpensNothing) {
  EXPECT_THAT(Tags("a: it's x\nb: !!python/name:os.getcwd ''\nc: 'z'\n"), ElementsAre(kPyName));
  EXPECT_THAT(Tags("a: x\n  'y\nb: !!python/name:os.getcwd ''\nc: 'z'\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, BlockScalarEndsWhereItsIndentationSaysSo) {
  // A leading blank line of four spaces sets the indentation to 4 (PyYAML's
  // scan_block_scalar_indentation): the line at 3 ends the block and is read as YAML (PyYAML
  // then refuses the document; the scan reads on).
  EXPECT_THAT(Tags("a:\n  b: |\n    \n   !!python/name:os.getcwd ''\n"), ElementsAre(kPyName));
  // The block's lines are those indented past the key's mapping.
  EXPECT_THAT(Tags("a: |\n  x\nb: !!python/name:os.getcwd ''\n"), ElementsAre(kPyName));
  // An explicit indentation of 1 under a key at column 2 makes column 3 the block's.
  EXPECT_THAT(Tags("a:\n  b: |1\n   x\n  c: !!python/name:os.getcwd ''\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, DocumentMarkerEndsAQuotedScalar) {
  EXPECT_THAT(Tags("a: \"x\n---\nb: !!python/name:os.getcwd ''\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, TagInsidePlainScalarCountsOverApproximately) {
  EXPECT_THAT(Tags("a: b !!python/name:os.getcwd\n"), ElementsAre(kPyName));
}

TEST(RepoYamlTest, HandleRedefinitionIsResolvedUnderEveryBinding) {
  // The %TAG belongs to the second document only; both meanings of !e! are judged.
  EXPECT_THAT(Tags("--- 1\n...\n%TAG !e! tag:yaml.org,2002:python/\n---\na: !e!name:x ''\n"),
              ElementsAre("py:tag:yaml.org,2002:python/name:x"));
}

// --- _target_ keys.

TEST(RepoYamlTest, TargetInBlockMappings) {
  EXPECT_THAT(Targets("model:\n  _target_: nemo.collections.asr.models.EncDecCTCModel\n"
                      "  optim:\n    _target_: torch.optim.Adam  # the optimizer\n"),
              ElementsAre("nemo.collections.asr.models.EncDecCTCModel", "torch.optim.Adam"));
}

TEST(RepoYamlTest, TargetKeyInEverySpelling) {
  EXPECT_THAT(Targets("- '_target_': a.A\n- \"_target_\": b.B\n- \"_tar\\x67et_\": c.C\n"
                      "- {_target_: d.D, x: 1}\n- ? _target_\n  : e.E\n- &k _target_: f.F\n"
                      "- !!str _target_: g.G\n- *k : h.H\n"),
              ElementsAre("a.A", "b.B", "c.C", "d.D", "e.E", "f.F", "g.G", "h.H"));
}

TEST(RepoYamlTest, TargetValueInEverySpelling) {
  EXPECT_THAT(Targets("a:\n  _target_:\n    os.system\nb:\n  _target_: |-\n    os.system\n"
                      "c:\n  _target_: \"o\\x73.system\"\nd: &t os.system\ne:\n  _target_: *t\n"
                      "f: {_target_: 'os.system'}\n"),
              ElementsAre("os.system", "os.system", "os.system", "os.system", "os.system"));
}

TEST(RepoYamlTest, DoubleQuotedEscapesDecodeToUtf8) {
  EXPECT_THAT(Targets("_target_: \"a\\u00e9\\u4e2d\\U0001F600\\x41\\tb\"\n"),
              ElementsAre("a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"
                          "A\tb"));
}

TEST(RepoYamlTest, EmptyTargetIsNone) {
  EXPECT_THAT(Targets("a:\n  _target_:\n  b: 1\nc:\n  _target_: null\nd: {_target_: }\n"),
              IsEmpty());
}

TEST(RepoYamlTest, AliasOfNoScalarIsJudgedByItsName) {
  EXPECT_THAT(Targets("a: &c [1]\nb:\n  _target_: *c\nc:\n  _target_: *nothing\n"),
              ElementsAre("*c", "*nothing"));
}

TEST(RepoYamlTest, RepeatedTargetKeepsBoth) {
  EXPECT_THAT(Targets("_target_: os.system\n_target_: torch.nn.ReLU\n"),
              ElementsAre("os.system", "torch.nn.ReLU"));
}

TEST(RepoYamlTest, TargetsInCommentsAndTextAreNone) {
  EXPECT_THAT(Targets("# _target_: os.system\na: \"_target_: os.system\"\nb: |\n"
                      "  _target_: os.system\nc: x _target_: y\n"),
              IsEmpty());
}

TEST(RepoYamlTest, TargetLineAndOffset) {
  const YamlScan s = Scan("a: 1\nb:\n  _target_: x.Y\n");
  ASSERT_EQ(s.targets.size(), 1u);
  EXPECT_EQ(s.targets[0].line, 3u);
  EXPECT_EQ(s.targets[0].offset, 20u);
}

// --- Limits.

TEST(RepoYamlTest, TagsOverTheBoundAreCounted) {
  YamlLimits limits;
  limits.max_tags = 2;
  const YamlScan s = Scan("- !a x\n- !b x\n- !c x\n- !!python/name:y ''\n", limits);
  EXPECT_EQ(s.tags.size(), 2u);
  EXPECT_EQ(s.more_tags, 2u);
  EXPECT_TRUE(s.more_python);
}

TEST(RepoYamlTest, TargetsOverTheBoundAreCountedAndJudged) {
  YamlLimits limits;
  limits.max_targets = 1;
  const YamlScan s = Scan("- _target_: a.B\n- _target_: os.system\n- _target_: c.D\n", limits);
  EXPECT_EQ(s.targets.size(), 1u);
  EXPECT_EQ(s.more_targets, 2u);
  EXPECT_EQ(s.more_code_targets, 1u);
}

TEST(RepoYamlTest, DeepFlowNestingStopsAtTheLimit) {
  YamlLimits limits;
  limits.max_nesting = 100;
  const YamlScan s = ScanYaml(std::string(1000, '[') + " !!python/name:x ''", limits);
  EXPECT_EQ(s.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(base::LimitOf(s.status)->name, "max_yaml_nesting");
  EXPECT_EQ(s.error_offset, 100u);
}

TEST(RepoYamlTest, DeepBlockNestingStopsAtTheLimit) {
  YamlLimits limits;
  limits.max_nesting = 10;
  std::string text;
  for (int i = 0; i < 20; ++i) text += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  EXPECT_EQ(base::LimitOf(ScanYaml(text, limits).status)->name, "max_yaml_nesting");
}

TEST(RepoYamlTest, FileOverTheLimitIsNotRead) {
  YamlLimits limits;
  limits.max_bytes = 4;
  EXPECT_EQ(base::LimitOf(ScanYaml("a: !!python/name:x ''", limits).status)->name,
            "max_yaml_bytes");
}

TEST(RepoYamlTest, TooManyTagDirectivesStop) {
  YamlLimits limits;
  limits.max_tag_directives = 1;
  const YamlScan s = ScanYaml("%TAG !a! x:\n%TAG !b! y:\n---\na: 1\n", limits);
  EXPECT_EQ(base::LimitOf(s.status)->name, "max_yaml_tag_directives");
}

TEST(RepoYamlTest, LongDirectivePrefixIsJudgedWhole) {
  const std::string prefix = "tag:yaml.org,2002:python/" + std::string(300, 'x');
  const YamlScan s = Scan("%TAG !e! " + prefix + "\n---\na: !e!y ''\n");
  ASSERT_EQ(s.tags.size(), 1u);
  EXPECT_TRUE(s.tags[0].python);
}

TEST(RepoYamlTest, ManyDirectivesDoNotMultiplyTheCostOfATag) {
  // 256 long bindings of one handle, then 200,000 tags: judged from the handle's summary, not
  // by resolving each tag under each binding (that would copy ~100 GB).
  std::string text;
  for (int i = 0; i < 256; ++i) {
    text += "%TAG !e! tag:example.com," + std::to_string(i) + ":" + std::string(4000, 'p') + "\n";
  }
  text += "---\n";
  for (int i = 0; i < 200000; ++i) text += "- !e!x 1\n";
  const YamlScan s = Scan(text);
  ASSERT_EQ(s.tags.size(), 1u);
  EXPECT_FALSE(s.tags[0].python);
  EXPECT_EQ(s.tags[0].count, 200000u);
}

TEST(RepoYamlTest, AliasesDoNotMultiplyTheCostOfTheirScalar) {
  // One 4 KiB anchored target, then 300,000 aliases of it as keys and as _target_ values past
  // max_targets: each costs its name, not the scalar (that would copy ~1 GB twice).
  std::string text = "a: &t \"" + std::string(4000, 'x') + ".os.system\"\nb:\n";
  for (int i = 0; i < 300000; ++i) text += "- {*t : 1, _target_: *t}\n";
  const YamlScan s = Scan(text);
  EXPECT_EQ(s.targets.size(), 64u);
  EXPECT_EQ(s.more_targets, 300000u - 64u);
  EXPECT_EQ(s.more_code_targets, 300000u - 64u);
}

TEST(RepoYamlTest, LongScalarsAreCut) {
  YamlLimits limits;
  limits.max_scalar_bytes = 8;
  const YamlScan s = ScanYaml("_target_: os.system.and.more\nx: !averylongtag y\n", limits);
  ASSERT_EQ(s.targets.size(), 1u);
  EXPECT_EQ(s.targets[0].value, "os.syste");
  ASSERT_EQ(s.tags.size(), 1u);
  EXPECT_EQ(s.tags[0].written, "!averylo");
}

TEST(RepoYamlTest, YamlNames) {
  EXPECT_TRUE(IsYamlName("config.yaml"));
  EXPECT_TRUE(IsYamlName("CONFIG.YML"));
  EXPECT_FALSE(IsYamlName("config.json"));
  EXPECT_FALSE(IsYamlName("yaml"));
}

}  // namespace
}  // namespace ckptscan::torch
