// ExtractTensors against what torch.load returns: names follow Python's dict (keys that compare
// equal are one key, named by the first key object), every container kind torch's result has,
// legacy storage views as torch's cache hands them out, and a problem on every tensor whose
// name or bytes the conversion cannot tell as torch.load would.
#include "core/torch/tensors.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/pickle/vm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::torch {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A protocol-2 pickle, written opcode by opcode.
class Pickle {
 public:
  Pickle& Op(char c) {
    b_.push_back(c);
    return *this;
  }
  Pickle& Str(std::string_view s) {
    Op('X');
    U32(static_cast<uint32_t>(s.size()));
    b_.append(s);
    return *this;
  }
  Pickle& Int(int64_t v) {
    if (v >= 0 && v < 256) return Op('K').Byte(static_cast<uint8_t>(v));
    Op('J');
    return U32(static_cast<uint32_t>(static_cast<int32_t>(v)));
  }
  Pickle& Float(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    Op('G');
    for (int i = 7; i >= 0; --i) Byte(static_cast<uint8_t>(bits >> (8 * i)));
    return *this;
  }
  Pickle& True() { return Op('\x88'); }
  Pickle& False() { return Op('\x89'); }
  Pickle& None() { return Op('N'); }
  Pickle& Global(std::string_view module, std::string_view name) {
    Op('c');
    b_.append(module);
    b_.push_back('\n');
    b_.append(name);
    b_.push_back('\n');
    return *this;
  }
  Pickle& Mark() { return Op('('); }
  Pickle& Tuple() { return Op('t'); }
  Pickle& EmptyTuple() { return Op(')'); }
  Pickle& Put(uint8_t i) { return Op('q').Byte(i); }
  Pickle& Get(uint8_t i) { return Op('h').Byte(i); }
  // _rebuild_tensor_v2(('storage', FloatStorage, key, location, numel), offset, (n,), (1,),
  // False, OrderedDict()): the 1-d float tensor of `n` elements at `offset` of storage `key`.
  Pickle& Tensor(std::string_view key, int64_t offset = 0, int64_t n = 2, int64_t numel = 4,
                 std::string_view location = "cpu", std::string_view storage = "FloatStorage") {
    Global("torch._utils", "_rebuild_tensor_v2").Mark();
    Mark().Str("storage").Global("torch", storage).Str(key).Str(location).Int(numel).Tuple();
    Op('Q').Int(offset).Mark().Int(n).Tuple().Mark().Int(1).Tuple().False();
    Global("collections", "OrderedDict").EmptyTuple().Op('R');
    return Tuple().Op('R');
  }
  std::string Done() const { return "\x80\x02" + b_ + "."; }

 private:
  Pickle& Byte(uint8_t v) {
    b_.push_back(static_cast<char>(v));
    return *this;
  }
  Pickle& U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::string b_;
};

struct Extracted {
  pickle::PickleFacts facts;
  TensorExtraction x;
};

Extracted Extract(const std::string& data, PersistentIds ids = PersistentIds::kZip) {
  Extracted e{pickle::Vm().RunOne(data), {}};
  EXPECT_FALSE(e.facts.error.has_value()) << e.facts.error->message;
  e.x = ExtractTensors(e.facts, nullptr, ids);
  return e;
}

// name -> (storage key, storage_offset, problem) of every tensor.
struct Seen {
  std::string key;
  uint64_t offset;
  std::string problem;
};
std::map<std::string, Seen> ByName(const TensorExtraction& x) {
  std::map<std::string, Seen> out;
  for (const TensorFact& t : x.tensors) {
    out[t.name] = Seen{t.storage >= 0 ? x.storages[static_cast<size_t>(t.storage)].key : "",
                       t.storage_offset, t.problem};
  }
  return out;
}

std::vector<std::string> Names(const TensorExtraction& x) {
  std::vector<std::string> out;
  for (const TensorFact& t : x.tensors) out.push_back(t.name);
  return out;
}

TEST(TensorsTest, TrueOneAndOnePointZeroAreOneKeyNamedByTheFirstHoldingTheLast) {
  // {True: a, 1: b, 1.0: c}: Python keeps the key True and the value c.
  Pickle p;
  p.Op('}').Mark().True().Tensor("a").Int(1).Tensor("b").Float(1.0).Tensor("c").Op('u');
  Extracted e = Extract(p.Done());
  auto t = ByName(e.x);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t["True"].key, "c");
  EXPECT_THAT(t["True"].problem, IsEmpty());
}

TEST(TensorsTest, NegativeZeroZeroAndFalseAreOneKey) {
  Pickle p;
  p.Op('}').Mark().Float(-0.0).Tensor("a").Int(0).Tensor("b").False().Tensor("c").Op('u');
  auto t = ByName(Extract(p.Done()).x);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t["-0.0"].key, "c");
}

TEST(TensorsTest, TorchVersionKeyIsItsStr) {
  // {'w': a, TorchVersion('w'): b} by REDUCE, then by copyreg._reconstructor.
  for (int form = 0; form < 2; ++form) {
    Pickle p;
    p.Op('}').Mark().Str("w").Tensor("a");
    if (form == 0) {
      p.Global("torch.torch_version", "TorchVersion").Mark().Str("w").Tuple().Op('R');
    } else {
      p.Global("copyreg", "_reconstructor").Mark().Global("torch.torch_version", "TorchVersion");
      p.Global("builtins", "str").Str("w").Tuple().Op('R');
    }
    p.Tensor("b").Op('u');
    auto t = ByName(Extract(p.Done()).x);
    ASSERT_EQ(t.size(), 1u) << form;
    EXPECT_EQ(t["w"].key, "b") << form;
  }
}

TEST(TensorsTest, KeysThatAreNotEqualButPrintAlikeAreBothListed) {
  // {1: a, '1': b}: two keys, both named "1" (the conversion refuses the clash).
  Pickle p;
  p.Op('}').Mark().Int(1).Tensor("a").Str("1").Tensor("b").Op('u');
  EXPECT_EQ(Names(Extract(p.Done()).x), (std::vector<std::string>{"1", "1"}));
}

TEST(TensorsTest, NanKeysAreEqualOnlyToTheSameObject) {
  // {nan: a, nan: b, <the first nan again>: c}: two keys.
  const double nan = std::nan("");
  Pickle p;
  p.Op('}').Mark().Float(nan).Put(9).Tensor("a").Float(nan).Tensor("b").Get(9).Tensor("c");
  p.Op('u');
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 2u);
  EXPECT_EQ(e.x.storages[static_cast<size_t>(e.x.tensors[0].storage)].key, "c");
  EXPECT_EQ(e.x.storages[static_cast<size_t>(e.x.tensors[1].storage)].key, "b");
}

TEST(TensorsTest, FloatKeysAreNamedAsPythonPrintsThem) {
  Pickle p;
  p.Op('}').Mark();
  const double keys[] = {0.5, 1e16, 1e-5, 123456789.125, 2.0, 1e300};
  for (size_t i = 0; i < std::size(keys); ++i) p.Float(keys[i]).Tensor(std::to_string(i));
  p.Op('u');
  EXPECT_EQ(Names(Extract(p.Done()).x),
            (std::vector<std::string>{"0.5", "1e+16", "1e-05", "123456789.125", "2.0", "1e+300"}));
}

TEST(TensorsTest, PythonFloatReprMatchesCPython) {
  // repr() in CPython 3.11.
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {0.1, "0.1"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {1.5e16, "1.5e+16"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {1.25e-7, "1.25e-07"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {9007199254740993.0, "9007199254740992.0"},
      {-2.5, "-2.5"},
      {1.0 / 3, "0.3333333333333333"},
      {2.0e-300, "2e-300"},
      {INFINITY, "inf"},
      {-INFINITY, "-inf"},
      {std::nan(""), "nan"},
  };
  for (const auto& [v, want] : cases) EXPECT_EQ(PythonFloatRepr(v), want) << want;
}

TEST(TensorsTest, OrderedDictOfTwoItemListsTakesThemAsPairs) {
  // OrderedDict([['a', t], [1, u], [True, v]]): keys 'a' and 1 (True merges into 1).
  Pickle p;
  p.Global("collections", "OrderedDict").Mark().Op(']').Mark();
  p.Op(']').Mark().Str("a").Tensor("t").Op('e');
  p.Op(']').Mark().Int(1).Tensor("u").Op('e');
  p.Op(']').Mark().True().Tensor("v").Op('e');
  p.Op('e').Tuple().Op('R');
  auto t = ByName(Extract(p.Done()).x);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t["a"].key, "t");
  EXPECT_EQ(t["1"].key, "v");
  EXPECT_THAT(t["1"].problem, IsEmpty());
}

TEST(TensorsTest, OrderedDictOfSomethingElseLeavesItsTensorsUnconvertible) {
  // OrderedDict([('a', t, 'extra')]): torch.load fails (too many values to unpack).
  Pickle p;
  p.Global("collections", "OrderedDict").Mark().Op(']').Mark();
  p.Mark().Str("a").Tensor("t").Str("extra").Tuple();
  p.Op('e').Tuple().Op('R');
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 1u);
  EXPECT_THAT(e.x.tensors[0].problem, HasSubstr("not a 2-item tuple or list"));
}

TEST(TensorsTest, CounterOfADictIsWalked) {
  Pickle p;
  p.Op('}').Mark().Str("stats").Global("collections", "Counter").Mark();
  p.Op('}').Mark().Str("w").Tensor("a").Op('u').Tuple().Op('R').Op('u');
  EXPECT_EQ(Names(Extract(p.Done()).x), (std::vector<std::string>{"stats.w"}));
}

TEST(TensorsTest, DefaultdictItemsAreWalked) {
  Pickle p;
  p.Global("collections", "defaultdict").Mark().Global("builtins", "dict").Tuple().Op('R');
  p.Mark().Int(3).Tensor("a").Op('u');
  EXPECT_EQ(Names(Extract(p.Done()).x), (std::vector<std::string>{"3"}));
}

TEST(TensorsTest, KeysLongerThanTheScanKeepsAreNotComparedByTheirPrefix) {
  // Two keys of 64 KiB + 1 that differ in their last byte only.
  const std::string prefix((64 << 10), 'k');
  Pickle p;
  p.Op('}').Mark().Str(prefix + "a").Tensor("a").Str(prefix + "b").Tensor("b").Op('u');
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 2u);
  for (const TensorFact& t : e.x.tensors) EXPECT_THAT(t.problem, HasSubstr("longer than"));
}

TEST(TensorsTest, ListAppendedAfterOrderedDictCopiedItIsNotTrusted) {
  // L = []; od = OrderedDict(L); L.append(('a', t)); (od, L): od is empty in Python.
  Pickle p;
  p.Mark().Global("collections", "OrderedDict").Mark().Op(']').Put(1).Tuple().Op('R');
  p.Get(1).Mark().Mark().Str("a").Tensor("t").Tuple().Op('e').Tuple();
  auto t = ByName(Extract(p.Done()).x);
  ASSERT_EQ(t.count("0.0.0.1"), 1u);
  EXPECT_THAT(t["0.0.0.1"].problem, HasSubstr("changes after the call copied it"));
  ASSERT_EQ(t.count("1.0.1"), 1u);
  EXPECT_THAT(t["1.0.1"].problem, IsEmpty());
}

TEST(TensorsTest, SizeListChangedAfterTheRebuildReadItIsRefused) {
  // size = [2]; t = _rebuild_tensor_v2(..., size, [1], ...); size.append(1)
  Pickle p;
  p.Op(']').Put(1).Mark().Int(2).Op('e').Op('0');  // memo 1 = [2]
  p.Global("torch._utils", "_rebuild_tensor_v2").Mark();
  p.Mark().Str("storage").Global("torch", "FloatStorage").Str("0").Str("cpu").Int(4).Tuple();
  p.Op('Q').Int(0).Get(1).Op(']').Mark().Int(1).Op('e').False();
  p.Global("collections", "OrderedDict").EmptyTuple().Op('R').Tuple().Op('R');
  p.Get(1).Int(1).Op('a').Op('0');
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 1u);
  EXPECT_THAT(e.x.tensors[0].problem, HasSubstr("changed after the call read it"));
}

TEST(TensorsTest, ContainerSharedByTwoPathsListsItsTensorsUnderBoth) {
  // L = [t]; {'a': L, 'b': L}
  Pickle p;
  p.Op('}').Mark().Str("a").Op(']').Put(1).Mark().Tensor("t").Op('e').Str("b").Get(1).Op('u');
  EXPECT_EQ(Names(Extract(p.Done()).x), (std::vector<std::string>{"a.0", "b.0"}));
}

TEST(TensorsTest, ContainerHoldingItselfIsRefused) {
  // L = [t]; L.append(L)
  Pickle p;
  p.Op(']').Put(1).Mark().Tensor("t").Get(1).Op('e');
  Extracted e = Extract(p.Done());
  auto t = ByName(e.x);
  ASSERT_EQ(t.count("1"), 1u);
  EXPECT_THAT(t["1"].problem, HasSubstr("holds itself"));
}

TEST(TensorsTest, StateThatSetsRealRefusesEveryTensorOfItsStorage) {
  // {'p': _rebuild_parameter_with_state(<a[0:2]>, False, OrderedDict(), {'real': 1.0}),
  //  'q': <a[2:4]>, 'r': <b>}: tensor.real = 1.0 writes storage a.
  Pickle p;
  p.Op('}').Mark().Str("p").Global("torch._utils", "_rebuild_parameter_with_state").Mark();
  p.Tensor("a").False().Global("collections", "OrderedDict").EmptyTuple().Op('R');
  p.Op('}').Mark().Str("real").Float(1.0).Op('u').Tuple().Op('R');
  p.Str("q").Tensor("a", 2).Str("r").Tensor("b").Op('u');
  auto t = ByName(Extract(p.Done()).x);
  EXPECT_THAT(t["p"].problem, HasSubstr("'real'"));
  EXPECT_THAT(t["q"].problem, HasSubstr("changes tensor data while it loads"));
  EXPECT_THAT(t["r"].problem, IsEmpty());
}

TEST(TensorsTest, StateOfPlainAttributesIsInert) {
  Pickle p;
  p.Global("torch._utils", "_rebuild_parameter_with_state").Mark();
  p.Tensor("a").False().Global("collections", "OrderedDict").EmptyTuple().Op('R');
  p.Op('}').Mark().Str("_is_hf_initialized").True().Str("partition_dim").Int(0).Op('u');
  p.Tuple().Op('R');
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 1u);
  EXPECT_THAT(e.x.tensors[0].problem, IsEmpty());
  EXPECT_TRUE(e.x.tensors[0].parameter);
}

TEST(TensorsTest, StateNamingATensorAttributeIsRefused) {
  for (const char* name : {"data", "grad", "T", "requires_grad", "__class__", "__x__"}) {
    Pickle q;
    q.Global("torch._tensor", "_rebuild_from_type_v2").Mark();
    q.Global("torch._utils", "_rebuild_tensor_v2").Global("torch", "Tensor");
    q.Mark().Mark().Str("storage").Global("torch", "FloatStorage").Str("a").Str("cpu").Int(4);
    q.Tuple().Op('Q').Int(0).Mark().Int(2).Tuple().Mark().Int(1).Tuple().False();
    q.Global("collections", "OrderedDict").EmptyTuple().Op('R').Tuple();
    q.Op('}').Mark().Str(name).None().Op('u').Tuple().Op('R');
    Extracted e = Extract(q.Done());
    ASSERT_EQ(e.x.tensors.size(), 1u);
    EXPECT_THAT(e.x.tensors[0].problem, HasSubstr("its state")) << name;
  }
}

TEST(TensorsTest, SetItemOnATensorRefusesItsStorage) {
  // t = <a>; t[0] = 5.0; {'t': t, 'u': <a[2:4]>}
  Pickle p;
  p.Op('}').Mark().Str("t").Tensor("a").Put(1).Str("u").Tensor("a", 2).Op('u');
  p.Get(1).Int(0).Float(5.0).Op('s').Op('0');
  auto t = ByName(Extract(p.Done()).x);
  EXPECT_THAT(t["t"].problem, HasSubstr("SETITEM"));
  EXPECT_THAT(t["u"].problem, HasSubstr("changes tensor data"));
}

TEST(TensorsTest, MetaLocationHasNoData) {
  Pickle p;
  p.Tensor("a", 0, 2, 4, "meta");
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 1u);
  EXPECT_THAT(e.x.tensors[0].problem, HasSubstr("'meta'"));
}

TEST(TensorsTest, RequiresGradOnAnIntegerTensorFailsInTorch) {
  Pickle p;
  p.Global("torch._utils", "_rebuild_tensor_v2").Mark();
  p.Mark().Str("storage").Global("torch", "LongStorage").Str("a").Str("cpu").Int(4).Tuple();
  p.Op('Q').Int(0).Mark().Int(2).Tuple().Mark().Int(1).Tuple().True();
  p.Global("collections", "OrderedDict").EmptyTuple().Op('R').Tuple().Op('R');
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 1u);
  EXPECT_THAT(e.x.tensors[0].problem, HasSubstr("requires grad"));
}

TEST(TensorsTest, ZipPersistentIdWithAViewIsNotTorchs) {
  // torch.load's zip path unpacks exactly four items after 'storage'.
  Pickle p;
  p.Global("torch._utils", "_rebuild_tensor_v2").Mark();
  p.Mark().Str("storage").Global("torch", "FloatStorage").Str("a").Str("cpu").Int(4).None();
  p.Tuple().Op('Q').Int(0).Mark().Int(2).Tuple().Mark().Int(1).Tuple().False();
  p.Global("collections", "OrderedDict").EmptyTuple().Op('R').Tuple().Op('R');
  Extracted e = Extract(p.Done());
  EXPECT_THAT(e.x.problems, ::testing::Contains(HasSubstr("is not ('storage'")));
}

// _rebuild_tensor_v2 of a legacy pid ('storage', FloatStorage, root, 'cpu', 8, view) with view
// (view_key, offset, size), or None.
void LegacyTensor(Pickle& p, std::string_view root, std::string_view view_key, int64_t offset,
                  int64_t size, int64_t n = 2) {
  p.Global("torch._utils", "_rebuild_tensor_v2").Mark();
  p.Mark().Str("storage").Global("torch", "FloatStorage").Str(root).Str("cpu").Int(8);
  if (view_key.empty()) {
    p.None();
  } else {
    p.Mark().Str(view_key).Int(offset).Int(size).Tuple();
  }
  p.Tuple().Op('Q').Int(0).Mark().Int(n).Tuple().Mark().Int(1).Tuple().False();
  p.Global("collections", "OrderedDict").EmptyTuple().Op('R').Tuple().Op('R');
}

TEST(TensorsTest, LegacyViewKeyUsedAgainGetsTheViewMadeFirst) {
  // [view 'v' of r at 4 (size 4), view 'v' of r at 0 (size 2)]: torch's cache returns the first
  // view for both, so both tensors start at element 4.
  Pickle p;
  p.Mark();
  LegacyTensor(p, "r", "v", 4, 4);
  LegacyTensor(p, "r", "v", 0, 2);
  p.Op('l');
  Extracted e = Extract(p.Done(), PersistentIds::kLegacy);
  ASSERT_THAT(e.x.problems, IsEmpty());
  auto t = ByName(e.x);
  EXPECT_EQ(t["0"].offset, 4u);
  EXPECT_EQ(t["1"].offset, 4u);
}

TEST(TensorsTest, LegacyViewKeyEqualToARootKeyGetsTheRoot) {
  Pickle p;
  p.Mark();
  LegacyTensor(p, "r", "r", 4, 4);
  p.Op('l');
  Extracted e = Extract(p.Done(), PersistentIds::kLegacy);
  ASSERT_THAT(e.x.problems, IsEmpty());
  EXPECT_EQ(ByName(e.x)["0"].offset, 0u);
}

TEST(TensorsTest, LegacyTensorPastItsViewFailsInTorch) {
  // A view of 2 elements holding a tensor of 3.
  Pickle p;
  LegacyTensor(p, "r", "v", 0, 2, 3);
  Extracted e = Extract(p.Done(), PersistentIds::kLegacy);
  ASSERT_EQ(e.x.tensors.size(), 1u);
  EXPECT_THAT(e.x.tensors[0].problem, HasSubstr("past its storage view"));
}

TEST(TensorsTest, ParameterByNewobjWithItsStateIsAPlainParameter) {
  // Parameter.__new__(Parameter, t, True) then BUILD (False, None, OrderedDict()).
  Pickle p;
  p.Global("torch.nn.parameter", "Parameter").Mark().Tensor("a").True().Tuple().Op('\x81');
  p.Mark().False().None().Global("collections", "OrderedDict").EmptyTuple().Op('R').Tuple();
  p.Op('b');
  Extracted e = Extract(p.Done());
  ASSERT_EQ(e.x.tensors.size(), 1u);
  EXPECT_THAT(e.x.tensors[0].problem, IsEmpty());
  EXPECT_TRUE(e.x.tensors[0].parameter);
  EXPECT_FALSE(e.x.tensors[0].requires_grad);
}

}  // namespace
}  // namespace ckptscan::torch
