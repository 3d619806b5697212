#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/compress/decompress.h"
#include "core/content/content.h"
#include "core/content/template_check.h"
#include "core/formats/reader.h"
#include "core/safetensors/validator.h"
#include "core/torch/keras_config.h"
#include "core/torch/legacy.h"
#include "core/torch/numpy.h"
#include "core/torch/repo_json.h"
#include "core/torch/tar.h"
#include "core/torch/tensors.h"
#include "core/zip/zipfile_view.h"

namespace ckptscan::formats {

void Reader::Gguf(std::string_view data) {
  out_->format = "gguf";
  uint64_t at = 0;
  absl::StatusOr<gguf::File> file = gguf::Read(data, options_.gguf, &at);
  if (file.ok()) {
    out_->gguf =
        torch::GgufFacts{true,           file->version,   file->tensors.size(),
                         file->kv_count, file->alignment, file->data_end - file->data_start};
    for (const gguf::Anomaly& a : file->anomalies) Anomaly(a.kind, "", a.offset, a.message);
    for (const gguf::Template& t : file->templates) {
      Template(t.text, "", absl::StrCat("GGUF ", base::AbslView(t.key)), t.offset,
               /*in_json=*/false);
    }
    GgufTensors(*file);
  } else {
    Error(file.status(), absl::StrCat("gguf: ", file.status().message()), "", at);
  }
}

void Reader::GgufTensors(const gguf::File& file) {
  for (const gguf::Tensor& g : file.tensors) {
    const gguf::GgmlType* type = gguf::FindGgmlType(g.type);
    torch::TensorFact t;
    t.name = g.name;
    t.offset = g.info_offset;
    for (size_t k = g.dims.size(); k-- > 0;) t.shape.push_back(static_cast<int64_t>(g.dims[k]));
    t.stride.assign(t.shape.size(), 1);
    for (size_t k = t.shape.size(); k-- > 1;) {
      // The reader bounded the element count below INT64_MAX.
      t.stride[k - 1] = t.stride[k] * std::max<int64_t>(t.shape[k], 1);
    }
    t.dtype = GgmlDtype(type->name);
    torch::StorageRef s;
    s.key = g.name;
    s.location = "cpu";
    s.pid_offset = g.info_offset;
    if (t.dtype != nullptr) {
      s.dtype = t.dtype;
      s.numel = g.nbytes / t.dtype->size;
    } else {
      s.untyped = true;
      s.numel = g.nbytes;
      t.kind = torch::TensorFact::Kind::kOther;
      t.problem = absl::StrCat("ggml type ", base::AbslView(type->name), " (blocks of ",
                               type->block_elements, " elements in ", type->block_bytes,
                               " bytes) is not a dtype this converter writes");
    }
    t.storage = static_cast<int32_t>(out_->storages.size());
    out_->storages.push_back(std::move(s));
    out_->storage_data.push_back(
        torch::StorageData{g.name, "", g.offset, g.nbytes, /*stored=*/true});
    out_->tensors.push_back(std::move(t));
  }
}

const torch::DTypeInfo* Reader::GgmlDtype(std::string_view ggml) {
  static constexpr std::pair<std::string_view, std::string_view> kPlain[] = {
      {"F32", "float32"}, {"F16", "float16"}, {"BF16", "bfloat16"}, {"F64", "float64"},
      {"I8", "int8"},     {"I16", "int16"},   {"I32", "int32"},     {"I64", "int64"}};
  for (const auto& [g, torch_name] : kPlain) {
    if (g == ggml) return torch::DTypeFromName(torch_name);
  }
  return nullptr;
}

}  // namespace ckptscan::formats
