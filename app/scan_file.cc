#include "app/scan_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "app/judge.h"
#include "app/pinned_job.h"
#include "app/report.h"
#include "app/report_format.h"
#include "base/mapped_file.h"
#include "base/sha256.h"
#include "base/status_macros.h"

namespace ckptscan::app {

v1::FileReport ReportForRun(const sandbox::JailedRun& run, const sandbox::JailOptions& options,
                            const rules::RuleSet& rules) {
  using sandbox::Outcome;
  if (run.result.ok()) {
    v1::FileReport report = JudgeFacts(run.facts, rules);
    if (options.list_tensors) AddTensorList(run.facts, &report);
    // TorchScript code files: the SHA-256 of the bytes the worker inflated (hashing parses
    // nothing; such an archive is never SAFE whatever its code holds).
    const std::vector<torch::CodeFile>& code = run.facts.code_files;
    for (size_t i = 0; i < code.size() && i < static_cast<size_t>(report.code_files_size()); ++i) {
      if (!code[i].has_content) continue;
      absl::StatusOr<std::string> hex = base::Sha256Hex(code[i].content);
      if (hex.ok()) report.mutable_code_files(static_cast<int>(i))->set_sha256(*std::move(hex));
    }
    return report;
  }

  v1::FileReport report;
  report.mutable_tensors()->set_count(0);
  report.mutable_tensors()->set_bytes(0);
  switch (run.result.outcome) {
    case Outcome::kViolation: {
      v1::Finding* f = report.add_findings();
      f->set_rule_id("sandbox.violation");
      f->set_severity(v1::SEVERITY_CRITICAL);
      f->set_category("sandbox");
      f->set_message(absl::StrCat(run.result.message,
                                  ". Parsing this file made the scanner attempt something it "
                                  "never does on its own: treat the file as malicious."));
      f->mutable_location();
      f->set_verdict(v1::VERDICT_DANGEROUS);
      report.set_verdict(v1::VERDICT_DANGEROUS);
      return report;
    }
    case Outcome::kTimeout:
      *report.add_errors() = ReportError(v1::ERROR_CODE_TIMEOUT, run.result.message);
      break;
    case Outcome::kCancelled:
      *report.add_errors() = ReportError(v1::ERROR_CODE_CANCELLED, run.result.message);
      break;
    case Outcome::kLimit: {
      v1::ScanError e = ReportError(v1::ERROR_CODE_LIMIT, run.result.message);
      e.set_limit_name(std::string(sandbox::JailLimitName(run.result.limit)));
      switch (run.result.limit) {
        case sandbox::JailLimit::kWorkerMemory:
          e.set_limit_value(options.worker_memory);
          break;
        case sandbox::JailLimit::kMaxFrameBytes:
          e.set_limit_value(options.max_frame_bytes);
          break;
        case sandbox::JailLimit::kMaxFrameValues:
          e.set_limit_value(options.max_frame_values);
          break;
        case sandbox::JailLimit::kFactsMemory:
          if (options.facts_budget != nullptr) e.set_limit_value(options.facts_budget->total());
          break;
        case sandbox::JailLimit::kFileSize:
        case sandbox::JailLimit::kNone:
          break;
      }
      *report.add_errors() = std::move(e);
      break;
    }
    default:
      *report.add_errors() = ReportError(
          v1::ERROR_CODE_SANDBOX,
          absl::StrCat(run.result.message, " [", sandbox::OutcomeName(run.result.outcome), "]"));
      break;
  }
  report.set_verdict(v1::VERDICT_ERROR);
  return report;
}

absl::StatusOr<v1::FileReport> ScanFile(const std::string& path, const rules::RuleSet& rules,
                                        const pickle::Limits& limits,
                                        const sandbox::JailOptions& options) {
  CKPT_ASSIGN_OR_RETURN(base::UniqueFd fd, base::OpenRegularFile(path));
  return ScanFd(std::move(fd), path, rules, limits, options);
}

absl::StatusOr<v1::FileReport> ScanFd(base::UniqueFd fd, const std::string& path,
                                      const rules::RuleSet& rules, const pickle::Limits& limits,
                                      const sandbox::JailOptions& options) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const base::UniqueFd watch = WatchInput(fd.get());
  // With a digest, the input is pinned first (a lease, else a sealed copy), and the worker and
  // the hasher both read the pinned bytes. Hashing reads the bytes but parses nothing. It runs
  // on a second descriptor (pread leaves the worker's descriptor alone) on another core while
  // the worker parses. Without a digest there is nothing to bind the verdict to: no pin.
  std::optional<sandbox::PinnedInput> pin;
  std::unique_ptr<base::BackgroundSha256> hash;
  if (options.sha256) {
    CKPT_ASSIGN_OR_RETURN(PinOrReport pinned, PinForJob(std::move(fd), size, options));
    if (pinned.report.has_value()) {
      pinned.report->set_path(path);
      pinned.report->set_size(size);
      return *std::move(pinned.report);
    }
    pin = std::move(pinned.pin);
    CKPT_ASSIGN_OR_RETURN(
        hash, base::BackgroundSha256::Start(pin->fd(), size, HashStop(*pin), options.bytes_read));
    CKPT_ASSIGN_OR_RETURN(fd, pin->DupForWorker());
  }
  const sandbox::JailedRun run =
      sandbox::Run(std::move(fd), size, worker::v1::Job::MODE_SCAN, limits,
                   pin ? JobOptions(options, *pin) : options, BaseName(path));
  if (options.after_worker_for_test) options.after_worker_for_test();
  absl::StatusOr<std::string> sha256 = hash ? hash->Wait() : std::string();
  v1::FileReport report = ReportForRun(run, options, rules);
  JudgeName(path, &report);
  if (pin && !CheckPinned(*pin, run, &report)) {
    sha256 = std::string();
  } else if (!sha256.ok()) {
    return sha256.status();
  }
  CheckInputUnchanged(watch.get(), st, &report);
  report.set_path(path);
  report.set_sha256(*std::move(sha256));
  report.set_size(size);
  return report;
}

Disassembly DisassembleFile(const std::string& path, const rules::RuleSet& rules,
                            const pickle::Limits& limits, const sandbox::JailOptions& options) {
  Disassembly out;
  absl::StatusOr<base::UniqueFd> fd = base::OpenRegularFile(path);
  struct stat st;
  if (fd.ok() && ::fstat(fd->get(), &st) != 0) {
    fd = absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  }
  if (!fd.ok()) {
    out.report = UnreadableFileReport(path, fd.status());
    return out;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  out.run = sandbox::Run(*std::move(fd), size, worker::v1::Job::MODE_DISASM, limits, options);
  out.report = ReportForRun(out.run, options, rules);
  out.report.set_path(path);
  out.report.set_size(size);
  return out;
}

v1::FileReport JailedFiles::Scan(const std::string& path) {
  absl::StatusOr<base::UniqueFd> fd = open_(path);
  absl::StatusOr<v1::FileReport> file = fd.ok()
                                            ? ScanFd(*std::move(fd), path, *rules_, limits_, jail_)
                                            : absl::StatusOr<v1::FileReport>(fd.status());
  v1::FileReport out = file.ok() ? *std::move(file) : UnreadableFileReport(path, file.status());
  if (judged_) judged_(out);
  return out;
}

v1::Report ScanInput(const Engine& engine, base::UniqueFd input, const std::string& name,
                     JailedFiles::Opener others, bool single_file, const CallOptions& call,
                     std::string_view scanner_version) {
  const std::shared_ptr<const rules::RuleSet> rules = engine.rules();
  const int held = input.get();
  JailedFiles files(
      [&](const std::string& path) -> absl::StatusOr<base::UniqueFd> {
        if (path == name) return ReopenReadOnly(held);
        return others(path);
      },
      [&](const std::string& path) -> absl::StatusOr<FileId> {
        CKPT_ASSIGN_OR_RETURN(base::UniqueFd fd,
                              path == name ? ReopenReadOnly(held) : others(path));
        return IdentityOf(fd.get());
      },
      rules, engine.limits(), JailFor(engine, call), call.on_judged);
  v1::Report report = NewReport(scanner_version, rules->version());
  if (single_file) {
    *report.add_files() = files.Scan(name);
    FoldVerdict(&report);
  } else {
    ScanTarget target;
    target.path = name;
    ScanSet({target}, {}, &files, &report);
  }
  return report;
}

absl::StatusOr<base::UniqueFd> ReopenReadOnly(int fd) {
  // Through /proc: a new open file description of the same file, read-only, with an offset of
  // its own (a dup would share the offset with the caller's).
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  base::UniqueFd out(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!out.valid()) return absl::ErrnoToStatus(errno, "reopen the input read-only");
  return out;
}

absl::StatusOr<base::UniqueFd> OpenLocal(const std::string& path) {
  return base::OpenRegularFile(path);
}

absl::StatusOr<FileId> FindLocal(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return err == ENOENT ? MissingFile(path, err) : absl::ErrnoToStatus(err, TerminalSafe(path));
  }
  return FileId{st.st_dev, st.st_ino};
}

absl::StatusOr<FileId> IdentityOf(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, "fstat");
  return FileId{st.st_dev, st.st_ino};
}

}  // namespace ckptscan::app
