// libFuzzer target: the content classes of repository files (core/content/content.h: text,
// images, SentencePiece) and the chat-template checker (core/content/template_check.h).
//
// Invariants: every outcome's offset lies within the input; kValid carries an OK status and
// kBroken/kNotClass a non-OK one; text is valid only when the input holds no NUL; an image is
// checked only under the format its magic names, and valid only when it starts with that magic;
// the template checker keeps at most max_hits hits, in text order, each at an offset within the
// template, with a known construct id and a message without raw control bytes.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <string_view>

#include "core/content/content.h"
#include "core/content/template_check.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr size_t kMaxInputBytes = 256 << 10;

void CheckOutcome(const ckptscan::content::Check& c, size_t size, const char* what) {
  using Outcome = ckptscan::content::Check::Outcome;
  CKPT_FUZZ_CHECK(c.offset <= size, "%s: offset %llu of %zu bytes", what,
                  static_cast<unsigned long long>(c.offset), size);
  CKPT_FUZZ_CHECK((c.outcome == Outcome::kValid) == c.status.ok(),
                  "%s: outcome and status disagree", what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan::content;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Limits limits;
  limits.max_line_bytes = 4096;  // small enough for the fuzzer to reach
  limits.max_image_chunks = 256;
  limits.max_sentencepiece_pieces = 256;

  const Check text = CheckText(bytes, limits);
  CheckOutcome(text, size, "text");
  if (text.valid()) CKPT_FUZZ_CHECK(bytes.find('\0') == std::string_view::npos, "text with a NUL");

  if (const std::optional<Image> image = SniffImage(bytes)) {
    const Check c = CheckImage(bytes, *image, limits);
    CheckOutcome(c, size, "image");
    CKPT_FUZZ_CHECK(c.outcome != Check::Outcome::kNotClass, "an image with its magic is kNotClass");
  }
  CheckOutcome(CheckSentencePiece(bytes, limits), size, "sentencepiece");

  TemplateLimits tl;
  tl.max_hits = 16;
  const TemplateCheck t = CheckChatTemplate(bytes, tl);
  static const std::set<std::string_view> kConstructs(std::begin(kTemplateConstructs),
                                                      std::end(kTemplateConstructs));
  CKPT_FUZZ_CHECK(t.hits.size() <= tl.max_hits, "%zu hits", t.hits.size());
  for (size_t i = 0; i < t.hits.size(); ++i) {
    const TemplateHit& h = t.hits[i];
    CKPT_FUZZ_CHECK(h.offset < size, "hit at %llu of %zu",
                    static_cast<unsigned long long>(h.offset), size);
    CKPT_FUZZ_CHECK(i == 0 || t.hits[i - 1].offset <= h.offset, "hits out of order at %zu", i);
    CKPT_FUZZ_CHECK(kConstructs.count(h.construct) == 1, "construct %s", h.construct.c_str());
    for (char ch : h.message) {
      CKPT_FUZZ_CHECK(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f,
                      "raw control byte in %s", h.message.c_str());
    }
  }
  if (t.hits.size() < tl.max_hits) CKPT_FUZZ_CHECK(t.more_hits == 0, "more_hits below the cap");
  return 0;
}
