#include "core/onnx/onnx_check.h"

#include <string>
#include <string_view>
#include <vector>

#include "base/limit_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx.pb.h"

namespace ckptscan::onnx_check {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

onnx::ModelProto Relu() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("test");
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("g");
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Relu");
  n->set_name("relu");
  n->add_input("x");
  n->add_output("y");
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_float_data(1);
  w->add_float_data(2);
  return m;
}

void External(onnx::TensorProto* t, const std::string& location, const std::string& offset = "",
              const std::string& length = "") {
  t->clear_float_data();
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    onnx::StringStringEntryProto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  if (!offset.empty()) add("offset", offset);
  if (!length.empty()) add("length", length);
}

std::vector<std::string> Kinds(const onnx::ModelProto& m) {
  const std::string bytes = m.SerializeAsString();
  EXPECT_TRUE(LooksLikeModel(bytes));
  absl::StatusOr<Model> r = Read(bytes, Limits{});
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<std::string> out;
  if (r.ok()) {
    for (const Finding& f : r->findings) out.push_back(f.kind);
  }
  return out;
}

// The error a model is refused with, or the reason it is not verified, or "ok".
std::string ErrorOf(std::string_view bytes, Limits limits = {}) {
  absl::StatusOr<Model> r = Read(bytes, limits);
  if (!r.ok()) return std::string(r.status().message());
  return r->unverified.ok() ? "ok" : std::string(r->unverified.message());
}
std::string ErrorOf(const onnx::ModelProto& m, Limits limits = {}) {
  return ErrorOf(m.SerializeAsString(), limits);
}

TEST(OnnxCheckTest, PlainModelHasNoFindings) {
  EXPECT_THAT(Kinds(Relu()), IsEmpty());
  absl::StatusOr<Model> r = Read(Relu().SerializeAsString(), Limits{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->nodes, 1u);
  EXPECT_EQ(r->graphs, 1u);
  EXPECT_EQ(r->ir_version, 8);
}

TEST(OnnxCheckTest, ExternalDataLocations) {
  onnx::ModelProto m = Relu();
  External(m.mutable_graph()->mutable_initializer(0), "weights.bin", "0", "8");
  EXPECT_THAT(Kinds(m), ElementsAre("external_data"));
  for (const char* bad :
       {"/etc/passwd", "../x.bin", "a/../../x", "..", "a\\..\\b", "C:x", "sub/..\\x"}) {
    m = Relu();
    External(m.mutable_graph()->mutable_initializer(0), bad);
    EXPECT_THAT(Kinds(m), ElementsAre("external_data_path")) << bad;
  }
  m = Relu();
  External(m.mutable_graph()->mutable_initializer(0), std::string("a\0b", 3));
  EXPECT_THAT(Kinds(m), ElementsAre("external_data_path"));
  // "..." and "a..b" are names, not parent references.
  m = Relu();
  External(m.mutable_graph()->mutable_initializer(0), "a..b/...");
  EXPECT_THAT(Kinds(m), ElementsAre("external_data"));
}

TEST(OnnxCheckTest, ExternalDataRangesAreChecked) {
  for (const auto& [offset, length] : std::vector<std::pair<std::string, std::string>>{
           {"-1", "4"},
           {"0", "-4"},
           {"0x10", "4"},
           {"1e3", "4"},
           {"9223372036854775808", "1"},
           {"9223372036854775807", "9223372036854775807"},
           {" 1", "1"}}) {
    onnx::ModelProto m = Relu();
    External(m.mutable_graph()->mutable_initializer(0), "w.bin", offset, length);
    EXPECT_NE(ErrorOf(m), "ok") << offset << " " << length;
  }
  onnx::ModelProto m = Relu();
  External(m.mutable_graph()->mutable_initializer(0), "");
  EXPECT_THAT(ErrorOf(m), HasSubstr("without a location"));
  // Two locations, the escaping one first: onnx keeps the last (harmless) copy, a reader that
  // keeps the first opens /etc/passwd. Refused, whichever copy comes first.
  for (bool evil_first : {true, false}) {
    m = Relu();
    onnx::TensorProto* t = m.mutable_graph()->mutable_initializer(0);
    External(t, evil_first ? "/etc/passwd" : "w.bin");
    onnx::StringStringEntryProto* e = t->add_external_data();
    e->set_key("location");
    e->set_value(evil_first ? "w.bin" : "/etc/passwd");
    EXPECT_THAT(ErrorOf(m), HasSubstr("location given twice")) << evil_first;
  }
}

TEST(OnnxCheckTest, CustomDomainsInSubgraphsAndFunctions) {
  onnx::ModelProto m = Relu();
  onnx::NodeProto* iff = m.mutable_graph()->add_node();
  iff->set_op_type("If");
  onnx::AttributeProto* a = iff->add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::NodeProto* inner = a->mutable_g()->add_node();
  inner->set_op_type("Evil");
  inner->set_domain("com.example.native");
  onnx::NodeProto* ml = m.mutable_graph()->add_node();
  ml->set_op_type("TreeEnsembleClassifier");
  ml->set_domain("ai.onnx.ml");
  EXPECT_THAT(Kinds(m), ElementsAre("custom_domain"));
  // A node naming a function the model defines is not native code.
  onnx::ModelProto f = Relu();
  onnx::NodeProto* call = f.mutable_graph()->add_node();
  call->set_op_type("MyFn");
  call->set_domain("local");
  onnx::FunctionProto* fn = f.add_functions();
  fn->set_name("MyFn");
  fn->set_domain("local");
  fn->add_node()->set_op_type("Relu");
  EXPECT_THAT(Kinds(f), IsEmpty());
}

TEST(OnnxCheckTest, DeepSubgraphsHitTheLimitWithoutRecursion) {
  onnx::ModelProto m = Relu();
  onnx::GraphProto* g = m.mutable_graph();
  for (int i = 0; i < 20; ++i) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type("Loop");
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("body");
    g = a->mutable_g();
  }
  EXPECT_EQ(ErrorOf(m), "ok");
  Limits l;
  l.max_graph_depth = 10;
  EXPECT_THAT(ErrorOf(m, l), HasSubstr("max_graph_depth"));
  l = Limits{};
  l.max_nodes = 5;
  EXPECT_THAT(ErrorOf(m, l), HasSubstr("max_onnx_nodes"));
}

TEST(OnnxCheckTest, TheRuntimesMemoryAddressMarkerIsFlagged) {
  // onnxruntime reads `offset` as a pointer when the location is its in-memory marker.
  onnx::ModelProto m = Relu();
  External(m.mutable_graph()->mutable_initializer(0), "*/_ORT_MEM_ADDR_/*", "4096", "8");
  EXPECT_THAT(Kinds(m), ElementsAre("external_data_path"));
  onnx::ModelProto near = Relu();
  External(near.mutable_graph()->mutable_initializer(0), "_ORT_MEM_ADDR_.bin", "0", "8");
  EXPECT_THAT(Kinds(near), ElementsAre("external_data"));
}

TEST(OnnxCheckTest, FunctionDefaultAttributesAreWalked) {
  // FunctionProto.attribute_proto (onnx 1.13+): a default value whose tensor, sparse tensor or
  // graph names external data is read by the runtime like any initializer.
  onnx::ModelProto m = Relu();
  onnx::FunctionProto* f = m.add_functions();
  f->set_domain("local");
  f->set_name("F");
  onnx::AttributeProto* a = f->add_attribute_proto();
  a->set_name("alpha");
  a->set_type(onnx::AttributeProto::TENSOR);
  External(a->mutable_t(), "../../etc/passwd");
  EXPECT_THAT(Kinds(m), ElementsAre("external_data_path"));

  onnx::ModelProto sparse = Relu();
  onnx::AttributeProto* s = sparse.add_functions()->add_attribute_proto();
  s->set_type(onnx::AttributeProto::SPARSE_TENSOR);
  External(s->mutable_sparse_tensor()->mutable_values(), "/etc/shadow");
  EXPECT_THAT(Kinds(sparse), ElementsAre("external_data_path"));

  onnx::ModelProto graph = Relu();
  onnx::AttributeProto* g = graph.add_functions()->add_attribute_proto();
  g->set_type(onnx::AttributeProto::GRAPH);
  External(g->mutable_g()->add_initializer(), "/proc/self/environ");
  EXPECT_THAT(Kinds(graph), ElementsAre("external_data_path"));
}

TEST(OnnxCheckTest, UnknownFieldsAnywhereAreNotVerified) {
  // A field onnx 1.17 does not know, deep in the tree: kept by protobuf as an unknown field,
  // which a later runtime may read. Not verified, whatever the findings.
  onnx::ModelProto m = Relu();
  m.mutable_graph()->mutable_initializer(0)->GetReflection()->MutableUnknownFields(
      m.mutable_graph()->mutable_initializer(0))->AddLengthDelimited(99, "x");
  EXPECT_THAT(ErrorOf(m), HasSubstr("does not know"));
  EXPECT_THAT(ErrorOf(m), HasSubstr("initializer[0]"));
  // An enum value the schema lacks is an unknown field too (proto2).
  onnx::ModelProto e = Relu();
  std::string bytes = e.SerializeAsString();
  onnx::AttributeProto odd;
  odd.set_name("k");
  odd.GetReflection()->MutableUnknownFields(&odd)->AddVarint(20, 99);  // type 99
  onnx::GraphProto g;
  *g.add_node() = e.graph().node(0);
  *g.mutable_node(0)->add_attribute() = odd;
  *e.mutable_graph() = g;
  EXPECT_THAT(ErrorOf(e), HasSubstr("does not know"));
  // A known field with another wire type is unknown to the decoder (ir_version as bytes).
  const std::string wrong = std::string("\x0a\x01x", 3) + Relu().SerializeAsString();
  EXPECT_TRUE(LooksLikeModel(wrong));
  EXPECT_THAT(ErrorOf(wrong), HasSubstr("does not know"));
  EXPECT_EQ(ErrorOf(Relu()), "ok");
}

TEST(OnnxCheckTest, ModelsInAnyFieldOrderAreRecognised) {
  onnx::ModelProto m = Relu();
  onnx::ModelProto graph_only;
  *graph_only.mutable_graph() = m.graph();
  onnx::ModelProto rest = m;
  rest.clear_graph();
  // The graph first (0x3a), then the rest: the same model to protobuf.
  const std::string graph_first = graph_only.SerializeAsString() + rest.SerializeAsString();
  EXPECT_NE(graph_first[0], '\x08');
  EXPECT_TRUE(LooksLikeModel(graph_first));
  EXPECT_EQ(ErrorOf(graph_first), "ok");
  // A 10-byte unknown field first (what pickle.load reads as opcodes): recognised, not verified.
  const std::string unknown_first = std::string("\xfa\x01\x07JUNKJUN", 10) + m.SerializeAsString();
  EXPECT_TRUE(LooksLikeModel(unknown_first));
  EXPECT_THAT(ErrorOf(unknown_first), HasSubstr("does not know"));
  // A group, closed: skipped by the decoder like any unknown field.
  const std::string group = std::string("\x7b\x08\x01\x7c", 4) + m.SerializeAsString();
  EXPECT_TRUE(LooksLikeModel(group));
  // Not models: no graph, training_info or function at the top level; an unclosed group; a
  // length past the end; field number 0; wire types 6 and 7; a tag of six bytes.
  EXPECT_FALSE(LooksLikeModel(std::string("\x12\x01x", 3)));
  EXPECT_FALSE(LooksLikeModel(std::string("\x7b", 1) + graph_only.SerializeAsString()));
  EXPECT_FALSE(LooksLikeModel(std::string("\x3a\x7f\x00", 3)));
  EXPECT_FALSE(LooksLikeModel(std::string("\x02\x00", 2) + graph_only.SerializeAsString()));
  EXPECT_FALSE(LooksLikeModel(std::string("\x3e", 1) + graph_only.SerializeAsString()));
  EXPECT_FALSE(LooksLikeModel(std::string("\x3f", 1) + graph_only.SerializeAsString()));
  EXPECT_FALSE(
      LooksLikeModel(std::string("\xba\x80\x80\x80\x80\x00", 6) + graph_only.SerializeAsString()));
  // JSON and text are never models (a JSON object's '{' opens a group its '}' cannot close).
  EXPECT_FALSE(LooksLikeModel("{\"weight_map\": {}}"));
  EXPECT_FALSE(LooksLikeModel("hello world\n"));
}

TEST(OnnxCheckTest, NotAModel) {
  EXPECT_FALSE(LooksLikeModel(""));
  EXPECT_FALSE(LooksLikeModel("\x80\x02"));
  EXPECT_FALSE(LooksLikeModel(std::string("\x08\x80\x80", 3)));  // the varint never ends
  // A large ir_version is still a model to onnx (found by onnx_differential).
  onnx::ModelProto big = Relu();
  big.set_ir_version(int64_t{1} << 40);
  EXPECT_TRUE(LooksLikeModel(big.SerializeAsString()));
  EXPECT_TRUE(Read(big.SerializeAsString(), Limits{}).ok());
  // A protobuf message has no end marker: a cut between two fields is a smaller model of its
  // own (what onnxruntime would load too). Every other cut fails; none crashes.
  const std::string bytes = Relu().SerializeAsString();
  size_t refused = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string_view cut = std::string_view(bytes).substr(0, n);
    absl::StatusOr<Model> r = Read(cut, Limits{});
    onnx::ModelProto reparsed;
    const bool whole_model = reparsed.ParseFromArray(cut.data(), static_cast<int>(cut.size())) &&
                             reparsed.SerializeAsString() == cut;
    if (r.ok()) {
      EXPECT_TRUE(whole_model) << "cut at " << n;
    } else {
      ++refused;
    }
  }
  EXPECT_GT(refused, bytes.size() / 2);
  onnx::ModelProto no_graph;
  no_graph.set_ir_version(8);
  EXPECT_THAT(ErrorOf(no_graph), HasSubstr("without a graph"));
}

}  // namespace
}  // namespace ckptscan::onnx_check
