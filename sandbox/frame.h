// The result frame: 8-byte little-endian length, then the payload (sandbox/protocol.h).
//
// WriteFrame runs in the jailed worker and uses nothing but write(2). FrameReader runs on
// the trusted side: it is fed the bytes read from the pipe, checks the declared length
// against its cap before keeping anything, and grows its buffer only as bytes arrive (a lying
// length cannot make it allocate). Thread-compatible.
//
//   FrameReader reader(kMaxFrameBytes);
//   while (...) { if (absl::Status s = reader.Feed(chunk); !s.ok()) ...kill the worker... }
//   absl::StatusOr<std::string> payload = std::move(reader).Finish();  // at EOF
#ifndef CKPTSCAN_SANDBOX_FRAME_H_
#define CKPTSCAN_SANDBOX_FRAME_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckptscan::sandbox {

// The 8 header bytes for a payload of `size` bytes.
std::string FrameHeader(uint64_t size);

// Writes header and payload to `fd`, retrying short writes and EINTR.
[[nodiscard]] absl::Status WriteFrame(int fd, std::string_view payload);

class FrameReader final {
 public:
  explicit FrameReader(uint64_t max_payload) : max_payload_(max_payload) {}

  // Appends bytes read from the pipe. ResourceExhausted when the declared length is over
  // the cap; InvalidArgument when more bytes arrive than the header declared.
  [[nodiscard]] absl::Status Feed(std::string_view bytes);
  // At EOF: the payload, or InvalidArgument for an empty, short or truncated frame.
  absl::StatusOr<std::string> Finish() &&;

  uint64_t bytes_seen() const { return seen_; }

 private:
  uint64_t max_payload_;
  uint64_t seen_ = 0;
  std::string header_;
  bool have_length_ = false;
  uint64_t length_ = 0;
  std::string payload_;
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_FRAME_H_
