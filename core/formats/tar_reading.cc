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

void Reader::Tar(std::string_view data) {
  absl::StatusOr<torch::TarArchive> ar = torch::ReadTar(data, options_.tar);
  if (ar.ok() && torch::IsTorchTar(*ar)) {
    torch::ReadTorchTar(data, *ar, vm_, options_.tar, options_.trace, out_);
  } else {
    out_->format = "tar";
    if (!ar.ok()) {
      Error(ar.status(), std::string(ar.status().message()), "", 0);
    } else {
      for (const torch::ContainerAnomaly& a : ar->anomalies) out_->anomalies.push_back(a);
      Error(v1::ERROR_CODE_UNSUPPORTED,
            "tar: an archive that is not a torch checkpoint (no storages, tensors or pickle "
            "member)",
            "", 0);
    }
  }
  // When tarfile fails anywhere, torch.load goes on with pickle.load from offset 0: the
  // header bytes (a member name is any 100 bytes) as a pickle.
  PickleReading(data, "(as pickle)", true);
}

}  // namespace ckptscan::formats
