// Content classes for the files of a model repository that are not checkpoints: text, images,
// SentencePiece models. Each validator checks a whole file, so that a file may be called "data"
// (SAFE, kind data) only when every byte of it belongs to the class; anything that does not fit
// is not of the class (the caller tries the next reading, and an unknown file stays ERROR).
//
// A parser of untrusted bytes: worker side only. Linear time, no recursion, bounded memory;
// every limit is a named field of Limits and a hit is a base::LimitError naming it.
//
// Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_CONTENT_CONTENT_H_
#define CKPTSCAN_CORE_CONTENT_CONTENT_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"

namespace ckptscan::content {

struct Limits {
  uint64_t max_text_bytes = 256ull << 20;  // a text file
  uint64_t max_line_bytes = 1ull << 20;    // one line of a text file ('\n'-terminated)
  uint64_t max_image_bytes = 64ull << 20;  // an image file
  uint64_t max_image_chunks = 1u << 16;    // PNG chunks, JPEG segments, GIF blocks, WebP chunks
  uint64_t max_sentencepiece_bytes = 64ull << 20;
  uint64_t max_sentencepiece_pieces = 1u << 22;
};

// The outcome of validating a file as one class.
//   kValid:    every byte belongs to the class.
//   kNotClass: the bytes are not of this class (status says why, offset where): try the next.
//   kBroken:   the bytes claim the class (its magic, its structure so far) but are malformed or
//              hit a limit: an error of the file (status is InvalidArgument, or a
//              base::LimitError, message and offset say what and where).
struct Check {
  enum class Outcome { kValid, kNotClass, kBroken };
  Outcome outcome = Outcome::kNotClass;
  absl::Status status;
  uint64_t offset = 0;
  bool valid() const { return outcome == Outcome::kValid; }
};

// Strict UTF-8 text: well-formed UTF-8 (no overlong forms, no surrogates, nothing above
// U+10FFFF), an optional BOM, no NUL and no C0 control character but \t \n \v \f \r, no DEL.
// kNotClass when a byte breaks that; kBroken only for a limit (max_text_bytes, max_line_bytes).
Check CheckText(std::string_view data, const Limits& limits);

enum class Image { kPng, kJpeg, kGif, kWebp };
std::string_view ImageName(Image image);  // "png", "jpeg", "gif", "webp"

// The image format whose magic `data` starts with, if any.
std::optional<Image> SniffImage(std::string_view data);

// The whole file as `image` (its magic already matched): every chunk, segment or block within
// bounds and in an order the format allows, checksums checked (PNG CRCs), the format's end
// marker last and nothing after it but zero bytes (encoders pad). Never kNotClass: a file with an
// image's magic that is not that image is kBroken.
Check CheckImage(std::string_view data, Image image, const Limits& limits);

// A SentencePiece model (`tokenizer.model`): the protobuf wire format of sentencepiece's
// ModelProto, checked field by field (docs/formats.md, "SentencePiece").
// kNotClass when the first field is not a piece (so the file is something else), kBroken when
// it starts as a model and then breaks.
Check CheckSentencePiece(std::string_view data, const Limits& limits);

}  // namespace ckptscan::content

#endif  // CKPTSCAN_CORE_CONTENT_CONTENT_H_
