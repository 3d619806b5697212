// The scan of one file, the same on every surface: `ckptscan scan` and `ls`, ckptscan's
// `--no-sandbox` (an unjailed worker child), ckptscand's ScanPath and ScanUpload, and
// `ckptscan disasm`.
//
// The trusted side opens the file (regular files only), pins it (sandbox/pinned_input.h) and
// hashes it on another core while a fresh ckptscan-worker (sandbox/run.h) extracts the facts
// inside its jail; the facts are judged here with the rules (app/judge.h). The worker's fate
// maps to the report:
//   kOk         the facts, judged
//   kViolation  DANGEROUS: a finding `sandbox.violation` (the worker was killed by SIGSYS)
//   kTimeout    ERROR, error code "timeout"
//   kLimit      ERROR, error code "limit" (limit_name worker_memory / max_frame_bytes /
//               max_frame_values / facts_memory / ...)
//   otherwise   ERROR, error code "sandbox" (a crash, a failed start, a bad frame)
// Nothing is SAFE unless the worker exited cleanly with a whole, consistent frame.
//
// Thread-safe: concurrent calls run concurrent workers.
//
//   absl::StatusOr<v1::FileReport> r = app::ScanFile(path, *rules, limits, jail);
//   v1::FileReport report = r.ok() ? *std::move(r) : app::UnreadableFileReport(path, r.status());
#ifndef CKPTSCAN_APP_SCAN_FILE_H_
#define CKPTSCAN_APP_SCAN_FILE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "app/call_options.h"
#include "app/engine.h"
#include "app/scan_set.h"
#include "base/unique_fd.h"
#include "ckptscan/v1/report.pb.h"
#include "core/pickle/limits.h"
#include "rules/rule_set.h"
#include "sandbox/run.h"

namespace ckptscan::app {

// The report for a job's run (format, findings, errors, verdict); path, sha256 and size are the
// caller's to fill.
v1::FileReport ReportForRun(const sandbox::JailedRun& run, const sandbox::JailOptions& options,
                            const rules::RuleSet& rules);

// Hashes and scans the open regular file `fd` in a worker; the report names it `path`. The
// input is pinned for the job (JailOptions::max_sealed_copy_bytes): if a writer could have
// changed it between the parse and the hash, the report is ERROR (code "io").
absl::StatusOr<v1::FileReport> ScanFd(base::UniqueFd fd, const std::string& path,
                                      const rules::RuleSet& rules, const pickle::Limits& limits,
                                      const sandbox::JailOptions& options);

// Opens, hashes and scans `path` in a worker. A non-OK status means the file could not be
// read at all (see UnreadableFileReport); every worker failure is a report, not a status.
absl::StatusOr<v1::FileReport> ScanFile(const std::string& path, const rules::RuleSet& rules,
                                        const pickle::Limits& limits,
                                        const sandbox::JailOptions& options);

// `ckptscan disasm`: the file read in a worker that also writes the opcode listing. The
// listing (run.trace) is untrusted text, to be shown through app/report_format's escaping.
struct Disassembly {
  v1::FileReport report;   // as a scan's (path and size filled); no digest
  sandbox::JailedRun run;  // run.result.ok(): trace, trace_truncated and facts are valid
};
Disassembly DisassembleFile(const std::string& path, const rules::RuleSet& rules,
                            const pickle::Limits& limits, const sandbox::JailOptions& options);

// Files judged each in a jailed worker (ScanFd), as ScanSet asks for them: opened by `open`
// (the CLI: the path itself; ckptscand: beneath its roots, or an upload's own bytes) and found
// by `find`; each report is passed to `judged` (may be empty) as it is made. A file `open`
// refuses is an ERROR report (UnreadableFileReport). Thread-safe when `open`, `find` and
// `judged` are.
class JailedFiles final : public FileSource {
 public:
  using Opener = std::function<absl::StatusOr<base::UniqueFd>(const std::string&)>;
  using Finder = std::function<absl::StatusOr<FileId>(const std::string&)>;
  JailedFiles(Opener open, Finder find, std::shared_ptr<const rules::RuleSet> rules,
              const pickle::Limits& limits, sandbox::JailOptions jail,
              std::function<void(const v1::FileReport&)> judged = nullptr)
      : open_(std::move(open)),
        find_(std::move(find)),
        rules_(std::move(rules)),
        limits_(limits),
        jail_(std::move(jail)),
        judged_(std::move(judged)) {}

  v1::FileReport Scan(const std::string& path) override;
  absl::StatusOr<FileId> Find(const std::string& path) override { return find_(path); }

 private:
  const Opener open_;
  const Finder find_;
  const std::shared_ptr<const rules::RuleSet> rules_;
  const pickle::Limits limits_;
  const sandbox::JailOptions jail_;
  const std::function<void(const v1::FileReport&)> judged_;
};

// One named input, already open (ckptscand: a file beneath its roots, or an upload's spooled
// bytes), scanned on the engine for the call; unless `single_file`, with the set it heads (a
// sharded checkpoint's shards, opened by `others`: ScanSet). The input is read through `input`
// only, never by its name again. The report is headed by `scanner_version` and the rules'
// version.
v1::Report ScanInput(const Engine& engine, base::UniqueFd input, const std::string& name,
                     JailedFiles::Opener others, bool single_file, const CallOptions& call,
                     std::string_view scanner_version);

// A new read-only open file description of the file open on `fd` (through /proc/self/fd: an
// offset of its own, unlike a dup).
absl::StatusOr<base::UniqueFd> ReopenReadOnly(int fd);

// A file on this machine: opened as a regular file, symlinks followed (base::OpenRegularFile).
absl::StatusOr<base::UniqueFd> OpenLocal(const std::string& path);
// A file on this machine by stat(2), symlinks followed; MissingFile when there is none.
absl::StatusOr<FileId> FindLocal(const std::string& path);
// The identity of an open file (fstat).
absl::StatusOr<FileId> IdentityOf(int fd);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_SCAN_FILE_H_
