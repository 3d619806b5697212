#include "app/scan_set.h"

#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "app/report.h"
#include "app/report_format.h"
#include "trusted/judge_facts.h"

namespace ckptscan::app {

absl::Status MissingFile(const std::string& path, int err) {
  return absl::NotFoundError(absl::StrCat(TerminalSafe(path), ": ", std::strerror(err)));
}

namespace {

// The format of a sharded checkpoint's index (core/torch's hf-index reading).
constexpr std::string_view kIndexFormat = "hf-index";

class SetScanner {
 public:
  SetScanner(FileSource* source, v1::Report* report) : source_(source), report_(report) {}

  // Scans `path` and remembers it; returns its index in the report.
  int Scan(const std::string& path) {
    *report_->add_files() = source_->Scan(path);
    const int at = report_->files_size() - 1;
    if (absl::StatusOr<FileId> id = source_->Find(path); id.ok()) scanned_.emplace(*id, at);
    return at;
  }

  // Every shard of every index in the report, the shards appended as they are scanned (the loop
  // visits them too).
  void FollowIndexes() {
    for (int i = 0; i < report_->files_size(); ++i) {
      if (report_->files(i).format() != kIndexFormat) continue;
      const std::string index_path = report_->files(i).path();
      const size_t slash = index_path.rfind('/');
      const std::string dir = slash == std::string::npos ? "" : index_path.substr(0, slash + 1);
      const std::vector<std::string> shards(report_->files(i).shards().begin(),
                                            report_->files(i).shards().end());
      for (const std::string& shard : shards) {
        const std::string path = dir + shard;
        absl::StatusOr<FileId> id = source_->Find(path);
        if (!id.ok()) {
          AddError(report_->mutable_files(i), v1::ERROR_CODE_MISSING_SHARD,
                   absl::StrCat("shard \"", TerminalSafe(shard), "\" named by the index's ",
                                "weight_map is ",
                                absl::IsNotFound(id.status()) ? "missing" : "unreadable", ": ",
                                id.status().message()));
        } else {
          const auto seen = scanned_.find(*id);
          const int at = seen != scanned_.end() ? seen->second : Scan(path);
          // A loader torch.load()s every shard: an index (this one, or another) is no shard.
          if (report_->files(at).format() == kIndexFormat) {
            AddError(report_->mutable_files(i), v1::ERROR_CODE_MALFORMED,
                     absl::StrCat("shard \"", TerminalSafe(shard),
                                  "\" named by the index's weight_map is itself an index (",
                                  at == i ? "this one" : TerminalSafe(report_->files(at).path()),
                                  "), not a checkpoint"));
          }
        }
      }
    }
  }

 private:
  FileSource* source_;
  v1::Report* report_;
  std::map<FileId, int> scanned_;  // every file scanned, by identity -> its place in the report
};

}  // namespace

void ScanSet(const std::vector<ScanTarget>& targets, const std::vector<ManifestEntry>& manifest,
             FileSource* source, v1::Report* report) {
  SetScanner set(source, report);
  for (const ScanTarget& t : targets) {
    switch (t.kind) {
      case ScanTarget::Kind::kSkipped:
        break;
      case ScanTarget::Kind::kUnreadable:
        *report->add_files() = pipeline::UnreadableFileReport(t.path, t.status);
        break;
      case ScanTarget::Kind::kFile:
        set.Scan(t.path);
        break;
    }
  }
  // A listed file that is missing is an ERROR entry; a digest that differs is an error of its
  // own (digest_mismatch), so that the file is never SAFE, whatever its content.
  for (const ManifestEntry& entry : manifest) {
    v1::FileReport* file;
    if (absl::StatusOr<FileId> id = source->Find(entry.path); !id.ok()) {
      file = report->add_files();
      *file = pipeline::UnreadableFileReport(
          entry.path,
          absl::Status(id.status().code(),
                       absl::StrCat("listed in the manifest but ",
                                    absl::IsNotFound(id.status()) ? "missing: " : "unreadable: ",
                                    id.status().message())));
    } else {
      file = report->mutable_files(set.Scan(entry.path));
    }
    file->set_expected_sha256(entry.sha256);
    if (!file->sha256().empty() && file->sha256() != entry.sha256) {
      AddError(file, v1::ERROR_CODE_DIGEST_MISMATCH,
               absl::StrCat("sha256 ", file->sha256(), " is not the ", entry.sha256,
                            " the manifest lists: the file was changed or replaced"));
    }
  }
  set.FollowIndexes();
  FoldVerdict(report);
}

}  // namespace ckptscan::app
