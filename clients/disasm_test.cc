#include "clients/disasm.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/inprocess/local_scan.h"

namespace ckptscan::clients {
namespace {

// What the worker does for MODE_DISASM, in this process: the listing while the VM runs, the
// facts judged, then the summary after the listing.
v1::FileReport Disassemble(const std::string& path, std::string_view bytes,
                           const rules::RuleSet& rules, const pickle::Limits& limits,
                           const TextSink& out) {
  bool listed = false;
  const sandbox::FileFacts facts = inprocess::ExtractFactsWithListing(bytes, limits, out, &listed);
  v1::FileReport report = app::JudgeFacts(facts, rules);
  report.set_path(path);
  report.set_size(bytes.size());
  out(DisasmSummary(facts, report, listed));
  return report;
}

using ::testing::HasSubstr;
using ::testing::Not;
using std::string_view_literals::operator""sv;

std::string DisasmOf(std::string_view bytes, v1::FileReport* report = nullptr) {
  std::string out;
  const std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();
  v1::FileReport r =
      Disassemble("x.pkl", bytes, *rules, {}, [&out](std::string_view text) { out.append(text); });
  if (report != nullptr) *report = r;
  return out;
}

TEST(DisassembleTest, ListsEveryOpcodeThenTheFindings) {
  v1::FileReport report;
  const std::string out = DisasmOf("cposix\nsystem\n(S'id'\ntR."sv, &report);
  EXPECT_THAT(out, HasSubstr("pickle 0:\n"));
  EXPECT_THAT(out, HasSubstr("         0  GLOBAL"));
  EXPECT_THAT(out, HasSubstr("        14    MARK"));
  EXPECT_THAT(out, HasSubstr("        22  REDUCE"));
  EXPECT_THAT(out, HasSubstr("        23  STOP"));
  EXPECT_THAT(out, HasSubstr("x.pkl: DANGEROUS"));
  EXPECT_EQ(report.verdict(), v1::VERDICT_DANGEROUS);
  EXPECT_EQ(report.path(), "x.pkl");
}

TEST(DisassembleTest, SeparatesPicklesAndLabelsNestedOnes) {
  // pickle 0: SHORT_BINBYTES holding a pickle (GLOBAL ... STOP); pickle 1: N.
  const std::string inner = "cposix\nsystem\n(S'id'\ntR.";
  std::string bytes = "\x80\x03";
  bytes += 'C';
  bytes += static_cast<char>(inner.size());
  bytes += inner;
  bytes += ".N.";
  const std::string out = DisasmOf(bytes);
  EXPECT_THAT(out, HasSubstr("pickle 0:\n"));
  EXPECT_THAT(out, HasSubstr("\npickle 1:\n"));
  EXPECT_THAT(out, HasSubstr("\npickle 2 (nested, depth 1"));
  EXPECT_THAT(out, HasSubstr("nested depth 1 in pickle 0"));
}

TEST(DisassembleTest, ErrorsFollowTheListing) {
  v1::FileReport report;
  const std::string out = DisasmOf("\x80\x02}q\x00"sv, &report);
  EXPECT_THAT(out, HasSubstr("error malformed"));
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
}

TEST(DisassembleTest, BrokenArchiveIsAnErrorNotAListing) {
  v1::FileReport report;
  const std::string out = DisasmOf("PK\x03\x04...."sv, &report);
  EXPECT_THAT(out, HasSubstr("format: zip"));
  EXPECT_THAT(out, HasSubstr("error malformed"));
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
}

}  // namespace
}  // namespace ckptscan::clients
