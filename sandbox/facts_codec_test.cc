#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>

#include "absl/numeric/int128.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/strings.h"
#include "core/pickle/graph_check.h"
#include "gtest/gtest.h"
#include "sandbox/facts_decoder.h"
#include "sandbox/protocol.h"
#include "sandbox/worker/extract_facts.h"
#include "sandbox/worker/facts_encoder.h"
#include "tests/inprocess/local_scan.h"

namespace ckptscan::sandbox {
namespace {

namespace wv1 = ::ckptscan::worker::v1;
using pickle::kNoNode;

// Every field of every struct set to something other than its default.
FileFacts EveryFieldFacts() {
  FileFacts f;
  f.format = "pickle";
  v1::ScanError e;
  e.set_code(v1::ERROR_CODE_LIMIT);
  e.set_message("too many \xff bytes");  // not UTF-8: bytes travel as they are
  e.mutable_location()->set_member("archive/data.pkl");
  e.mutable_location()->set_offset(77);
  e.mutable_location()->set_opcode("BINUNICODE");
  e.mutable_location()->set_pickle_index(2);
  e.mutable_location()->set_nested_depth(1);
  e.set_limit_name("max_opcodes");
  e.set_limit_value(1234);
  f.errors.push_back(e);

  MemberFacts m;
  m.member = "member\x01name";
  pickle::PickleFacts p;
  p.start = 3;
  p.end = 99;
  p.protocol = 4;
  p.opcodes = 17;
  pickle::Graph& g = p.graph;
  pickle::Node n0;
  n0.kind = pickle::Kind::kInt;
  n0.b = true;
  n0.fits = false;
  n0.i = absl::MakeInt128(-5, 0x0123456789abcdefULL);
  n0.f = -0.0;
  n0.text = std::string("12\0345", 5);
  n0.len = 1ull << 40;
  n0.truncated = true;
  n0.data_offset = 42;
  n0.in_stream = true;
  g.nodes.push_back(n0);
  pickle::Node n1;
  n1.kind = pickle::Kind::kGlobal;
  n1.ref = 0;
  g.nodes.push_back(n1);
  pickle::Node n2;
  n2.kind = pickle::Kind::kTuple;
  n2.items = {0, 0};
  n2.f = std::numeric_limits<double>::infinity();
  g.nodes.push_back(n2);
  pickle::Node n3;
  n3.kind = pickle::Kind::kCall;
  n3.ref = 0;
  n3.states = {2};
  n3.mutations = {1};
  g.nodes.push_back(n3);
  pickle::GlobalRef r;
  r.module = "copy_reg";
  r.name = "_reconstructor";
  r.resolved_module = "copyreg";
  r.resolved_name = "_reconstructor";
  r.offset = 5;
  r.opcode = 'c';
  r.via = pickle::Via::kExt;
  r.ext_code = -9;
  r.module_computed = true;  // the codec carries them whatever `via` says
  r.name_computed = true;
  g.globals.push_back(r);
  pickle::CallSite c;
  c.op = pickle::CallOp::kNewObjEx;
  c.offset = 50;
  c.opcode = 0x92;
  c.callee = 1;
  c.args = 2;
  c.kwargs = 0;
  c.result = 3;
  g.calls.push_back(c);
  pickle::CallSite c2;
  c2.op = pickle::CallOp::kSetItems;
  c2.callee = 3;
  g.calls.push_back(c2);
  p.root = 3;
  pickle::VmError ve;
  ve.code = pickle::VmError::Code::kLimit;
  ve.message = "limit hit";
  ve.offset = 88;
  ve.opcode = 0x8c;
  ve.has_opcode = true;
  ve.limit_name = "max_nodes";
  ve.limit_value = 4;
  p.error = ve;
  m.stream.pickles.push_back(p);

  pickle::PickleFacts nested;
  nested.start = 10;
  nested.end = 20;
  nested.depth = 1;
  nested.parent = 0;
  nested.parent_node = 0;
  m.stream.pickles.push_back(nested);
  m.stream.trailing_offset = 100;
  m.stream.trailing_bytes = 7;
  pickle::VmError se;
  se.code = pickle::VmError::Code::kUnsupported;
  se.message = "too many pickles";
  m.stream.stream_error = se;
  m.alternative = true;
  f.members.push_back(m);
  f.other_values.listed.push_back(torch::OtherValue{"epoch", "int", 12});
  f.other_values.listed.push_back(torch::OtherValue{"args", "argparse.Namespace", 40});
  f.other_values.total = 5;
  f.shard_index.present = true;
  f.shard_index.has_total_size = true;
  f.shard_index.total_size = 132;
  f.shard_index.weight_map = {{"0.weight", "pytorch_model-00001-of-00002.bin"},
                              {"3.bias", "pytorch_model-00002-of-00002.bin"}};
  return f;
}

void ExpectSameError(const pickle::VmError& a, const pickle::VmError& b) {
  EXPECT_EQ(a.code, b.code);
  EXPECT_EQ(a.message, b.message);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.opcode, b.opcode);
  EXPECT_EQ(a.has_opcode, b.has_opcode);
  EXPECT_EQ(a.limit_name, b.limit_name);
  EXPECT_EQ(a.limit_value, b.limit_value);
}

void ExpectSameFacts(const FileFacts& a, const FileFacts& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.other_values.total, b.other_values.total);
  EXPECT_EQ(a.shard_index.present, b.shard_index.present);
  EXPECT_EQ(a.shard_index.has_total_size, b.shard_index.has_total_size);
  EXPECT_EQ(a.shard_index.total_size, b.shard_index.total_size);
  EXPECT_EQ(a.shard_index.weight_map, b.shard_index.weight_map);
  EXPECT_EQ(a.safetensors.valid, b.safetensors.valid);
  EXPECT_EQ(a.safetensors.tensors, b.safetensors.tensors);
  EXPECT_EQ(a.safetensors.data_bytes, b.safetensors.data_bytes);
  EXPECT_EQ(a.safetensors.header_length, b.safetensors.header_length);
  EXPECT_EQ(a.safetensors.has_metadata, b.safetensors.has_metadata);
  ASSERT_EQ(a.other_values.listed.size(), b.other_values.listed.size());
  for (size_t i = 0; i < a.other_values.listed.size(); ++i) {
    EXPECT_EQ(a.other_values.listed[i].name, b.other_values.listed[i].name);
    EXPECT_EQ(a.other_values.listed[i].type, b.other_values.listed[i].type);
    EXPECT_EQ(a.other_values.listed[i].offset, b.other_values.listed[i].offset);
  }
  ASSERT_EQ(a.errors.size(), b.errors.size());
  for (size_t i = 0; i < a.errors.size(); ++i) {
    EXPECT_EQ(a.errors[i].SerializeAsString(), b.errors[i].SerializeAsString());
  }
  ASSERT_EQ(a.members.size(), b.members.size());
  for (size_t mi = 0; mi < a.members.size(); ++mi) {
    const MemberFacts& ma = a.members[mi];
    const MemberFacts& mb = b.members[mi];
    EXPECT_EQ(ma.member, mb.member);
    EXPECT_EQ(ma.alternative, mb.alternative);
    EXPECT_EQ(ma.stream.trailing_offset, mb.stream.trailing_offset);
    EXPECT_EQ(ma.stream.trailing_bytes, mb.stream.trailing_bytes);
    ASSERT_EQ(ma.stream.stream_error.has_value(), mb.stream.stream_error.has_value());
    if (ma.stream.stream_error) ExpectSameError(*ma.stream.stream_error, *mb.stream.stream_error);
    ASSERT_EQ(ma.stream.pickles.size(), mb.stream.pickles.size());
    for (size_t pi = 0; pi < ma.stream.pickles.size(); ++pi) {
      const pickle::PickleFacts& pa = ma.stream.pickles[pi];
      const pickle::PickleFacts& pb = mb.stream.pickles[pi];
      EXPECT_EQ(pa.start, pb.start);
      EXPECT_EQ(pa.end, pb.end);
      EXPECT_EQ(pa.protocol, pb.protocol);
      EXPECT_EQ(pa.opcodes, pb.opcodes);
      EXPECT_EQ(pa.root, pb.root);
      EXPECT_EQ(pa.depth, pb.depth);
      EXPECT_EQ(pa.parent, pb.parent);
      EXPECT_EQ(pa.parent_node, pb.parent_node);
      ASSERT_EQ(pa.error.has_value(), pb.error.has_value());
      if (pa.error) ExpectSameError(*pa.error, *pb.error);
      ASSERT_EQ(pa.graph.nodes.size(), pb.graph.nodes.size());
      for (size_t i = 0; i < pa.graph.nodes.size(); ++i) {
        const pickle::Node& x = pa.graph.nodes[i];
        const pickle::Node& y = pb.graph.nodes[i];
        EXPECT_EQ(x.kind, y.kind);
        EXPECT_EQ(x.b, y.b);
        EXPECT_EQ(x.fits, y.fits);
        EXPECT_EQ(x.i, y.i);
        EXPECT_EQ(std::signbit(x.f), std::signbit(y.f));
        EXPECT_TRUE(x.f == y.f || (std::isnan(x.f) && std::isnan(y.f)));
        EXPECT_EQ(x.text, y.text);
        EXPECT_EQ(x.len, y.len);
        EXPECT_EQ(x.truncated, y.truncated);
        EXPECT_EQ(x.data_offset, y.data_offset);
        EXPECT_EQ(x.in_stream, y.in_stream);
        EXPECT_EQ(x.items, y.items);
        EXPECT_EQ(x.ref, y.ref);
        EXPECT_EQ(x.states, y.states);
        EXPECT_EQ(x.mutations, y.mutations);
      }
      ASSERT_EQ(pa.graph.globals.size(), pb.graph.globals.size());
      for (size_t i = 0; i < pa.graph.globals.size(); ++i) {
        const pickle::GlobalRef& x = pa.graph.globals[i];
        const pickle::GlobalRef& y = pb.graph.globals[i];
        EXPECT_EQ(x.module, y.module);
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.resolved_module, y.resolved_module);
        EXPECT_EQ(x.resolved_name, y.resolved_name);
        EXPECT_EQ(x.offset, y.offset);
        EXPECT_EQ(x.opcode, y.opcode);
        EXPECT_EQ(x.via, y.via);
        EXPECT_EQ(x.ext_code, y.ext_code);
        EXPECT_EQ(x.module_computed, y.module_computed);
        EXPECT_EQ(x.name_computed, y.name_computed);
      }
      ASSERT_EQ(pa.graph.calls.size(), pb.graph.calls.size());
      for (size_t i = 0; i < pa.graph.calls.size(); ++i) {
        const pickle::CallSite& x = pa.graph.calls[i];
        const pickle::CallSite& y = pb.graph.calls[i];
        EXPECT_EQ(x.op, y.op);
        EXPECT_EQ(x.offset, y.offset);
        EXPECT_EQ(x.opcode, y.opcode);
        EXPECT_EQ(x.callee, y.callee);
        EXPECT_EQ(x.args, y.args);
        EXPECT_EQ(x.kwargs, y.kwargs);
        EXPECT_EQ(x.result, y.result);
      }
    }
  }
}

std::string Payload(const FileFacts& facts) {
  wv1::Result r;
  EncodeFacts(facts, r.mutable_facts());
  r.mutable_layers()->set_seccomp(true);
  return r.SerializeAsString();
}

TEST(FactsCodecTest, RoundTripKeepsEveryField) {
  const FileFacts facts = EveryFieldFacts();
  absl::StatusOr<DecodedResult> back = DecodeResult(Payload(facts));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameFacts(facts, back->facts);
  EXPECT_TRUE(back->layers.seccomp());
}

TEST(FactsCodecTest, RoundTripOfRealVmFactsJudgesTheSame) {
  auto rules = rules::RuleSet::Default();
  for (std::string_view bytes :
       {std::string_view("cposix\nsystem\n(S'id'\ntR."), std::string_view("\x80\x02}q\x00.", 6),
        std::string_view("\x80\x02}q\x00", 5), std::string_view("PK\x03\x04", 4),
        std::string_view("")}) {
    const FileFacts facts = ExtractFacts(bytes, {});
    absl::StatusOr<DecodedResult> back = DecodeResult(Payload(facts));
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameFacts(facts, back->facts);
    EXPECT_EQ(app::JudgeFacts(facts, *rules).SerializeAsString(),
              app::JudgeFacts(back->facts, *rules).SerializeAsString());
  }
}

// A safetensors file: one F32 tensor of 2 elements; `end` is its data_offsets end.
std::string SafetensorsBytes(int end) {
  std::string header = absl::StrCat(
      "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
      "\"data_offsets\":[0,",
      end, "]}}");
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(8, '\0');
}

TEST(FactsCodecTest, SafetensorsFactsCrossTheJailAndAreJudged) {
  auto rules = rules::RuleSet::Default();
  const FileFacts valid = ExtractFacts(SafetensorsBytes(8), {});
  ASSERT_EQ(valid.format, "safetensors");
  ASSERT_TRUE(valid.safetensors.valid);
  EXPECT_EQ(valid.safetensors.tensors, 1u);
  EXPECT_EQ(valid.safetensors.data_bytes, 8u);
  EXPECT_TRUE(valid.safetensors.has_metadata);
  absl::StatusOr<DecodedResult> back = DecodeResult(Payload(valid));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameFacts(valid, back->facts);
  const v1::FileReport report = app::JudgeFacts(back->facts, *rules);
  EXPECT_EQ(report.verdict(), v1::VERDICT_SAFE);
  EXPECT_EQ(report.tensors().count(), 1u);
  EXPECT_EQ(report.tensors().bytes(), 8u);

  const FileFacts invalid = ExtractFacts(SafetensorsBytes(16), {});  // past the buffer
  ASSERT_EQ(invalid.format, "safetensors");
  EXPECT_FALSE(invalid.safetensors.valid);
  back = DecodeResult(Payload(invalid));
  ASSERT_TRUE(back.ok()) << back.status();
  const v1::FileReport bad = app::JudgeFacts(back->facts, *rules);
  EXPECT_EQ(bad.verdict(), v1::VERDICT_ERROR);
  ASSERT_EQ(bad.errors_size(), 1);
  EXPECT_EQ(bad.errors(0).code(), v1::ERROR_CODE_MALFORMED);
  EXPECT_TRUE(absl::StartsWith(bad.errors(0).message(), "safetensors: "))
      << bad.errors(0).message();
}

TEST(FactsCodecTest, InvalidSafetensorsWithoutAnErrorIsNeverSafe) {
  // A compromised worker claims the format but neither validity nor an error.
  FileFacts facts;
  facts.format = "safetensors";
  absl::StatusOr<DecodedResult> back = DecodeResult(Payload(facts));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(app::JudgeFacts(back->facts, *rules::RuleSet::Default()).verdict(), v1::VERDICT_ERROR);
}

// ------------------------------------------------------------ adversarial decoding

// A payload with one member, one pickle of `nodes` empty tuples, edited by `edit`.
template <typename Edit>
absl::Status DecodeEdited(Edit edit) {
  FileFacts facts = EveryFieldFacts();
  wv1::Result r;
  EncodeFacts(facts, r.mutable_facts());
  edit(r.mutable_facts()->mutable_members(0)->mutable_stream());
  return DecodeResult(r.SerializeAsString()).status();
}

void ExpectRejected(const absl::Status& s, std::string_view mentions) {
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), base::AbslView(mentions))) << s;
}

TEST(FactsCodecTest, SafetensorsFactsForAnotherFormatAreRejected) {
  FileFacts facts = ExtractFacts(SafetensorsBytes(8), {});
  wv1::Result r;
  EncodeFacts(facts, r.mutable_facts());
  r.mutable_facts()->set_format("pickle");
  ExpectRejected(DecodeResult(r.SerializeAsString()).status(), "safetensors");
}

// A compromised worker lying about the facts of the new readings: each lie is refused on the
// trusted side before anything is judged or hashed.
TEST(FactsCodecTest, LiesAboutTheNewFormatsAreRejected) {
  const auto decode = [](const std::function<void(wv1::FileFacts*)>& edit) {
    FileFacts facts;
    facts.format = "torchscript";
    facts.code_files.push_back(torch::CodeFile{"a/code/m.py", 10, 3, true, "abc"});
    wv1::Result r;
    EncodeFacts(facts, r.mutable_facts());
    edit(r.mutable_facts());
    return DecodeResult(r.SerializeAsString()).status();
  };
  EXPECT_TRUE(decode([](wv1::FileFacts*) {}).ok());
  // Code files on a file that is no TorchScript archive.
  ExpectRejected(decode([](wv1::FileFacts* f) { f->set_format("pickle"); }), "code files");
  // Content that is not the size the worker reports (the digest would describe other bytes).
  ExpectRejected(decode([](wv1::FileFacts* f) { f->mutable_code_files(0)->set_nbytes(4); }),
                 "code files");
  ExpectRejected(
      decode([](wv1::FileFacts* f) { f->mutable_code_files(0)->set_has_content(false); }),
      "code files");
  // More code bytes than the worker may carry.
  ExpectRejected(decode([](wv1::FileFacts* f) {
                   wv1::CodeFileFacts* big = f->add_code_files();
                   big->set_name("a/code/big.py");
                   big->set_has_content(true);
                   big->set_content(std::string(torch::kMaxCodeBytes, 'x'));
                   big->set_nbytes(torch::kMaxCodeBytes);
                 }),
                 "code files");
  // "Validated" GGUF or ONNX facts for another format, or a GGUF tensor count that differs
  // from the tensors sent: either would make an unread file SAFE.
  ExpectRejected(decode([](wv1::FileFacts* f) {
                   f->clear_code_files();
                   f->mutable_gguf()->set_valid(true);
                 }),
                 "GGUF");
  ExpectRejected(decode([](wv1::FileFacts* f) {
                   f->clear_code_files();
                   f->set_format("gguf");
                   f->mutable_gguf()->set_valid(true);
                   f->mutable_gguf()->set_tensors(5);
                 }),
                 "GGUF");
  ExpectRejected(decode([](wv1::FileFacts* f) {
                   f->clear_code_files();
                   f->mutable_onnx()->set_valid(true);
                 }),
                 "ONNX");
  ExpectRejected(decode([](wv1::FileFacts* f) {
                   f->clear_code_files();
                   f->set_format("onnx");
                   f->mutable_onnx()->set_valid(false);
                 }),
                 "ONNX");
  // An anomaly of a category no reader reports.
  ExpectRejected(decode([](wv1::FileFacts* f) {
                   wv1::ContainerAnomaly* a = f->add_anomalies();
                   a->set_kind("x");
                   a->set_category("gguf");
                 }),
                 "category");
}

TEST(FactsCodecTest, MoreOtherValuesListedThanCountedIsRejected) {
  FileFacts facts = EveryFieldFacts();
  wv1::Result r;
  EncodeFacts(facts, r.mutable_facts());
  r.mutable_facts()->set_other_values_total(1);
  ExpectRejected(DecodeResult(r.SerializeAsString()).status(), "other values");
}

TEST(FactsCodecTest, ShardFileNameOutsideTheIndexDirectoryIsRejected) {
  for (const char* file : {"../secret.bin", "/etc/passwd", "a/b.bin", "..", ""}) {
    FileFacts facts = EveryFieldFacts();
    wv1::Result r;
    EncodeFacts(facts, r.mutable_facts());
    r.mutable_facts()->mutable_weight_map(0)->set_file(file);
    ExpectRejected(DecodeResult(r.SerializeAsString()).status(), "weight map");
  }
}

TEST(FactsCodecTest, DuplicateWeightMapNameIsRejected) {
  FileFacts facts = EveryFieldFacts();
  wv1::Result r;
  EncodeFacts(facts, r.mutable_facts());
  r.mutable_facts()->mutable_weight_map(1)->set_name("0.weight");
  ExpectRejected(DecodeResult(r.SerializeAsString()).status(), "a name twice");
}

TEST(FactsCodecTest, GarbageIsNotAResult) {
  ExpectRejected(DecodeResult(std::string(64, '\xff')).status(), "not a worker.v1.Result");
}

TEST(FactsCodecTest, ResultWithoutFactsIsRejected) {
  ExpectRejected(DecodeResult("").status(), "no facts");
}

TEST(FactsCodecTest, UnknownNodeKind) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_nodes(0)->set_kind(16);
                 }),
                 "is not a pickle::Kind");
}

TEST(FactsCodecTest, ItemOutOfRange) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_nodes(2)->add_items(4);
                 }),
                 "inconsistent graph");
}

TEST(FactsCodecTest, GlobalRefOutOfRange) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_nodes(1)->set_ref(1);
                 }),
                 "inconsistent graph");
}

TEST(FactsCodecTest, CallSiteNodeOutOfRange) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_calls(0)->set_args(0xfffffffe);
                 }),
                 "inconsistent graph");
}

TEST(FactsCodecTest, MutationOutOfRange) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_nodes(3)->add_mutations(2);
                 }),
                 "inconsistent graph");
}

TEST(FactsCodecTest, UnknownViaAndCallOp) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_globals(0)->set_via(5);
                 }),
                 "is not a pickle::Via");
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_calls(0)->set_op(10);
                 }),
                 "is not a pickle::CallOp");
}

TEST(FactsCodecTest, OpcodeThatIsNotAByte) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_graph()->mutable_calls(0)->set_opcode(256);
                 }),
                 "is not a byte");
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) {
                   s->mutable_pickles(0)->mutable_error()->set_opcode(1000);
                 }),
                 "is not a byte");
}

TEST(FactsCodecTest, UnknownVmErrorCode) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) { s->mutable_stream_error()->set_code(4); }),
                 "is not a VmError::Code");
}

// A hostile worker's error code: a number the enum lacks, none, or a code only the trusted
// side gives (a worker that says "cancelled" or "digest_mismatch" is lying).
TEST(FactsCodecTest, ErrorCodeAWorkerDoesNotGiveIsRejected) {
  for (uint32_t code : {uint32_t{v1::ERROR_CODE_UNSPECIFIED}, uint32_t{v1::ERROR_CODE_CANCELLED},
                        uint32_t{v1::ERROR_CODE_DIGEST_MISMATCH}, uint32_t{v1::ERROR_CODE_SANDBOX},
                        uint32_t{v1::ERROR_CODE_IO}, 13u, 0xffffffffu}) {
    wv1::Result r;
    EncodeFacts(EveryFieldFacts(), r.mutable_facts());
    r.mutable_facts()->mutable_errors(0)->set_code(code);
    ExpectRejected(DecodeResult(r.SerializeAsString()).status(),
                   absl::StrCat("error 0: code ", code, " is not an error code a worker gives"));
  }
  for (v1::ErrorCode code :
       {v1::ERROR_CODE_MALFORMED, v1::ERROR_CODE_UNSUPPORTED, v1::ERROR_CODE_LIMIT,
        v1::ERROR_CODE_NOT_PRESENT}) {
    FileFacts facts = EveryFieldFacts();
    facts.errors[0].set_code(code);
    absl::StatusOr<DecodedResult> back = DecodeResult(Payload(facts));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->facts.errors[0].code(), code);
  }
}

TEST(FactsCodecTest, RootOutOfRange) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) { s->mutable_pickles(0)->set_root(4); }),
                 "root node");
}

TEST(FactsCodecTest, NestedPickleWhoseParentIsNotEarlier) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) { s->mutable_pickles(1)->set_parent(1); }),
                 "not an earlier pickle");
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) { s->mutable_pickles(1)->set_parent(-7); }),
                 "not an earlier pickle");
}

TEST(FactsCodecTest, NestedPickleParentNodeOutOfRange) {
  ExpectRejected(
      DecodeEdited([](wv1::StreamFacts* s) { s->mutable_pickles(1)->set_parent_node(4); }),
      "parent node");
}

TEST(FactsCodecTest, NestedDepthThatSkipsALevel) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) { s->mutable_pickles(1)->set_depth(3); }),
                 "nested depth");
}

TEST(FactsCodecTest, TopLevelPickleWithAParent) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) { s->mutable_pickles(0)->set_parent(0); }),
                 "top-level pickle with a parent");
}

TEST(FactsCodecTest, ProtocolOutOfRange) {
  ExpectRejected(DecodeEdited([](wv1::StreamFacts* s) { s->mutable_pickles(0)->set_protocol(-2); }),
                 "protocol");
}

TEST(FactsCodecTest, ListingOverItsCap) {
  wv1::Result r;
  r.mutable_facts();
  r.set_trace(std::string(kMaxTraceBytes + 1, 'x'));
  ExpectRejected(DecodeResult(r.SerializeAsString()).status(), "kMaxTraceBytes");
}

// `field` (wire type 2) holding `body`.
std::string Field(int field, const std::string& body) {
  std::string out(1, static_cast<char>(field << 3 | 2));
  uint64_t n = body.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + body;
}

// A Result whose one graph holds `nodes` empty nodes (2 wire bytes each).
std::string PayloadWithEmptyNodes(uint64_t nodes) {
  std::string graph;
  graph.reserve(2 * nodes);
  for (uint64_t i = 0; i < nodes; ++i) graph.append("\x0a\x00", 2);
  // Result.facts(1) > FileFacts.members(3) > MemberFacts.stream(2) > StreamFacts.pickles(1)
  // > PickleFacts.graph(5); PickleFacts also needs root/parent_node = none.
  std::string pickle = Field(5, graph);
  pickle += std::string("\x30\xff\xff\xff\xff\x0f", 6);                       // root = 0xFFFFFFFF
  pickle += std::string("\x48\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);  // parent = -1
  pickle += std::string("\x50\xff\xff\xff\xff\x0f", 6);  // parent_node = 0xFFFFFFFF
  return Field(1, Field(3, Field(2, Field(1, pickle))));
}

// A Result whose one graph holds an empty node 0 and a node 1 with `body` (Node fields).
std::string PayloadWithNode(const std::string& body) {
  std::string graph = std::string("\x0a\x00", 2) + Field(1, body);
  std::string pickle = Field(5, graph);
  pickle += std::string("\x30\xff\xff\xff\xff\x0f", 6);
  pickle += std::string("\x48\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
  pickle += std::string("\x50\xff\xff\xff\xff\x0f", 6);
  return Field(1, Field(3, Field(2, Field(1, pickle))));
}

// Node.items (12) packed: `n` references to node 0, one wire byte each.
std::string PackedItems(uint64_t n) { return Field(12, std::string(n, '\0')); }

uint64_t AdmittedValues(std::string payload, uint64_t max_values = kMaxFrameValues) {
  uint64_t seen = 0;
  DecodeLimits limits;
  limits.max_values = max_values;
  limits.admit = [&](uint64_t, uint64_t values) {
    seen = values;
    return absl::ResourceExhaustedError("stop (facts_memory)");
  };
  EXPECT_TRUE(absl::IsResourceExhausted(DecodeResult(&payload, limits).status()));
  return seen;
}

TEST(FactsCodecTest, ListItemsAreCountedOnTheWireAndChargedAsValues) {
  // 2 nodes + the member + the pickle = 4 values, plus the items, kListItemsPerValue a value.
  EXPECT_EQ(AdmittedValues(PayloadWithNode("")), 4u);
  EXPECT_EQ(AdmittedValues(PayloadWithNode(PackedItems(16 * 1000))),
            4u + 16 * 1000 / kListItemsPerValue);
  EXPECT_EQ(AdmittedValues(PayloadWithNode(PackedItems(16 * 1000 + 1))),
            4u + 16 * 1000 / kListItemsPerValue + 1);
  // Multi-byte varints count once; states (14) and mutations (15) count like items.
  const std::string multi = Field(12, std::string("\x80\x01\x81\x01\x00", 5));
  const std::string states = Field(14, std::string(kListItemsPerValue, '\0'));
  const std::string mutations = Field(15, std::string(kListItemsPerValue, '\0'));
  EXPECT_EQ(AdmittedValues(PayloadWithNode(multi + states + mutations)), 4u + 3);
  // Unpacked elements (tag 12 varint, one each) count too.
  std::string unpacked;
  for (uint64_t i = 0; i < 2 * kListItemsPerValue; ++i) unpacked.append("\x60\x00", 2);
  EXPECT_EQ(AdmittedValues(PayloadWithNode(unpacked)), 4u + 2);
  // A tensor's shape and stride (FileFacts.tensors(5) > TensorFact.shape(4) / stride(5)).
  const std::string tensor = Field(5, Field(4, std::string(kListItemsPerValue, '\x01')) +
                                          Field(5, std::string(kListItemsPerValue, '\x01')));
  EXPECT_EQ(AdmittedValues(Field(1, tensor)), 1u + 4);  // int64: two items an element
}

TEST(FactsCodecTest, ManyPackedItemsAreRefusedPastTheValueLimitBeforeAnythingIsBuilt) {
  std::string payload = PayloadWithNode(PackedItems(16 * 1000));
  DecodeLimits limits;
  limits.max_values = 1000;  // 4 + 1000 values
  const absl::Status over = DecodeResult(&payload, limits).status();
  EXPECT_TRUE(absl::IsResourceExhausted(over)) << over;
  EXPECT_TRUE(absl::StrContains(over.message(), "16000 list items")) << over;
  EXPECT_TRUE(absl::StrContains(over.message(), "(max_frame_values)")) << over;
  EXPECT_FALSE(payload.empty());  // refused before parsing
  // The whole frame cap in one-byte items stays within the protocol's value cap, so the worker
  // (which checks the same count) can always send it; a lower per-job limit refuses it.
  EXPECT_LE(ListItemValues(kMaxFrameBytes), kMaxFrameValues);
}

TEST(FactsCodecTest, AnUnterminatedPackedVarintIsMalformed) {
  const std::string cut = Field(12, std::string("\x00\x80", 2));
  const absl::Status s = DecodeResult(PayloadWithNode(cut)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

// A hostile worker's frame (the worker is jailed because it may be compromised): fields
// worker.proto does not have, or known ones with another wire type. protobuf would keep each as
// an unknown field, counted nowhere: a 64 MiB frame of 22.4M of them decoded with peak RSS
// +524,180 kB (~24 bytes a field), while the facts budget was charged the 64 MiB frame and 3
// values. Refused before anything is parsed, at every level, including messages the count used
// to skip whole.
TEST(FactsCodecTest, FieldsOutsideTheSchemaAreRefusedBeforeAnythingIsBuilt) {
  std::string unknown;  // field 100, varint 0: 3 wire bytes each
  for (int i = 0; i < 1000; ++i) unknown.append("\xa0\x06\x00", 3);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"at the Result", PayloadWithEmptyNodes(1) + unknown},
      {"in a node", PayloadWithNode(unknown)},
      {"in a scan error", Field(1, Field(2, unknown))},
      {"a node's kind as bytes", PayloadWithNode(Field(1, "x"))},
      {"a node's items as fixed32", PayloadWithNode(std::string("\x65\0\0\0\0", 5))},
  };
  for (auto [what, payload] : cases) {
    const absl::Status s = DecodeResult(&payload, DecodeLimits{}).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << what << ": " << s;
    EXPECT_FALSE(payload.empty()) << what << ": it was parsed";
  }
  // The same frames without the foreign fields decode.
  EXPECT_TRUE(DecodeResult(PayloadWithEmptyNodes(1)).ok());
  EXPECT_TRUE(DecodeResult(PayloadWithNode("")).ok());
}

// Peak RSS (VmHWM) in kB, or 0.
uint64_t PeakRssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

// The measurement behind kListItemsPerValue: in a child (so that nothing else has raised the
// peak), reset the peak RSS (clear_refs 5), decode one node with 8M one-byte items, and compare.
TEST(FactsCodecTest, DecodedListItemsCostWhatTheyAreCharged) {
  constexpr uint64_t kItems = 8'000'000;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string payload = PayloadWithNode(PackedItems(kItems));
    uint64_t delta_kb = 0;
    if (std::ofstream("/proc/self/clear_refs") << "5") {
      const uint64_t before = PeakRssKb();
      const bool ok = DecodeResult(payload).ok();
      delta_kb = ok ? PeakRssKb() - before : 0;
    }
    (void)!::write(fds[1], &delta_kb, sizeof(delta_kb));
    ::_exit(0);
  }
  ::close(fds[1]);
  uint64_t delta_kb = 0;
  const bool got = ::read(fds[0], &delta_kb, sizeof(delta_kb)) == sizeof(delta_kb);
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(got);
  if (delta_kb == 0) GTEST_SKIP() << "no /proc/self/clear_refs, or the decode failed";
  const double per_item = static_cast<double>(delta_kb) * 1024 / kItems;
  std::printf("decoded list item: %.1f bytes (peak RSS +%llu kB for %llu items)\n", per_item,
              static_cast<unsigned long long>(delta_kb), static_cast<unsigned long long>(kItems));
  EXPECT_LE(per_item, 400.0 / kListItemsPerValue);
  EXPECT_GE(per_item, 4.0);  // the item was really built
}

TEST(FactsCodecTest, ValuesAreCountedOnTheWireBeforeAnythingIsBuilt) {
  absl::StatusOr<DecodedResult> small = DecodeResult(PayloadWithEmptyNodes(1000));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->facts.members.at(0).stream.pickles.at(0).graph.nodes.size(), 1000u);
  // kMaxFrameValues nodes plus the member and the pickle: two over the limit.
  const absl::Status over = DecodeResult(PayloadWithEmptyNodes(kMaxFrameValues)).status();
  EXPECT_TRUE(absl::IsResourceExhausted(over)) << over;
  EXPECT_TRUE(absl::StrContains(over.message(), "max_frame_values")) << over;
}

TEST(FactsCodecTest, ALowerValueLimitAndTheAdmitHookSeeTheCountBeforeAnythingIsBuilt) {
  std::string payload = PayloadWithEmptyNodes(1000);
  DecodeLimits limits;
  limits.max_values = 1001;  // 1000 nodes + the member + the pickle = 1002
  absl::StatusOr<DecodedResult> over = DecodeResult(&payload, limits);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_TRUE(absl::StrContains(over.status().message(), "the limit is 1001")) << over.status();
  EXPECT_FALSE(payload.empty());  // refused before parsing: nothing was freed

  limits.max_values = 1002;
  uint64_t seen_bytes = 0;
  uint64_t seen_values = 0;
  limits.admit = [&](uint64_t bytes, uint64_t values) {
    seen_bytes = bytes;
    seen_values = values;
    return absl::ResourceExhaustedError("no room (facts_memory)");
  };
  const uint64_t size = payload.size();
  EXPECT_TRUE(absl::IsResourceExhausted(DecodeResult(&payload, limits).status()));
  EXPECT_EQ(seen_bytes, size);
  EXPECT_EQ(seen_values, 1002u);

  limits.admit = [](uint64_t, uint64_t) { return absl::OkStatus(); };
  absl::StatusOr<DecodedResult> ok = DecodeResult(&payload, limits);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->facts.members.at(0).stream.pickles.at(0).graph.nodes.size(), 1000u);
  EXPECT_TRUE(payload.empty());  // freed once parsed
  EXPECT_EQ(payload.capacity() < size, true);
}

TEST(FactsCodecTest, CountFrameValuesCountsWhatTheDecoderCounts) {
  const FileFacts facts = EveryFieldFacts();
  // 1 error + 1 member + 2 pickles + 4 nodes + 1 global + 2 calls + 2 other values + 2
  // weight map entries, and one for the nodes' list items (fewer than kListItemsPerValue).
  EXPECT_EQ(CountFrameValues(facts), 16u);
  EXPECT_EQ(AdmittedValues(Payload(facts)), CountFrameValues(facts));
}

// A real per-channel quantized checkpoint (torch 1.13's quantize_per_channel): its facts carry
// the scales and zero points as ChannelTensors.
FileFacts QuantizedFacts() {
  std::ifstream in(
      std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/quantized/torch_q_per_channel.pt",
      std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ExtractFacts(bytes, {});
}

TEST(FactsCodecTest, QuantizedTensorsKeepTheirParametersAndAreCountedAsTheDecoderCounts) {
  const FileFacts facts = QuantizedFacts();
  ASSERT_EQ(facts.tensors.size(), 3u);
  for (const torch::TensorFact& t : facts.tensors) ASSERT_EQ(t.qchannel.size(), 2u) << t.name;
  absl::StatusOr<DecodedResult> back = DecodeResult(Payload(facts));
  ASSERT_TRUE(back.ok()) << back.status();
  for (size_t i = 0; i < facts.tensors.size(); ++i) {
    const torch::TensorFact& a = facts.tensors[i];
    const torch::TensorFact& b = back->facts.tensors[i];
    EXPECT_EQ(a.qscheme, b.qscheme);
    EXPECT_EQ(a.q_axis, b.q_axis);
    ASSERT_EQ(b.qchannel.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(a.qchannel[k].name, b.qchannel[k].name);
      EXPECT_EQ(a.qchannel[k].dtype, b.qchannel[k].dtype);
      EXPECT_EQ(a.qchannel[k].shape, b.qchannel[k].shape);
      EXPECT_EQ(a.qchannel[k].stride, b.qchannel[k].stride);
      EXPECT_EQ(a.qchannel[k].storage, b.qchannel[k].storage);
      EXPECT_EQ(a.qchannel[k].storage_offset, b.qchannel[k].storage_offset);
    }
  }
  // The worker's frame budget counts the ChannelTensors exactly as the decoder admits them.
  EXPECT_EQ(AdmittedValues(Payload(facts)), CountFrameValues(facts));
}

TEST(FactsCodecTest, AHostileWorkersPerChannelParametersAreRejected) {
  // What a compromised worker could claim: parameters on a dense tensor, three of them, a
  // storage that is not in the facts, an unknown dtype, sizes without strides.
  const FileFacts clean = QuantizedFacts();
  auto rejected = [&](auto mutate) {
    wv1::Result r;
    EncodeFacts(clean, r.mutable_facts());
    mutate(r.mutable_facts()->mutable_tensors(0));
    return !DecodeResult(r.SerializeAsString()).ok();
  };
  EXPECT_TRUE(rejected([](wv1::TensorFact* t) { t->set_kind(0); }));
  EXPECT_TRUE(rejected([](wv1::TensorFact* t) { *t->add_qchannel() = t->qchannel(0); }));
  EXPECT_TRUE(rejected([](wv1::TensorFact* t) { t->mutable_qchannel(1)->set_storage(99); }));
  EXPECT_TRUE(rejected([](wv1::TensorFact* t) { t->mutable_qchannel(1)->set_storage(-1); }));
  EXPECT_TRUE(rejected([](wv1::TensorFact* t) { t->mutable_qchannel(0)->set_dtype("float128"); }));
  EXPECT_TRUE(rejected([](wv1::TensorFact* t) { t->mutable_qchannel(0)->add_shape(2); }));
  EXPECT_FALSE(rejected([](wv1::TensorFact*) {}));
  // A declared quantization method that is not a plain name (it is shown in reports).
  wv1::Result r;
  EncodeFacts(clean, r.mutable_facts());
  r.mutable_facts()->set_quant_method("gptq\x1b[2J");
  EXPECT_FALSE(DecodeResult(r.SerializeAsString()).ok());
}

TEST(FactsCodecTest, EveryTruncationOfAValidPayloadIsRejectedOrConsistent) {
  // No prefix may crash the decoder; any prefix that parses must still be consistent.
  const std::string payload = Payload(EveryFieldFacts());
  for (size_t n = 0; n < payload.size(); ++n) {
    absl::StatusOr<DecodedResult> r = DecodeResult(std::string_view(payload.data(), n));
    if (r.ok()) {
      for (const MemberFacts& m : r->facts.members) {
        for (const pickle::PickleFacts& p : m.stream.pickles) {
          EXPECT_FALSE(pickle::FindInconsistency(p.graph).has_value());
        }
      }
    }
  }
}

TEST(FactsCodecTest, EveryByteFlipIsRejectedOrConsistent) {
  const std::string payload = Payload(EveryFieldFacts());
  for (size_t i = 0; i < payload.size(); ++i) {
    for (unsigned char x : {0x01, 0x80, 0xff}) {
      std::string bad = payload;
      bad[i] = static_cast<char>(bad[i] ^ x);
      absl::StatusOr<DecodedResult> r = DecodeResult(bad);
      if (!r.ok()) continue;
      for (const MemberFacts& m : r->facts.members) {
        for (size_t pi = 0; pi < m.stream.pickles.size(); ++pi) {
          const pickle::PickleFacts& p = m.stream.pickles[pi];
          EXPECT_FALSE(pickle::FindInconsistency(p.graph).has_value());
          EXPECT_TRUE(p.root == kNoNode || p.root < p.graph.nodes.size());
          if (p.depth > 0) {
            EXPECT_LT(p.parent, static_cast<int32_t>(pi));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ckptscan::sandbox
