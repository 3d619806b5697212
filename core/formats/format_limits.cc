#include "core/formats/format_limits.h"

#include <array>
#include <limits>

namespace ckptscan::formats {
namespace {

constexpr uint64_t kU64 = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
using L = FormatLimit;

// The defaults are the Limits structs' (read_options_limits_test checks them); max_code_files
// and max_keras_objects are also bounds of the result frame (torch::kMaxCodeFiles,
// torch::kMaxJsonObjectRefs), so they can be lowered only.
constexpr std::array kTable = {
    FormatLimitInfo{L::kMaxEntries, "max_entries", "central-directory entries of a zip", 1 << 16,
                    kU64},
    FormatLimitInfo{L::kMaxNameBytes, "max_name_bytes", "one zip member name", 1024, kU64},
    FormatLimitInfo{L::kMaxCentralDirectoryBytes, "max_central_directory_bytes",
                    "a zip's central directory, read whole", 16 << 20, kU64},
    FormatLimitInfo{L::kMaxMemberBytes, "max_member_bytes",
                    "declared uncompressed size of one DEFLATE zip member", 1ull << 30, kU64},
    FormatLimitInfo{L::kMaxCompressionRatio, "max_compression_ratio",
                    "declared uncompressed / compressed size of a DEFLATE zip member", 1100, kU64},
    FormatLimitInfo{L::kMaxTotalUncompressed, "max_total_uncompressed",
                    "declared uncompressed sizes of all zip members together", 256ull << 30, kU64},
    FormatLimitInfo{L::kMaxAnomaliesPerKind, "max_anomalies_per_kind",
                    "zip anomalies listed per kind (the rest summarised)", 64, kU64},
    FormatLimitInfo{L::kMaxContainerDepth, "max_container_depth",
                    "archives inside archives (0: none is read)", 2, kU32},
    FormatLimitInfo{L::kMaxCodeFiles, "max_code_files", "TorchScript code files of an archive",
                    10000, 10000},
    FormatLimitInfo{L::kMaxNpyHeaderBytes, "max_npy_header_bytes", "the header of one .npy",
                    1 << 20, kU64},
    FormatLimitInfo{L::kMaxMembers, "max_members", "members of a tar archive", 10'000, kU32},
    FormatLimitInfo{L::kMaxRecords, "max_records",
                    "storage, view or tensor records of a torch tar", 1'000'000, kU64},
    FormatLimitInfo{L::kMaxDims, "max_dims", "dimensions of one torch tar tensor record", 1'024,
                    kU32},
    FormatLimitInfo{L::kMaxIndexBytes, "max_index_bytes", "a JSON file (index, config)",
                    64ull << 20, kU64},
    FormatLimitInfo{L::kMaxIndexEntries, "max_index_entries", "weight_map entries of an index",
                    1u << 20, kU64},
    FormatLimitInfo{L::kMaxIndexNameBytes, "max_index_name_bytes",
                    "one tensor name of an index's weight_map", 4096, kU64},
    FormatLimitInfo{L::kMaxJsonDepth, "max_json_depth",
                    "nesting of objects and arrays in a JSON file", 64, kU32},
    FormatLimitInfo{L::kMaxKerasObjects, "max_keras_objects",
                    "objects of a Keras config judged", 100000, 100000},
    FormatLimitInfo{L::kMaxDecompressedBytes, "max_decompressed_bytes",
                    "decompressed bytes of a joblib compressed file", 1ull << 30, kU64},
    FormatLimitInfo{L::kMaxJoblibCompressionRatio, "max_joblib_compression_ratio",
                    "decompressed / compressed bytes of a joblib compressed file", 1100, kU64},
    FormatLimitInfo{L::kMaxDecoderMemory, "max_decoder_memory",
                    "liblzma's memory for one decoder", 256ull << 20, kU64},
    FormatLimitInfo{L::kMaxTextBytes, "max_text_bytes", "a text file", 256ull << 20, kU64},
    FormatLimitInfo{L::kMaxTextLineBytes, "max_text_line_bytes", "one line of a text file",
                    1ull << 20, kU64},
    FormatLimitInfo{L::kMaxImageBytes, "max_image_bytes", "an image file", 64ull << 20, kU64},
    FormatLimitInfo{L::kMaxImageChunks, "max_image_chunks",
                    "PNG chunks, JPEG segments, GIF blocks, WebP chunks", 1u << 16, kU64},
    FormatLimitInfo{L::kMaxSentencepieceBytes, "max_sentencepiece_bytes",
                    "a SentencePiece model (at most 2^31-1 is used)", 64ull << 20, kU64},
    FormatLimitInfo{L::kMaxSentencepiecePieces, "max_sentencepiece_pieces",
                    "pieces of a SentencePiece model", 1u << 22, kU64},
    FormatLimitInfo{L::kMaxTemplateBytes, "max_template_bytes", "one chat template's text",
                    4ull << 20, kU64},
    FormatLimitInfo{L::kMaxTemplateHits, "max_template_hits",
                    "findings listed per chat template (the rest counted)", 64, kU64},
    FormatLimitInfo{L::kMaxTokens, "max_tokens", "tokens of a chat template", 1ull << 20, kU64},
    FormatLimitInfo{L::kMaxTemplateNodes, "max_template_nodes",
                    "syntax-tree nodes of a chat template", 1ull << 19, kU64},
    FormatLimitInfo{L::kMaxNesting, "max_nesting",
                    "brackets and blocks open at once in a chat template", 256, kU64},
    FormatLimitInfo{L::kMaxTemplateStringBytes, "max_template_string_bytes",
                    "one folded string constant of a chat template", 1ull << 16, kU64},
    FormatLimitInfo{L::kMaxLoopUnroll, "max_loop_unroll",
                    "iterations of a chat template's constant loop evaluated", 4096, kU64},
    FormatLimitInfo{L::kMaxEvalSteps, "max_eval_steps",
                    "steps of a chat template's abstract evaluation", 1ull << 22, kU64},
    FormatLimitInfo{L::kMaxCallDepth, "max_call_depth",
                    "chat-template macro calls open at once", 64, kU64},
    FormatLimitInfo{L::kMaxKv, "max_kv", "GGUF key/value pairs", 1'000'000, kU64},
    FormatLimitInfo{L::kMaxGgufTensors, "max_gguf_tensors", "GGUF tensor infos", 1'000'000,
                    kU64},
    FormatLimitInfo{L::kMaxKeyBytes, "max_key_bytes", "one GGUF key or tensor name", 65'535,
                    kU64},
    FormatLimitInfo{L::kMaxGgufStringBytes, "max_gguf_string_bytes", "one GGUF string value",
                    64ull << 20, kU64},
    FormatLimitInfo{L::kMaxArrayElements, "max_array_elements",
                    "elements of all GGUF arrays together", 1ull << 26, kU64},
    FormatLimitInfo{L::kMaxArrayDepth, "max_array_depth", "GGUF arrays of arrays", 4, kU32},
    FormatLimitInfo{L::kMaxAlignment, "max_alignment", "GGUF general.alignment", 1ull << 20,
                    kU64},
    FormatLimitInfo{L::kMaxModelBytes, "max_model_bytes", "an ONNX model (protobuf's own limit)",
                    (2ull << 30) - 1, (2ull << 30) - 1},
    FormatLimitInfo{L::kMaxOnnxNodes, "max_onnx_nodes", "nodes of all ONNX graphs and functions",
                    1'000'000, kU64},
    FormatLimitInfo{L::kMaxGraphDepth, "max_graph_depth",
                    "ONNX graphs inside graph attributes", 64, kU32},
    FormatLimitInfo{L::kMaxOnnxTensors, "max_onnx_tensors", "ONNX tensors wherever they are",
                    10'000'000, kU64},
    FormatLimitInfo{L::kMaxHeaderBytes, "max_header_bytes", "a safetensors header",
                    100'000'000, kU64},
    FormatLimitInfo{L::kMaxSafetensorsTensors, "max_safetensors_tensors",
                    "tensor entries of a safetensors header", 1'000'000, kU64},
    FormatLimitInfo{L::kMaxRank, "max_rank", "dimensions of one safetensors tensor", 16, kU64},
    FormatLimitInfo{L::kMaxMetadataEntries, "max_metadata_entries",
                    "entries of a safetensors __metadata__", 100'000, kU64},
    FormatLimitInfo{L::kMaxYamlBytes, "max_yaml_bytes", "a YAML file", 64ull << 20, kU64},
    FormatLimitInfo{L::kMaxYamlNesting, "max_yaml_nesting",
                    "YAML block indentation levels and flow nesting", 10'000, kU64},
    FormatLimitInfo{L::kMaxYamlTags, "max_yaml_tags", "distinct YAML tags listed", 64, kU64},
    FormatLimitInfo{L::kMaxYamlTargets, "max_yaml_targets", "YAML _target_ values listed", 64,
                    kU64},
    FormatLimitInfo{L::kMaxYamlTagDirectives, "max_yaml_tag_directives",
                    "%TAG directives of a YAML file", 256, kU64},
    FormatLimitInfo{L::kMaxYamlAnchors, "max_yaml_anchors",
                    "YAML anchored scalars remembered for aliases", 4096, kU64},
    FormatLimitInfo{L::kMaxYamlScalarBytes, "max_yaml_scalar_bytes",
                    "a YAML key, _target_ value or tag kept", 4096, kU64},
};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < kTable.size(); ++i) {
    if (static_cast<size_t>(kTable[i].id) != i) return false;
  }
  return true;
}
static_assert(InEnumOrder(), "kTable must list FormatLimit in declaration order");
static_assert(static_cast<size_t>(FormatLimit::kMaxYamlScalarBytes) + 1 == kTable.size(),
              "every FormatLimit has a row in kTable");

}  // namespace

absl::Span<const FormatLimitInfo> FormatLimits() { return kTable; }

const FormatLimitInfo* FindFormatLimit(std::string_view name) {
  for (const FormatLimitInfo& info : kTable) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

}  // namespace ckptscan::formats
