#include "app/scan_set.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "app/judge.h"
#include "app/report.h"
#include "app/report_format.h"
#include "rules/catalogue.h"
#include "rules/rule_set.h"

namespace ckptscan::app {

absl::Status MissingFile(const std::string& path, int err) {
  return absl::NotFoundError(absl::StrCat(TerminalSafe(path), ": ", std::strerror(err)));
}

namespace {

// The format of a sharded checkpoint's index (core/torch's hf-index reading).
constexpr std::string_view kIndexFormat = "hf-index";

// A finding that explains, and changes no verdict by itself unless its rule says so.
v1::Finding RuleFinding(std::string_view rule_id, std::string message) {
  const rules::RuleInfo* info = rules::FindRule(rule_id);
  v1::Finding f;
  f.set_rule_id(std::string(rule_id));
  f.set_category(std::string(rule_id.substr(0, rule_id.find('.'))));
  f.set_verdict(info != nullptr ? info->verdict : v1::VERDICT_SUSPICIOUS);
  f.set_severity(info != nullptr ? info->severity : v1::SEVERITY_MEDIUM);
  f.set_message(std::move(message));
  return f;
}

void AddFinding(v1::FileReport* file, v1::Finding f) {
  file->set_verdict(rules::WorseVerdict(file->verdict(), f.verdict()));
  *file->add_findings() = std::move(f);
}

// A file no reading applies to, with nothing else against it: what --unknown decides.
bool OnlyUnknown(const v1::FileReport& f) {
  return f.kind() == "unknown" && f.findings_size() == 0 && f.errors_size() == 1 &&
         f.errors(0).code() == v1::ERROR_CODE_UNSUPPORTED &&
         f.errors(0).location().member().empty();
}

// Reports scanned ahead of need, `jobs` files at a time, then taken in the sequential order.
// Only speed changes: a path not scanned ahead is scanned when it is asked for; one scanned
// ahead but never asked for (it cannot happen with the paths ScanSet gives) is dropped.
class ScanAhead {
 public:
  ScanAhead(FileSource* source, int jobs) : source_(source), jobs_(std::max(jobs, 1)) {}

  bool parallel() const { return jobs_ > 1; }

  // Scans the `paths` not yet scanned, one per file identity (the first name), in parallel.
  void Prefetch(const std::vector<std::string>& paths, const std::set<FileId>& scanned) {
    if (!parallel()) return;
    std::vector<std::string> todo;
    std::vector<FileId> ids;  // each path's identity before its scan
    std::set<FileId> seen = scanned;
    for (const std::string& path : paths) {
      absl::StatusOr<FileId> id = source_->Find(path);
      if (!id.ok() || !seen.insert(*id).second || ready_.count(path) != 0) continue;
      todo.push_back(path);
      ids.push_back(*id);
    }
    if (todo.size() < 2) return;
    std::vector<v1::FileReport> reports(todo.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < todo.size(); i = next++) reports[i] = source_->Scan(todo[i]);
    };
    const size_t threads = std::min<size_t>(static_cast<size_t>(jobs_), todo.size());
    std::vector<std::thread> pool;
    pool.reserve(threads - 1);
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    for (size_t i = 0; i < todo.size(); ++i) {
      ready_.emplace(todo[i], std::make_pair(ids[i], std::move(reports[i])));
    }
  }

  // `path`'s report, and in `before` the identity `path` named before the file was scanned.
  v1::FileReport Scan(const std::string& path, absl::StatusOr<FileId>* before) {
    const auto it = ready_.find(path);
    if (it == ready_.end()) {
      *before = source_->Find(path);
      return source_->Scan(path);
    }
    *before = it->second.first;
    v1::FileReport r = std::move(it->second.second);
    ready_.erase(it);
    return r;
  }

 private:
  FileSource* source_;
  int jobs_;
  std::map<std::string, std::pair<FileId, v1::FileReport>> ready_;
};

class SetScanner {
 public:
  SetScanner(FileSource* source, v1::Report* report, int jobs)
      : source_(source), report_(report), ahead_(source, jobs) {}

  // Scans, in parallel ahead of need, the files `paths` name that are not scanned yet.
  void Prefetch(const std::vector<std::string>& paths) {
    if (!ahead_.parallel()) return;  // -j 1: nothing is scanned ahead
    std::set<FileId> scanned;
    for (const auto& [id, at] : scanned_) scanned.insert(id);
    ahead_.Prefetch(paths, scanned);
  }

  // The shard paths of every index in the report from place `from` on.
  std::vector<std::string> ShardPaths(int from) const {
    std::vector<std::string> paths;
    for (int i = from; i < report_->files_size(); ++i) {
      if (report_->files(i).format() != kIndexFormat) continue;
      const std::string& index_path = report_->files(i).path();
      const size_t slash = index_path.rfind('/');
      const std::string dir = slash == std::string::npos ? "" : index_path.substr(0, slash + 1);
      for (const std::string& shard : report_->files(i).shards()) paths.push_back(dir + shard);
    }
    return paths;
  }

  // Scans `path` and remembers it by identity; returns its index in the report. A path that
  // names another file after the scan than before (replaced meanwhile: a wider window with
  // -j, where files are scanned ahead) gets an error, and is not remembered, so that another
  // name of the new file is not skipped as "the same file" as one that was never scanned.
  int Scan(const std::string& path) {
    absl::StatusOr<FileId> before;
    v1::FileReport file = ahead_.Scan(path, &before);
    const absl::StatusOr<FileId> after = source_->Find(path);
    const bool same = before.ok() && after.ok() && *before == *after;
    if (before.ok() && after.ok() && !same) {
      AddError(&file, v1::ERROR_CODE_IO,
               absl::StrCat(TerminalSafe(path),
                            " was replaced by another file while the set was "
                            "scanned: the verdict may be of the file it replaced"));
    }
    *report_->add_files() = std::move(file);
    const int at = report_->files_size() - 1;
    if (same) scanned_.emplace(*after, at);
    return at;
  }

  // The place in the report of the file `path` names if it was scanned already, or -1.
  int Scanned(const std::string& path) {
    absl::StatusOr<FileId> id = source_->Find(path);
    if (!id.ok()) return -1;
    const auto it = scanned_.find(*id);
    return it == scanned_.end() ? -1 : it->second;
  }

  // A path a pattern skipped, by identity, so that a shard scanned anyway is not listed as
  // skipped without a word.
  void RememberSkipped(const std::string& path, int skipped_at) {
    if (absl::StatusOr<FileId> id = source_->Find(path); id.ok()) skipped_.emplace(*id, skipped_at);
  }

  // Every shard of every index in the report, the shards appended as they are scanned (the loop
  // visits them too).
  void FollowIndexes() {
    int prefetched_to = 0;  // the indexes before this place have their shards scanned ahead
    for (int i = 0; i < report_->files_size(); ++i) {
      if (i >= prefetched_to) {
        Prefetch(ShardPaths(i));
        prefetched_to = report_->files_size();
      }
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
          shards_.insert(at);
          if (const auto skipped = skipped_.find(*id); skipped != skipped_.end()) {
            v1::SkippedPath* entry = report_->mutable_skipped(skipped->second);
            if (entry->reason().find(", but scanned") == std::string::npos) {
              entry->set_reason(absl::StrCat(entry->reason(), ", but scanned: a shard of ",
                                             TerminalSafe(index_path)));
            }
          }
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
  std::map<FileId, int> skipped_;  // skipped targets, by identity -> their skipped entry
  std::set<int> shards_;           // report places of files some index names as a shard
  ScanAhead ahead_;

 public:
  const std::set<int>& shards() const { return shards_; }
};

}  // namespace

void ScanSet(const std::vector<ScanTarget>& targets, const std::vector<ManifestEntry>& manifest,
             FileSource* source, v1::Report* report, const ScanSetOptions& options) {
  SetScanner set(source, report, options.jobs);
  {
    std::vector<std::string> ahead;
    for (const ScanTarget& t : targets) {
      if (t.kind == ScanTarget::Kind::kFile) ahead.push_back(t.path);
    }
    for (const ManifestEntry& entry : manifest) ahead.push_back(entry.path);
    set.Prefetch(ahead);
  }
  std::vector<int> target_files;  // report places of the files scanned as targets
  for (const ScanTarget& t : targets) {
    switch (t.kind) {
      case ScanTarget::Kind::kSkipped: {
        v1::SkippedPath* s = report->add_skipped();
        s->set_path(t.path);
        s->set_reason(t.reason);
        set.RememberSkipped(t.path, report->skipped_size() - 1);
        break;
      }
      case ScanTarget::Kind::kUnreadable:
        *report->add_files() = UnreadableFileReport(t.path, t.status);
        break;
      case ScanTarget::Kind::kFile: {
        if (const int seen = set.Scanned(t.path); seen >= 0) {
          v1::SkippedPath* s = report->add_skipped();
          s->set_path(t.path);
          s->set_reason(absl::StrCat("the same file as ", TerminalSafe(report->files(seen).path()),
                                     ", which is scanned"));
          // A second name still carries its own expected digest (a cache blob named by its
          // SHA-256, linked to another blob): compared with the file's, not dropped.
          v1::FileReport* file = report->mutable_files(seen);
          if (!t.expected_sha256.empty() && !file->sha256().empty() &&
              file->sha256() != t.expected_sha256) {
            AddError(file, v1::ERROR_CODE_DIGEST_MISMATCH,
                     absl::StrCat("sha256 ", file->sha256(), " is not the ", t.expected_sha256,
                                  " its other name ", TerminalSafe(t.path),
                                  " is a cache blob named by: the blob was changed or replaced"));
          }
          break;
        }
        const int at = set.Scan(t.path);
        target_files.push_back(at);
        v1::FileReport* file = report->mutable_files(at);
        if (!t.note.empty()) {
          v1::Finding f = RuleFinding("scan.selection", t.note);
          *file->add_findings() = std::move(f);
        }
        if (!t.via.empty()) {
          *file->add_findings() = RuleFinding(
              "scan.folder_link",
              absl::StrCat("reached through the folder link ", TerminalSafe(t.via),
                           ": a loader given this path reads the file there"));
        }
        if (!t.expected_sha256.empty()) {
          file->set_expected_sha256(t.expected_sha256);
          if (!file->sha256().empty() && file->sha256() != t.expected_sha256) {
            AddError(file, v1::ERROR_CODE_DIGEST_MISMATCH,
                     absl::StrCat("sha256 ", file->sha256(), " is not the ", t.expected_sha256,
                                  " its cache blob is named by: the blob was changed or replaced"));
          }
        }
        break;
      }
    }
  }
  // A listed file that is missing is an ERROR entry; a digest that differs is an error of its
  // own (digest_mismatch), so that the file is never SAFE, whatever its content.
  std::set<int> listed;
  for (const ManifestEntry& entry : manifest) {
    v1::FileReport* file;
    if (absl::StatusOr<FileId> id = source->Find(entry.path); !id.ok()) {
      file = report->add_files();
      *file = UnreadableFileReport(
          entry.path,
          absl::Status(id.status().code(),
                       absl::StrCat("listed in the manifest but ",
                                    absl::IsNotFound(id.status()) ? "missing: " : "unreadable: ",
                                    id.status().message())));
    } else {
      const int seen = set.Scanned(entry.path);
      const int at = seen >= 0 ? seen : set.Scan(entry.path);
      file = report->mutable_files(at);
      // Listed again (the same path twice, or another name of the same file): scanned once,
      // but every entry's digest is compared.
      if (!listed.insert(at).second) {
        if (!file->sha256().empty() && file->sha256() != entry.sha256) {
          AddError(file, v1::ERROR_CODE_DIGEST_MISMATCH,
                   absl::StrCat("sha256 ", file->sha256(), " is not the ", entry.sha256,
                                " the manifest lists for ", TerminalSafe(entry.path),
                                ", another name of this file: it was changed or replaced"));
        }
        continue;
      }
    }
    file->set_expected_sha256(entry.sha256);
    if (!file->sha256().empty() && file->sha256() != entry.sha256) {
      AddError(file, v1::ERROR_CODE_DIGEST_MISMATCH,
               absl::StrCat("sha256 ", file->sha256(), " is not the ", entry.sha256,
                            " the manifest lists: the file was changed or replaced"));
    }
  }
  if (options.report_unlisted) {
    for (int at : target_files) {
      if (listed.count(at) != 0) continue;
      AddFinding(report->mutable_files(at),
                 RuleFinding("manifest.unlisted",
                             "the file is in the scanned folder but the manifest does not list "
                             "it: its digest is not pinned"));
    }
  }
  set.FollowIndexes();
  if (options.unknown != UnknownPolicy::kError) {
    // Only a file found in a folder or named: a listed file or an index's shard is required,
    // and stays ERROR.
    std::set<int> eligible;
    for (int at : target_files) {
      if (listed.count(at) == 0 && set.shards().count(at) == 0) eligible.insert(at);
    }
    auto* files = report->mutable_files();
    int original = 0;
    for (int i = 0; i < files->size(); ++original) {
      v1::FileReport* f = files->Mutable(i);
      if (eligible.count(original) == 0 || !OnlyUnknown(*f)) {
        ++i;
        continue;
      }
      if (options.unknown == UnknownPolicy::kWarn) {
        const std::string message = f->errors(0).message();
        f->clear_errors();
        f->set_verdict(v1::VERDICT_SAFE);
        AddFinding(f, RuleFinding("file.unknown_format", message));
        ++i;
      } else {
        v1::SkippedPath* s = report->add_skipped();
        s->set_path(f->path());
        s->set_reason("not a format ckptscan verifies (--unknown skip)");
        files->DeleteSubrange(i, 1);
      }
    }
  }
  FoldVerdict(report);
}

}  // namespace ckptscan::app
