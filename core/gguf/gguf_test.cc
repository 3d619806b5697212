#include "core/gguf/gguf.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/limit_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::gguf {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Writes GGUF files the way gguf-py's GGUFWriter lays them out (header, key/values, tensor
// infos, padding to the alignment, each tensor's data padded to the alignment).
class Builder {
 public:
  explicit Builder(uint32_t version = 3) : version_(version) {}

  Builder& Str(std::string_view key, std::string_view value) {
    Key(key);
    U32(&kv_, 8);
    String(&kv_, value);
    ++n_kv_;
    return *this;
  }
  Builder& U32Value(std::string_view key, uint32_t value) {
    Key(key);
    U32(&kv_, 4);
    U32(&kv_, value);
    ++n_kv_;
    return *this;
  }
  // An array of `count` u8 values (or of `type` with raw element bytes).
  Builder& Raw(std::string_view key, uint32_t type, std::string_view value_bytes) {
    Key(key);
    U32(&kv_, type);
    kv_.append(value_bytes);
    ++n_kv_;
    return *this;
  }
  Builder& StrArray(std::string_view key, const std::vector<std::string>& values) {
    Key(key);
    U32(&kv_, 9);
    U32(&kv_, 8);
    U64(&kv_, values.size());
    for (const std::string& v : values) String(&kv_, v);
    ++n_kv_;
    return *this;
  }
  // A tensor of ggml `type` with dims (fastest first) and `nbytes` of data; offset placed where
  // ggml expects it unless given.
  Builder& Tensor(std::string_view name, uint32_t type, std::vector<uint64_t> dims, uint64_t nbytes,
                  int64_t offset = -1) {
    String(&infos_, name);
    U32(&infos_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(&infos_, d);
    U32(&infos_, type);
    U64(&infos_, offset >= 0 ? static_cast<uint64_t>(offset) : data_.size());
    ++n_tensors_;
    data_.append(nbytes, '\x11');
    while (data_.size() % alignment_ != 0) data_.push_back('\0');
    return *this;
  }
  Builder& Alignment(uint32_t a) {
    alignment_ = a;
    return U32Value("general.alignment", a);
  }

  std::string Bytes() const {
    std::string out = "GGUF";
    U32(&out, version_);
    U64(&out, n_tensors_);
    U64(&out, n_kv_);
    out += kv_;
    out += infos_;
    if (n_tensors_ > 0) {
      while (out.size() % alignment_ != 0) out.push_back('\0');
    }
    out += data_;
    return out;
  }

  static void U32(std::string* out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
  }
  static void U64(std::string* out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
  }
  static void String(std::string* out, std::string_view s) {
    U64(out, s.size());
    out->append(s);
  }

 private:
  void Key(std::string_view key) { String(&kv_, key); }

  uint32_t version_;
  uint32_t alignment_ = 32;
  uint64_t n_kv_ = 0;
  uint64_t n_tensors_ = 0;
  std::string kv_, infos_, data_;
};

Builder Small() {
  Builder b;
  b.Str("general.architecture", "llama")
      .StrArray("tokenizer.ggml.tokens", {"<s>", "</s>", "a"})
      .Str("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}")
      .Tensor("token_embd.weight", 0, {4, 3}, 48)
      .Tensor("blk.0.attn_q.weight", 12, {256, 2}, 288)
      .Tensor("output_norm.weight", 30, {4}, 8);
  return b;
}

TEST(GgufTest, ReadsAWellFormedFile) {
  const std::string bytes = Small().Bytes();
  absl::StatusOr<File> f = Read(bytes, Limits{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(f->kv_count, 3u);
  EXPECT_EQ(f->alignment, 32u);
  EXPECT_EQ(f->architecture, "llama");
  ASSERT_EQ(f->tensors.size(), 3u);
  EXPECT_EQ(f->tensors[0].name, "token_embd.weight");
  EXPECT_THAT(f->tensors[0].dims, ElementsAre(4, 3));
  EXPECT_EQ(f->tensors[0].nbytes, 48u);
  EXPECT_EQ(f->tensors[0].offset, f->data_start);
  EXPECT_EQ(f->tensors[1].nbytes, 288u);  // 2 rows of one Q4_K block (144 bytes)
  EXPECT_EQ(f->tensors[1].offset, f->data_start + 64);
  EXPECT_EQ(f->tensors[2].offset, f->data_start + 64 + 288);
  EXPECT_EQ(f->data_start % 32, 0u);
  EXPECT_EQ(f->data_end, bytes.size());
  ASSERT_EQ(f->templates.size(), 1u);
  EXPECT_EQ(f->templates[0].key, "tokenizer.chat_template");
  EXPECT_EQ(bytes.substr(f->templates[0].offset, f->templates[0].text.size()),
            f->templates[0].text);
  EXPECT_TRUE(f->anomalies.empty());
}

TEST(GgufTest, TypeTableMatchesGgmlBlockSizes) {
  // A few of ggml-common.h's static_asserts on block sizes.
  EXPECT_EQ(FindGgmlType(2)->block_bytes, 18u);    // block_q4_0
  EXPECT_EQ(FindGgmlType(9)->block_bytes, 36u);    // block_q8_1 (half2 ds + 32 int8)
  EXPECT_EQ(FindGgmlType(10)->block_bytes, 84u);   // block_q2_K
  EXPECT_EQ(FindGgmlType(11)->block_bytes, 110u);  // block_q3_K
  EXPECT_EQ(FindGgmlType(12)->block_bytes, 144u);  // block_q4_K
  EXPECT_EQ(FindGgmlType(13)->block_bytes, 176u);  // block_q5_K
  EXPECT_EQ(FindGgmlType(14)->block_bytes, 210u);  // block_q6_K
  EXPECT_EQ(FindGgmlType(15)->block_bytes, 292u);  // block_q8_K
  EXPECT_EQ(FindGgmlType(29)->block_bytes, 56u);   // block_iq1_m
  EXPECT_EQ(FindGgmlType(34)->block_bytes, 54u);   // block_tq1_0
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 0xffffffffu}) {
    EXPECT_EQ(FindGgmlType(removed), nullptr) << removed;
  }
}

TEST(GgufTest, EveryTruncationFailsAndNeverCrashes) {
  const std::string bytes = Small().Bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(Read(std::string_view(bytes).substr(0, n), Limits{}).ok()) << n;
  }
}

TEST(GgufTest, ByteFlipsNeverCrash) {
  const std::string bytes = Small().Bytes();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      std::string m = bytes;
      m[i] = static_cast<char>(m[i] ^ flip);
      uint64_t at = 0;
      absl::StatusOr<File> f = Read(m, Limits{}, &at);
      if (!f.ok()) {
        EXPECT_LE(at, m.size()) << i;
      }
    }
  }
}

std::string ErrorOf(const std::string& bytes, Limits limits = {}) {
  absl::StatusOr<File> f = Read(bytes, limits);
  return f.ok() ? "ok" : std::string(f.status().message());
}

TEST(GgufTest, RefusesWhatGgmlRefuses) {
  EXPECT_THAT(ErrorOf(Builder(1).Bytes()), HasSubstr("version 1"));
  EXPECT_THAT(ErrorOf(Builder(4).Bytes()), HasSubstr("version 4"));
  EXPECT_THAT(ErrorOf(Builder().Tensor(std::string(64, 'n'), 0, {1}, 4).Bytes()),
              HasSubstr("64 bytes or more"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", 0, {1, 1, 1, 1, 1}, 4).Bytes()),
              HasSubstr("5 dimensions"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", 0, {1ull << 63}, 4).Bytes()), HasSubstr("negative"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", 0, {1ull << 32, 1ull << 32}, 4).Bytes()),
              HasSubstr("overflows int64"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", 4, {32}, 18).Bytes()),
              HasSubstr("not in ckptscan's ggml type table"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", 2, {33}, 36).Bytes()),
              HasSubstr("not a whole number of Q4_0 blocks"));
  EXPECT_THAT(ErrorOf(Builder().Alignment(48).Bytes()), HasSubstr("not a power of two"));
  // ggml divides by dimensions 1-3 (SIGFPE on a zero); a zero first dimension is an empty row.
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", 0, {4, 0}, 0).Bytes()), HasSubstr("divides by"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", 0, {4, 1, 0}, 0).Bytes()), HasSubstr("divides by"));
  EXPECT_EQ(ErrorOf(Builder().Tensor("t", 0, {0, 4}, 0).Bytes()), "ok");
  EXPECT_THAT(ErrorOf(Builder().Raw("general.alignment", 10, std::string(8, '\0')).Bytes()),
              HasSubstr("not u32"));
  // Out of order, a gap, overlapping, misaligned.
  EXPECT_THAT(ErrorOf(Builder().Tensor("a", 0, {8}, 32).Tensor("b", 0, {8}, 32, 0).Bytes()),
              HasSubstr("where ggml expects 32"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("a", 0, {8}, 32, 32).Bytes()),
              HasSubstr("where ggml expects 0"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("a", 0, {8}, 32).Tensor("b", 0, {8}, 32, 16).Bytes()),
              HasSubstr("where ggml expects 32"));
  // Data past the end of the file.
  std::string cut = Builder().Tensor("a", 0, {64}, 256).Bytes();
  cut.resize(cut.size() - 1);
  EXPECT_THAT(ErrorOf(cut), HasSubstr("run past the end of the file"));
}

TEST(GgufTest, RefusesWhatReadersDisagreeOn) {
  EXPECT_THAT(ErrorOf(Builder().Str(std::string_view("a\0b", 3), "x").Bytes()),
              HasSubstr("holds a NUL"));
  EXPECT_THAT(ErrorOf(Builder().Str("", "x").Bytes()), HasSubstr("is empty"));
  EXPECT_THAT(ErrorOf(Builder().Str("k\xff", "x").Bytes()), HasSubstr("not UTF-8"));
  EXPECT_THAT(ErrorOf(Builder().Raw("b", 7, "\x02").Bytes()), HasSubstr("neither 0 nor 1"));
  EXPECT_THAT(ErrorOf(Builder().Raw("t", 13, "").Bytes()), HasSubstr("not a GGUF type"));
  // A template a lenient decoder would read differently.
  EXPECT_THAT(ErrorOf(Builder().Str("tokenizer.chat_template", "{{ x.__cl\xffs__ }}").Bytes()),
              HasSubstr("not UTF-8 at byte 9"));
  EXPECT_THAT(ErrorOf(Builder().StrArray("tokenizer.chat_template.tool_use", {"x"}).Bytes()),
              HasSubstr("not string (8)"));
  EXPECT_THAT(ErrorOf(Builder().Tensor(std::string_view("a\0", 2), 0, {1}, 4).Bytes()),
              HasSubstr("holds a NUL"));
}

TEST(GgufTest, DuplicatesAndTrailingBytesAreAnomalies) {
  std::string bytes = Builder()
                          .Str("general.name", "a")
                          .Str("general.name", "b")
                          .Tensor("t", 0, {8}, 32)
                          .Tensor("t", 0, {8}, 32)
                          .Bytes();
  bytes += "PK\x03\x04 trailing";
  absl::StatusOr<File> f = Read(bytes, Limits{});
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<std::string> kinds;
  for (const Anomaly& a : f->anomalies) kinds.push_back(a.kind);
  EXPECT_THAT(kinds, ElementsAre("duplicate_key", "duplicate_tensor", "trailing_data"));
  EXPECT_EQ(f->anomalies.back().offset, bytes.size() - 13);
}

TEST(GgufTest, NamedTemplatesAreAllReturned) {
  const std::string bytes = Builder()
                                .Str("tokenizer.chat_template", "a")
                                .Str("tokenizer.chat_template.tool_use", "b")
                                .Str("tokenizer.chat_templatex", "not one")
                                .Str("tokenizer.chat_template.", "c: llama-cpp-python reads it")
                                .Bytes();
  absl::StatusOr<File> f = Read(bytes, Limits{});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->templates.size(), 3u);
  EXPECT_EQ(f->templates[2].key, "tokenizer.chat_template.");
  EXPECT_EQ(f->templates[1].key, "tokenizer.chat_template.tool_use");
  EXPECT_EQ(f->templates[1].text, "b");
}

TEST(GgufTest, NestedArraysAreBoundedWithoutRecursion) {
  // Arrays of arrays of u8, nested `depth` deep, one element each.
  const auto nested = [](uint32_t depth) {
    std::string v;
    for (uint32_t i = 0; i + 1 < depth; ++i) {
      Builder::U32(&v, 9);
      Builder::U64(&v, 1);
    }
    Builder::U32(&v, 0);
    Builder::U64(&v, 1);
    v.push_back('\x05');
    return Builder().Raw("a", 9, v).Bytes();
  };
  EXPECT_EQ(ErrorOf(nested(4)), "ok");
  EXPECT_THAT(ErrorOf(nested(5)), HasSubstr("max_array_depth"));
  Limits deep;
  deep.max_array_depth = 100000;
  EXPECT_EQ(ErrorOf(nested(50000), deep), "ok");
}

TEST(GgufTest, LimitsAreNamed) {
  Limits l;
  l.max_tensors = 1;
  absl::StatusOr<File> f = Read(Small().Bytes(), l);
  ASSERT_FALSE(f.ok());
  ASSERT_TRUE(base::LimitOf(f.status()).has_value());
  EXPECT_EQ(base::LimitOf(f.status())->name, "max_gguf_tensors");
  l = Limits{};
  l.max_array_elements = 2;
  EXPECT_THAT(ErrorOf(Small().Bytes(), l), HasSubstr("max_array_elements"));
  l = Limits{};
  l.max_string_bytes = 10;
  EXPECT_THAT(ErrorOf(Small().Bytes(), l), HasSubstr("max_gguf_string_bytes"));
  // A count past the bytes that remain fails at once, not after a long loop.
  std::string huge;
  Builder::U32(&huge, 0);
  Builder::U64(&huge, 1ull << 40);
  l = Limits{};
  l.max_array_elements = UINT64_MAX;
  EXPECT_THAT(ErrorOf(Builder().Raw("a", 9, huge).Bytes(), l), HasSubstr("run past the end"));
}

TEST(GgufTest, ErrorsPointAtTheFailingItem) {
  const std::string bytes = Builder().Str("a", "x").Tensor("t", 4, {32}, 18).Bytes();
  uint64_t at = 0;
  ASSERT_FALSE(Read(bytes, Limits{}, &at).ok());
  EXPECT_EQ(at, 24u + 8 + 1 + 4 + 8 + 1);  // the tensor info after the header and one kv
}

}  // namespace
}  // namespace ckptscan::gguf
