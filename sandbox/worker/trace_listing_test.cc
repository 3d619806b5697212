#include "sandbox/worker/trace_listing.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::sandbox {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

}  // namespace
}  // namespace ckptscan::sandbox
