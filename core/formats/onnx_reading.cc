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
#include "base/json_python.h"
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

void Reader::Onnx(std::string_view data) {
  out_->format = "onnx";
  absl::StatusOr<onnx_check::Model> model = onnx_check::Read(data, options_.onnx);
  if (model.ok()) {
    out_->onnx =
        torch::OnnxFacts{true, model->ir_version, model->nodes, model->graphs, model->tensors};
    for (const onnx_check::Finding& f : model->findings) {
      Anomaly(f.kind, "", 0, absl::StrCat(base::AbslView(f.where), ": ", base::AbslView(f.message)),
              /*must_flag=*/f.kind != "external_data", "onnx");
    }
    if (!model->unverified.ok()) {
      Error(model->unverified, absl::StrCat("onnx: ", model->unverified.message()), "", 0);
    }
  } else {
    Error(model.status(), absl::StrCat("onnx: ", model.status().message()), "", 0);
  }
  // A model's skipped fields can hold any text, so such bytes may also be JSON: when they begin
  // as a JSON object, json.loads's reading (a config.json's auto_map) is judged too. (The
  // pickle and zipfile readings run on every file: read_file.cc's loaders.)
  if (base::StartsWithJsonObject(data)) JsonDocument(data);
}

}  // namespace ckptscan::formats
