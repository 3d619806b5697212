#include "core/convert/convert.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/strings.h"
#include "core/bf16/bf16.h"
#include "core/safetensors/validator.h"
#include "nlohmann/json.hpp"

namespace ckptscan::convert {
namespace {

using torch::TensorFact;

absl::Status Refuse(const TensorFact& t, std::string_view why) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "tensor '%s' cannot be converted: %s", base::AbslView(base::Escaped(t.name)),
      base::AbslView(why)));
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

}  // namespace

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

absl::StatusOr<Plan> PlanConversion(const torch::FileFacts& facts, const Options& options) {
  for (const torch::ContainerAnomaly& a : facts.anomalies) {
    if (a.kind == "byteorder") {
      return absl::FailedPreconditionError("big-endian storages are not converted");
    }
  }
  for (const std::string& d : options.allow_dtypes) {
    if (absl::Status s = CheckAllowDtype(d); !s.ok()) return s;
  }
  const bool c64_native = std::find(options.allow_dtypes.begin(), options.allow_dtypes.end(),
                                    "C64") != options.allow_dtypes.end();
  Plan plan;
  std::vector<safetensors::TensorSpec> specs;
  std::vector<std::string> as_real;  // output names of complex64 tensors written as F32 [..., 2]
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> uses;
  // Identical views of one storage (tied weights): the first name in byte order is kept.
  using ViewKey = std::tuple<int32_t, uint64_t, std::vector<int64_t>, std::vector<int64_t>,
                             const torch::DTypeInfo*>;
  std::map<ViewKey, std::string> kept;
  std::vector<size_t> order;
  for (size_t i = 0; i < facts.tensors.size(); ++i) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return facts.tensors[a].name < facts.tensors[b].name;
  });
  for (size_t i : order) {
    const TensorFact& t = facts.tensors[i];
    std::optional<std::string> name = SelectedName(t.name, options.select);
    if (!name.has_value()) continue;
    if (!t.problem.empty()) return Refuse(t, t.problem);
    if (t.dtype == nullptr || t.dtype->safetensors.empty()) {
      return Refuse(t, absl::StrCat("safetensors has no dtype for ",
                                    t.dtype ? base::AbslView(t.dtype->name) : "an unknown dtype"));
    }
    if (t.storage < 0 || static_cast<size_t>(t.storage) >= facts.storage_data.size()) {
      return Refuse(t, "no storage");
    }
    const torch::StorageData& sd = facts.storage_data[static_cast<size_t>(t.storage)];
    if (!sd.stored) return Refuse(t, "its storage is compressed in the container");
    const torch::StorageRef& s = facts.storages[static_cast<size_t>(t.storage)];
    absl::Status bounds = torch::CheckBounds(t, s.numel);
    if (!bounds.ok()) return Refuse(t, base::StdView(bounds.message()));
    ViewKey key{t.storage, t.storage_offset, t.shape, t.stride, t.dtype};
    auto [it, inserted] = kept.emplace(key, *name);
    if (!inserted) {
      plan.aliases[*name] = it->second;
      continue;
    }
    const bool to_bf16 =
        options.to_bf16 && (t.dtype->name == "float32" || t.dtype->name == "float16");
    // complex64 is interleaved (real, imaginary) float32 pairs: the same bytes are a float32
    // tensor with a trailing dimension of 2, as torch.view_as_real gives.
    const bool complex_as_real = t.dtype->safetensors == "C64" && !c64_native;
    std::string_view written = t.dtype->safetensors;
    if (to_bf16) written = "BF16";
    if (complex_as_real) written = "F32";
    std::optional<safetensors::Dtype> dtype = safetensors::ParseDtype(written);
    if (!dtype.has_value()) return Refuse(t, "unknown safetensors dtype");
    safetensors::TensorSpec spec;
    spec.name = *name;
    spec.dtype = *dtype;
    for (int64_t d : t.shape) spec.shape.push_back(static_cast<uint64_t>(d));
    if (complex_as_real) {
      if (spec.shape.size() >= safetensors::ValidatorLimits{}.max_rank) {
        return Refuse(t, absl::StrCat("complex64 is written as float32 with one more dimension "
                                      "(torch.view_as_real), and its rank ",
                                      spec.shape.size(), " is already the most a file holds (",
                                      safetensors::ValidatorLimits{}.max_rank,
                                      "); --allow-dtype C64 writes it as C64"));
      }
      spec.shape.push_back(2);
      as_real.push_back(*name);
    }
    std::string_view how = "as-is";
    if (to_bf16) {
      how = "bf16";
    } else if (complex_as_real) {
      how = "as-real";
    } else if (c64_native && written == "C64") {
      how = "allowed";
    }
    ++uses[{std::string(t.dtype->name), std::string(written), std::string(how)}];
    uint64_t numel = t.numel();
    const uint64_t out_size = to_bf16 ? 2 : t.dtype->size;
    if (numel == UINT64_MAX || !base::CheckedMul<uint64_t>(numel, out_size, &spec.byte_size)) {
      return Refuse(t, "its size overflows");
    }
    specs.push_back(std::move(spec));
    plan.entries.push_back(Plan::Entry{i, *name, to_bf16});
  }
  for (const torch::OtherValue& v : facts.other_values.listed) {
    std::optional<std::string> name = SelectedName(v.name, options.select);
    if (!name.has_value()) continue;
    plan.not_written.push_back(torch::OtherValue{*std::move(name), v.type, v.offset});
  }
  plan.not_written_total =
      options.select.empty() ? facts.other_values.total : plan.not_written.size();
  if (options.strict && plan.not_written_total > 0) {
    std::string examples;
    for (size_t i = 0; i < plan.not_written.size() && i < 5; ++i) {
      absl::StrAppend(&examples, i == 0 ? "" : ", ", "'",
                      base::AbslView(base::Escaped(plan.not_written[i].name)), "' (",
                      base::AbslView(base::Escaped(plan.not_written[i].type)), ")");
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--strict: ", plan.not_written_total,
        plan.not_written_total == 1 ? " value is" : " values are",
        " not a tensor and would not be written: ", examples,
        plan.not_written_total > 5 ? ", ..." : ""));
  }
  std::map<std::string, std::string> metadata = plan.aliases;
  for (std::string_view reserved :
       {std::string_view("format"), std::string_view("ckptscan.source_sha256"),
        std::string_view("ckptscan.source_format"), std::string_view("ckptscan.version"),
        std::string_view("ckptscan.rules_version"), std::string_view("ckptscan.verdict"),
        std::string_view("ckptscan.dtype_policy"), std::string_view(kComplexAsRealKey)}) {
    if (auto it = metadata.find(std::string(reserved)); it != metadata.end()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "tensor '%s' is a tied weight, recorded in __metadata__ under its name, which "
          "__metadata__ reserves for ckptscan's provenance",
          base::AbslView(base::Escaped(it->first))));
    }
  }
  metadata["format"] = "pt";
  if (!options.source_sha256.empty()) metadata["ckptscan.source_sha256"] = options.source_sha256;
  if (!options.source_format.empty()) metadata["ckptscan.source_format"] = options.source_format;
  if (!options.scanner_version.empty()) metadata["ckptscan.version"] = options.scanner_version;
  if (!options.rules_version.empty()) {
    metadata["ckptscan.rules_version"] = options.rules_version;
    metadata["ckptscan.verdict"] = "SAFE";  // nothing else is ever converted
  }
  metadata["ckptscan.dtype_policy"] = options.to_bf16 ? "bf16" : "keep";
  if (!as_real.empty()) {
    std::sort(as_real.begin(), as_real.end());
    // A name that is not UTF-8 is refused by SerializeHeader below; `replace` only keeps the
    // JSON encoder from throwing on it first.
    metadata[kComplexAsRealKey] =
        nlohmann::json(as_real).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  for (const auto& [key, count] : uses) {
    const auto& [source, written, how] = key;
    plan.dtypes.push_back(Plan::DtypeUse{source, written, how, count});
  }
  absl::StatusOr<safetensors::SerializedHeader> header =
      safetensors::SerializeHeader(specs, metadata);
  if (!header.ok()) return header.status();
  plan.header = *std::move(header);
  return plan;
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
  return options;
}

absl::StatusOr<Plan> PlanFromSpec(const torch::FileFacts& facts,
                                  const worker::v1::ConvertSpec& spec) {
  absl::StatusOr<Plan> plan = PlanConversion(facts, OptionsFromSpec(spec, facts.format));
  if (plan.ok() && plan->entries.empty() && !spec.select().empty()) {
    return absl::NotFoundError(absl::StrCat("no tensor under --select ",
                                            base::AbslView(base::Escaped(spec.select()))));
  }
  return plan;
}

absl::Status WriteSafetensors(std::string_view file, const torch::FileFacts& facts,
                              const Plan& plan, ByteSink& out, size_t buffer_bytes,
                              const InputRelease& release) {
  if (buffer_bytes < 64) buffer_bytes = 64;
  if (absl::Status s = out.Write(plan.header.bytes); !s.ok()) return s;
  std::string raw;              // source elements of one chunk, row-major
  std::vector<float> f32;       // aligned copies for the bf16 kernels
  std::vector<uint16_t> f16;
  std::vector<uint16_t> bf16;
  std::string le;  // big-endian hosts only: the bf16 words byte-swapped
  for (const safetensors::Placement& p : plan.header.placements) {
    const Plan::Entry& entry = plan.entries[p.spec_index];
    const TensorFact& t = facts.tensors[entry.tensor];
    const torch::StorageData& sd = facts.storage_data[static_cast<size_t>(t.storage)];
    const uint64_t es = t.dtype->size;
    const uint64_t numel = t.numel();
    if (!base::RangeWithin(sd.offset, sd.nbytes, file.size())) {
      return Refuse(t, "its storage lies outside the file");
    }
    const std::string_view storage = file.substr(sd.offset, sd.nbytes);
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
