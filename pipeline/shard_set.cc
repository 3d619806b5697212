#include "pipeline/shard_set.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/escape.h"
#include "core/base/strings.h"
#include "core/base/unique_fd.h"
#include "nlohmann/json.hpp"
#include "core/signing/keys.h"
#include "pipeline/judge_facts.h"
#include "pipeline/sign_output.h"

namespace ckptscan::pipeline {
namespace {

using base::AbslView;

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(AbslView(what), " ", path));
}

absl::Status FsyncPath(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Errno("open", path);
  if (::fsync(fd.get()) != 0) return Errno("fsync", path);
  return absl::OkStatus();
}

// OUT may be absent or an empty directory (which rename() replaces atomically).
absl::Status CheckOutputDir(const std::string& out) {
  struct stat st;
  if (::lstat(out.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno("stat", out);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::AlreadyExistsError(absl::StrCat(
        out, " exists and is not a directory; a sharded checkpoint converts into a new or empty "
             "directory"));
  }
  DIR* dir = ::opendir(out.c_str());
  if (dir == nullptr) return Errno("open", out);
  bool empty = true;
  errno = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  const int read_errno = errno;
  ::closedir(dir);
  if (!empty) {
    return absl::AlreadyExistsError(absl::StrCat(
        out, " is not empty; a sharded checkpoint converts into a new or empty directory "
             "(--force does not mix a set with existing files)"));
  }
  if (read_errno != 0) return absl::ErrnoToStatus(read_errno, absl::StrCat("read ", out));
  return absl::OkStatus();
}

// The hidden staging directory and what was created in it; removed unless released.
class Staging {
 public:
  // mkdir(2) with a random suffix rather than mkdtemp(3): the directory becomes OUT, so it
  // gets the mode the umask gives a new directory, not 0700.
  static absl::StatusOr<Staging> Create(const std::string& out) {
    std::random_device random;
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string dir = absl::StrFormat("%s/.%s.ckptscan-%08x", DirName(out), BaseName(out),
                                        static_cast<uint32_t>(random()));
      if (::mkdir(dir.c_str(), 0777) == 0) return Staging(std::move(dir));
      if (errno != EEXIST) return Errno("mkdir", dir);
    }
    return absl::AlreadyExistsError(absl::StrCat("no free staging name beside ", out));
  }
  Staging(Staging&& o) noexcept : dir_(std::move(o.dir_)), files_(std::move(o.files_)) {
    o.dir_.clear();
  }
  Staging& operator=(Staging&&) = delete;
  ~Staging() {
    if (dir_.empty()) return;
    for (const std::string& f : files_) (void)::unlink(absl::StrCat(dir_, "/", f).c_str());
    (void)::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& name) const { return absl::StrCat(dir_, "/", name); }
  void Created(const std::string& name) { files_.push_back(name); }
  void Release() { dir_.clear(); }

 private:
  explicit Staging(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::vector<std::string> files_;
};


// What one shard's plan stores, recorded by its PlanCheck.
struct ShardOutcome {
  std::set<std::string> names;  // stored tensors and aliases
  uint64_t tensor_bytes = 0;
  uint64_t tensors = 0;
  uint64_t aliases = 0;
};

// The names a plan stores must be exactly the names the index gives the shard.
absl::Status CheckCoverage(const convert::Plan& plan, const std::string& shard,
                           const std::set<std::string>& listed, ShardOutcome* outcome) {
  ShardOutcome o;
  for (const convert::Plan::Entry& e : plan.entries) o.names.insert(e.name);
  for (const auto& [alias, kept] : plan.aliases) o.names.insert(alias);
  o.tensors = plan.entries.size();
  o.aliases = plan.aliases.size();
  o.tensor_bytes = plan.header.file_size - plan.header.bytes.size();
  for (const std::string& n : o.names) {
    if (listed.count(n) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", AbslView(base::Escaped(shard)), " holds tensor '",
          AbslView(base::Escaped(n)), "', which the index does not map to it"));
    }
  }
  for (const std::string& n : listed) {
    if (o.names.count(n) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the index maps tensor '", AbslView(base::Escaped(n)), "' to shard ",
          AbslView(base::Escaped(shard)), ", which does not hold it"));
    }
  }
  *outcome = std::move(o);
  return absl::OkStatus();
}

std::string OutputShardName(size_t i, size_t m) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, m);
}

}  // namespace

void ConvertShardSet(const ConvertRequest& request, const v1::FileReport& index_report,
                     const torch::ShardIndex& index, const ConvertOneFn& convert_one,
                     ConvertResult* result) {
  result->report = index_report;
  result->shard_reports.clear();
  result->status = [&]() -> absl::Status {
    std::map<std::string, std::set<std::string>> shards;  // file -> names, in byte order
    for (const auto& [name, file] : index.weight_map) shards[file].insert(name);
    if (shards.empty()) {
      return absl::FailedPreconditionError("the index maps no tensor to any shard");
    }
    if (shards.size() > kMaxShards) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the index names ", shards.size(), " shards, over ", kMaxShards));
    }
    if (absl::Status s = CheckOutputDir(request.output); !s.ok()) return s;
    absl::StatusOr<Staging> staging = Staging::Create(request.output);
    if (!staging.ok()) return staging.status();

    const std::string in_dir = DirName(request.input);
    const std::string out_dir = request.output;
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total_size = 0, tensors = 0, aliases = 0;
    absl::Status first_error;
    size_t i = 0;
    for (const auto& [file, names] : shards) {
      const std::string out_name = OutputShardName(i++, shards.size());
      ConvertRequest r = request;
      r.input = absl::StrCat(in_dir, "/", file);
      r.output = staging->Path(out_name);
      r.replace = false;
      r.allow_index = false;
      r.sign.key = nullptr;  // the set is signed as one model below
      ShardOutcome outcome;
      const std::string shard = file;
      const std::set<std::string>& listed = names;
      absl::StatusOr<ConvertResult> one =
          convert_one(r, [&](const convert::Plan& plan) {
            return CheckCoverage(plan, shard, listed, &outcome);
          });
      if (!one.ok()) {
        result->shard_reports.push_back(UnreadableFileReport(r.input, one.status()));
        if (first_error.ok()) {
          first_error = absl::FailedPreconditionError(
              absl::StrCat("shard ", AbslView(base::Escaped(file)), ": ", one.status().message()));
        }
        continue;
      }
      if (one->report.has_conversion()) {
        staging->Created(out_name);
        one->report.mutable_conversion()->set_output(absl::StrCat(out_dir, "/", out_name));
      }
      result->shard_reports.push_back(std::move(one->report));
      if (!one->status.ok()) {
        if (first_error.ok()) {
          first_error = absl::Status(
              one->status.code(), absl::StrCat("shard ", AbslView(base::Escaped(file)), ": ",
                                               one->status.message()));
        }
        continue;
      }
      for (const std::string& n : outcome.names) weight_map[n] = out_name;
      total_size += outcome.tensor_bytes;
      tensors += outcome.tensors;
      aliases += outcome.aliases;
    }
    if (!first_error.ok()) return first_error;

    nlohmann::json doc = {{"metadata", {{"total_size", total_size}}},
                          {"weight_map", std::move(weight_map)}};
    const std::string text = doc.dump(2) + "\n";
    const std::string index_path = staging->Path(kOutputIndexName);
    staging->Created(kOutputIndexName);
    if (absl::Status s = signing::WriteNewFile(index_path, text, 0644); !s.ok()) return s;
    if (request.sign.key != nullptr) {
      // Signed in place, read back from the staging directory on both cores; the bundle is
      // part of the set, so the set never appears unsigned.
      const absl::Time sign_start = absl::Now();
      absl::StatusOr<std::string> bundle = SignDirectoryModel(
          staging->dir(), BaseName(out_dir), kSignatureName, request.sign);
      if (!bundle.ok()) return bundle.status();
      if (request.sign.on_signed) request.sign.on_signed(absl::Now() - sign_start);
      staging->Created(kSignatureName);
      if (absl::Status s = signing::WriteNewFile(staging->Path(kSignatureName), *bundle, 0644); !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = FsyncPath(staging->dir()); !s.ok()) return s;
    if (::rename(staging->dir().c_str(), out_dir.c_str()) != 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("rename ", staging->dir(), " to ", out_dir,
                              errno == ENOTEMPTY || errno == EEXIST
                                  ? " (it is no longer an empty directory)"
                                  : ""));
    }
    staging->Release();
    (void)FsyncPath(DirName(out_dir));
    v1::Conversion* c = result->report.mutable_conversion();
    c->set_output(absl::StrCat(out_dir, "/", kOutputIndexName));
    c->set_tensors(tensors);
    c->set_aliases(aliases);
    c->set_bytes(text.size());
    c->set_dtype(request.to_bf16 ? "bf16" : "keep");
    if (request.sign.key != nullptr) {
      c->set_signature(absl::StrCat(out_dir, "/", kSignatureName));
      c->set_signer(request.sign.key->public_key().hint());
    }
    return absl::OkStatus();
  }();
}

}  // namespace ckptscan::pipeline
