// The conversion output on the trusted side (docs/sandbox.md): an unlinked file in the
// destination directory, published under its final name only after it was validated.
//
// Create() opens the file with O_TMPFILE in the final path's directory (no name: a crash or a
// refusal leaves nothing behind). Where the file system does not support O_TMPFILE it falls
// back to a named temporary file (".NAME.ckptscan-XXXXXX", created O_EXCL) that the destructor
// unlinks unless it was published. The bytes are written by the caller (in-process) or by the
// jailed worker (descriptor 3; see DupForWorker). Validate() maps the file read-only and runs
// the strict safetensors validator on it; Publish() fsyncs it and gives it its final name:
// linkat(/proc/self/fd/N, AT_SYMLINK_FOLLOW), which fails if the name exists, or with
// `replace`, a link under a temporary name renamed over the final one.
//
// Thread-compatible. Move-only.
//
//   CKPT_ASSIGN_OR_RETURN(pipeline::OutputFile out, pipeline::OutputFile::Create(path));
//   ... write to out.fd() ...
//   CKPT_RETURN_IF_ERROR(out.Validate().status());
//   CKPT_RETURN_IF_ERROR(out.Publish(/*replace=*/false));
#ifndef CKPTSCAN_PIPELINE_OUTPUT_FILE_H_
#define CKPTSCAN_PIPELINE_OUTPUT_FILE_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckptscan/v1/report.pb.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "core/base/unique_fd.h"
#include "core/convert/convert.h"
#include "pipeline/sign_output.h"
#include "core/safetensors/validator.h"

namespace ckptscan::pipeline {

// `ckptscan convert`: what to convert, and where.
struct ConvertRequest {
  std::string input;
  std::string output;           // the final path of the .safetensors file
  std::string select;           // convert::Options::select
  std::string scanner_version;  // recorded in __metadata__
  std::string rules_version;    // recorded in __metadata__ (with the verdict, SAFE)
  bool replace = false;         // --force: an existing output is replaced
  bool to_bf16 = false;         // --dtype bf16 (convert::Options::to_bf16)
  bool strict = false;          // --strict (convert::Options::strict)
  // --key / --sign-method: outputs are signed (pipeline/sign_output.h) with this key, held by
  // the trusted side only (not owned; a null key = unsigned).
  SignOptions sign;
  // An input that is a sharded checkpoint's index converts as a set into the directory
  // `output` (pipeline/shard_set.h). False for the shards themselves.
  bool allow_index = true;
  // Opens `input` and, for a sharded set, each shard (given as the index's directory + "/" +
  // the shard's name). Empty: OpenRegularFile (symlinks followed). The daemon confines both to
  // its roots (daemon/confine.h); the jailed path uses it, the in-process path does not.
  std::function<absl::StatusOr<base::UniqueFd>(const std::string&)> open_input;
};

// The spec both sides plan from (convert::PlanFromSpec): the request's selection and dtype
// policy, the input's digest, the scanner version.
worker::v1::ConvertSpec SpecFor(const ConvertRequest& request, const std::string& sha256);

// What a conversion did. `report` is the scan's report, exactly as `scan` makes it, plus
// `conversion` when the output was published; `status` is OK when the output was written and
// published, FailedPrecondition when the verdict was not SAFE (nothing written), another error
// when the conversion or its validation failed.
struct ConvertResult {
  v1::FileReport report;
  absl::Status status;
  // A sharded set (the input was an index): every shard's report, in shard order.
  std::vector<v1::FileReport> shard_reports;
};

class OutputFile final {
 public:
  static absl::StatusOr<OutputFile> Create(const std::string& final_path);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // unlinks a named temporary that was not published

  int fd() const { return fd_.get(); }
  bool is_tmpfile() const { return temp_path_.empty(); }

  // Writes `bytes` at `offset` (pwrite, retried until whole): the trusted side's header.
  absl::Status WriteAt(uint64_t offset, std::string_view bytes);

  // A close-on-exec duplicate of the descriptor, to hand to a worker as its descriptor 3.
  absl::StatusOr<base::UniqueFd> DupForWorker() const;

  // Maps the whole file read-only and validates it (strict profile). When `expected_header`
  // is not empty the file must begin with exactly those bytes (8-byte length + header JSON).
  absl::StatusOr<safetensors::Layout> Validate(std::string_view expected_header = {}) const;

  // fsync, then link under the final name (fails with AlreadyExists if it exists, unless
  // `replace`). After a failure nothing is left under any name.
  absl::Status Publish(bool replace);

 private:
  OutputFile(std::string final_path, std::string temp_path, base::UniqueFd fd)
      : final_path_(std::move(final_path)), temp_path_(std::move(temp_path)), fd_(std::move(fd)) {}

  std::string final_path_;
  std::string temp_path_;  // empty for an O_TMPFILE file
  base::UniqueFd fd_;
  bool published_ = false;
};

// The trusted side's last step, for both paths: the output written by the worker (or in
// process) must begin with exactly `plan`'s header, be exactly the planned size and pass the
// strict validator; then it is published (`request.replace`) and described for the report.
// `early` (may be null): shard digests of the output computed before its header was written
// (SignFileModel).
absl::StatusOr<v1::Conversion> ValidateAndPublish(OutputFile& out, const convert::Plan& plan,
                                                  const ConvertRequest& request,
                                                  const ShardDigests* early = nullptr);

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_PIPELINE_OUTPUT_FILE_H_
