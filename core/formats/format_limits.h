// The worker's format limits by name: the table `--limit NAME=VALUE` reads (app/limit_flags.h)
// and the job carries to the worker (worker.proto FormatLimit), which applies each to its
// formats::ReadOptions (read_options_limits.h). A name is what a limit error prints
// ("[limit max_compression_ratio=200]"); names are unique here and against pickle::Limits.
//
// Plain data, no parser: the trusted side links it. The defaults repeat the Limits structs'
// initializers; read_options_limits_test checks that they agree. Thread-safe: constant tables.
#ifndef CKPTSCAN_CORE_FORMATS_FORMAT_LIMITS_H_
#define CKPTSCAN_CORE_FORMATS_FORMAT_LIMITS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace ckptscan::formats {

// One per settable limit, in FormatLimits() order.
enum class FormatLimit : uint8_t {
  // zip archives (zip::Limits)
  kMaxEntries,
  kMaxNameBytes,
  kMaxCentralDirectoryBytes,
  kMaxMemberBytes,
  kMaxCompressionRatio,
  kMaxTotalUncompressed,
  kMaxAnomaliesPerKind,
  kMaxContainerDepth,
  kMaxCodeFiles,
  kMaxNpyHeaderBytes,
  // torch <= 0.3 tar checkpoints (torch::TarLimits)
  kMaxMembers,
  kMaxRecords,
  kMaxDims,
  // JSON: sharded-checkpoint indexes, config.json (torch::IndexLimits)
  kMaxIndexBytes,
  kMaxIndexEntries,
  kMaxIndexNameBytes,
  kMaxJsonDepth,
  kMaxKerasObjects,
  // joblib's compressed files (compress::Limits)
  kMaxDecompressedBytes,
  kMaxJoblibCompressionRatio,
  kMaxDecoderMemory,
  // text, images, SentencePiece (content::Limits)
  kMaxTextBytes,
  kMaxTextLineBytes,
  kMaxImageBytes,
  kMaxImageChunks,
  kMaxSentencepieceBytes,
  kMaxSentencepiecePieces,
  // chat templates (content::TemplateLimits, jinja::Limits)
  kMaxTemplateBytes,
  kMaxTemplateHits,
  kMaxTokens,
  kMaxTemplateNodes,
  kMaxNesting,
  kMaxTemplateStringBytes,
  kMaxLoopUnroll,
  kMaxEvalSteps,
  kMaxCallDepth,
  // GGUF (gguf::Limits)
  kMaxKv,
  kMaxGgufTensors,
  kMaxKeyBytes,
  kMaxGgufStringBytes,
  kMaxArrayElements,
  kMaxArrayDepth,
  kMaxAlignment,
  // ONNX (onnx_check::Limits)
  kMaxModelBytes,
  kMaxOnnxNodes,
  kMaxGraphDepth,
  kMaxOnnxTensors,
  // safetensors (safetensors::ValidatorLimits)
  kMaxHeaderBytes,
  kMaxSafetensorsTensors,
  kMaxRank,
  kMaxMetadataEntries,
  // YAML files (torch::YamlLimits)
  kMaxYamlBytes,
  kMaxYamlNesting,
  kMaxYamlTags,
  kMaxYamlTargets,
  kMaxYamlTagDirectives,
  kMaxYamlAnchors,
  kMaxYamlScalarBytes,
};

struct FormatLimitInfo {
  FormatLimit id;
  std::string_view name;  // as limit errors print it
  std::string_view help;
  uint64_t default_value;
  uint64_t max_value;  // largest value the field holds (or the protocol allows)
};

// Every format limit, in enum order (FormatLimits()[i].id == FormatLimit(i)).
absl::Span<const FormatLimitInfo> FormatLimits();

// The limit of that name, or nullptr.
const FormatLimitInfo* FindFormatLimit(std::string_view name);

// One limit set away from its default, as the job carries it.
struct FormatLimitSetting {
  FormatLimit limit;
  uint64_t value;
  bool operator==(const FormatLimitSetting&) const = default;
};
using FormatLimitSettings = std::vector<FormatLimitSetting>;

}  // namespace ckptscan::formats

#endif  // CKPTSCAN_CORE_FORMATS_FORMAT_LIMITS_H_
