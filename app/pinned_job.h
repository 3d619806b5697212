// A job on a pinned input: what a scan and a conversion of one file do around the jailed worker
// so that the verdict is bound to the bytes hashed (sandbox/pinned_input.h): the pin, a watch
// descriptor for the checks after the job, the hash's stop, and the checks themselves.
//
// Thread-compatible: each job holds its own.
#ifndef CKPTSCAN_APP_PINNED_JOB_H_
#define CKPTSCAN_APP_PINNED_JOB_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "ckptscan/v1/report.pb.h"
#include "sandbox/pinned_input.h"
#include "sandbox/run.h"

namespace ckptscan::app {

// A second descriptor of the input, kept by the trusted side while the worker reads its own.
base::UniqueFd WatchInput(int fd);

// A further check behind the pin, made after the job: the input is the same inode, of the same
// size, unwritten (mtime and ctime). Otherwise `report` gets an io error and blocks, its
// findings kept (pinned_job.cc says what it catches and what only the pin does).
void CheckInputUnchanged(int watch, const struct stat& before, v1::FileReport* report);

// The input pinned for a job, or a report for a file over max_sealed_copy_bytes that could not
// be leased (ERROR, code "limit"); any other failure is the status.
struct PinOrReport {
  std::optional<sandbox::PinnedInput> pin;
  std::optional<v1::FileReport> report;
};
absl::StatusOr<PinOrReport> PinForJob(base::UniqueFd fd, uint64_t size,
                                      const sandbox::JailOptions& options);

// The job's options: a broken lease also stops the worker.
sandbox::JailOptions JobOptions(const sandbox::JailOptions& options,
                                const sandbox::PinnedInput& pin);

// The hash's stop: a broken lease ends it early (null for a sealed copy).
std::function<bool()> HashStop(const sandbox::PinnedInput& pin);

// Once the worker has finished and the digest is computed: whether the pin held (then the lease
// is given back). If not, `report` gets an io error and blocks, and its digest must be left out.
bool CheckPinned(sandbox::PinnedInput& pin, const sandbox::JailedRun& run, v1::FileReport* report);

// The last component of a path (what loaders that read by name see).
std::string_view BaseName(std::string_view path);

// A report error.
v1::ScanError ReportError(v1::ErrorCode code, std::string message);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_PINNED_JOB_H_
