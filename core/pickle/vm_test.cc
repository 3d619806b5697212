#include "core/pickle/vm.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/pickle/opcodes.h"
#include "gtest/gtest.h"

namespace ckptscan::pickle {
namespace {

using std::string_literals::operator""s;

std::vector<std::string> Globals(const PickleFacts& p, bool resolved = false) {
  std::vector<std::string> out;
  for (const GlobalRef& g : p.graph.globals) {
    if (g.via == Via::kExt) {
      out.push_back("<ext " + std::to_string(g.ext_code) + ">");
    } else if (g.via == Via::kDynamic) {
      out.push_back("<computed " + (g.module_computed ? "?"s : g.module) + "." +
                    (g.name_computed ? "?"s : g.name) + ">");
    } else {
      out.push_back(resolved ? g.resolved_module + "." + g.resolved_name : g.module + "." + g.name);
    }
  }
  return out;
}

std::string ErrorOf(const PickleFacts& p) { return p.error ? p.error->message : ""; }

// pickle.dumps({'a': [1, 2.5, 'x', b'yz', (None, True)], 'b': {3}}, protocol=N), CPython 3.11.
const std::string kProto0 =
    "(dp0\nVa\np1\n(lp2\nI1\naF2.5\naVx\np3\nac_codecs\nencode\np4\n(Vyz\np5\nVlatin1\np6\ntp7\n"
    "Rp8\na(NI01\ntp9\nasVb\np10\nc__builtin__\nset\np11\n((lp12\nI3\natp13\nRp14\ns.";
const std::string kProto2 =
    "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x47\x40"
    "\x04\x00\x00\x00\x00\x00\x00\x58\x01\x00\x00\x00\x78\x71\x03\x63\x5f\x63\x6f\x64\x65\x63"
    "\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x04\x58\x02\x00\x00\x00\x79\x7a\x71\x05\x58\x06"
    "\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x06\x86\x71\x07\x52\x71\x08\x4e\x88\x86\x71\x09"
    "\x65\x58\x01\x00\x00\x00\x62\x71\x0a\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a"
    "\x73\x65\x74\x0a\x71\x0b\x5d\x71\x0c\x4b\x03\x61\x85\x71\x0d\x52\x71\x0e\x75\x2e"s;
const std::string kProto4 =
    "\x80\x04\x95\x2f\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b"
    "\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x8c\x01\x78\x94\x43\x02\x79\x7a\x94\x4e\x88\x86"
    "\x94\x65\x8c\x01\x62\x94\x8f\x94\x28\x4b\x03\x90\x75\x2e"s;

TEST(VmTest, RealPicklesOfEveryFramingParseWhole) {
  Vm vm;
  for (const std::string* data : {&kProto0, &kProto2, &kProto4}) {
    StreamFacts f = vm.ScanStream(*data);
    ASSERT_EQ(f.pickles.size(), 1u);
    EXPECT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
    EXPECT_EQ(f.pickles[0].end, data->size());
    EXPECT_EQ(f.trailing_bytes, 0u);
    const Graph& g = f.pickles[0].graph;
    ASSERT_NE(f.pickles[0].root, kNoNode);
    EXPECT_EQ(g.at(f.pickles[0].root).kind, Kind::kDict);
    EXPECT_EQ(g.at(f.pickles[0].root).items.size(), 4u);  // two key/value pairs
  }
  // Protocols 0 and 2 name _codecs.encode and __builtin__.set, mapped to builtins.set.
  StreamFacts f0 = vm.ScanStream(kProto0);
  EXPECT_EQ(Globals(f0.pickles[0]),
            (std::vector<std::string>{"_codecs.encode", "__builtin__.set"}));
  EXPECT_EQ(Globals(f0.pickles[0], true),
            (std::vector<std::string>{"_codecs.encode", "builtins.set"}));
  EXPECT_TRUE(Globals(vm.ScanStream(kProto4).pickles[0]).empty());
}

TEST(VmTest, ReduceOfOsSystemIsRecordedWithItsArguments) {
  StreamFacts f = Vm().ScanStream("cposix\nsystem\n(S'id'\ntR.");
  ASSERT_TRUE(f.ok());
  const PickleFacts& p = f.pickles[0];
  EXPECT_EQ(Globals(p), (std::vector<std::string>{"posix.system"}));
  ASSERT_EQ(p.graph.calls.size(), 1u);
  EXPECT_EQ(p.graph.calls[0].op, CallOp::kReduce);
  EXPECT_EQ(p.graph.calls[0].offset, 22u);
  EXPECT_EQ(SummarizeCall(p.graph, p.graph.calls[0]), "posix.system('id')");
  EXPECT_EQ(p.graph.globals[0].offset, 0u);
  EXPECT_EQ(p.graph.globals[0].opcode, GLOBAL);
}

TEST(VmTest, FixImportsMappingAppliesOnlyBelowProtocolThree) {
  StreamFacts p2 = Vm().ScanStream("\x80\x02" "c__builtin__\neval\n)R."s);
  EXPECT_EQ(Globals(p2.pickles[0], true), (std::vector<std::string>{"builtins.eval"}));
  StreamFacts p3 = Vm().ScanStream("\x80\x03" "c__builtin__\neval\n)R."s);
  EXPECT_EQ(Globals(p3.pickles[0], true), (std::vector<std::string>{"__builtin__.eval"}));
  StreamFacts cp = Vm().ScanStream("ccopy_reg\n_reconstructor\n."s);
  EXPECT_EQ(Globals(cp.pickles[0], true), (std::vector<std::string>{"copyreg._reconstructor"}));
}

TEST(VmTest, StackGlobalOperandsResolveThroughTheMemo) {
  // 'os' and 'system' are memoized, popped, and fetched back before STACK_GLOBAL.
  std::string data = "\x80\x04\x8c\x02os\x94\x8c\x06system\x94" "00" "h\x00h\x01\x93)R."s;
  StreamFacts f = Vm().ScanStream(data);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(Globals(f.pickles[0]), (std::vector<std::string>{"os.system"}));
  EXPECT_EQ(f.pickles[0].graph.globals[0].via, Via::kStackGlobal);
}

TEST(VmTest, MemoizeStoresTheStackTopNotThePreviousArgument) {
  // S2: a POP right before MEMOIZE; the memo gets 'posix', not 'junk'.
  std::string data = "\x80\x04\x8c\x05posix\x8c\x04junk" "0" "\x94" "0" "h\x00\x8c\x06system\x93."s;
  StreamFacts f = Vm().ScanStream(data);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(Globals(f.pickles[0]), (std::vector<std::string>{"posix.system"}));
}

TEST(VmTest, MemoizeIndexIsTheMemoLengthAfterSparsePuts) {
  // S1: PUT 5 then MEMOIZE → index 1 (one entry set), not 6.
  std::string data = "\x80\x04\x8c\x02os" "p5\n" "0\x8c\x06system\x94" "0" "g5\nh\x01\x93."s;
  StreamFacts f = Vm().ScanStream(data);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(Globals(f.pickles[0]), (std::vector<std::string>{"os.system"}));
}

TEST(VmTest, StackGlobalWithNonStrOperandsIsAnError) {
  StreamFacts f = Vm().ScanStream("\x80\x04K\x01\x8c\x06system\x93."s);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->message, "STACK_GLOBAL requires str");
  EXPECT_EQ(f.pickles[0].error->offset, 12u);
}

TEST(VmTest, GetOfAnUnsetMemoKeyIsAnError) {
  StreamFacts f = Vm().ScanStream("(I1\ng0\n.");
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->message, "Memo value not found at index 0");
}

TEST(VmTest, MarkFenceStopsPopsBelowTheMark) {
  EXPECT_EQ(ErrorOf(Vm().ScanStream("(2.").pickles[0]), "unexpected MARK found");
  EXPECT_EQ(ErrorOf(Vm().ScanStream("N(a.").pickles[0]), "unexpected MARK found");
  EXPECT_EQ(ErrorOf(Vm().ScanStream("2.").pickles[0]), "unpickling stack underflow");
  EXPECT_EQ(ErrorOf(Vm().ScanStream("(0N.").pickles[0]), "");  // POP removes the MARK itself
  EXPECT_EQ(ErrorOf(Vm().ScanStream("t.").pickles[0]), "could not find MARK");
  EXPECT_EQ(ErrorOf(Vm().ScanStream("(N\x85.").pickles[0]), "");
}

TEST(VmTest, TextIntegerLiteralsFollowCPythonNotPickletools) {
  // P2: pickletools rejects base-0 literals; _pickle.c accepts them and goes on to the payload.
  StreamFacts f = Vm().ScanStream("I0x10\n0cposix\nsystem\n(S'id'\ntR.");
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(Globals(f.pickles[0]), (std::vector<std::string>{"posix.system"}));
  StreamFacts nul = Vm().ScanStream("I1\0junk\n0cposix\nsystem\n(S'id'\ntR."s);
  ASSERT_TRUE(nul.ok()) << ErrorOf(nul.pickles[0]);
  EXPECT_EQ(Globals(nul.pickles[0]), (std::vector<std::string>{"posix.system"}));
}

TEST(VmTest, ArgumentCrossingItsFrameIsRejected) {
  // FRAME of 3 bytes holding the start of a 10-byte BINUNICODE (P3, cpython#154848).
  std::string straddle = "\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00" "X\x0a\x00\x00\x00" "cos\nsystem\n."s;
  StreamFacts f = Vm().ScanStream(straddle);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_NE(f.pickles[0].error->message.find("crosses the end of its frame"), std::string::npos)
      << f.pickles[0].error->message;
  // CPython 3.11 reads on: the stop is ours, never a clean end of another loader's reading.
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
  EXPECT_FALSE(f.StopsWhereLoaderStops());
}

TEST(VmTest, FrameInsideAnUnfinishedFrameIsRejected) {
  std::string nested =
      "\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00" "N\x95\x01\x00\x00\x00\x00\x00\x00\x00" "N.N."s;
  StreamFacts f = Vm().ScanStream(nested);
  EXPECT_EQ(ErrorOf(f.pickles[0]),
            "beginning of a new frame before end of current frame (CPython 3.11 reads across "
            "frames; ckptscan does not follow it)");
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
}

TEST(VmTest, LineCrossingItsFrameIsRejected) {
  std::string s = "\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00" "cos\nsystem\n."s;
  EXPECT_NE(ErrorOf(Vm().ScanStream(s).pickles[0]).find("crosses the end of its frame"),
            std::string::npos);
}

TEST(VmTest, EveryPickleOfAStreamIsScannedAndTrailingBytesReported) {
  StreamFacts two = Vm().ScanStream("N.cposix\nsystem\n(S'id'\ntR.");
  ASSERT_EQ(two.pickles.size(), 2u);
  EXPECT_EQ(two.pickles[1].start, 2u);
  EXPECT_EQ(Globals(two.pickles[1]), (std::vector<std::string>{"posix.system"}));
  EXPECT_EQ(two.trailing_bytes, 0u);

  StreamFacts trailing = Vm().ScanStream("N.\xff\xfe garbage"s);
  ASSERT_EQ(trailing.pickles.size(), 1u);
  EXPECT_TRUE(trailing.ok());
  EXPECT_EQ(trailing.trailing_offset, 2u);
  EXPECT_EQ(trailing.trailing_bytes, 10u);
}

TEST(VmTest, FindingsBeforeABrokenTailAreKept) {
  // nullifAI: the payload runs before the stream breaks.
  StreamFacts f = Vm().ScanStream("cposix\nsystem\n(S'id'\ntR\xff"s);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(Globals(f.pickles[0]), (std::vector<std::string>{"posix.system"}));
  EXPECT_EQ(f.pickles[0].graph.calls.size(), 1u);
  // A second pickle with a payload and no STOP is kept as a (failed) pickle, not trailing.
  StreamFacts second = Vm().ScanStream("N.cposix\nsystem\n(S'id'\ntR");
  ASSERT_EQ(second.pickles.size(), 2u);
  EXPECT_EQ(Globals(second.pickles[1]), (std::vector<std::string>{"posix.system"}));
}

TEST(VmTest, ExtensionCodesAreRecordedAndParsingGoesOn) {
  StreamFacts f = Vm().ScanStream("\x80\x02\x82\x07)Rcposix\nsystem\n."s);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(Globals(f.pickles[0]), (std::vector<std::string>{"<ext 7>", "posix.system"}));
  EXPECT_EQ(ErrorOf(Vm().ScanStream("\x82\x00."s).pickles[0]), "EXT specifies code <= 0");
}

TEST(VmTest, EveryCallOpcodeIsACallSite) {
  struct Case {
    std::string data;
    CallOp op;
  } cases[] = {
      {"(S'id'\nios\nsystem\n.", CallOp::kInst},
      {"(cos\nsystem\nS'id'\no.", CallOp::kObj},
      {"\x80\x02" "cos\nsystem\n)\x81."s, CallOp::kNewObj},
      {"\x80\x04" "cos\nsystem\n)}\x92."s, CallOp::kNewObjEx},
      {"cos\nsystem\n}b."s, CallOp::kBuild},
      {"cos\nsystem\n)RS'k'\nS'v'\ns."s, CallOp::kSetItems},
      {"cos\nsystem\n)RS'v'\na."s, CallOp::kAppends},
      {"\x80\x04" "cos\nsystem\n)R(K\x01\x90."s, CallOp::kAddItems},
      {"Pstorage\n.", CallOp::kPersistentLoad},
      {"(S'storage'\ntQ.", CallOp::kPersistentLoad},
  };
  for (const Case& c : cases) {
    StreamFacts f = Vm().ScanStream(c.data);
    ASSERT_TRUE(f.ok()) << testing::PrintToString(c.data) << ": " << ErrorOf(f.pickles[0]);
    bool found = false;
    for (const CallSite& cs : f.pickles[0].graph.calls) found |= cs.op == c.op;
    EXPECT_TRUE(found) << CallOpName(c.op) << " in " << testing::PrintToString(c.data);
  }
}

TEST(VmTest, BuildOnALiteralFollowsCPythonsSlotStateRules) {
  EXPECT_EQ(ErrorOf(Vm().ScanStream("K\x01" "Nb."s).pickles[0]), "");
  EXPECT_NE(ErrorOf(Vm().ScanStream("K\x01" "N\x85" "b."s).pickles[0]), "");  // (None,)
  EXPECT_EQ(ErrorOf(Vm().ScanStream("K\x01" "N}\x86" "b."s).pickles[0]), "");  // (None, {})
  EXPECT_NE(ErrorOf(Vm().ScanStream("K\x01}b."s).pickles[0]), "");
  EXPECT_NE(ErrorOf(Vm().ScanStream("K\x01" "N}S'a'\nK\x01s\x86" "b."s).pickles[0]), "");
}

TEST(VmTest, PlainContainerMutationsAreNotCallSites) {
  StreamFacts f = Vm().ScanStream("}S'k'\nS'v'\ns]N\x85" "a\x8f(K\x01\x90\x87."s);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_TRUE(f.pickles[0].graph.calls.empty());
}

TEST(VmTest, BytesThatAreAPickleAreScannedAsNested) {
  std::string inner = "cposix\nsystem\n(S'id'\ntR.";
  std::string outer = "C" + std::string(1, static_cast<char>(inner.size())) + inner + "\x85.";
  StreamFacts f = Vm().ScanStream(outer);
  ASSERT_EQ(f.pickles.size(), 2u);
  EXPECT_TRUE(Globals(f.pickles[0]).empty());
  EXPECT_EQ(f.pickles[1].depth, 1u);
  EXPECT_EQ(f.pickles[1].parent, 0);
  EXPECT_EQ(f.pickles[1].start, 2u);  // offsets stay those of the outer stream
  EXPECT_EQ(Globals(f.pickles[1]), (std::vector<std::string>{"posix.system"}));
}

TEST(VmTest, NestedScanningStopsAtTheDepthLimit) {
  std::string p = "cposix\nsystem\n.";
  for (int i = 0; i < 5; ++i) {
    p = "C" + std::string(1, static_cast<char>(p.size())) + p + "cbuiltins\nlen\n.";
  }
  Limits lim;
  lim.max_nested_depth = 2;
  StreamFacts f = Vm(lim).ScanStream(p);
  uint32_t deepest = 0;
  for (const PickleFacts& q : f.pickles) deepest = std::max(deepest, q.depth);
  EXPECT_EQ(deepest, 2u);
}

TEST(VmTest, LimitsStopTheVmWithTheirName) {
  Limits lim;
  lim.max_opcodes = 10;
  StreamFacts f = Vm(lim).ScanStream(std::string(100, 'N') + ".");
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kLimit);
  EXPECT_EQ(f.pickles[0].error->limit_name, "max_opcodes");
  EXPECT_EQ(f.pickles[0].error->limit_value, 10u);

  Limits marks;
  marks.max_mark_depth = 1000;
  EXPECT_EQ(Vm(marks).ScanStream(std::string(100000, '(')).pickles[0].error->limit_name,
            "max_mark_depth");

  Limits memo;
  memo.max_memo_entries = 3;
  EXPECT_EQ(Vm(memo).ScanStream("Nq\x01q\x02q\x03q\x04."s).pickles[0].error->limit_name,
            "max_memo_entries");
}

TEST(VmTest, HugeDeclaredLengthsFailBeforeAnyAllocation) {
  // BINBYTES8 declaring 2^62 bytes: a limit error, immediately.
  std::string b8 = "\x80\x04\x8e\x00\x00\x00\x00\x00\x00\x00\x40"s;
  StreamFacts f = Vm().ScanStream(b8);
  EXPECT_EQ(f.pickles[0].error->limit_name, "max_string_bytes");
  // Within the limit but past the end of the input: malformed, not a crash.
  std::string b4 = "\x80\x03" "B\xff\xff\xff\x00"s;
  EXPECT_NE(ErrorOf(Vm().ScanStream(b4).pickles[0]).find("truncated"), std::string::npos);
  // LONG_BINPUT at 0xffffffff: CPython sizes its memo array by the index and fails.
  EXPECT_EQ(Vm().ScanStream("Nr\xff\xff\xff\xff.").pickles[0].error->limit_name,
            "max_memo_index");
}

TEST(VmTest, DeepNestingNeitherRecursesNorCopies) {
  // 200k nested lists: [[[[...]]]] built by EMPTY_LIST*n then APPEND*(n-1).
  const int n = 200000;
  std::string data(n, ']');
  data += std::string(n - 1, 'a');
  data += ".";
  Limits deep;
  deep.max_value_depth = n;
  StreamFacts f = Vm(deep).ScanStream(data);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(f.pickles[0].graph.at(f.pickles[0].root).depth, static_cast<uint32_t>(n));
  std::string s = Summarize(f.pickles[0].graph, f.pickles[0].root);
  EXPECT_LT(s.size(), 200u);
  // By default that depth is refused: pickle.dump cannot write it.
  StreamFacts refused = Vm().ScanStream(data);
  ASSERT_TRUE(refused.pickles[0].error.has_value());
  EXPECT_EQ(refused.pickles[0].error->limit_name, "max_value_depth");
  // Billion laughs: DUP fan-out shares one node instead of copying.
  std::string laughs = "]";
  for (int i = 0; i < 30; ++i) laughs += "2\x86";  // (x, x)
  laughs += ".";
  Limits lim;
  lim.max_expanded_values = 1u << 31;
  StreamFacts l = Vm(lim).ScanStream(laughs);
  ASSERT_TRUE(l.ok()) << ErrorOf(l.pickles[0]);
  EXPECT_LT(l.pickles[0].graph.nodes.size(), 40u);
  // ... but the object it loads holds 2^31 values: over the default expansion limit.
  StreamFacts bomb = Vm().ScanStream(laughs);
  ASSERT_TRUE(bomb.pickles[0].error.has_value());
  EXPECT_EQ(bomb.pickles[0].error->limit_name, "max_expanded_values");
}

TEST(VmTest, ValueDepthIsBoundedHoweverTheNestingIsBuilt) {
  Limits lim;
  lim.max_value_depth = 100;
  auto depth_error = [&](const std::string& data) -> std::string {
    StreamFacts f = Vm(lim).ScanStream(data);
    return f.pickles[0].error.has_value() ? f.pickles[0].error->limit_name : "";
  };
  // TUPLE1 around TUPLE1 (no MARK, one stack slot): 99 levels over None pass, 100 do not.
  EXPECT_EQ(depth_error("N" + std::string(100, '\x85') + "."), "");
  EXPECT_EQ(depth_error("N" + std::string(101, '\x85') + "."), "max_value_depth");
  // MARK-built tuples, dicts by SETITEM, sets by ADDITEMS and a list appended to itself.
  EXPECT_EQ(depth_error(std::string(101, '(') + std::string(101, 't') + "."), "max_value_depth");
  std::string dicts = "}";
  for (int i = 0; i < 101; ++i) dicts = "}K\x01" + dicts + "s";
  EXPECT_EQ(depth_error("\x80\x04" + dicts + "."), "max_value_depth");
  EXPECT_EQ(depth_error("\x80\x04\x8f(\x8f" + std::string(101, '\x85') + "\x90."),
            "max_value_depth");  // a tuple of depth 101 added to a set
  EXPECT_EQ(depth_error("]q\x00" + std::string(101, '2') + std::string(101, 'a') + "."),
            "max_value_depth");  // L.append(L) 101 times: a cycle only deepens per append
  // The error names the opcode that went too deep.
  StreamFacts f = Vm(lim).ScanStream("N" + std::string(101, '\x85') + ".");
  EXPECT_EQ(f.pickles[0].error->offset, 101u);
}

TEST(VmTest, NoneTrueAndFalseAreOneNodeEachLikeInPython) {
  StreamFacts f = Vm().ScanStream("\x80\x02(" + std::string(1000, 'N') + "\x88\x89\x88\x89l.");
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  // None, True, False and the list: four nodes for 1,004 items.
  EXPECT_EQ(f.pickles[0].graph.nodes.size(), 4u);
  EXPECT_EQ(f.pickles[0].graph.at(f.pickles[0].root).items.size(), 1004u);
  EXPECT_EQ(Summarize(f.pickles[0].graph, f.pickles[0].root).substr(0, 12), "[None, None,");
}

TEST(VmTest, EveryTruncationOfARealPickleIsAnErrorNeverACrash) {
  for (const std::string* data : {&kProto0, &kProto2, &kProto4}) {
    for (size_t cut = 0; cut < data->size(); ++cut) {
      StreamFacts f = Vm().ScanStream(data->substr(0, cut));
      if (cut == 0) {
        ASSERT_EQ(f.pickles.size(), 1u);
      }
      EXPECT_FALSE(f.ok()) << "cut at " << cut;
    }
  }
}

TEST(VmTest, EveryByteFlipOfARealPickleEndsCleanly) {
  for (const std::string* data : {&kProto0, &kProto2, &kProto4}) {
    for (size_t i = 0; i < data->size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string m = *data;
        m[i] = static_cast<char>(m[i] ^ (1 << bit));
        StreamFacts f = Vm().ScanStream(m);
        ASSERT_FALSE(f.pickles.empty());
      }
    }
  }
}

TEST(VmTest, UnknownOpcodeIsRejectedWithItsOffset) {
  StreamFacts f = Vm().ScanStream("N\xff."s);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->offset, 1u);
  EXPECT_EQ(f.pickles[0].error->message, "invalid load key, 0xff");
}

TEST(VmTest, OutOfBandBuffersAreUnsupported) {
  StreamFacts f = Vm().ScanStream("\x80\x05\x97."s);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kUnsupported);
}

TEST(VmTest, TraceSeesEveryOpcodeWithItsEffect) {
  std::vector<TraceEvent> events;
  TraceSink sink = [&](const TraceEvent& ev) { events.push_back(ev); };
  Vm().ScanStream("cposix\nsystem\n(S'id'\ntR.", 0, &sink);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].note, "global posix.system");
  EXPECT_EQ(events[1].opcode, MARK);
  EXPECT_EQ(events[1].mark_depth, 1u);
  EXPECT_EQ(events[2].arg, "'id'");
  EXPECT_EQ(events[4].note, "call posix.system('id')");
  EXPECT_EQ(events[5].opcode, STOP);
}

TEST(VmTest, JoblibReadingSkipsInlineArrayBytesAndScansObjectArrayPickles) {
  const std::string dir = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/joblib/";
  std::ifstream in(dir + "malicious/object_array_payload.joblib", std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(data.empty());
  // pickle.load's reading stops at the first array's raw bytes, before the payload.
  StreamFacts plain = Vm().ScanStream(data);
  bool plain_sees_payload = false;
  for (const PickleFacts& p : plain.pickles) {
    for (const std::string& g : Globals(p)) plain_sees_payload |= g == "posix.system";
  }
  EXPECT_FALSE(plain_sees_payload);
  // joblib.load's reading reads the array bytes where joblib does and finds it.
  StreamFacts joblib = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(joblib.ok()) << ErrorOf(joblib.pickles[0]);
  EXPECT_EQ(joblib.trailing_bytes, 0u);
  ASSERT_GE(joblib.pickles.size(), 2u);
  EXPECT_EQ(joblib.pickles[0].end, data.size());
  // The object array is pickled whole (numpy's reconstructors), payload inside.
  std::vector<std::string> inner = Globals(joblib.pickles[1]);
  EXPECT_NE(std::find(inner.begin(), inner.end(), "posix.system"), inner.end());
  EXPECT_EQ(inner.front(), "numpy.core.multiarray._reconstruct");
}

TEST(VmTest, JoblibArrayBytesPastTheEndAreAnError) {
  const std::string dir = std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/joblib/";
  std::ifstream in(dir + "benign/arrays.joblib", std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t cut = 0; cut < data.size(); cut += 7) {
    StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data.substr(0, cut));
    EXPECT_FALSE(f.ok()) << "cut at " << cut;
  }
}

TEST(VmTest, StackGlobalOfACallResultIsADynamicImport) {
  // _codecs.encode('bf', 'rot13') is 'os' at load time: STACK_GLOBAL('os'?, 'system').
  std::string s = "\x80\x04" "c_codecs\nencode\n" "\x8c\x02" "bf" "\x8c\x05" "rot13" "\x86R"
                  "\x8c\x06" "system" "\x93" "\x8c\x04" "true" "\x85R."s;
  StreamFacts f = Vm().ScanStream(s);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(Globals(f.pickles[0]), (std::vector<std::string>{"_codecs.encode",
                                                            "<computed ?.system>"}));
  const GlobalRef& g = f.pickles[0].graph.globals[1];
  EXPECT_EQ(g.via, Via::kDynamic);
  EXPECT_TRUE(g.module_computed);
  EXPECT_FALSE(g.name_computed);
}

TEST(VmTest, StackGlobalOfANonStrLiteralIsStillMalformed) {
  StreamFacts f = Vm().ScanStream("\x80\x04K\x01\x8c\x01x\x93."s);
  EXPECT_EQ(ErrorOf(f.pickles[0]), "STACK_GLOBAL requires str");
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kMalformed);
}

TEST(VmTest, ErrorsCPythonRaisesTooEndAnotherLoadersReadingCleanly) {
  // An invalid opcode: _pickle.c stops there as well.
  StreamFacts bad = Vm().ScanStream("\x80\x02N\x00"s);
  EXPECT_TRUE(bad.StopsWhereLoaderStops());
  // A limit of ours: the loader reads on.
  Limits small;
  small.max_line_bytes = 4;
  StreamFacts limit = Vm(small).ScanStream("Ilonger than four\n."s);
  ASSERT_TRUE(limit.pickles[0].error.has_value());
  EXPECT_EQ(limit.pickles[0].error->code, VmError::Code::kLimit);
  EXPECT_FALSE(limit.StopsWhereLoaderStops());
  // The same limit hit while reading a persistent id: pickle.load (no persistent_load) stops
  // at the PERSID before reading its line.
  StreamFacts persid = Vm(small).ScanStream("Plonger than four\n."s);
  ASSERT_TRUE(persid.pickles[0].error.has_value());
  EXPECT_TRUE(persid.StopsWhereLoaderStops());
}

// What joblib.dump writes for one array, with its dtype code, state elsize and flags.
std::string JoblibOneArray(std::string_view code, int32_t elsize, int32_t flags, uint32_t n,
                           std::string_view after) {
  auto ustr = [](std::string_view s) {
    std::string out = "X";
    uint32_t len = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&len), 4);
    out.append(s);
    return out;
  };
  auto i32 = [](int32_t v) {
    std::string out = "J";
    out.append(reinterpret_cast<const char*>(&v), 4);
    return out;
  };
  std::string dtype = "cnumpy\ndtype\n" + ustr(code) + "\x89\x88\x87R(K\x03" + ustr("|") +
                      "NNN" + i32(elsize) + i32(-1) + i32(flags) + "tb";
  return "\x80\x02" "cjoblib.numpy_pickle\nNumpyArrayWrapper\n)\x81}(" + ustr("shape") + "(" +
         i32(static_cast<int32_t>(n)) + "t" + ustr("dtype") + dtype + "ub" + std::string(after) +
         ".";
}

TEST(VmTest, JoblibItemSizeIsNumpysNotTheStatesElsize) {
  // 'i4' with a state claiming 16-byte items: numpy keeps 4, so joblib reads 3 x 4 bytes.
  std::string data = JoblibOneArray("i4", 16, 0, 3, std::string(12, '\0') + "N0");
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(f.pickles[0].end, data.size());
}

TEST(VmTest, JoblibFlexibleDtypeTakesItsSizeFromTheState) {
  std::string data = JoblibOneArray("S1", 5, 0, 2, std::string(10, 'z'));
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  EXPECT_EQ(f.pickles[0].end, data.size());
}

TEST(VmTest, JoblibHasObjectComesFromTheStatesFlags) {
  // f8 with NPY_ITEM_HASOBJECT: joblib unpickles what follows.
  std::string data = JoblibOneArray("f8", -1, 1, 4, "cposix\nsystem\n(S'true'\ntR.");
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.ok()) << ErrorOf(f.pickles[0]);
  ASSERT_EQ(f.pickles.size(), 2u);
  EXPECT_EQ(Globals(f.pickles[1]), (std::vector<std::string>{"posix.system"}));
}

TEST(VmTest, JoblibDtypeByNameIsNotModelled) {
  StreamFacts f = Vm(Limits{}, Loader::kJoblib)
                      .ScanStream(JoblibOneArray("float64", -1, 0, 1, std::string(8, '\0')));
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
  EXPECT_NE(ErrorOf(f.pickles[0]).find("dtype code 'float64'"), std::string::npos);
}

TEST(VmTest, JoblibPlaceholderMadeByReconstructorStopsTheReading) {
  std::string data =
      "\x80\x02" "ccopyreg\n_reconstructor\n" "cjoblib.numpy_pickle\nNumpyArrayWrapper\n"
      "cbuiltins\nobject\nN\x87R}b."s;
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
  // pickle.load knows nothing of placeholders: the same bytes are a clean pickle there.
  EXPECT_TRUE(Vm().ScanStream(data).ok());
}

TEST(VmTest, JoblibSecondBuildOnAPlaceholderStopsTheReading) {
  // The placeholder fetched again from the memo and built again: joblib reads a second array.
  std::string first = JoblibOneArray("u1", -1, 0, 1, "X");
  first.pop_back();  // no STOP yet
  // Memoize the placeholder right after NEWOBJ: insert BINPUT 0 after ")\x81".
  const size_t at = first.find(")\x81") + 2;
  first.insert(at, "q\x00"s);
  std::string data = first + "0h\x00}b."s;
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
  EXPECT_NE(ErrorOf(f.pickles[0]).find("second BUILD"), std::string::npos) << ErrorOf(f.pickles[0]);
}

TEST(VmTest, JoblibSlotStateSettingClassStopsTheReading) {
  // BUILD (None, {'__class__': NumpyArrayWrapper}) on a plain object: setattr turns it into a
  // placeholder, and joblib reads array bytes after it.
  std::string data =
      "\x80\x02" "ccollections\nOrderedDict\n)R" "N}\x8c\x09__class__"
      "cjoblib.numpy_pickle\nNumpyArrayWrapper\ns\x86" "b."s;
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
}

TEST(VmTest, JoblibObjectArrayWithAllowMmapIsScannedThenStops) {
  // Under mmap_mode joblib maps these bytes raw, without it it unpickles them: the pickle's
  // payload is reported, and the reading stops.
  std::string data = JoblibOneArray("O8", -1, 1, 1, "cposix\nsystem\n(S'true'\ntR.");
  const size_t state_end = data.find("ub", data.find("dtype"));
  ASSERT_NE(state_end, std::string::npos);
  data.insert(state_end, "X\x0a\x00\x00\x00" "allow_mmap\x88"s);
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
  ASSERT_EQ(f.pickles.size(), 2u);
  EXPECT_EQ(Globals(f.pickles[1]), (std::vector<std::string>{"posix.system"}));
}

// Found by tests/differential/joblib_diff.py: joblib's outer stream is read by the pure-Python
// unpickler, which imports an INST class before it looks for the MARK, and takes a name line
// the data ends in (less its last byte).
TEST(VmTest, JoblibReadingImportsAnInstClassEvenWithoutAMark) {
  const std::string data = "\x80\x02iposix\nsystem\n."s;
  StreamFacts c = Vm().ScanStream(data);
  EXPECT_TRUE(Globals(c.pickles[0]).empty());  // _pickle.c: no MARK, nothing imported
  StreamFacts py = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  EXPECT_EQ(Globals(py.pickles[0]), (std::vector<std::string>{"posix.system"}));
  EXPECT_EQ(ErrorOf(py.pickles[0]), "could not find MARK");
}

TEST(VmTest, JoblibReadingTakesANameLineTheDataEndsIn) {
  const std::string data = "\x80\x02" "cposix\nsystemX"s;  // pickle.py: readline()[:-1]
  EXPECT_TRUE(Globals(Vm().ScanStream(data).pickles[0]).empty());
  StreamFacts py = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  EXPECT_EQ(Globals(py.pickles[0]), (std::vector<std::string>{"posix.system"}));
  EXPECT_TRUE(py.pickles[0].error.has_value());  // and then the data has ended
}

// pickle._Unpickler (Loader::kPython) reads on where _pickle.c stops (docs/pickle_vm.md); each
// case below ran os.getcwd or imported posix.system under joblib.load 1.2 in the loader matrix
// (tests/fixtures/router).
std::vector<std::string> PythonGlobals(const std::string& data) {
  StreamFacts f = Vm(Limits{}, Loader::kPython).ScanStream(data, 0, nullptr, Pickles::kFirst);
  return f.pickles.empty() ? std::vector<std::string>{} : Globals(f.pickles[0]);
}

TEST(VmTest, PythonReadingTakesFloatAndIntAsPythonSpellsThem) {
  const std::vector<std::string> getcwd{"os.getcwd"};
  for (const std::string& lead : {"F 1\n0"s, "F1_0\n0"s, "F 1.5 \n0"s, "I 1\n0"s, "I1_000\n0"s,
                                  "L 1L\n0"s, "F1e999\n0"s}) {
    const std::string data = lead + "cos\ngetcwd\n(tR.";
    EXPECT_EQ(PythonGlobals(data), getcwd) << lead;
  }
  // What Python's float() and int() refuse stops the reading before the import.
  for (const std::string& lead : {"F1__0\n0"s, "F_1\n0"s, "F1_\n0"s, "I0 1\n0"s, "F\n0"s}) {
    const std::string data = lead + "cos\ngetcwd\n(tR.";
    EXPECT_TRUE(PythonGlobals(data).empty()) << lead;
  }
}

TEST(VmTest, PythonReadingTakesAShortFrameAsTheBytesLeft) {
  const std::string body = "cos\ngetcwd\n)R.";
  const std::string data = "\x80\x04\x95\xe8\x03\x00\x00\x00\x00\x00\x00"s + body;
  EXPECT_TRUE(Globals(Vm().ScanStream(data).pickles[0]).empty());  // _pickle.c: truncated
  EXPECT_EQ(PythonGlobals(data), (std::vector<std::string>{"os.getcwd"}));
}

TEST(VmTest, PythonReadingOfATextLineWithoutNewlineDropsItsLastByte) {
  EXPECT_EQ(PythonGlobals("cos\ngetcwdX"), (std::vector<std::string>{"os.getcwd"}));
  EXPECT_EQ(PythonGlobals("cos\ngetc"), (std::vector<std::string>{"os.get"}));
  EXPECT_EQ(PythonGlobals("ios\ngetcwd\n."), (std::vector<std::string>{"os.getcwd"}));
}

TEST(VmTest, PythonReadingStopsAtAPersistentId) {
  StreamFacts f = Vm(Limits{}, Loader::kPython).ScanStream("\x80\x02X\x01\x00\x00\x00" "aQ."s);
  ASSERT_FALSE(f.pickles.empty());
  EXPECT_EQ(ErrorOf(f.pickles[0]), "unsupported persistent id encountered");
}

TEST(VmTest, PythonReadingResumesAfterTheFrameItsStopLiesIn) {
  // A frame of 4 bytes: "N." and two more; pickle.py read all four from the file.
  const std::string data = "\x80\x04\x95\x04\x00\x00\x00\x00\x00\x00\x00N.N."s;
  StreamFacts c = Vm().ScanStream(data);
  StreamFacts py = Vm(Limits{}, Loader::kPython).ScanStream(data);
  ASSERT_FALSE(c.pickles.empty());
  ASSERT_FALSE(py.pickles.empty());
  EXPECT_EQ(py.pickles[0].end, data.size());
  EXPECT_LT(c.pickles[0].end, data.size());
}

// joblib 0.9's NDArrayWrapper: NEWOBJ, one BUILD with {filename, subclass, allow_mmap}; its
// array is in a file beside the pickle, so joblib.load reads nothing more from the stream.
std::string JoblibCompanionWrapper(std::string_view wrapper, std::string_view after) {
  return "\x80\x02" "cjoblib.numpy_pickle\n" + std::string(wrapper) +
         "\n)\x81}(U\x08" "filenameU\x0c" "x.pkl_01.npy" "U\x08" "subclass"
         "cnumpy\nndarray\nub" + std::string(after) + "."s;
}

TEST(VmTest, JoblibCompanionWrapperReadsNothingFromTheStream) {
  for (std::string_view wrapper : {"NDArrayWrapper", "ZNDArrayWrapper"}) {
    // What follows the BUILD is read as opcodes, as joblib's unpickler reads it.
    std::string data = JoblibCompanionWrapper(wrapper, "0cposix\nsystem\n(S'true'\ntR");
    StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
    ASSERT_TRUE(f.ok()) << wrapper << ": " << ErrorOf(f.pickles[0]);
    EXPECT_EQ(f.pickles[0].end, data.size()) << wrapper;
    std::vector<std::string> g = Globals(f.pickles[0]);
    EXPECT_NE(std::find(g.begin(), g.end(), "posix.system"), g.end()) << wrapper;
  }
}

TEST(VmTest, JoblibCompanionWrapperWithASecondBuildStopsTheReading) {
  // A second BUILD lands on the array joblib put in the wrapper's place: not modelled.
  std::string data = JoblibCompanionWrapper("NDArrayWrapper", "}b");
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
}

TEST(VmTest, JoblibCompanionWrapperMadeByReduceStopsTheReading) {
  std::string data =
      "\x80\x02" "cjoblib.numpy_pickle\nNDArrayWrapper\n" "U\x01" "a"
      "cnumpy\nndarray\n\x86R}b."s;
  StreamFacts f = Vm(Limits{}, Loader::kJoblib).ScanStream(data);
  ASSERT_TRUE(f.pickles[0].error.has_value());
  EXPECT_EQ(f.pickles[0].error->code, VmError::Code::kStricter);
}

}  // namespace
}  // namespace ckptscan::pickle
