// The conversion output on the trusted side (docs/sandbox.md): an unlinked file in the
// destination directory, published under its final name only after it was validated.
//
// The destination directory is opened once (CreateAt takes it as a descriptor, e.g. the
// daemon's confined one or a sharded set's staging directory; Create opens the final path's
// directory) and every later step is relative to that descriptor: a directory renamed or
// replaced by a symbolic link afterwards cannot redirect the output.
//
// CreateAt() opens the file with O_TMPFILE in the directory (no name: a crash or a refusal
// leaves nothing behind). Where the file system does not support O_TMPFILE it falls back to a
// named temporary file (".NAME.ckptscan-XXXXXXXX", created O_EXCL | O_NOFOLLOW) that the
// destructor unlinks unless it was published. The bytes are written by the caller (in-process)
// or by the jailed worker (descriptor 3; see DupForWorker). Validate() maps the file read-only
// and runs the strict safetensors validator on it; Publish() fsyncs it and gives it its final
// name: linkat(/proc/self/fd/N, AT_SYMLINK_FOLLOW) into the directory, which fails if the
// name exists, or with `replace`, a link under a temporary name renamed over the final one.
//
// Thread-compatible. Move-only.
//
//   CKPT_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Create(path));
//   ... write to out.fd() ...
//   CKPT_RETURN_IF_ERROR(out.Validate().status());
//   CKPT_RETURN_IF_ERROR(out.Publish(/*replace=*/false));
#ifndef CKPTSCAN_APP_OUTPUT_FILE_H_
#define CKPTSCAN_APP_OUTPUT_FILE_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "app/publish.h"
#include "base/unique_fd.h"
#include "ckptscan/v1/report.pb.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "core/convert/convert.h"
#include "core/safetensors/validator.h"

namespace ckptscan::app {

// `ckptscan convert`: what to convert, and where.
struct ConvertRequest {
  std::string input;
  // The final path of the .safetensors file (or of a sharded set's directory). With
  // `output_dir_fd`, only its last component is used to create anything; the rest is shown.
  std::string output;
  // Not owned; -1: none. The directory `output` is created in, already opened (the daemon's
  // descriptor confined beneath its roots; the CLI's opened once): the output, its signature and
  // a set's staging directory are created relative to it, never by re-resolving `output`.
  // Without it the conversion opens `output`'s directory once itself (OpenOutputDir).
  int output_dir_fd = -1;
  std::string select;                     // convert::Options::select
  std::string scanner_version;            // recorded in __metadata__
  std::string rules_version;              // recorded in __metadata__ (with the verdict, SAFE)
  bool replace = false;                   // --force: an existing output is replaced
  bool to_bf16 = false;                   // --dtype bf16 (convert::Options::to_bf16)
  bool strict = false;                    // --strict (convert::Options::strict)
  std::vector<std::string> allow_dtypes;  // --allow-dtype (convert::Options::allow_dtypes)
  bool cast_quantized = false;            // --cast-quantized (convert::Options::cast_quantized)
  // A sharded set's quantized layers, from its index (convert::Options::extra_layers); set by
  // ConvertShardSet for each shard.
  std::vector<convert::QuantizedLayer> quantized_layers;
  // quantization_config.quant_method of the config.json beside the input
  // (convert::Options::declared_quantization); read by ConvertFile for the top-level
  // input, never for an upload (its opener reads nothing but the upload).
  std::string declared_quantization;
  // --key / --sign-method: outputs are signed (app/publish.h) with this key, held by
  // the trusted side only (not owned; a null key = unsigned).
  SignOptions sign;
  // An input that is a sharded checkpoint's index converts as a set into the directory
  // `output` (app/shard_set.h). False for the shards themselves.
  bool allow_index = true;
  // Opens `input` and, for a sharded set, each shard (given as the index's directory + "/" +
  // the shard's name). Empty: OpenRegularFile (symlinks followed). The daemon confines both to
  // its roots (daemon/confine.h). (The in-process conversion of tests/inprocess/ ignores it.)
  std::function<absl::StatusOr<base::UniqueFd>(const std::string&)> open_input;
  // Tests only (no command line flag, RPC field or config key sets it): called by a sharded
  // set's conversion at each step of its staging directory's life ("mkdir", "shard N" after
  // the Nth shard, "index", "signed" with a key, "rename" before the last check, "renaming"
  // between that check and the rename), so that a test can play the caller who swaps it.
  std::function<void(std::string_view step)> staging_hook_for_test;
};

// The directory an output is created in, opened once, and the output's name in it.
struct OutputDir {
  base::UniqueFd owned;  // set when OpenOutputDir opened it
  int fd = -1;           // `owned`, or the request's output_dir_fd
  std::string name;      // the last component of `output`: a plain name
};

// request.output_dir_fd when set, else `output`'s directory opened O_PATH | O_DIRECTORY (the
// caller's own path: symbolic links in it are followed, once). The name must be a plain file
// name (not empty, ".", ".." or containing '/').
absl::StatusOr<OutputDir> OpenOutputDir(const ConvertRequest& request);
// The same for an output path alone (its directory opened here): scan --attest, OutputFile.
absl::StatusOr<OutputDir> OpenOutputDir(const std::string& output);

// The process's umask, read from /proc/self/status without changing it (022 if unreadable).
mode_t CurrentUmask();

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
  // The file `name` (a plain name) in the directory open on `dir_fd` (duplicated: the caller
  // may close its own). `shown` is the path messages name it by.
  static absl::StatusOr<OutputFile> CreateAt(int dir_fd, const std::string& name,
                                             std::string shown);
  // Opens `final_path`'s directory once, then CreateAt.
  static absl::StatusOr<OutputFile> Create(const std::string& final_path);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // unlinks a named temporary that was not published

  int fd() const { return fd_.get(); }
  int dir_fd() const { return dir_.get(); }
  const std::string& name() const { return name_; }
  bool is_tmpfile() const { return temp_name_.empty(); }

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

  // Removes the published name again, if it still names this file (unlinkat in the
  // directory; a file someone else put under the name is left alone).
  absl::Status Unpublish();

 private:
  OutputFile(base::UniqueFd dir, std::string name, std::string shown, std::string temp_name,
             base::UniqueFd fd)
      : dir_(std::move(dir)),
        name_(std::move(name)),
        shown_(std::move(shown)),
        temp_name_(std::move(temp_name)),
        fd_(std::move(fd)) {}

  base::UniqueFd dir_;     // the directory, opened once
  std::string name_;       // the final name in it
  std::string shown_;      // the final path, for messages
  std::string temp_name_;  // empty for an O_TMPFILE file
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

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_OUTPUT_FILE_H_
