#include "pipeline/sign_output.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/signing/bundle.h"
#include "core/signing/manifest.h"
#include "pipeline/sha256.h"

namespace ckptscan::pipeline {

absl::StatusOr<std::string> SignFileModel(int fd, uint64_t size, const std::string& model_name,
                                          const signing::PrivateKey& key) {
  absl::StatusOr<std::string> digest = Sha256HexOfFd(fd, size);
  if (!digest.ok()) return digest.status();
  signing::Manifest manifest;
  manifest.model_name = model_name;
  manifest.AddFile(".", *std::move(digest));
  return signing::Sign(manifest, key);
}

absl::StatusOr<std::string> SignDirectoryModel(const std::string& dir,
                                               const std::string& model_name,
                                               const std::string& signature_name,
                                               const signing::PrivateKey& key) {
  signing::HashOptions options;
  options.serialization.ignore_paths = {signature_name};
  absl::StatusOr<signing::Manifest> manifest = signing::HashModel(dir, options);
  if (!manifest.ok()) return manifest.status();
  manifest->model_name = model_name;
  return signing::Sign(*manifest, key);
}

std::string SignaturePathFor(const std::string& output) { return absl::StrCat(output, ".sig"); }

}  // namespace ckptscan::pipeline
