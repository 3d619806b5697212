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

void Reader::Safetensors(std::string_view data) {
  out_->format = "safetensors";
  absl::StatusOr<safetensors::Layout> layout =
      safetensors::Validate(data, options_.safetensors);
  if (layout.ok()) {
    torch::SafetensorsFacts& f = out_->safetensors;
    f.valid = true;
    f.tensors = layout->tensors.size();
    f.header_length = layout->header_length;
    f.data_bytes = layout->file_size - layout->data_start;
    f.has_metadata = layout->has_metadata;
    SafetensorsTensors(*layout);
  } else {
    Error(layout.status(), std::string(layout.status().message()), "", 0);
  }
}

void Reader::SafetensorsTensors(const safetensors::Layout& layout) {
  for (const safetensors::TensorLayout& st : layout.tensors) {
    torch::TensorFact t;
    t.name = st.name;
    t.offset = 8;  // the header
    const std::string_view dtype_name = safetensors::DtypeName(st.dtype);
    t.dtype = torch::DTypeFromSafetensors(dtype_name);
    for (uint64_t d : st.shape) {
      if (d > static_cast<uint64_t>(INT64_MAX)) {
        t.problem = "a dimension over 2^63-1";
        break;
      }
      t.shape.push_back(static_cast<int64_t>(d));
    }
    if (t.dtype == nullptr) {
      t.problem =
          absl::StrCat("dtype ", base::AbslView(dtype_name), " is not one this converter writes");
    }
    if (!t.problem.empty()) {
      t.kind = torch::TensorFact::Kind::kOther;
      t.shape.clear();
      out_->tensors.push_back(std::move(t));
      continue;
    }
    t.stride.assign(t.shape.size(), 1);
    for (size_t k = t.shape.size(); k-- > 1;) {
      // Row-major strides; the validator bounded numel x size by the file, so no overflow.
      t.stride[k - 1] = t.stride[k] * std::max<int64_t>(t.shape[k], 1);
    }
    torch::StorageRef s;
    s.key = st.name;
    s.dtype = t.dtype;
    s.numel = t.dtype->size == 0 ? 0 : (st.end - st.begin) / t.dtype->size;
    s.location = "cpu";
    s.pid_offset = 8;
    t.storage = static_cast<int32_t>(out_->storages.size());
    out_->storages.push_back(std::move(s));
    out_->storage_data.push_back(
        torch::StorageData{st.name, "", st.begin, st.end - st.begin, /*stored=*/true});
    out_->tensors.push_back(std::move(t));
  }
}

}  // namespace ckptscan::formats
