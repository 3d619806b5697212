// The unpickler's input with its framing (framed_input.h): reads of arguments and lines, and
// FRAME's start of a frame, as _pickle.c (strict PEP 3154) or pickle.py's _Unframer reads them.
#include "core/pickle/framed_input.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "core/pickle/vm_internal.h"

namespace ckptscan::pickle::internal {
namespace {

constexpr char kReadsAcross[] = " (CPython 3.11 reads across frames; ckptscan does not follow it)";
// _Unframer's own message for a read or line that a frame cannot satisfy.
constexpr char kExhausted[] = "pickle exhausted before end of frame";

// A framing rule of ours that CPython 3.11 does not enforce (VmError::kStricter): it reads on.
absl::Status Stricter(std::string msg) { return absl::FailedPreconditionError(std::move(msg)); }
absl::Status Malformed(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

}  // namespace

void FramedInput::LeaveFrameIfDone() {
  if (in_frame_ && r_.remaining() == 0) {
    in_frame_ = false;
    (void)r_.SetEnd(r_.data_end_offset());
  }
}

absl::StatusOr<std::string_view> FramedInput::Read(uint64_t n) {
  LeaveFrameIfDone();
  if (n > r_.remaining()) {
    if (in_frame_) {
      if (framing_ == Framing::kUnframer) {
        return Malformed(absl::StrFormat("%s (%d bytes needed at offset %d, %d left in it)",
                                         kExhausted, n, r_.offset(), r_.remaining()));
      }
      return Stricter(absl::StrCat(
          absl::StrFormat("argument of %d bytes crosses the end of its frame at offset %d", n,
                          r_.end_offset()),
          kReadsAcross));
    }
    return Malformed(absl::StrFormat("pickle data was truncated: %d bytes needed, %d remain", n,
                                     r_.remaining()));
  }
  return r_.ReadBytes(n);
}

absl::StatusOr<uint64_t> FramedInput::ReadUInt(int nbytes) {
  CKPT_ASSIGN_OR_RETURN(std::string_view b, Read(nbytes));
  uint64_t v = 0;
  for (int k = nbytes - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[k]);
  return v;
}

absl::StatusOr<std::string_view> FramedInput::ReadLine() {
  LeaveFrameIfDone();
  std::string_view window = r_.Peek();
  uint64_t cap = limits_.max_line_bytes;
  std::string_view search = window.size() > cap ? window.substr(0, cap) : window;
  size_t nl = search.find('\n');
  if (nl == std::string_view::npos) {
    if (window.size() > cap) return LimitExceeded("max_line_bytes", cap);
    if (in_frame_) {
      if (framing_ == Framing::kUnframer) {
        return Malformed(absl::StrFormat("%s (a line at offset %d)", kExhausted, r_.offset()));
      }
      return Stricter(absl::StrCat(
          absl::StrFormat("line crosses the end of its frame at offset %d", r_.end_offset()),
          kReadsAcross));
    }
    if (framing_ == Framing::kUnframer) return r_.ReadBytes(window.size());
    return Malformed("pickle data was truncated (no end of line)");
  }
  return r_.ReadBytes(nl + 1);
}

absl::Status FramedInput::StartFrame(uint64_t size) {
  if (in_frame_ && r_.remaining() > 0) {
    constexpr char kNewFrame[] = "beginning of a new frame before end of current frame";
    if (framing_ == Framing::kUnframer) return Malformed(kNewFrame);
    return Stricter(absl::StrCat(kNewFrame, kReadsAcross));
  }
  in_frame_ = false;
  (void)r_.SetEnd(r_.data_end_offset());
  if (size > r_.remaining()) {
    if (framing_ == Framing::kStrict) {
      return Malformed(absl::StrFormat("pickle data was truncated: frame of %d bytes, %d remain",
                                       size, r_.remaining()));
    }
    // _Unframer.load_frame: io.BytesIO(file.read(size)), however short the read.
    size = r_.remaining();
  }
  if (size > 0) {
    in_frame_ = true;
    (void)r_.SetEnd(r_.offset() + size);
  }
  return absl::OkStatus();
}

}  // namespace ckptscan::pickle::internal
