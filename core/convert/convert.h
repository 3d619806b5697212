// Conversion of a verified checkpoint's tensors to safetensors, from the facts alone.
//
// Nothing is loaded or unpickled: the tensors' names, dtypes, shapes, strides and where their
// bytes are come from the worker's FileFacts (core/torch), and the bytes are gathered from the
// file itself into row-major order, a bounded buffer at a time, whatever the model's size.
// Views and storage offsets are written contiguous; tensors that are the same view of the same
// storage (tied weights) are stored once, the other names recorded in `__metadata__` as
// removed name -> kept name (Hugging Face's convention). A checkpoint that is one bare tensor
// (torch.save(t), an .npy file) writes it under the name "tensor". A tensor safetensors cannot
// hold (quantized, sparse, meta, complex128, a compressed or big-endian storage) is an error
// naming it. Output bytes are deterministic (core/safetensors/writer.h).
//
// Thread-compatible; the sink is written from the calling thread only.
//
//   CKPT_ASSIGN_OR_RETURN(convert::Plan plan, convert::PlanConversion(facts, options));
//   CKPT_RETURN_IF_ERROR(convert::WriteSafetensors(file_bytes, facts, plan, sink));
#ifndef CKPTSCAN_CORE_CONVERT_CONVERT_H_
#define CKPTSCAN_CORE_CONVERT_CONVERT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "core/safetensors/writer.h"
#include "core/torch/file_facts.h"

namespace ckptscan::convert {

// Where output bytes go (a file descriptor in the worker, a string in tests).
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  [[nodiscard]] virtual absl::Status Write(std::string_view bytes) = 0;
};

// Writes to a descriptor (base::WriteAll); errors start with `what`.
class FdSink final : public ByteSink {
 public:
  FdSink(int fd, std::string what) : fd_(fd), what_(std::move(what)) {}
  absl::Status Write(std::string_view bytes) override {
    return base::WriteAll(fd_, bytes, what_);
  }

 private:
  int fd_;
  std::string what_;
};

class StringSink final : public ByteSink {
 public:
  absl::Status Write(std::string_view bytes) override {
    out_.append(bytes);
    return absl::OkStatus();
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

struct Options {
  // Provenance recorded in __metadata__ (besides "format": "pt").
  std::string source_sha256;
  std::string source_format;
  std::string scanner_version;
  std::string rules_version;  // with "ckptscan.verdict": "SAFE" (only SAFE input converts)
  // Write only the tensors under this dotted key, with the prefix dropped ("" = all).
  std::string select;
  // Bytes gathered per write (memory stays bounded by this whatever the model size).
  size_t buffer_bytes = 1 << 20;
  // --dtype bf16: float32 and float16 tensors are written as bfloat16 (round to nearest even,
  // core/bf16); other dtypes are kept.
  bool to_bf16 = false;
  // --strict: a value beside the selected tensors (one the output would not hold) is an error.
  bool strict = false;
};

struct Plan {
  struct Entry {
    size_t tensor;         // index into FileFacts::tensors
    std::string name;      // output name
    bool to_bf16 = false;  // written as bfloat16 (from float32 or float16)
  };
  std::vector<Entry> entries;                  // parallel to the header's specs
  std::map<std::string, std::string> aliases;  // removed name -> kept name
  safetensors::SerializedHeader header;
  // Values beside the selected tensors, which the output does not hold (named as in the
  // output, i.e. without the --select prefix). At most torch::kMaxListedOtherValues listed;
  // the total is exact without --select, else a lower bound when the facts' list was cut.
  std::vector<torch::OtherValue> not_written;
  uint64_t not_written_total = 0;
};

absl::StatusOr<Plan> PlanConversion(const torch::FileFacts& facts, const Options& options);

// The options a conversion request carries (select, dtype policy, provenance), for facts of a
// file of `source_format`.
Options OptionsFromSpec(const worker::v1::ConvertSpec& spec, std::string_view source_format);
// PlanConversion with OptionsFromSpec, and a --select that matches no tensor is NotFound. The
// worker plans with it and the trusted side re-plans with it from the same spec, so the header
// it requires of the worker's output is the worker's plan by construction.
absl::StatusOr<Plan> PlanFromSpec(const torch::FileFacts& facts,
                                  const worker::v1::ConvertSpec& spec);

// Called with ranges of `file` that WriteSafetensors has finished reading, so that a caller
// holding the input as a file mapping can drop those pages (pipeline::ReleaseMappedPages):
// the touched input then never accumulates in the process's memory, whatever its size.
using InputRelease = std::function<void(std::string_view)>;

// Writes the header and every stored tensor's bytes, gathered from `file` (the whole input).
absl::Status WriteSafetensors(std::string_view file, const torch::FileFacts& facts,
                              const Plan& plan, ByteSink& out, size_t buffer_bytes = 1 << 20,
                              const InputRelease& release = nullptr);

}  // namespace ckptscan::convert

#endif  // CKPTSCAN_CORE_CONVERT_CONVERT_H_
