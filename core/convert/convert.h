// Conversion of a verified checkpoint's tensors to safetensors, from the facts alone.
//
// Nothing is loaded or unpickled: the tensors' names, dtypes, shapes, strides and where their
// bytes are come from the worker's FileFacts (core/torch), and the bytes are gathered from the
// file itself into row-major order, a bounded buffer at a time, whatever the model's size.
// Views and storage offsets are written contiguous; tensors that are the same view of the same
// storage (tied weights) are stored once, the other names recorded in `__metadata__` as
// removed name -> kept name (Hugging Face's convention). A checkpoint that is one bare tensor
// (torch.save(t), an .npy file) writes it under the name "tensor". A tensor safetensors cannot
// hold (packed 4-bit quantized, sparse, meta, complex128, a compressed or big-endian storage) is an
// error naming it. Output bytes are deterministic (core/safetensors/writer.h).
//
// Which dtype is written how (docs/safetensors.md, "Dtypes: what is written"): every dtype
// safetensors 0.4.5 (Debian 13) reads is written as is; complex64, which no safetensors
// before 0.7.0 reads (the whole file fails with InvalidHeaderDeserialization), is written as
// float32 with a trailing dimension of 2 (torch.view_as_real: the same bytes), its names listed
// in __metadata__ under kComplexAsRealKey, unless Options::allow_dtypes holds "C64".
//
// Quantized weights: a torch-quantized tensor (qint8, quint8, qint32) is written as its integer
// data plus its scale, zero point and axis as tensors of their own (kQuantizedKey); under
// --dtype bf16 the float tensors of layers that GPTQ, AWQ or bitsandbytes quantized keep their
// dtype (their kernels read them so) unless Options::cast_quantized.
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
  absl::Status Write(std::string_view bytes) override { return base::WriteAll(fd_, bytes, what_); }

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

// __metadata__ key listing, as a JSON array of strings in byte order, the output names of the
// complex64 tensors written as float32 [..., 2]; torch.view_as_complex restores each exactly.
inline constexpr char kComplexAsRealKey[] = "ckptscan.complex64_as_real";

// The safetensors dtypes that --allow-dtype may name: those written differently by default
// because the widely deployed readers cannot read them (only C64). OK, or InvalidArgument
// saying why not.
absl::Status CheckAllowDtype(std::string_view safetensors_dtype);

// A layer that GPTQ, AWQ or bitsandbytes quantized, recognised from its tensors alone:
//   gptq               P.qweight, P.qzeros (int32), P.scales (a float dtype), P.g_idx
//   awq                the same without P.g_idx
//   bitsandbytes-int8  P.weight (int8) and P.SCB
//   bitsandbytes-4bit  P.weight (uint8) and P.weight.quant_state.bitsandbytes__nf4 or __fp4
// Every tensor named P.<anything> belongs to the layer: the kernels that load such a layer read
// its float tensors (scales, bias, absmax) in the dtype they were saved in.
struct QuantizedLayer {
  std::string prefix;  // P ("" when the tensors are at the top level)
  std::string layout;  // "gptq", "awq", "bitsandbytes-int8", "bitsandbytes-4bit"
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
  // --allow-dtype: safetensors dtypes written as is although the widely deployed readers
  // cannot read them (CheckAllowDtype: only "C64").
  std::vector<std::string> allow_dtypes;
  // --cast-quantized: under to_bf16, the float tensors of quantized layers (FindQuantizedLayers)
  // are cast as well; without it they keep their dtype.
  bool cast_quantized = false;
  // Quantized layers recognised beyond this file's tensors: a sharded set's, from its index's
  // names (FindQuantizedLayers names_only), so that a layer whose tensors are split over two
  // shards keeps its float tensors in both. Added to the ones this file's tensors show.
  std::vector<QuantizedLayer> extra_layers;
  // The quant_method that a config.json beside the input declares ("" for none). Under to_bf16
  // without cast_quantized, a declared quantization with no layer recognised among the tensors
  // refuses the conversion: its layout is one this list does not know, and casting could break
  // what its loader reads in the saved dtype.
  std::string declared_quantization;
};

// __metadata__ key holding, as a JSON object by output name, how each torch-quantized tensor
// was written: {"scheme": "per_tensor_affine" | "per_channel_affine" |
// "per_channel_affine_float_qparams", "dtype": "qint8" | "quint8" | "qint32"}. The integer data
// is the tensor itself; "<name>.scale", "<name>.zero_point" and, per channel, "<name>.axis" are
// tensors of their own (docs/safetensors.md, "Quantized tensors").
inline constexpr char kQuantizedKey[] = "ckptscan.quantized";

// The quantized layers among `names` (tensor name -> torch dtype name), by prefix. With
// `names_only` the dtypes are not looked at (a sharded set's index names its tensors, not their
// dtypes): a layer is recognised by its tensors' names alone.
std::vector<QuantizedLayer> FindQuantizedLayers(
    const std::map<std::string, std::string_view>& names, bool names_only = false);

struct Plan {
  struct Entry {
    size_t tensor;         // index into FileFacts::tensors
    std::string name;      // output name
    bool to_bf16 = false;  // written as bfloat16 (from float32 or float16)
    // A quantized tensor's per-channel parameter: the tensor's qchannel[channel] (0 scales,
    // 1 zero_points) is written, not the tensor; -1 otherwise.
    int channel = -1;
    // Written instead of tensor bytes when not empty: a quantized tensor's per-tensor scale
    // (F64), zero point or axis (I64), little-endian.
    std::string literal;
  };
  std::vector<Entry> entries;                  // parallel to the header's specs
  std::map<std::string, std::string> aliases;  // removed name -> kept name
  safetensors::SerializedHeader header;
  // Values beside the selected tensors, which the output does not hold (named as in the
  // output, i.e. without the --select prefix). At most torch::kMaxListedOtherValues listed;
  // the total is exact without --select, else a lower bound when the facts' list was cut.
  std::vector<torch::OtherValue> not_written;
  uint64_t not_written_total = 0;
  // What was done with each dtype, one entry per (source, written, how), in that order.
  struct DtypeUse {
    std::string source;   // the torch dtype, e.g. "complex64"
    std::string written;  // the safetensors dtype written, e.g. "F32"
    // "as-is"; "bf16" (--dtype bf16); "as-real" (complex64 as F32 [..., 2]); "allowed" (as is
    // by --allow-dtype, which the widely deployed readers cannot read)
    std::string how;
    uint64_t tensors = 0;  // stored tensors (aliases not counted)
  };
  std::vector<DtypeUse> dtypes;
  // Quantized layers (FindQuantizedLayers) per layout, in layout order: how many, and how many
  // of their float tensors kept their dtype under --dtype bf16 (0 with --cast-quantized).
  struct LayoutUse {
    std::string layout;
    uint64_t layers = 0;
    uint64_t kept = 0;
    std::string example;  // the first layer's prefix
  };
  std::vector<LayoutUse> quantized_layers;
  std::string declared_quantization;  // Options::declared_quantization, for the report
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
// holding the input as a file mapping can drop those pages (base::DropMappedPages):
// the touched input then never accumulates in the process's memory, whatever its size.
using InputRelease = std::function<void(std::string_view)>;

// Writes the header and every stored tensor's bytes, gathered from `file` (the whole input).
absl::Status WriteSafetensors(std::string_view file, const torch::FileFacts& facts,
                              const Plan& plan, ByteSink& out, size_t buffer_bytes = 1 << 20,
                              const InputRelease& release = nullptr);

}  // namespace ckptscan::convert

#endif  // CKPTSCAN_CORE_CONVERT_CONVERT_H_
