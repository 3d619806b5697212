// ByteReader: a bounded, consuming reader over untrusted bytes.
//
// Every read checks the remaining length first and fails with InvalidArgument naming the
// absolute byte offset; nothing is ever read past the current end. Multi-byte integers are
// decoded with shifts (never pointer casts). The reader does not own the bytes: the viewed
// buffer must outlive it. Not thread-safe; cheap to copy.
//
//   ByteReader r(data, /*base_offset=*/member_start);
//   CKPT_ASSIGN_OR_RETURN(uint32_t n, r.ReadU32LE());
//   CKPT_ASSIGN_OR_RETURN(std::string_view body, r.ReadBytes(n));
#ifndef CKPTSCAN_BASE_BYTE_READER_H_
#define CKPTSCAN_BASE_BYTE_READER_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace ckptscan::base {

class ByteReader final {
 public:
  // `base_offset` is the absolute offset of data[0] (used only for positions and messages).
  explicit ByteReader(std::string_view data, uint64_t base_offset = 0)
      : data_(data), base_(base_offset), pos_(0), end_(data.size()) {}

  // Absolute offset of the next byte to read.
  uint64_t offset() const { return base_ + pos_; }
  // Bytes left before the current end.
  uint64_t remaining() const { return end_ - pos_; }
  bool empty() const { return pos_ == end_; }
  // Absolute offset one past the last readable byte.
  uint64_t end_offset() const { return base_ + end_; }
  uint64_t data_end_offset() const { return base_ + data_.size(); }

  // Narrows (or restores) the readable window to end at absolute offset `abs_end`, which must
  // lie between the current position and the end of the data.
  [[nodiscard]] absl::Status SetEnd(uint64_t abs_end);

  // The unread bytes of the current window, without consuming them.
  std::string_view Peek() const { return data_.substr(pos_, end_ - pos_); }

  absl::StatusOr<uint8_t> ReadU8();
  absl::StatusOr<uint16_t> ReadU16LE();
  absl::StatusOr<uint32_t> ReadU32LE();
  absl::StatusOr<uint64_t> ReadU64LE();
  // Reads exactly n bytes.
  absl::StatusOr<std::string_view> ReadBytes(uint64_t n);
  // Reads through the next '\n' (included). Fails if there is none before the end.
  absl::StatusOr<std::string_view> ReadLine();
  [[nodiscard]] absl::Status Skip(uint64_t n);

 private:
  absl::Status Truncated(uint64_t need) const;

  std::string_view data_;
  uint64_t base_;
  uint64_t pos_;
  uint64_t end_;
};

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_BYTE_READER_H_
