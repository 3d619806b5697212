#include "daemon/upload.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ckptscan::daemon {

absl::Status CheckUploadName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("the upload header needs a name");
  if (name.size() > kMaxUploadNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the upload name is ", name.size(), " bytes, over ", kMaxUploadNameBytes));
  }
  if (name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("the upload name contains a NUL byte");
  }
  return absl::OkStatus();
}

absl::StatusOr<base::UniqueFd> SpoolFile(const std::string& dir) {
  base::UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("spool file in ", dir));
  return fd;
}

absl::StatusOr<base::UniqueFd> ReopenReadOnly(int fd) {
  const std::string proc = absl::StrCat("/proc/self/fd/", fd);
  base::UniqueFd ro(::open(proc.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ro.valid()) return absl::ErrnoToStatus(errno, "reopen the spooled upload read-only");
  return ro;
}

std::unique_ptr<StallWatchdog::Watch> WatchCall(StallWatchdog* dog, grpc::ServerContext* ctx,
                                                const std::string& message) {
  return dog->Start([call = ctx->c_call(), message] {
    (void)grpc_call_cancel_with_status(call, GRPC_STATUS_DEADLINE_EXCEEDED, message.c_str(),
                                       nullptr);
  });
}

absl::Status SendConverted(absl::Duration idle, StallWatchdog* dog, grpc::ServerContext* ctx,
                           grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream,
                           const v1::ConvertChunk& first, int output, uint64_t size) {
  const std::string unread =
      absl::StrCat("the caller took no output for ", absl::FormatDuration(idle),
                   " (the daemon's output_idle_timeout): the call is cancelled");
  const std::unique_ptr<StallWatchdog::Watch> watch = WatchCall(dog, ctx, unread);
  auto write = [&](const v1::ConvertChunk& c) {
    return Watched(watch.get(), idle, [&] { return stream->Write(c); });
  };
  auto write_failed = [&] {
    return watch->fired() ? absl::DeadlineExceededError(unread)
                          : absl::CancelledError("the caller went away");
  };
  if (!write(first)) return write_failed();
  v1::ConvertChunk chunk;
  std::string* data = chunk.mutable_data();
  for (uint64_t offset = 0; offset < size;) {
    data->resize(static_cast<size_t>(std::min<uint64_t>(kMaxChunkBytes, size - offset)));
    const ssize_t got = ::pread(output, data->data(), data->size(), static_cast<off_t>(offset));
    if (got <= 0) return absl::InternalError("the converted output could not be read back");
    data->resize(static_cast<size_t>(got));
    if (!write(chunk)) return write_failed();
    offset += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace ckptscan::daemon
