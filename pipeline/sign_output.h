// Signing conversion outputs on the trusted side (docs/signing.md): the key lives in the
// process that publishes, never in a worker, and what is signed is read back from the
// validated output by this process (a worker's word about its own bytes is never signed).
//
// A single output file is a single-file model (its only resource is ".", as model_signing
// names it) signed before it is published, its bundle written beside it as OUT.sig; a
// sharded set is a directory model signed inside the staging directory, both cores hashing,
// its bundle written as model.sig in it (and ignored by the signature), before the set is
// renamed into place. Either way a signed output is never visible without its signature.
//
// Thread-compatible.
#ifndef CKPTSCAN_PIPELINE_SIGN_OUTPUT_H_
#define CKPTSCAN_PIPELINE_SIGN_OUTPUT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/signing/keys.h"

namespace ckptscan::pipeline {

// The bundle for the single-file model on `fd` (`size` bytes, hashed by pread), named
// `model_name` in the statement.
absl::StatusOr<std::string> SignFileModel(int fd, uint64_t size, const std::string& model_name,
                                          const signing::PrivateKey& key);

// The bundle for the directory model `dir` (every regular file but `signature_name`, which is
// recorded as ignored), named `model_name` in the statement.
absl::StatusOr<std::string> SignDirectoryModel(const std::string& dir,
                                               const std::string& model_name,
                                               const std::string& signature_name,
                                               const signing::PrivateKey& key);

// OUT -> OUT.sig: where a single output file's signature goes.
std::string SignaturePathFor(const std::string& output);

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_PIPELINE_SIGN_OUTPUT_H_
