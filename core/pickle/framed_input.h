// Private to core/pickle: the unpickler's input, as one of the two unpicklers reads it.
//
// Framing::kStrict is _pickle.c's input (_Unpickler_Read, _Unpickler_ReadLine) with PEP 3154
// framing enforced strictly, as fixed CPython does: no argument or line may cross a frame end and
// no FRAME may start inside an unfinished frame. CPython 3.11 reads across frames, so those
// errors are FailedPrecondition (stricter than the loader). A line must end in '\n'.
//
// Framing::kUnframer is pickle.py's _Unframer (pickle._Unpickler, which joblib.load uses, 3.11
// and 3.13 alike): a read or line that starts in a frame must end inside it ("pickle exhausted
// before end of frame"), a frame whose bytes are all read is left for the file, a FRAME inside
// an unfinished frame is refused — all InvalidArgument, since that unpickler raises there too.
// A FRAME longer than the bytes left is a frame of the bytes left (file.read returns short).
// Outside frames readline() returns what is left when no '\n' follows (possibly nothing).
//
// Errors are absl statuses the VM maps to VmError codes: InvalidArgument (malformed, as the
// unpickler), FailedPrecondition (stricter than CPython 3.11) and a named limit
// (max_line_bytes).
#ifndef CKPTSCAN_CORE_PICKLE_FRAMED_INPUT_H_
#define CKPTSCAN_CORE_PICKLE_FRAMED_INPUT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/byte_reader.h"
#include "core/pickle/limits.h"

namespace ckptscan::pickle::internal {

enum class Framing : uint8_t { kStrict, kUnframer };

class FramedInput final {
 public:
  // `base` is the absolute offset of data[0]; `limits` must outlive this.
  FramedInput(const Limits& limits, std::string_view data, uint64_t base,
              Framing framing = Framing::kStrict)
      : limits_(limits), r_(data, base), framing_(framing) {}

  uint64_t offset() const { return r_.offset(); }
  // Bytes left in the current frame, or in the data outside frames.
  uint64_t remaining() const { return r_.remaining(); }
  bool in_frame() const { return in_frame_; }
  // Where the file stands after a load for pickle.py, whose _Unframer read the current frame
  // whole from the file: the frame's end inside one, else offset().
  uint64_t file_offset() const { return in_frame_ ? r_.end_offset() : r_.offset(); }

  // Leaves a frame whose bytes are all read: the next read continues past it.
  void LeaveFrameIfDone();

  // n bytes, which must lie inside the current frame if any.
  absl::StatusOr<std::string_view> Read(uint64_t n);
  // An unsigned little-endian integer of nbytes (at most 8) bytes, read as Read does.
  absl::StatusOr<uint64_t> ReadUInt(int nbytes);
  // readline(): through the next '\n' (included), which must lie inside the current frame if
  // any and within limits.max_line_bytes. kUnframer, outside a frame: the rest of the data when
  // no '\n' follows (empty at the end), as file.readline() returns it.
  absl::StatusOr<std::string_view> ReadLine();
  // FRAME's argument: a frame of `size` bytes starts here (none when 0). The current frame
  // must be finished.
  absl::Status StartFrame(uint64_t size);

  // The bytes left (in the frame, else in the data), and reads of them as they are, without
  // the framing rules: for the readers that bypass the unpickler's buffer (joblib's).
  std::string_view Peek() const { return r_.Peek(); }
  absl::StatusOr<std::string_view> ReadBytes(uint64_t n) { return r_.ReadBytes(n); }
  absl::Status Skip(uint64_t n) { return r_.Skip(n); }
  absl::StatusOr<uint8_t> ReadU8() { return r_.ReadU8(); }

 private:
  const Limits& limits_;
  base::ByteReader r_;
  Framing framing_;
  bool in_frame_ = false;
};

}  // namespace ckptscan::pickle::internal

#endif  // CKPTSCAN_CORE_PICKLE_FRAMED_INPUT_H_
