#include "core/formats/read_options_limits.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/strings.h"

namespace ckptscan::formats {
namespace {

// The field a limit names; a switch without default, so that -Wswitch flags a new FormatLimit
// that has none.
template <typename Options, typename Fn>
void Visit(Options& o, FormatLimit limit, Fn&& fn) {
  switch (limit) {
    case FormatLimit::kMaxEntries: return fn(o.zip.max_entries);
    case FormatLimit::kMaxNameBytes: return fn(o.zip.max_name_bytes);
    case FormatLimit::kMaxCentralDirectoryBytes: return fn(o.zip.max_central_directory_bytes);
    case FormatLimit::kMaxMemberBytes: return fn(o.zip.max_member_bytes);
    case FormatLimit::kMaxCompressionRatio: return fn(o.zip.max_compression_ratio);
    case FormatLimit::kMaxTotalUncompressed: return fn(o.zip.max_total_uncompressed);
    case FormatLimit::kMaxAnomaliesPerKind: return fn(o.zip.max_anomalies_per_kind);
    case FormatLimit::kMaxContainerDepth: return fn(o.max_container_depth);
    case FormatLimit::kMaxCodeFiles: return fn(o.max_code_files);
    case FormatLimit::kMaxNpyHeaderBytes: return fn(o.max_npy_header_bytes);
    case FormatLimit::kMaxMembers: return fn(o.tar.max_members);
    case FormatLimit::kMaxRecords: return fn(o.tar.max_records);
    case FormatLimit::kMaxDims: return fn(o.tar.max_dims);
    case FormatLimit::kMaxIndexBytes: return fn(o.index.max_bytes);
    case FormatLimit::kMaxIndexEntries: return fn(o.index.max_entries);
    case FormatLimit::kMaxIndexNameBytes: return fn(o.index.max_name_bytes);
    case FormatLimit::kMaxJsonDepth: return fn(o.index.max_depth);
    case FormatLimit::kMaxKerasObjects: return fn(o.max_keras_objects);
    case FormatLimit::kMaxDecompressedBytes: return fn(o.compress.max_decompressed_bytes);
    case FormatLimit::kMaxJoblibCompressionRatio: return fn(o.compress.max_compression_ratio);
    case FormatLimit::kMaxDecoderMemory: return fn(o.compress.max_decoder_memory);
    case FormatLimit::kMaxTextBytes: return fn(o.content.max_text_bytes);
    case FormatLimit::kMaxTextLineBytes: return fn(o.content.max_line_bytes);
    case FormatLimit::kMaxImageBytes: return fn(o.content.max_image_bytes);
    case FormatLimit::kMaxImageChunks: return fn(o.content.max_image_chunks);
    case FormatLimit::kMaxSentencepieceBytes: return fn(o.content.max_sentencepiece_bytes);
    case FormatLimit::kMaxSentencepiecePieces: return fn(o.content.max_sentencepiece_pieces);
    // The reader's max_template_bytes is the template's (template_check.h): set together.
    case FormatLimit::kMaxTemplateBytes:
      fn(o.templates.reader.max_template_bytes);
      return fn(o.templates.max_template_bytes);
    case FormatLimit::kMaxTemplateHits: return fn(o.templates.max_hits);
    case FormatLimit::kMaxTokens: return fn(o.templates.reader.max_tokens);
    case FormatLimit::kMaxTemplateNodes: return fn(o.templates.reader.max_nodes);
    case FormatLimit::kMaxNesting: return fn(o.templates.reader.max_nesting);
    case FormatLimit::kMaxTemplateStringBytes: return fn(o.templates.reader.max_string_bytes);
    case FormatLimit::kMaxLoopUnroll: return fn(o.templates.reader.max_loop_unroll);
    case FormatLimit::kMaxEvalSteps: return fn(o.templates.reader.max_eval_steps);
    case FormatLimit::kMaxCallDepth: return fn(o.templates.reader.max_call_depth);
    case FormatLimit::kMaxKv: return fn(o.gguf.max_kv);
    case FormatLimit::kMaxGgufTensors: return fn(o.gguf.max_tensors);
    case FormatLimit::kMaxKeyBytes: return fn(o.gguf.max_key_bytes);
    case FormatLimit::kMaxGgufStringBytes: return fn(o.gguf.max_string_bytes);
    case FormatLimit::kMaxArrayElements: return fn(o.gguf.max_array_elements);
    case FormatLimit::kMaxArrayDepth: return fn(o.gguf.max_array_depth);
    case FormatLimit::kMaxAlignment: return fn(o.gguf.max_alignment);
    case FormatLimit::kMaxModelBytes: return fn(o.onnx.max_model_bytes);
    case FormatLimit::kMaxOnnxNodes: return fn(o.onnx.max_nodes);
    case FormatLimit::kMaxGraphDepth: return fn(o.onnx.max_graph_depth);
    case FormatLimit::kMaxOnnxTensors: return fn(o.onnx.max_tensors);
    case FormatLimit::kMaxHeaderBytes: return fn(o.safetensors.max_header_bytes);
    case FormatLimit::kMaxSafetensorsTensors: return fn(o.safetensors.max_tensors);
    case FormatLimit::kMaxRank: return fn(o.safetensors.max_rank);
    case FormatLimit::kMaxMetadataEntries: return fn(o.safetensors.max_metadata_entries);
    case FormatLimit::kMaxYamlBytes: return fn(o.yaml.max_bytes);
    case FormatLimit::kMaxYamlNesting: return fn(o.yaml.max_nesting);
    case FormatLimit::kMaxYamlTags: return fn(o.yaml.max_tags);
    case FormatLimit::kMaxYamlTargets: return fn(o.yaml.max_targets);
    case FormatLimit::kMaxYamlTagDirectives: return fn(o.yaml.max_tag_directives);
    case FormatLimit::kMaxYamlAnchors: return fn(o.yaml.max_anchors);
    case FormatLimit::kMaxYamlScalarBytes: return fn(o.yaml.max_scalar_bytes);
  }
}

}  // namespace

uint64_t GetFormatLimit(const ReadOptions& options, FormatLimit limit) {
  uint64_t value = 0;
  Visit(options, limit, [&](const auto& field) { value = field; });
  return value;
}

absl::Status SetFormatLimit(FormatLimit limit, uint64_t value, ReadOptions* options) {
  const FormatLimitInfo& info = FormatLimits()[static_cast<size_t>(limit)];
  if (value > info.max_value) {
    return absl::InvalidArgumentError(
        absl::StrCat(base::AbslView(info.name), "=", value, ": at most ", info.max_value));
  }
  // Narrowing is safe: max_value is within every field's type.
  Visit(*options, limit, [&](auto& field) { field = static_cast<std::decay_t<decltype(field)>>(value); });
  return absl::OkStatus();
}

absl::Status SetFormatLimit(std::string_view name, uint64_t value, ReadOptions* options) {
  const FormatLimitInfo* info = FindFormatLimit(name);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown format limit ", base::AbslView(name)));
  }
  return SetFormatLimit(info->id, value, options);
}

}  // namespace ckptscan::formats
