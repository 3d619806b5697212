#include "core/gguf/gguf.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/json_text.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"

namespace ckptscan::gguf {
namespace {

using base::AbslView;

// ggml's types with their block geometry. The ids not listed (4, 5: Q4_2, Q4_3; 31-33:
// Q4_0_4_4, Q4_0_4_8, Q4_0_8_8; 36-38: IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed from
// ggml and have no block size there: ggml refuses them.
constexpr uint32_t kQkK = 256;
constexpr GgmlType kTypes[] = {
    {0, "F32", 1, 4},
    {1, "F16", 1, 2},
    {2, "Q4_0", 32, 2 + 16},
    {3, "Q4_1", 32, 2 + 2 + 16},
    {6, "Q5_0", 32, 2 + 4 + 16},
    {7, "Q5_1", 32, 2 + 2 + 4 + 16},
    {8, "Q8_0", 32, 2 + 32},
    {9, "Q8_1", 32, 2 + 2 + 32},  // ggml's block_q8_1 (gguf-py's table says 40)
    {10, "Q2_K", kQkK, 2 + 2 + kQkK / 16 + kQkK / 4},
    {11, "Q3_K", kQkK, 2 + kQkK / 4 + kQkK / 8 + 12},
    {12, "Q4_K", kQkK, 2 + 2 + kQkK / 2 + 12},
    {13, "Q5_K", kQkK, 2 + 2 + kQkK / 2 + kQkK / 8 + 12},
    {14, "Q6_K", kQkK, 2 + kQkK / 2 + kQkK / 4 + kQkK / 16},
    {15, "Q8_K", kQkK, 4 + kQkK + kQkK / 8},
    {16, "IQ2_XXS", kQkK, 2 + kQkK / 4},
    {17, "IQ2_XS", kQkK, 2 + kQkK / 4 + kQkK / 32},
    {18, "IQ3_XXS", kQkK, 2 + kQkK / 4 + kQkK / 8},
    {19, "IQ1_S", kQkK, 2 + kQkK / 8 + kQkK / 16},
    {20, "IQ4_NL", 32, 2 + 16},
    {21, "IQ3_S", kQkK, 2 + kQkK / 4 + kQkK / 8 + kQkK / 32 + 4},
    {22, "IQ2_S", kQkK, 2 + kQkK / 4 + kQkK / 16},
    {23, "IQ4_XS", kQkK, 2 + 2 + kQkK / 2 + kQkK / 64},
    {24, "I8", 1, 1},
    {25, "I16", 1, 2},
    {26, "I32", 1, 4},
    {27, "I64", 1, 8},
    {28, "F64", 1, 8},
    {29, "IQ1_M", kQkK, kQkK / 8 + kQkK / 16 + kQkK / 32},
    {30, "BF16", 1, 2},
    {34, "TQ1_0", kQkK, 2 + 4 * 13},
    {35, "TQ2_0", kQkK, 2 + 64},
    {39, "MXFP4", 32, 1 + 16},
    {40, "NVFP4", 64, 4 + 32},
    {41, "Q1_0", 128, 2 + 16},
    {42, "Q2_0", 64, 2 + 16},
};

constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
constexpr uint64_t kMaxNameBytes = 63;  // GGML_MAX_NAME (64) includes the NUL
constexpr uint32_t kMaxValueType = 12;  // FLOAT64
constexpr std::string_view kAlignmentKey = "general.alignment";
constexpr std::string_view kArchitectureKey = "general.architecture";
constexpr std::string_view kTemplateKey = "tokenizer.chat_template";

// Bytes of one value of a fixed-size type; 0 for string and array.
uint64_t FixedSize(uint32_t type) {
  switch (static_cast<ValueType>(type)) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsTemplateKey(std::string_view key) {
  // llama-cpp-python collects every key that starts with "tokenizer.chat_template." (an empty
  // NAME included).
  return key == kTemplateKey ||
         (key.size() > kTemplateKey.size() && key.substr(0, kTemplateKey.size()) == kTemplateKey &&
          key[kTemplateKey.size()] == '.');
}

// x rounded up to a multiple of `alignment` (a power of two).
bool Pad(uint64_t x, uint64_t alignment, uint64_t* out) {
  uint64_t sum = 0;
  if (!base::CheckedAdd<uint64_t>(x, alignment - 1, &sum)) return false;
  *out = sum & ~(alignment - 1);
  return true;
}

class Reader {
 public:
  Reader(std::string_view data, const Limits& limits, uint64_t* error_offset)
      : data_(data), limits_(limits), r_(data), error_offset_(error_offset) {}

  absl::StatusOr<File> Read() {
    absl::Status s = ReadAll();
    if (!s.ok()) {
      if (error_offset_ != nullptr) *error_offset_ = item_;
      return s;
    }
    return std::move(file_);
  }

 private:
  absl::Status ReadAll() {
    CKPT_ASSIGN_OR_RETURN(std::string_view magic, r_.ReadBytes(4));
    if (magic != kMagic) return absl::InvalidArgumentError("not a GGUF file (no \"GGUF\" magic)");
    item_ = r_.offset();
    CKPT_ASSIGN_OR_RETURN(file_.version, r_.ReadU32LE());
    if (file_.version == 1) {
      return absl::UnimplementedError(
          "GGUF version 1 (32-bit counts), which current ggml and llama.cpp refuse, is not read");
    }
    if (file_.version != 2 && file_.version != 3) {
      return absl::UnimplementedError(
          absl::StrCat("GGUF version ", file_.version, " is not one ckptscan reads (2, 3)"));
    }
    item_ = r_.offset();
    CKPT_ASSIGN_OR_RETURN(const uint64_t n_tensors, r_.ReadU64LE());
    if (n_tensors > limits_.max_tensors) {
      return Limit(absl::StrCat("the header declares ", n_tensors, " tensors, over ",
                                limits_.max_tensors, " (max_gguf_tensors)"),
                   "max_gguf_tensors", limits_.max_tensors);
    }
    item_ = r_.offset();
    CKPT_ASSIGN_OR_RETURN(file_.kv_count, r_.ReadU64LE());
    if (file_.kv_count > limits_.max_kv) {
      return Limit(absl::StrCat("the header declares ", file_.kv_count, " key/value pairs, over ",
                                limits_.max_kv, " (max_kv)"),
                   "max_kv", limits_.max_kv);
    }
    for (uint64_t i = 0; i < file_.kv_count; ++i) CKPT_RETURN_IF_ERROR(KeyValue(i));
    for (uint64_t i = 0; i < n_tensors; ++i) CKPT_RETURN_IF_ERROR(TensorInfo(i));
    return DataSection();
  }

  absl::Status Limit(const std::string& message, std::string_view name, uint64_t value) {
    return base::LimitError(message, name, value);
  }

  // A string: u64 length, then that many bytes.
  absl::StatusOr<std::string_view> String(uint64_t max, std::string_view limit,
                                          std::string_view what) {
    const uint64_t at = r_.offset();
    CKPT_ASSIGN_OR_RETURN(const uint64_t n, r_.ReadU64LE());
    if (n > max) {
      return Limit(absl::StrCat(AbslView(what), " at offset ", at, " is ", n, " bytes, over ", max,
                                " (", AbslView(limit), ")"),
                   limit, max);
    }
    if (n > r_.remaining()) {
      return absl::InvalidArgumentError(absl::StrCat(AbslView(what), " at offset ", at, " is ", n,
                                                     " bytes, past the end of the file (",
                                                     r_.remaining(), " bytes remain)"));
    }
    return r_.ReadBytes(n);
  }

  absl::Status KeyValue(uint64_t index) {
    item_ = r_.offset();
    CKPT_ASSIGN_OR_RETURN(const std::string_view key,
                          String(limits_.max_key_bytes, "max_key_bytes", "a key"));
    if (key.empty() || key.find('\0') != std::string_view::npos || !base::IsValidUtf8(key)) {
      return absl::InvalidArgumentError(absl::StrCat("key ", index, " at offset ", item_, " (",
                                                     base::Quoted(key),
                                                     ") is empty, holds a NUL or is not UTF-8"));
    }
    if (const auto [it, inserted] = keys_.emplace(key, item_); !inserted) {
      file_.anomalies.push_back(
          Anomaly{"duplicate_key", item_,
                  absl::StrCat("metadata key ", base::Quoted(key), " at offset ", item_,
                               " was already set at offset ", it->second,
                               ": ggml refuses the file, other readers keep one of the values")});
    }
    const uint64_t type_at = r_.offset();
    CKPT_ASSIGN_OR_RETURN(const uint32_t type, r_.ReadU32LE());
    if (type > kMaxValueType) {
      return absl::InvalidArgumentError(absl::StrCat("key ", base::Quoted(key), ": value type ",
                                                     type, " at offset ", type_at,
                                                     " is not a GGUF type"));
    }
    const uint64_t value_at = r_.offset();
    if (key == kAlignmentKey) return Alignment(type, value_at);
    if (IsTemplateKey(key)) return TemplateValue(key, type, value_at);
    if (key == kArchitectureKey && static_cast<ValueType>(type) == ValueType::kString) {
      CKPT_ASSIGN_OR_RETURN(const std::string_view v,
                            String(limits_.max_string_bytes, "max_gguf_string_bytes", "a string"));
      bool plain = !v.empty() && v.size() <= 64;
      for (char c : v) plain = plain && c > 0x20 && c < 0x7f;
      if (plain) file_.architecture = std::string(v);
      return absl::OkStatus();
    }
    return Value(key, type);
  }

  // general.alignment: ggml reads it as a u32 (any other type aborts gguf_get_val_u32) that
  // must be a power of two.
  absl::Status Alignment(uint32_t type, uint64_t value_at) {
    if (static_cast<ValueType>(type) != ValueType::kU32) {
      return absl::InvalidArgumentError(absl::StrCat("general.alignment at offset ", value_at,
                                                     " has value type ", type, ", not u32 (4)"));
    }
    CKPT_ASSIGN_OR_RETURN(const uint32_t a, r_.ReadU32LE());
    if (a == 0 || (a & (a - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("general.alignment ", a, " at offset ", value_at, " is not a power of two"));
    }
    if (a > limits_.max_alignment) {
      return Limit(absl::StrCat("general.alignment ", a, " at offset ", value_at, " is over ",
                                limits_.max_alignment, " (max_alignment)"),
                   "max_alignment", limits_.max_alignment);
    }
    file_.alignment = a;
    return absl::OkStatus();
  }

  absl::Status TemplateValue(std::string_view key, uint32_t type, uint64_t value_at) {
    if (static_cast<ValueType>(type) != ValueType::kString) {
      return absl::InvalidArgumentError(absl::StrCat("chat template ", base::Quoted(key),
                                                     " at offset ", value_at, " has value type ",
                                                     type, ", not string (8)"));
    }
    CKPT_ASSIGN_OR_RETURN(const std::string_view text,
                          String(limits_.max_string_bytes, "max_gguf_string_bytes", "a chat template"));
    if (const std::optional<size_t> bad = base::FirstInvalidUtf8(text)) {
      // A loader decoding it leniently would drop or replace the byte and render what the
      // checker never saw.
      return absl::InvalidArgumentError(
          absl::StrCat("chat template ", base::Quoted(key), " is not UTF-8 at byte ", *bad,
                       " of the template (offset ", value_at + 8 + *bad, ")"));
    }
    file_.templates.push_back(Template{std::string(key), text, value_at + 8});
    return absl::OkStatus();
  }

  // One value of `type`, arrays of arrays to max_array_depth, without recursion.
  absl::Status Value(std::string_view key, uint32_t type) {
    struct Frame {
      uint32_t element;
      uint64_t remaining;
    };
    std::vector<Frame> stack;
    const auto push_array = [&]() -> absl::Status {
      const uint64_t at = r_.offset();
      if (stack.size() >= limits_.max_array_depth) {
        return Limit(absl::StrCat("key ", base::Quoted(key), ": arrays nested deeper than ",
                                  limits_.max_array_depth, " at offset ", at, " (max_array_depth)"),
                     "max_array_depth", limits_.max_array_depth);
      }
      CKPT_ASSIGN_OR_RETURN(const uint32_t element, r_.ReadU32LE());
      if (element > kMaxValueType) {
        return absl::InvalidArgumentError(absl::StrCat("key ", base::Quoted(key),
                                                       ": array element type ", element,
                                                       " at offset ", at, " is not a GGUF type"));
      }
      CKPT_ASSIGN_OR_RETURN(const uint64_t count, r_.ReadU64LE());
      if (count > limits_.max_array_elements - array_elements_) {
        return Limit(absl::StrCat("key ", base::Quoted(key), ": an array of ", count,
                                  " elements at offset ", at,
                                  " brings the file's array elements "
                                  "over ",
                                  limits_.max_array_elements, " (max_array_elements)"),
                     "max_array_elements", limits_.max_array_elements);
      }
      array_elements_ += count;
      stack.push_back(Frame{element, count});
      return absl::OkStatus();
    };
    if (static_cast<ValueType>(type) == ValueType::kArray) {
      CKPT_RETURN_IF_ERROR(push_array());
    } else {
      CKPT_RETURN_IF_ERROR(Scalars(key, type, 1));
    }
    while (!stack.empty()) {
      Frame& top = stack.back();
      if (top.remaining == 0) {
        stack.pop_back();
        continue;
      }
      if (static_cast<ValueType>(top.element) == ValueType::kArray) {
        --top.remaining;
        CKPT_RETURN_IF_ERROR(push_array());
        continue;
      }
      if (static_cast<ValueType>(top.element) == ValueType::kString) {
        --top.remaining;
        CKPT_RETURN_IF_ERROR(Scalars(key, top.element, 1));
        continue;
      }
      const uint64_t count = top.remaining;
      top.remaining = 0;
      CKPT_RETURN_IF_ERROR(Scalars(key, top.element, count));
    }
    return absl::OkStatus();
  }

  // `count` values of a scalar type (string or fixed-size).
  absl::Status Scalars(std::string_view key, uint32_t type, uint64_t count) {
    const uint64_t at = r_.offset();
    if (static_cast<ValueType>(type) == ValueType::kString) {
      for (uint64_t i = 0; i < count; ++i) {
        CKPT_RETURN_IF_ERROR(
            String(limits_.max_string_bytes, "max_gguf_string_bytes", "a string").status());
      }
      return absl::OkStatus();
    }
    uint64_t bytes = 0;
    if (!base::CheckedMul<uint64_t>(FixedSize(type), count, &bytes) || bytes > r_.remaining()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", base::Quoted(key), ": ", count, " values of type ", type, " at offset ", at,
          " run past the end of the file (", r_.remaining(), " bytes remain)"));
    }
    CKPT_ASSIGN_OR_RETURN(const std::string_view values, r_.ReadBytes(bytes));
    if (static_cast<ValueType>(type) == ValueType::kBool) {
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i] != 0 && values[i] != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "key ", base::Quoted(key), ": bool value ", static_cast<uint8_t>(values[i]),
              " at offset ", at + i, " is neither 0 nor 1"));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status TensorInfo(uint64_t index) {
    item_ = r_.offset();
    Tensor t;
    t.info_offset = item_;
    CKPT_ASSIGN_OR_RETURN(const std::string_view name,
                          String(limits_.max_key_bytes, "max_key_bytes", "a tensor name"));
    // Built only for a message: a file may hold a million tensors.
    const auto where = [&] {
      return absl::StrCat("tensor ", index, " ", base::Quoted(name), " (info at offset ", item_,
                          ")");
    };
    if (name.empty() || name.find('\0') != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": the name is empty or holds a NUL"));
    }
    if (name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": the name is ", name.size(),
                       " bytes; ggml refuses names of 64 bytes or more"));
    }
    t.name = std::string(name);
    CKPT_ASSIGN_OR_RETURN(const uint32_t n_dims, r_.ReadU32LE());
    if (n_dims > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": ", n_dims, " dimensions, more than ggml's ", kMaxDims));
    }
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      CKPT_ASSIGN_OR_RETURN(const uint64_t n, r_.ReadU64LE());
      if (n > static_cast<uint64_t>(INT64_MAX)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": dimension ", d, " is negative as ggml reads it (int64)"));
      }
      if (!base::CheckedMul<uint64_t>(numel, n, &numel) ||
          numel >= static_cast<uint64_t>(INT64_MAX)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": the element count overflows int64"));
      }
      // ggml divides INT64_MAX by ne[1], ne[2] and ne[3] to check the element count: a zero
      // there crashes its loader (SIGFPE).
      if (d >= 1 && n == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ": dimension ", d, " is 0, which ggml's loader divides by (a crash)"));
      }
      t.dims.push_back(n);
    }
    const uint64_t type_at = r_.offset();
    CKPT_ASSIGN_OR_RETURN(t.type, r_.ReadU32LE());
    const GgmlType* type = FindGgmlType(t.type);
    if (type == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(where(), ": ggml type ", t.type, " at offset ", type_at,
                       " is not in ckptscan's ggml type table "
                       "(removed from ggml, or newer than this table)"));
    }
    const uint64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % type->block_elements != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": ", row, " elements per row is not a whole number of ",
                       AbslView(type->name), " blocks (", type->block_elements, " elements each)"));
    }
    // bytes = numel / block_elements * block_bytes; numel is a multiple of the block (its
    // first dimension is).
    if (!base::CheckedMul<uint64_t>(numel / type->block_elements, type->block_bytes, &t.nbytes)) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": the byte size overflows"));
    }
    CKPT_ASSIGN_OR_RETURN(t.offset, r_.ReadU64LE());  // relative until DataSection
    if (const auto [it, inserted] = tensor_names_.emplace(t.name, item_); !inserted) {
      file_.anomalies.push_back(
          Anomaly{"duplicate_tensor", item_,
                  absl::StrCat("tensor name ", base::Quoted(name), " at offset ", item_,
                               " was already used at offset ", it->second,
                               ": ggml refuses the file, other readers keep one of the tensors")});
    }
    file_.tensors.push_back(std::move(t));
    return absl::OkStatus();
  }

  // Where ggml puts the data section and each tensor in it.
  absl::Status DataSection() {
    item_ = r_.offset();
    const uint64_t size = data_.size();
    uint64_t start = r_.offset();
    if (!file_.tensors.empty() && !Pad(start, file_.alignment, &start)) {
      return absl::InvalidArgumentError("the data section's offset overflows");
    }
    if (start > size) {
      return absl::InvalidArgumentError(absl::StrCat("the data section starts at offset ", start,
                                                     ", past the end of the file (", size,
                                                     " bytes)"));
    }
    file_.data_start = start;
    uint64_t expected = 0;  // the running padded size, relative to the data section
    for (Tensor& t : file_.tensors) {
      item_ = t.info_offset;
      // Built only for a message.
      const auto where = [&] {
        return absl::StrCat("tensor ", base::Quoted(t.name), " (info at offset ", t.info_offset,
                            ")");
      };
      if (t.offset != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ": data at relative offset ", t.offset, " where ggml expects ", expected,
            " (tensors lie in order, each padded to general.alignment ", file_.alignment, ")"));
      }
      uint64_t abs = 0;
      if (!base::CheckedAdd<uint64_t>(start, t.offset, &abs) ||
          !base::RangeWithin(abs, t.nbytes, size)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": its ", t.nbytes, " bytes at relative offset ", t.offset,
                         " run past the end of the file (", size, " bytes)"));
      }
      t.offset = abs;
      uint64_t padded = 0;
      if (!Pad(t.nbytes, file_.alignment, &padded) ||
          !base::CheckedAdd<uint64_t>(expected, padded, &expected)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": the data section size overflows"));
      }
    }
    // ggml reads the whole data section, the last tensor's padding included (a file cut inside
    // that padding is one gguf-py never writes).
    uint64_t end = 0;
    if (!base::CheckedAdd<uint64_t>(start, expected, &end) || end > size) {
      item_ = start;
      return absl::InvalidArgumentError(
          absl::StrCat("the data section (", expected, " bytes from offset ", start,
                       ", each tensor padded to general.alignment ", file_.alignment,
                       ") runs past the end of the file (", size, " bytes)"));
    }
    file_.data_end = end;
    if (end < size) {
      file_.anomalies.push_back(
          Anomaly{"trailing_data", end,
                  absl::StrCat(size - end, " bytes after the data section (offset ", end,
                               "), which no GGUF reader reads")});
    }
    return absl::OkStatus();
  }

  std::string_view data_;
  const Limits& limits_;
  base::ByteReader r_;
  uint64_t* error_offset_;
  uint64_t item_ = 0;  // offset of the item being read (errors point at it)
  uint64_t array_elements_ = 0;
  absl::flat_hash_map<std::string_view, uint64_t> keys_;
  absl::flat_hash_map<std::string, uint64_t> tensor_names_;
  File file_;
};

}  // namespace

const GgmlType* FindGgmlType(uint32_t id) {
  for (const GgmlType& t : kTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

absl::StatusOr<File> Read(std::string_view data, const Limits& limits, uint64_t* error_offset) {
  return Reader(data, limits, error_offset).Read();
}

}  // namespace ckptscan::gguf
