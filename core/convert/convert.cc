#include "core/convert/convert.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/bf16/bf16.h"
#include "core/safetensors/validator.h"
#include "nlohmann/json.hpp"

namespace ckptscan::convert {
namespace {

using torch::TensorFact;

// A refusal names its tensor by at most this many bytes of the name, so that the reason after
// it survives the worker's bounded error message (a dict key may be megabytes long).
constexpr size_t kMaxNameBytesInRefusal = 256;

absl::Status Refuse(const TensorFact& t, std::string_view why) {
  std::string name = base::Escaped(std::string_view(t.name).substr(0, kMaxNameBytesInRefusal));
  if (t.name.size() > kMaxNameBytesInRefusal) {
    absl::StrAppend(&name, "... (", t.name.size(), " bytes)");
  }
  return absl::FailedPreconditionError(absl::StrFormat("tensor '%s' cannot be converted: %s",
                                                       base::AbslView(name), base::AbslView(why)));
}

// A checkpoint that is one bare tensor (torch.save(t), an .npy file) has no name for it;
// safetensors needs one.
constexpr char kRootTensorName[] = "tensor";

// The output name under --select, or nullopt when the tensor is not selected.
std::optional<std::string> SelectedName(const std::string& name, const std::string& select) {
  if (select.empty()) return name.empty() ? std::string(kRootTensorName) : name;
  if (name.size() > select.size() + 1 && name.compare(0, select.size(), select) == 0 &&
      name[select.size()] == '.') {
    return name.substr(select.size() + 1);
  }
  return std::nullopt;
}

bool IsRowMajorContiguous(const TensorFact& t) {
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] != 1 && t.stride[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// The dtypes --allow-dtype may name: those not written as is by default. C64: no safetensors
// release before 0.7.0 (Debian 13 ships 0.4.5) reads a file holding a C64 tensor, the whole
// file fails with InvalidHeaderDeserialization (docs/safetensors.md).
constexpr std::string_view kGated[] = {"C64"};

// Where a tensor's bytes are: its storage is in the facts, stored (not compressed), and holds
// every element the tensor reaches. `t` alone: the planner checks a quantized tensor's
// per-channel parameters one by one, naming which failed.
absl::Status CheckData(const torch::FileFacts& facts, const TensorFact& t) {
  if (t.storage < 0 || static_cast<size_t>(t.storage) >= facts.storage_data.size()) {
    return absl::FailedPreconditionError("no storage");
  }
  if (!facts.storage_data[static_cast<size_t>(t.storage)].stored) {
    return absl::FailedPreconditionError("its storage is compressed in the container");
  }
  return torch::CheckBounds(
      t, torch::StorageElements(t, facts.storages[static_cast<size_t>(t.storage)]));
}

Plan::Entry MakeEntry(size_t tensor, std::string name, bool to_bf16 = false, int channel = -1,
                      std::string literal = {}) {
  Plan::Entry e;
  e.tensor = tensor;
  e.name = std::move(name);
  e.to_bf16 = to_bf16;
  e.channel = channel;
  e.literal = std::move(literal);
  return e;
}

std::string LittleEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// True when `name` is `leaf` itself or ends with "." + leaf; *prefix is what comes before.
bool LeafOf(const std::string& name, std::string_view leaf, std::string* prefix) {
  if (name == leaf) {
    prefix->clear();
    return true;
  }
  if (name.size() <= leaf.size() ||
      name.compare(name.size() - leaf.size(), leaf.size(), leaf) != 0 ||
      name[name.size() - leaf.size() - 1] != '.') {
    return false;
  }
  *prefix = name.substr(0, name.size() - leaf.size() - 1);
  return true;
}

std::string Member(const std::string& prefix, std::string_view leaf) {
  return prefix.empty() ? std::string(leaf) : absl::StrCat(prefix, ".", base::AbslView(leaf));
}

bool IsFloat(std::string_view dtype) {
  return dtype == "float32" || dtype == "float16" || dtype == "bfloat16" || dtype == "float64";
}

}  // namespace

std::vector<QuantizedLayer> FindQuantizedLayers(
    const std::map<std::string, std::string_view>& names, bool names_only) {
  auto has = [&](const std::string& name) { return names.count(name) != 0; };
  // Whether tensor `name` exists with a dtype that `ok` accepts (any dtype with names_only).
  auto is = [&](const std::string& name, auto ok) {
    auto it = names.find(name);
    return it != names.end() && (names_only || ok(it->second));
  };
  auto int32 = [](std::string_view d) { return d == "int32"; };
  std::map<std::string, std::string> found;
  for (const auto& [name, dtype] : names) {
    std::string p;
    if (LeafOf(name, "qweight", &p) && is(name, int32) && is(Member(p, "qzeros"), int32) &&
        is(Member(p, "scales"), IsFloat)) {
      found[p] = has(Member(p, "g_idx")) ? "gptq" : "awq";
    } else if (LeafOf(name, "SCB", &p) &&
               is(Member(p, "weight"), [](std::string_view d) { return d == "int8"; })) {
      found[p] = "bitsandbytes-int8";
    } else if ((LeafOf(name, "weight.quant_state.bitsandbytes__nf4", &p) ||
                LeafOf(name, "weight.quant_state.bitsandbytes__fp4", &p)) &&
               is(Member(p, "weight"), [](std::string_view d) { return d == "uint8"; })) {
      found[p] = "bitsandbytes-4bit";
    }
  }
  std::vector<QuantizedLayer> out;
  for (auto& [prefix, layout] : found) out.push_back(QuantizedLayer{prefix, std::move(layout)});
  return out;
}

absl::Status CheckAllowDtype(std::string_view safetensors_dtype) {
  for (std::string_view g : kGated) {
    if (g == safetensors_dtype) return absl::OkStatus();
  }
  std::string allowed;
  for (std::string_view g : kGated) {
    absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", base::AbslView(g));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      base::AbslView(base::Escaped(safetensors_dtype)),
      safetensors::ParseDtype(safetensors_dtype).has_value()
          ? " is not a gated dtype (docs/safetensors.md: it is written as is, or never)"
          : " is not a safetensors dtype name",
      "; --allow-dtype takes only ", allowed));
}

namespace {

// PlanConversion's passes over one file's facts, in order: the checks before anything is
// planned, the quantized layers, each selected tensor (written, aliased or refused), then the
// aliases, the layers' uses, the values that are not written, and the header with its
// __metadata__.
class Planner {
 public:
  Planner(const torch::FileFacts& facts, const Options& options)
      : facts_(facts), options_(options) {}

  absl::StatusOr<Plan> Run() && {
    CKPT_RETURN_IF_ERROR(Preflight());
    CKPT_RETURN_IF_ERROR(QuantizedLayers());
    for (size_t i : TensorsByName()) CKPT_RETURN_IF_ERROR(Tensor(i));
    CKPT_RETURN_IF_ERROR(CheckAliases());
    LayerUses();
    CKPT_RETURN_IF_ERROR(NotWritten());
    absl::StatusOr<std::map<std::string, std::string>> metadata = Metadata();
    if (!metadata.ok()) return metadata.status();
    for (const auto& [key, count] : uses_) {
      const auto& [source, written, how] = key;
      plan_.dtypes.push_back(Plan::DtypeUse{source, written, how, count});
    }
    CKPT_ASSIGN_OR_RETURN(plan_.header, safetensors::SerializeHeader(specs_, *metadata));
    return std::move(plan_);
  }

 private:
  // Identical views of one storage (tied weights): the first name in byte order is kept.
  using ViewKey = std::tuple<int32_t, uint64_t, std::vector<int64_t>, std::vector<int64_t>,
                             const torch::DTypeInfo*>;

  // What is refused before any tensor is looked at: big-endian storages, a bad --allow-dtype.
  absl::Status Preflight() {
    for (const torch::ContainerAnomaly& a : facts_.anomalies) {
      if (a.kind == "byteorder") {
        return absl::FailedPreconditionError("big-endian storages are not converted");
      }
    }
    for (const std::string& d : options_.allow_dtypes) CKPT_RETURN_IF_ERROR(CheckAllowDtype(d));
    CKPT_RETURN_IF_ERROR(NpzLookups());
    c64_native_ = std::find(options_.allow_dtypes.begin(), options_.allow_dtypes.end(), "C64") !=
                  options_.allow_dtypes.end();
    return absl::OkStatus();
  }

  // An .npz's tensor is named by its member less ".npy"; numpy returns, for that name, the
  // member named exactly so when there is one (NpzMemberFor): then the tensor is not what
  // numpy.load gives under its name.
  absl::Status NpzLookups() const {
    if (facts_.format != "npz") return absl::OkStatus();
    absl::flat_hash_set<std::string_view> members;
    for (const torch::StorageData& d : facts_.storage_data) members.insert(d.member);
    for (const TensorFact& t : facts_.tensors) {
      if (t.storage < 0 || static_cast<size_t>(t.storage) >= facts_.storage_data.size()) continue;
      const std::string& member = facts_.storage_data[static_cast<size_t>(t.storage)].member;
      const std::string_view read = torch::NpzMemberFor(t.name, members);
      if (!read.empty() && read != member) {
        return Refuse(t, absl::StrFormat("numpy.load reads the member '%s' for this name, not "
                                         "'%s' (an exact member name comes first)",
                                         base::AbslView(base::Escaped(read)),
                                         base::AbslView(base::Escaped(member))));
      }
    }
    return absl::OkStatus();
  }

  // Tensor indices in byte order of their names (stable: equal names keep the file's order).
  std::vector<size_t> TensorsByName() const {
    std::vector<size_t> order;
    for (size_t i = 0; i < facts_.tensors.size(); ++i) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return facts_.tensors[a].name < facts_.tensors[b].name;
    });
    return order;
  }

  // Layers that GPTQ, AWQ or bitsandbytes quantized: under --dtype bf16 their float tensors
  // keep their dtype unless --cast-quantized.
  absl::Status QuantizedLayers() {
    std::map<std::string, std::string_view> dtype_by_name;
    for (const TensorFact& t : facts_.tensors) {
      dtype_by_name.emplace(t.name, t.dtype != nullptr ? t.dtype->name : std::string_view());
    }
    layers_ = FindQuantizedLayers(dtype_by_name);
    for (const QuantizedLayer& extra : options_.extra_layers) {
      if (std::none_of(layers_.begin(), layers_.end(),
                       [&](const QuantizedLayer& l) { return l.prefix == extra.prefix; })) {
        layers_.push_back(extra);
      }
    }
    std::sort(layers_.begin(), layers_.end(),
              [](const QuantizedLayer& a, const QuantizedLayer& b) { return a.prefix < b.prefix; });
    plan_.declared_quantization = options_.declared_quantization;
    if (options_.to_bf16 && !options_.cast_quantized && !options_.declared_quantization.empty() &&
        layers_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the config.json beside the input declares quantization_config (quant_method \"",
          options_.declared_quantization,
          "\"), and no layer of a layout ckptscan knows (GPTQ, AWQ, bitsandbytes) is among the "
          "tensors: --dtype bf16 could cast tensors its loader reads in their saved dtype. "
          "Convert with --dtype keep, or add --cast-quantized to cast them anyway"));
    }
    for (size_t k = 0; k < layers_.size(); ++k) layer_by_prefix_[layers_[k].prefix] = k;
    kept_in_layer_.assign(layers_.size(), 0);
    layer_selected_.assign(layers_.size(), false);
    return absl::OkStatus();
  }

  // The layer a tensor belongs to, or -1: P.LEAF for a quantized layer P, where LEAF is one
  // name (qweight, scales, bias, SCB) or a member of the weight (bitsandbytes' weight.absmax,
  // weight.quant_state.*). A deeper name (P.lora_A.weight) is another module's.
  int LayerOf(const std::string& name) const {
    if (layers_.empty()) return -1;
    auto leaf_of_layer = [](std::string_view leaf) {
      return leaf.find('.') == std::string_view::npos || leaf.rfind("weight.", 0) == 0;
    };
    for (size_t j = name.find('.'); j != std::string::npos; j = name.find('.', j + 1)) {
      auto it = layer_by_prefix_.find(name.substr(0, j));
      if (it != layer_by_prefix_.end() && leaf_of_layer(std::string_view(name).substr(j + 1))) {
        return static_cast<int>(it->second);
      }
    }
    auto it = layer_by_prefix_.find("");
    return it != layer_by_prefix_.end() && leaf_of_layer(name) ? static_cast<int>(it->second) : -1;
  }

  // One output tensor of `t` (entry.name), `elem_size` bytes per element.
  absl::Status Add(const TensorFact& t, Plan::Entry entry, std::string_view written,
                   std::vector<uint64_t> shape, uint64_t elem_size, std::string_view source,
                   std::string_view how) {
    std::optional<safetensors::Dtype> dtype = safetensors::ParseDtype(written);
    if (!dtype.has_value()) return Refuse(t, "unknown safetensors dtype");
    uint64_t numel = 1;
    for (uint64_t d : shape) {
      if (!base::CheckedMul<uint64_t>(numel, d, &numel)) return Refuse(t, "its size overflows");
    }
    safetensors::TensorSpec spec;
    spec.name = entry.name;
    spec.dtype = *dtype;
    spec.shape = std::move(shape);
    if (!base::CheckedMul<uint64_t>(numel, elem_size, &spec.byte_size)) {
      return Refuse(t, "its size overflows");
    }
    if (!out_names_.insert(entry.name).second) {
      return Refuse(t, absl::StrFormat("the output name '%s' would be written twice",
                                       base::AbslView(base::Escaped(entry.name))));
    }
    ++uses_[{std::string(source), std::string(written), std::string(how)}];
    specs_.push_back(std::move(spec));
    plan_.entries.push_back(std::move(entry));
    return absl::OkStatus();
  }

  // One tensor of the file: left out (not selected), refused, written (quantized or plain) or
  // recorded as an alias of an identical view already written.
  absl::Status Tensor(size_t i) {
    const TensorFact& t = facts_.tensors[i];
    std::optional<std::string> name = SelectedName(t.name, options_.select);
    if (!name.has_value()) return absl::OkStatus();
    if (!t.problem.empty()) return Refuse(t, t.problem);
    const int layer = LayerOf(t.name);
    if (layer >= 0) layer_selected_[static_cast<size_t>(layer)] = true;
    if (t.kind == TensorFact::Kind::kQuantized) return QuantizedTensor(i, *name);
    if (t.dtype == nullptr || t.dtype->safetensors.empty()) {
      return Refuse(t, absl::StrCat("safetensors has no dtype for ",
                                    t.dtype ? base::AbslView(t.dtype->name) : "an unknown dtype"));
    }
    if (absl::Status d = CheckData(facts_, t); !d.ok()) {
      return Refuse(t, base::StdView(d.message()));
    }
    ViewKey key{t.storage, t.storage_offset, t.shape, t.stride, t.dtype};
    auto [it, inserted] = kept_.emplace(key, *name);
    if (!inserted) {
      plan_.aliases[*name] = it->second;
      return absl::OkStatus();
    }
    return PlainTensor(i, *name, layer);
  }

  // A quantized tensor: the integer data as it is stored, then the quantizer's parameters
  // (never cast).
  absl::Status QuantizedTensor(size_t i, const std::string& name) {
    const TensorFact& t = facts_.tensors[i];
    if (absl::Status q = torch::CheckQuantized(t); !q.ok()) {
      return Refuse(t, base::StdView(q.message()));
    }
    if (absl::Status d = CheckData(facts_, t); !d.ok()) {
      return Refuse(t, base::StdView(d.message()));
    }
    const std::string_view source(t.dtype->name);
    std::vector<uint64_t> shape(t.shape.begin(), t.shape.end());
    std::string scheme = t.qscheme;
    CKPT_RETURN_IF_ERROR(Add(t, MakeEntry(i, name), torch::QuantizedDataDtype(t.dtype), shape,
                             t.dtype->size, source, "quantized"));
    if (t.qchannel.empty()) {
      CKPT_RETURN_IF_ERROR(Add(t,
                               MakeEntry(i, absl::StrCat(name, ".scale"), false, -1,
                                         LittleEndian64(std::bit_cast<uint64_t>(t.q_scale))),
                               "F64", {}, 8, "float64", "quantizer"));
      CKPT_RETURN_IF_ERROR(Add(t,
                               MakeEntry(i, absl::StrCat(name, ".zero_point"), false, -1,
                                         LittleEndian64(static_cast<uint64_t>(t.q_zero_point))),
                               "I64", {}, 8, "int64", "quantizer"));
    } else {
      for (int k = 0; k < 2; ++k) {
        const TensorFact& c = t.qchannel[static_cast<size_t>(k)];
        if (absl::Status d = CheckData(facts_, c); !d.ok()) {
          return Refuse(t,
                        absl::StrCat(k == 0 ? "its scales: " : "its zero_points: ", d.message()));
        }
        CKPT_RETURN_IF_ERROR(
            Add(t, MakeEntry(i, absl::StrCat(name, k == 0 ? ".scale" : ".zero_point"), false, k),
                c.dtype->safetensors, {static_cast<uint64_t>(c.shape[0])}, c.dtype->size,
                c.dtype->name, "quantizer"));
      }
      CKPT_RETURN_IF_ERROR(Add(t,
                               MakeEntry(i, absl::StrCat(name, ".axis"), false, -1,
                                         LittleEndian64(static_cast<uint64_t>(t.q_axis))),
                               "I64", {}, 8, "int64", "quantizer"));
      // torch.save writes the per_channel_affine tag for both per-channel schemes; float
      // zero points are what makes one per_channel_affine_float_qparams.
      if (t.qchannel[1].dtype->name == "float32") scheme = "per_channel_affine_float_qparams";
    }
    quantized_[name] = {{"scheme", scheme}, {"dtype", std::string(source)}};
    return absl::OkStatus();
  }

  // A plain tensor, first of its view: cast to bf16, kept (a quantized layer's float tensor
  // under bf16), complex64 written as float32 pairs, or as it is.
  absl::Status PlainTensor(size_t i, const std::string& name, int layer) {
    const TensorFact& t = facts_.tensors[i];
    const bool castable =
        options_.to_bf16 && (t.dtype->name == "float32" || t.dtype->name == "float16");
    const bool keep_quantized = castable && layer >= 0 && !options_.cast_quantized;
    if (keep_quantized) ++kept_in_layer_[static_cast<size_t>(layer)];
    const bool to_bf16 = castable && !keep_quantized;
    // complex64 is interleaved (real, imaginary) float32 pairs: the same bytes are a float32
    // tensor with a trailing dimension of 2, as torch.view_as_real gives.
    const bool complex_as_real = t.dtype->safetensors == "C64" && !c64_native_;
    std::string_view written = t.dtype->safetensors;
    if (to_bf16) written = "BF16";
    if (complex_as_real) written = "F32";
    std::vector<uint64_t> shape;
    for (int64_t d : t.shape) shape.push_back(static_cast<uint64_t>(d));
    uint64_t elem_size = to_bf16 ? 2 : t.dtype->size;
    if (complex_as_real) {
      if (shape.size() >= safetensors::ValidatorLimits{}.max_rank) {
        return Refuse(t, absl::StrCat("complex64 is written as float32 with one more dimension "
                                      "(torch.view_as_real), and its rank ",
                                      shape.size(), " is already the most a file holds (",
                                      safetensors::ValidatorLimits{}.max_rank,
                                      "); --allow-dtype C64 writes it as C64"));
      }
      shape.push_back(2);
      elem_size = 4;
      as_real_.push_back(name);
    }
    std::string_view how = "as-is";
    if (to_bf16) {
      how = "bf16";
    } else if (keep_quantized) {
      how = "quantized-layer";
    } else if (complex_as_real) {
      how = "as-real";
    } else if (c64_native_ && written == "C64") {
      how = "allowed";
    }
    return Add(t, MakeEntry(i, name, to_bf16), written, std::move(shape), elem_size, t.dtype->name,
               how);
  }

  // A tied name is recorded as an alias in __metadata__: it must not be a written tensor's name
  // too (a quantized tensor's NAME.scale, say), or a reader restoring aliases would lose one.
  absl::Status CheckAliases() const {
    for (const auto& [alias, target] : plan_.aliases) {
      if (out_names_.count(alias) != 0) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "tensor '%s' is a tied weight of '%s', and a tensor of that name is written as well",
            base::AbslView(base::Escaped(alias)), base::AbslView(base::Escaped(target))));
      }
    }
    return absl::OkStatus();
  }

  // How many selected quantized layers of each layout there are, and how many of their float
  // tensors kept their dtype.
  void LayerUses() {
    for (size_t k = 0; k < layers_.size(); ++k) {
      if (!layer_selected_[k]) continue;
      auto it =
          std::find_if(plan_.quantized_layers.begin(), plan_.quantized_layers.end(),
                       [&](const Plan::LayoutUse& u) { return u.layout == layers_[k].layout; });
      if (it == plan_.quantized_layers.end()) {
        plan_.quantized_layers.push_back(
            Plan::LayoutUse{layers_[k].layout, 0, 0, layers_[k].prefix});
        it = plan_.quantized_layers.end() - 1;
      }
      ++it->layers;
      it->kept += kept_in_layer_[k];
    }
    std::sort(
        plan_.quantized_layers.begin(), plan_.quantized_layers.end(),
        [](const Plan::LayoutUse& a, const Plan::LayoutUse& b) { return a.layout < b.layout; });
  }

  // The selected values that are not tensors: listed, and refused with --strict.
  absl::Status NotWritten() {
    for (const torch::OtherValue& v : facts_.other_values.listed) {
      std::optional<std::string> name = SelectedName(v.name, options_.select);
      if (!name.has_value()) continue;
      plan_.not_written.push_back(torch::OtherValue{*std::move(name), v.type, v.offset});
    }
    plan_.not_written_total =
        options_.select.empty() ? facts_.other_values.total : plan_.not_written.size();
    if (!options_.strict || plan_.not_written_total == 0) return absl::OkStatus();
    std::string examples;
    for (size_t i = 0; i < plan_.not_written.size() && i < 5; ++i) {
      absl::StrAppend(&examples, i == 0 ? "" : ", ", "'",
                      base::AbslView(base::Escaped(plan_.not_written[i].name)), "' (",
                      base::AbslView(base::Escaped(plan_.not_written[i].type)), ")");
    }
    return absl::FailedPreconditionError(
        absl::StrCat("--strict: ", plan_.not_written_total,
                     plan_.not_written_total == 1 ? " value is" : " values are",
                     " not a tensor and would not be written: ", examples,
                     plan_.not_written_total > 5 ? ", ..." : ""));
  }

  // __metadata__: the aliases, then the provenance under the names it reserves (an alias may
  // not take one of them).
  absl::StatusOr<std::map<std::string, std::string>> Metadata() const {
    std::map<std::string, std::string> metadata = plan_.aliases;
    for (std::string_view reserved :
         {std::string_view("format"), std::string_view("ckptscan.source_sha256"),
          std::string_view("ckptscan.source_format"), std::string_view("ckptscan.version"),
          std::string_view("ckptscan.rules_version"), std::string_view("ckptscan.verdict"),
          std::string_view("ckptscan.dtype_policy"), std::string_view(kComplexAsRealKey),
          std::string_view(kQuantizedKey)}) {
      if (auto it = metadata.find(std::string(reserved)); it != metadata.end()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "tensor '%s' is a tied weight, recorded in __metadata__ under its name, which "
            "__metadata__ reserves for ckptscan's provenance",
            base::AbslView(base::Escaped(it->first))));
      }
    }
    metadata["format"] = "pt";
    if (!options_.source_sha256.empty()) {
      metadata["ckptscan.source_sha256"] = options_.source_sha256;
    }
    if (!options_.source_format.empty()) {
      metadata["ckptscan.source_format"] = options_.source_format;
    }
    if (!options_.scanner_version.empty()) metadata["ckptscan.version"] = options_.scanner_version;
    if (!options_.rules_version.empty()) {
      metadata["ckptscan.rules_version"] = options_.rules_version;
      metadata["ckptscan.verdict"] = "SAFE";  // nothing else is ever converted
    }
    metadata["ckptscan.dtype_policy"] = options_.to_bf16 ? "bf16" : "keep";
    if (!as_real_.empty()) {
      std::vector<std::string> names = as_real_;
      std::sort(names.begin(), names.end());
      // A name that is not UTF-8 is refused by SerializeHeader; `replace` only keeps the JSON
      // encoder from throwing on it first.
      metadata[kComplexAsRealKey] =
          nlohmann::json(names).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    if (!quantized_.empty()) {
      metadata[kQuantizedKey] =
          quantized_.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    return metadata;
  }

  const torch::FileFacts& facts_;
  const Options& options_;
  bool c64_native_ = false;
  Plan plan_;
  std::vector<safetensors::TensorSpec> specs_;
  std::vector<std::string> as_real_;  // output names of complex64 tensors written as F32 [..., 2]
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> uses_;
  std::set<std::string> out_names_;
  nlohmann::json quantized_ = nlohmann::json::object();  // kQuantizedKey, by output name
  std::map<ViewKey, std::string> kept_;
  std::vector<QuantizedLayer> layers_;
  std::map<std::string, size_t> layer_by_prefix_;
  std::vector<uint64_t> kept_in_layer_;
  std::vector<bool> layer_selected_;
};

}  // namespace

absl::StatusOr<Plan> PlanConversion(const torch::FileFacts& facts, const Options& options) {
  return Planner(facts, options).Run();
}

Options OptionsFromSpec(const worker::v1::ConvertSpec& spec, std::string_view source_format) {
  Options options;
  options.source_sha256 = spec.source_sha256();
  options.source_format = std::string(source_format);
  options.scanner_version = spec.scanner_version();
  options.select = spec.select();
  options.to_bf16 = spec.to_bf16();
  options.strict = spec.strict();
  options.rules_version = spec.rules_version();
  options.allow_dtypes.assign(spec.allow_dtypes().begin(), spec.allow_dtypes().end());
  options.cast_quantized = spec.cast_quantized();
  options.declared_quantization = spec.declared_quantization();
  for (const worker::v1::QuantizedLayerSpec& l : spec.quantized_layers()) {
    options.extra_layers.push_back(QuantizedLayer{l.prefix(), l.layout()});
  }
  return options;
}

// For a --select that names no tensor: the keys that do exist one level below the longest
// prefix of it that some tensor's name starts with (the top level when none does), with their
// tensor counts, at most kShownKeys of them.
static std::string KeysBesideSelect(const torch::FileFacts& facts, std::string_view select) {
  constexpr size_t kShownKeys = 20;
  std::string prefix;  // "" or "a.b."
  for (size_t dot = select.find('.'); dot != std::string_view::npos;
       dot = select.find('.', dot + 1)) {
    const std::string candidate = std::string(select.substr(0, dot)) + ".";
    bool used = false;
    for (const torch::TensorFact& t : facts.tensors) {
      used = used || absl::StartsWith(t.name, candidate);
    }
    if (!used) break;
    prefix = candidate;
  }
  std::map<std::string, size_t> keys;
  for (const torch::TensorFact& t : facts.tensors) {
    if (!absl::StartsWith(t.name, prefix)) continue;
    const std::string_view rest = std::string_view(t.name).substr(prefix.size());
    ++keys[std::string(rest.substr(0, rest.find('.')))];
  }
  if (keys.empty()) return "the file holds no tensor";
  std::string out =
      prefix.empty()
          ? "keys at the top level: "
          : absl::StrCat("keys under ",
                         base::AbslView(base::Escaped(prefix.substr(0, prefix.size() - 1))), ": ");
  size_t shown = 0;
  for (const auto& [key, n] : keys) {
    if (shown == kShownKeys) {
      absl::StrAppend(&out, ", and ", keys.size() - kShownKeys, " more");
      break;
    }
    absl::StrAppend(&out, shown == 0 ? "" : ", ", base::AbslView(base::Escaped(key)), " (", n,
                    n == 1 ? " tensor)" : " tensors)");
    ++shown;
  }
  return out;
}

absl::StatusOr<Plan> PlanFromSpec(const torch::FileFacts& facts,
                                  const worker::v1::ConvertSpec& spec) {
  absl::StatusOr<Plan> plan = PlanConversion(facts, OptionsFromSpec(spec, facts.format));
  if (plan.ok() && plan->entries.empty() && !spec.select().empty()) {
    return absl::NotFoundError(absl::StrCat("no tensor under --select ",
                                            base::AbslView(base::Escaped(spec.select())), "; ",
                                            KeysBesideSelect(facts, spec.select())));
  }
  return plan;
}

absl::Status WriteSafetensors(std::string_view file, const torch::FileFacts& facts,
                              const Plan& plan, ByteSink& out, size_t buffer_bytes,
                              const InputRelease& release) {
  if (buffer_bytes < 64) buffer_bytes = 64;
  if (absl::Status s = out.Write(plan.header.bytes); !s.ok()) return s;
  std::string raw;         // source elements of one chunk, row-major
  std::vector<float> f32;  // aligned copies for the bf16 kernels
  std::vector<uint16_t> f16;
  std::vector<uint16_t> bf16;
  std::string le;  // big-endian hosts only: the bf16 words byte-swapped
  for (const safetensors::Placement& p : plan.header.placements) {
    const Plan::Entry& entry = plan.entries[p.spec_index];
    if (!entry.literal.empty()) {
      if (absl::Status s = out.Write(entry.literal); !s.ok()) return s;
      continue;
    }
    const TensorFact& owner = facts.tensors[entry.tensor];
    const TensorFact& t =
        entry.channel < 0 ? owner : owner.qchannel[static_cast<size_t>(entry.channel)];
    const torch::StorageData& sd = facts.storage_data[static_cast<size_t>(t.storage)];
    const uint64_t es = t.dtype->size;
    const uint64_t numel = t.numel();
    if (!base::RangeWithin(sd.offset, sd.nbytes, file.size())) {
      return Refuse(t, "its storage lies outside the file");
    }
    const std::string_view storage = file.substr(sd.offset, sd.nbytes);
    // The plan checked the tensor against its storage's declared size; the bytes actually there
    // must hold it as well: nothing is ever read past them.
    if (absl::Status b = torch::CheckBounds(t, torch::ElementsIn(storage.size(), t.dtype));
        !b.ok()) {
      return Refuse(t, base::StdView(b.message()));
    }
    const uint64_t chunk = std::max<uint64_t>(1, buffer_bytes / es);
    const bool contiguous = IsRowMajorContiguous(t);
    std::vector<int64_t> index(t.shape.size(), 0);  // the odometer for strided views
    for (uint64_t k = 0; k < numel; k += chunk) {
      const uint64_t n = std::min(chunk, numel - k);
      // Bounds were checked when planning (CheckBounds), for every element reached here.
      if (contiguous && !entry.to_bf16) {
        // Straight from the mapped input, no copy.
        const std::string_view chunk_bytes = storage.substr((t.storage_offset + k) * es, n * es);
        if (absl::Status s = out.Write(chunk_bytes); !s.ok()) return s;
        if (release) release(chunk_bytes);
        continue;
      }
      // The chunk's source elements, row-major: in place when contiguous, else gathered.
      std::string_view src;
      if (contiguous) {
        src = storage.substr((t.storage_offset + k) * es, n * es);
      } else {
        raw.clear();
        for (uint64_t j = 0; j < n; ++j) {
          uint64_t e = t.storage_offset;
          for (size_t d = 0; d < index.size(); ++d) {
            e += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(t.stride[d]);
          }
          raw.append(storage.substr(e * es, es));
          for (size_t d = index.size(); d-- > 0;) {
            if (++index[d] < t.shape[d]) break;
            index[d] = 0;
          }
        }
        src = raw;
      }
      if (!entry.to_bf16) {
        if (absl::Status s = out.Write(src); !s.ok()) return s;
        continue;
      }
      // Copied once into an aligned buffer of the source type for the kernels.
      bf16.resize(n);
      if (es == 4) {
        f32.resize(n);
        std::memcpy(f32.data(), src.data(), n * 4);
        bf16::Fp32ToBf16(f32.data(), bf16.data(), n);
      } else {
        f16.resize(n);
        std::memcpy(f16.data(), src.data(), n * 2);
        bf16::Fp16ToBf16(f16.data(), bf16.data(), n);
      }
      if (contiguous && release) release(src);
      // safetensors is little-endian: on a little-endian host the words are already its bytes.
      std::string_view words(reinterpret_cast<const char*>(bf16.data()), n * 2);
      if constexpr (std::endian::native != std::endian::little) {
        le.resize(n * 2);
        for (uint64_t j = 0; j < n; ++j) {
          le[2 * j] = static_cast<char>(bf16[j] & 0xff);
          le[2 * j + 1] = static_cast<char>(bf16[j] >> 8);
        }
        words = le;
      }
      if (absl::Status s = out.Write(words); !s.ok()) return s;
    }
    // A strided view may come back anywhere in its storage: released when it is done.
    if (release && !IsRowMajorContiguous(t)) release(storage);
  }
  return absl::OkStatus();
}

}  // namespace ckptscan::convert
