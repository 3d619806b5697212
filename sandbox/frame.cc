#include "sandbox/frame.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {

std::string FrameHeader(uint64_t size) {
  std::string h(kFrameHeaderBytes, '\0');
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) {
    h[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  }
  return h;
}

absl::Status WriteFrame(int fd, std::string_view payload) {
  const std::string header = FrameHeader(payload.size());
  if (absl::Status s = base::WriteAll(fd, header, "write frame"); !s.ok()) return s;
  return base::WriteAll(fd, payload, "write frame");
}

absl::Status FrameReader::Feed(std::string_view bytes) {
  seen_ += bytes.size();
  if (!have_length_) {
    const size_t take = std::min(bytes.size(), kFrameHeaderBytes - header_.size());
    header_.append(bytes.data(), take);
    bytes.remove_prefix(take);
    if (header_.size() < kFrameHeaderBytes) return absl::OkStatus();
    uint64_t length = 0;
    for (size_t i = 0; i < kFrameHeaderBytes; ++i) {
      length |= uint64_t{static_cast<unsigned char>(header_[i])} << (8 * i);
    }
    if (length > max_payload_) {
      return absl::ResourceExhaustedError(absl::StrCat("result frame declares ", length,
                                                       " bytes; the limit is ", max_payload_,
                                                       " (max_frame_bytes)"));
    }
    have_length_ = true;
    length_ = length;
  }
  if (bytes.size() > length_ - payload_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("result frame: bytes after the declared ", length_, "-byte payload"));
  }
  payload_.append(bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<std::string> FrameReader::Finish() && {
  if (!have_length_) {
    return absl::InvalidArgumentError(seen_ == 0
                                          ? "the worker wrote no result frame"
                                          : absl::StrCat("result frame: header cut after ", seen_,
                                                         " of ", kFrameHeaderBytes, " bytes"));
  }
  if (payload_.size() != length_) {
    return absl::InvalidArgumentError(absl::StrCat("result frame truncated: ", payload_.size(),
                                                   " of ", length_, " payload bytes"));
  }
  return std::move(payload_);
}

}  // namespace ckptscan::sandbox
