#include "clients/disasm.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/inprocess/local_scan.h"
#include "worker/trace_listing.h"

namespace ckptscan::clients {
namespace {

using pipeline::FormatTraceLine;

// What the worker does for MODE_DISASM, in this process: the VM with a trace into the listing,
// the facts judged, then the summary after the listing.
v1::FileReport Disassemble(const std::string& path, std::string_view bytes,
                           const rules::RuleSet& rules, const pickle::Limits& limits,
                           const TextSink& out) {
  pipeline::TraceListing listing(out);
  const pickle::TraceSink trace = listing.AsSink();
  const pipeline::FileFacts facts = pipeline::ExtractFacts(bytes, limits, &trace);
  v1::FileReport report = pipeline::JudgeFacts(facts, rules);
  report.set_path(path);
  report.set_size(bytes.size());
  out(DisasmSummary(facts, report, listing.started()));
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

TEST(FormatTraceLineTest, OffsetNameArgAndNote) {
  pickle::TraceEvent e;
  e.offset = 22;
  e.opcode = 'R';
  e.note = "call posix.system('id')";
  EXPECT_EQ(FormatTraceLine(e), "        22  REDUCE            ; call posix.system('id')\n");
  e.offset = 5;
  e.opcode = 'K';
  e.arg = "7";
  e.note = "";
  e.mark_depth = 2;
  EXPECT_EQ(FormatTraceLine(e), "         5      BININT1          7\n");
}

TEST(FormatTraceLineTest, DeepMarkNestingIsCappedAndNumbered) {
  pickle::TraceEvent e;
  e.opcode = '(';
  e.mark_depth = 100000;
  const std::string line = FormatTraceLine(e);
  EXPECT_LT(line.size(), 80u);
  EXPECT_THAT(line, HasSubstr("[100000] MARK"));
}

TEST(FormatTraceLineTest, UnknownByteAndTerminalControlsAreShownSafely) {
  pickle::TraceEvent e;
  e.opcode = 0xff;
  e.arg = "\x1b[2J";
  e.note = "global a\nb";
  const std::string line = FormatTraceLine(e);
  EXPECT_THAT(line, HasSubstr("<0xff>"));
  EXPECT_THAT(line, Not(HasSubstr("\x1b")));
  EXPECT_THAT(line, HasSubstr("global a\\nb"));
  EXPECT_EQ(line.find('\n'), line.size() - 1);
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
