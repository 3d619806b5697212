// Uploads and downloads of ckptscand's streaming RPCs (ScanUpload, ConvertUpload): the bytes a
// caller sends are spooled to an unlinked file, under the daemon's caps, its spool budget and
// its idle timeouts; a conversion's output is staged in a private job directory and streamed
// back the same way. The daemon never parses these bytes: a worker reads them read-only.
//
// Thread-safe: every function works on its own call's state.
#ifndef CKPTSCAN_DAEMON_UPLOAD_H_
#define CKPTSCAN_DAEMON_UPLOAD_H_

#include <grpcpp/grpcpp.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "app/convert.h"
#include "app/scan_file.h"
#include "base/unique_fd.h"
#include "ckptscan/v1/scanner.grpc.pb.h"
#include "daemon/job_slots.h"
#include "signing/manifest.h"

namespace ckptscan::daemon {

inline constexpr uint64_t kMaxChunkBytes = 1u << 20;  // upload and download chunks
inline constexpr size_t kMaxUploadNameBytes = 4096;

// What an upload may be and where it goes (from ServiceOptions).
struct SpoolOptions {
  uint64_t max_upload_bytes = 0;
  // Liveness: a read waits at most idle_timeout for the next chunk; after its first
  // idle_timeout (its grace) the upload must have sent min_bytes_per_second for every second
  // since it began (0: no rate); it must be whole within `deadline`.
  absl::Duration idle_timeout;
  uint64_t min_bytes_per_second = 0;
  absl::Duration deadline = absl::InfiniteDuration();
  std::string spool_dir;
};

// When an upload that began at `start` and has sent `received` bytes must have sent more (or
// be whole), and which limit says so. The earliest of: its next chunk within idle_timeout of
// `now`; min_bytes_per_second after the grace (received / rate seconds past start +
// idle_timeout); the deadline.
struct UploadDue {
  enum class Limit { kIdle, kMinRate, kDeadline };
  absl::Time at;
  Limit limit = Limit::kIdle;
};
UploadDue NextUploadDue(const SpoolOptions& options, absl::Time start, uint64_t received,
                        absl::Time now);
// The message a stalled upload is cancelled with, naming the limit (DEADLINE_EXCEEDED).
std::string UploadStallMessage(const SpoolOptions& options, UploadDue::Limit limit);

// The name an upload header gives: not empty, at most kMaxUploadNameBytes, no NUL.
absl::Status CheckUploadName(const std::string& name);

// An unlinked file in the spool directory (O_TMPFILE: nothing to clean up after a crash).
absl::StatusOr<base::UniqueFd> SpoolFile(const std::string& dir);

// A watch that cancels the call on a stall. The caller gets DEADLINE_EXCEEDED and `message`:
// the transport sends a server-side cancellation's status as the call's trailers.
std::unique_ptr<StallWatchdog::Watch> WatchCall(StallWatchdog* dog, grpc::ServerContext* ctx,
                                                const std::string& message);
// The same with one of several messages: the one `which` holds when the watch fires (the
// caller sets it before each Arm, to name the limit that deadline comes from).
std::unique_ptr<StallWatchdog::Watch> WatchCall(StallWatchdog* dog, grpc::ServerContext* ctx,
                                                std::vector<std::string> messages,
                                                std::shared_ptr<std::atomic<size_t>> which);

// One blocking stream operation under a watch: cancelled if it takes longer than `limit`.
template <typename Op>
bool Watched(StallWatchdog::Watch* watch, absl::Duration limit, Op&& op) {
  watch->Arm(absl::ToChronoNanoseconds(limit));
  const bool ok = op();
  watch->Disarm();
  return ok;
}

// Reads an upload: the header first, then data chunks into an unlinked spool file, under the
// total cap and the daemon's spool budget (`upload`). A read that waits longer than
// upload_idle_timeout for the caller cancels the call. `Stream` is a ServerReader or a
// ServerReaderWriter.
template <typename Stream>
absl::StatusOr<base::UniqueFd> ReceiveUpload(const SpoolOptions& options, grpc::ServerContext* ctx,
                                             Stream* stream, JobSlots::Upload* upload,
                                             StallWatchdog* dog, v1::UploadHeader* header) {
  using Limit = UploadDue::Limit;
  std::vector<std::string> stalled;
  for (Limit l : {Limit::kIdle, Limit::kMinRate, Limit::kDeadline}) {
    stalled.push_back(UploadStallMessage(options, l));
  }
  auto which = std::make_shared<std::atomic<size_t>>(0);
  const std::unique_ptr<StallWatchdog::Watch> watch = WatchCall(dog, ctx, stalled, which);
  const absl::Time start = absl::Now();
  uint64_t total = 0;
  v1::UploadChunk chunk;
  // Each read is armed with the earliest of the idle timeout, the minimum rate and the
  // deadline: an upload that trickles a byte now and then is as stalled as a silent one.
  auto read = [&] {
    const UploadDue due = NextUploadDue(options, start, total, absl::Now());
    which->store(static_cast<size_t>(due.limit));
    return Watched(watch.get(), std::max(due.at - absl::Now(), absl::ZeroDuration()),
                   [&] { return stream->Read(&chunk); });
  };
  auto fired = [&] { return absl::DeadlineExceededError(stalled[which->load()]); };
  if (!read()) {
    if (watch->fired()) return fired();
    return absl::InvalidArgumentError("the upload ended before its header");
  }
  if (chunk.kind_case() != v1::UploadChunk::kHeader) {
    return absl::InvalidArgumentError("the first message of an upload must be its header");
  }
  *header = std::move(*chunk.mutable_header());
  if (absl::Status s = CheckUploadName(header->name()); !s.ok()) return s;
  if (header->size() > options.max_upload_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the upload declares ", header->size(), " bytes, over the daemon's cap of ",
                     options.max_upload_bytes, " (max_upload_bytes)"));
  }
  absl::StatusOr<base::UniqueFd> fd = SpoolFile(options.spool_dir);
  if (!fd.ok()) return fd.status();
  while (read()) {
    if (chunk.kind_case() != v1::UploadChunk::kData) {
      return absl::InvalidArgumentError("only the first message of an upload is a header");
    }
    const std::string& data = chunk.data();
    if (data.size() > kMaxChunkBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("an upload chunk of ", data.size(), " bytes, over ", kMaxChunkBytes));
    }
    total += data.size();
    if (total > options.max_upload_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("the upload is over the daemon's cap of ",
                                                       options.max_upload_bytes,
                                                       " bytes (max_upload_bytes)"));
    }
    if (header->size() != 0 && total > header->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the upload runs past the ", header->size(), " bytes its header declares"));
    }
    if (absl::Status s = upload->Spool(data.size()); !s.ok()) return s;
    if (absl::Status s = base::WriteAll(fd->get(), data, "spool upload"); !s.ok()) return s;
  }
  if (watch->fired()) return fired();
  if (ctx->IsCancelled()) return absl::CancelledError("the caller cancelled the upload");
  if (header->size() != 0 && total != header->size()) {
    return absl::InvalidArgumentError(absl::StrCat("the upload ended after ", total, " of the ",
                                                   header->size(), " bytes its header declares"));
  }
  // A read-only descriptor for the worker: it gets no way to write the spooled bytes.
  return app::ReopenReadOnly(fd->get());
}

// Removes a private job directory and the files a conversion left in it.
class JobDir final {
 public:
  static absl::StatusOr<JobDir> Create(const std::string& spool) {
    std::string tmpl = spool + "/job-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return absl::ErrnoToStatus(errno, absl::StrCat("job directory in ", spool));
    }
    return JobDir(std::move(tmpl));
  }
  JobDir(JobDir&& o) noexcept : dir_(std::move(o.dir_)) { o.dir_.clear(); }
  ~JobDir() {
    if (dir_.empty()) return;
    for (const char* name : {"model.safetensors", "model.safetensors.sig"}) {
      (void)::unlink(absl::StrCat(dir_, "/", name).c_str());
    }
    (void)::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  explicit JobDir(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Sends `first` (the ConvertResponse), then `size` bytes of `output` in chunks of at most
// kMaxChunkBytes. A write the caller does not take within `idle` cancels the call:
// DeadlineExceeded; a caller that went away: Cancelled; an unreadable output: Internal.
absl::Status SendConverted(absl::Duration idle, StallWatchdog* dog, grpc::ServerContext* ctx,
                           grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream,
                           const v1::ConvertChunk& first, int output, uint64_t size);

// A ConvertUpload job: the spooled upload converted into a private job directory in the spool,
// whose files live only until they are sent (the caller names them).
class UploadConversion final {
 public:
  // The request for `spooled` (named `header.name()`): the header's options parsed, the output
  // in a new job directory in `spool_dir`, nothing read but the upload's own bytes (a set's shards
  // are not in an upload: sets convert by path).
  static absl::StatusOr<UploadConversion> Prepare(const v1::UploadHeader& header,
                                                  base::UniqueFd spooled,
                                                  const std::string& spool_dir,
                                                  signing::Method default_sign_method);

  app::ConvertRequest request;

  // Completes the answer `first` (the job directory's paths removed; the signature and the
  // output's size when converted), then sends it and the output (SendConverted).
  absl::Status Send(absl::Duration idle, StallWatchdog* dog, grpc::ServerContext* ctx,
                    grpc::ServerReaderWriter<v1::ConvertChunk, v1::UploadChunk>* stream,
                    v1::ConvertChunk first);

 private:
  UploadConversion(JobDir dir, base::UniqueFd spooled)
      : dir_(std::move(dir)), spooled_(std::move(spooled)) {}
  JobDir dir_;
  base::UniqueFd spooled_;
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_UPLOAD_H_
