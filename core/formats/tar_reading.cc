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
  // header bytes (a member name is any 100 bytes) as a pickle (File runs that reading).
}

void Reader::TarAlternative(std::string_view data) {
  // The file is something else, but its first block is a tar header: torch.load opens it with
  // tarfile and extracts "storages" (torch/serialization.py _legacy_load's tar branch), then
  // "tensors" and "pickle", each read by pickle.load. A tar without "storages" makes it raise
  // KeyError there, before any pickle is read.
  absl::StatusOr<torch::TarArchive> ar = torch::ReadTar(data, options_.tar);
  constexpr std::string_view kWho = "(as torch.load: tar)";
  if (!ar.ok()) {
    // Our tar reader stops where tarfile may not (a header kind we do not read, a limit):
    // torch.load's reading of the file is not verified.
    Error(ar.status(),
          absl::StrCat("torch.load reads the file as a tar archive (its first block is a valid "
                       "header), which ckptscan cannot read: ",
                       ar.status().message()),
          kWho, 0);
    return;
  }
  if (!torch::IsTorchTar(*ar)) {
    Anomaly("polyglot", std::string(kWho), 0,
            "the first block is a tar header: torch.load opens the file with tarfile, finds no "
            "storages member and fails",
            /*must_flag=*/false);
    return;
  }
  Anomaly("polyglot", std::string(kWho), 0,
          "the file is also a torch tar checkpoint (its first block is a valid tar header): "
          "torch.load reads that archive's pickles; both readings are scanned");
  torch::FileFacts sub;
  torch::ReadTorchTar(data, *ar, vm_, options_.tar, nullptr, &sub);
  MergeAlternative(std::move(sub), kWho);
}

}  // namespace ckptscan::formats
