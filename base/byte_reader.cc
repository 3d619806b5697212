#include "base/byte_reader.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ckptscan::base {

absl::Status ByteReader::Truncated(uint64_t need) const {
  return absl::InvalidArgumentError(
      absl::StrFormat("truncated at byte offset %d: need %d bytes, %d remain", offset(), need,
                      remaining()));
}

absl::Status ByteReader::SetEnd(uint64_t abs_end) {
  if (abs_end < offset() || abs_end > data_end_offset()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "window end %d outside [%d, %d]", abs_end, offset(), data_end_offset()));
  }
  end_ = abs_end - base_;
  return absl::OkStatus();
}

absl::StatusOr<std::string_view> ByteReader::ReadBytes(uint64_t n) {
  if (n > remaining()) return Truncated(n);
  std::string_view out = data_.substr(pos_, n);
  pos_ += n;
  return out;
}

absl::Status ByteReader::Skip(uint64_t n) {
  if (n > remaining()) return Truncated(n);
  pos_ += n;
  return absl::OkStatus();
}

absl::StatusOr<uint8_t> ByteReader::ReadU8() {
  if (remaining() < 1) return Truncated(1);
  return static_cast<uint8_t>(data_[pos_++]);
}

namespace {
uint64_t LoadLE(std::string_view b) {
  uint64_t v = 0;
  for (size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
  return v;
}
}  // namespace

absl::StatusOr<uint16_t> ByteReader::ReadU16LE() {
  if (remaining() < 2) return Truncated(2);
  uint64_t v = LoadLE(data_.substr(pos_, 2));
  pos_ += 2;
  return static_cast<uint16_t>(v);
}

absl::StatusOr<uint32_t> ByteReader::ReadU32LE() {
  if (remaining() < 4) return Truncated(4);
  uint64_t v = LoadLE(data_.substr(pos_, 4));
  pos_ += 4;
  return static_cast<uint32_t>(v);
}

absl::StatusOr<uint64_t> ByteReader::ReadU64LE() {
  if (remaining() < 8) return Truncated(8);
  uint64_t v = LoadLE(data_.substr(pos_, 8));
  pos_ += 8;
  return v;
}

absl::StatusOr<std::string_view> ByteReader::ReadLine() {
  std::string_view window = data_.substr(pos_, end_ - pos_);
  size_t nl = window.find('\n');
  if (nl == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no end of line after byte offset %d (%d bytes remain)", offset(),
                        remaining()));
  }
  pos_ += nl + 1;
  return window.substr(0, nl + 1);
}

}  // namespace ckptscan::base
