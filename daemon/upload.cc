#include "daemon/upload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_replace.h"
#include "app/publish.h"
#include "base/status_macros.h"
#include "signing/keys.h"
#include "signing/limits.h"

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

std::unique_ptr<StallWatchdog::Watch> WatchCall(StallWatchdog* dog, grpc::ServerContext* ctx,
                                                const std::string& message) {
  return dog->Start([call = ctx->c_call(), message] {
    (void)grpc_call_cancel_with_status(call, GRPC_STATUS_DEADLINE_EXCEEDED, message.c_str(),
                                       nullptr);
  });
}

std::unique_ptr<StallWatchdog::Watch> WatchCall(StallWatchdog* dog, grpc::ServerContext* ctx,
                                                std::vector<std::string> messages,
                                                std::shared_ptr<std::atomic<size_t>> which) {
  return dog->Start([call = ctx->c_call(), messages = std::move(messages),
                     which = std::move(which)] {
    const std::string& message = messages[std::min(which->load(), messages.size() - 1)];
    (void)grpc_call_cancel_with_status(call, GRPC_STATUS_DEADLINE_EXCEEDED, message.c_str(),
                                       nullptr);
  });
}

UploadDue NextUploadDue(const SpoolOptions& o, absl::Time start, uint64_t received,
                        absl::Time now) {
  UploadDue due{now + o.idle_timeout, UploadDue::Limit::kIdle};
  if (o.min_bytes_per_second > 0) {
    // The rate is owed from the start, after a grace of one idle timeout (and kRateSlack):
    // `received` bytes pay for received / rate seconds. The slack keeps an upload that simply
    // stopped, due by both at nearly the same time, named by the idle timeout.
    constexpr absl::Duration kRateSlack = absl::Seconds(1);
    const absl::Time owed = start + o.idle_timeout + kRateSlack +
                            absl::Seconds(static_cast<double>(received) /
                                          static_cast<double>(o.min_bytes_per_second));
    if (owed < due.at) due = {owed, UploadDue::Limit::kMinRate};
  }
  if (start + o.deadline < due.at) due = {start + o.deadline, UploadDue::Limit::kDeadline};
  return due;
}

std::string UploadStallMessage(const SpoolOptions& o, UploadDue::Limit limit) {
  switch (limit) {
    case UploadDue::Limit::kMinRate:
      return absl::StrCat("the upload is too slow: under the daemon's upload_min_rate of ",
                          o.min_bytes_per_second, " bytes a second (after its first ",
                          absl::FormatDuration(o.idle_timeout), "): the call is cancelled");
    case UploadDue::Limit::kDeadline:
      return absl::StrCat("the upload did not finish within ", absl::FormatDuration(o.deadline),
                          " (the daemon's upload_deadline): the call is cancelled");
    case UploadDue::Limit::kIdle:
      break;
  }
  return absl::StrCat("the upload sent nothing for ", absl::FormatDuration(o.idle_timeout),
                      " (the daemon's upload_idle_timeout): the call is cancelled");
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

absl::StatusOr<UploadConversion> UploadConversion::Prepare(const v1::UploadHeader& header,
                                                           base::UniqueFd spooled,
                                                           const std::string& spool_dir,
                                                           signing::Method default_sign_method) {
  app::ConvertRequest request;
  CKPT_RETURN_IF_ERROR(app::ApplyConvertOptions(header.convert(), default_sign_method, &request));
  CKPT_ASSIGN_OR_RETURN(JobDir dir, JobDir::Create(spool_dir));
  const int fd = spooled.get();
  const std::string name = header.name();
  request.input = name;
  request.output = absl::StrCat(dir.dir(), "/model.safetensors");
  request.replace = false;
  request.allow_index = false;  // a set's shards are not in the upload: sets convert by path
  request.open_input = [fd, name](const std::string& path) -> absl::StatusOr<base::UniqueFd> {
    if (path != name) return absl::PermissionDeniedError("an upload can only read its own bytes");
    return app::ReopenReadOnly(fd);
  };
  UploadConversion job(std::move(dir), std::move(spooled));
  job.request = std::move(request);
  return job;
}

absl::Status UploadConversion::Send(
    absl::Duration idle, StallWatchdog* dog, grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream, v1::ConvertChunk first) {
  v1::ConvertResponse* response = first.mutable_response();
  for (v1::FileReport& f : *response->mutable_report()->mutable_files()) {
    if (f.has_conversion()) {
      f.mutable_conversion()->clear_output();
      f.mutable_conversion()->clear_signature();
    }
  }
  response->set_error(absl::StrReplaceAll(response->error(), {{dir_.dir() + "/", ""}}));
  base::UniqueFd output;
  uint64_t output_size = 0;
  if (response->converted()) {
    output = base::UniqueFd(::open(request.output.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    absl::StatusOr<std::string> bundle =
        signing::ReadSmallFile(app::SignaturePathFor(request.output),
                               signing::Limits{}.max_bundle_bytes, "Limits::max_bundle_bytes");
    if (!output.valid() || ::fstat(output.get(), &st) != 0 || !bundle.ok()) {
      return absl::InternalError("the converted output could not be read back");
    }
    output_size = static_cast<uint64_t>(st.st_size);
    response->set_signature(*std::move(bundle));
    response->set_output_size(output_size);
  }
  return SendConverted(idle, dog, ctx, stream, first, output.get(), output_size);
}

}  // namespace ckptscan::daemon
