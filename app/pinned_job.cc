#include "app/pinned_job.h"

#include <fcntl.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/limit_status.h"
#include "rules/rule_set.h"

namespace ckptscan::app {

v1::ScanError ReportError(v1::ErrorCode code, std::string message) {
  v1::ScanError e;
  e.set_code(code);
  e.set_message(std::move(message));
  return e;
}

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// A second descriptor of the input, kept by the trusted side while the worker reads its own.
base::UniqueFd WatchInput(int fd) { return base::UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

// A further check behind the pin (sandbox/pinned_input.h), which is what binds the digest to
// the parsed bytes: writes through a shared writable mapping to pages already dirty move
// neither mtime nor ctime, so this comparison alone proves nothing about them. It still
// catches what the pin lets through or what happens without one (a scan without a digest): any
// write(2), a fault on a clean page of a shared mapping (mtime and ctime; ctime cannot be set
// back by a user), a truncation (the size), a rename-over (the inode). If one differs, the
// bytes the worker parsed and the bytes hashed may be two different contents, and neither the
// verdict nor the digest can be trusted. The report keeps its findings and gets an error, so it
// blocks (ERROR, or DANGEROUS if that is worse); a conversion is then not published (the
// verdict is not SAFE). A shrink the hash sees first is reported by the hash ("the file
// shrank").
void CheckInputUnchanged(int watch, const struct stat& before, v1::FileReport* report) {
  struct stat after;
  std::string what;
  if (watch < 0 || ::fstat(watch, &after) != 0) {
    what = "it could not be examined again after the scan";
  } else if (after.st_dev != before.st_dev || after.st_ino != before.st_ino) {
    what = "it is another file now";
  } else if (after.st_size != before.st_size) {
    what = absl::StrCat("its size went from ", before.st_size, " to ", after.st_size, " bytes");
  } else if (after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
             after.st_mtim.tv_nsec != before.st_mtim.tv_nsec ||
             after.st_ctim.tv_sec != before.st_ctim.tv_sec ||
             after.st_ctim.tv_nsec != before.st_ctim.tv_nsec) {
    what = "it was written to (its modification or change time moved)";
  } else {
    return;
  }
  *report->add_errors() = ReportError(
      v1::ERROR_CODE_IO, absl::StrCat("the file changed while it was being scanned: ", what,
                                      "; the verdict and the digest may be of different contents"));
  report->set_verdict(rules::WorseVerdict(report->verdict(), v1::VERDICT_ERROR));
}

absl::StatusOr<PinOrReport> PinForJob(base::UniqueFd fd, uint64_t size,
                                      const sandbox::JailOptions& options) {
  absl::StatusOr<sandbox::PinnedInput> pin =
      sandbox::PinnedInput::Pin(std::move(fd), size, options.max_sealed_copy_bytes);
  PinOrReport out;
  if (pin.ok()) {
    if (options.on_pin) options.on_pin(pin->Describe());
    out.pin.emplace(*std::move(pin));
    return out;
  }
  if (!absl::IsResourceExhausted(pin.status())) return pin.status();
  if (options.on_pin) options.on_pin("none (over max_sealed_copy_bytes)");
  v1::FileReport& report = out.report.emplace();
  report.mutable_tensors()->set_count(0);
  report.mutable_tensors()->set_bytes(0);
  v1::ScanError e = ReportError(v1::ERROR_CODE_LIMIT, std::string(pin.status().message()));
  const base::LimitHit hit = base::LimitOf(pin.status())
                                 .value_or(base::LimitHit{sandbox::kMaxSealedCopyBytesName,
                                                          options.max_sealed_copy_bytes});
  e.set_limit_name(hit.name);
  e.set_limit_value(hit.value);
  *report.add_errors() = std::move(e);
  report.set_verdict(v1::VERDICT_ERROR);
  return out;
}

// The job's options: a broken lease also stops the worker (the result is ERROR then anyway),
// so that the writer waiting in open(2) is let through soon.
sandbox::JailOptions JobOptions(const sandbox::JailOptions& options,
                                const sandbox::PinnedInput& pin) {
  if (pin.kind() != sandbox::PinnedInput::Kind::kLease) return options;
  sandbox::JailOptions job = options;
  job.cancelled = [user = options.cancelled, p = &pin] { return (user && user()) || p->Broken(); };
  return job;
}

// The hash's stop: a broken lease ends it early (the job is ERROR then, and the writer waits).
std::function<bool()> HashStop(const sandbox::PinnedInput& pin) {
  if (pin.kind() != sandbox::PinnedInput::Kind::kLease) return nullptr;
  return [p = &pin] { return p->Broken(); };
}

// Once the worker has finished and the digest is computed: whether the pin held. If not, the
// report gets an io error and blocks (findings kept); its digest is then of no use (it may be
// of other bytes, or stopped early) and the caller leaves it out. A worker stopped because the
// lease broke was not cancelled by the caller: that error goes. Then the lease is given back.
bool CheckPinned(sandbox::PinnedInput& pin, const sandbox::JailedRun& run, v1::FileReport* report) {
  const absl::Status held = pin.Check();
  pin.Release();
  if (held.ok()) return true;
  if (run.result.outcome == sandbox::Outcome::kCancelled) {
    auto* errors = report->mutable_errors();
    errors->erase(
        std::remove_if(errors->begin(), errors->end(),
                       [](const v1::ScanError& e) { return e.code() == v1::ERROR_CODE_CANCELLED; }),
        errors->end());
  }
  *report->add_errors() = ReportError(v1::ERROR_CODE_IO, std::string(held.message()));
  report->set_verdict(rules::WorseVerdict(report->verdict(), v1::VERDICT_ERROR));
  return false;
}

}  // namespace ckptscan::app
