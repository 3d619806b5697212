#include "app/shard_set.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_*
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "app/judge.h"
#include "app/publish.h"
#include "base/escape.h"
#include "base/strings.h"
#include "base/unique_fd.h"
#include "nlohmann/json.hpp"
#include "signing/keys.h"

namespace ckptscan::app {
namespace {

using base::AbslView;

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status Errno(std::string_view what, std::string_view path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(AbslView(what), " ", AbslView(path)));
}

bool SameInode(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// fsync(2) of the directory open on `dir_fd` (which may be an O_PATH descriptor).
absl::Status FsyncDir(int dir_fd, std::string_view shown) {
  base::UniqueFd fd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Errno("open", shown);
  if (::fsync(fd.get()) != 0) return Errno("fsync", shown);
  return absl::OkStatus();
}

// Whether the directory open on `dir_fd` has no entry; read through a new open file
// description, so `dir_fd`'s offset is not moved.
absl::StatusOr<bool> IsEmptyDir(int dir_fd, std::string_view shown) {
  const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open", shown);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const absl::Status s = Errno("open", shown);
    ::close(fd);
    return s;
  }
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
  if (empty && read_errno != 0) {
    return absl::ErrnoToStatus(read_errno, absl::StrCat("read ", AbslView(shown)));
  }
  return empty;
}

// An existing OUT as CheckOutputDir found it: an empty directory, kept open until the set is
// published so that its inode cannot be freed and reused by another directory meanwhile.
struct CheckedOut {
  base::UniqueFd fd;
  struct stat st;
};

// OUT (`name` in the directory open on `parent_fd`) may be absent (nullopt) or an empty
// directory (Staging::Publish exchanges exactly that directory out).
absl::StatusOr<std::optional<CheckedOut>> CheckOutputDir(int parent_fd, const std::string& name,
                                                         const std::string& shown) {
  struct stat st;
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::nullopt;
    return Errno("stat", shown);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::AlreadyExistsError(
        absl::StrCat(shown,
                     " exists and is not a directory; a sharded checkpoint converts into a new or "
                     "empty directory"));
  }
  CheckedOut out;
  out.fd.reset(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!out.fd.valid()) return Errno("open", shown);
  if (::fstat(out.fd.get(), &out.st) != 0) return Errno("stat", shown);
  if (!SameInode(st, out.st)) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown, " was replaced while it was checked; nothing was converted"));
  }
  absl::StatusOr<bool> empty = IsEmptyDir(out.fd.get(), shown);
  if (!empty.ok()) return empty.status();
  if (!*empty) {
    return absl::AlreadyExistsError(
        absl::StrCat(shown,
                     " is not empty; a sharded checkpoint converts into a new or empty directory "
                     "(--force does not mix a set with existing files)"));
  }
  return std::optional<CheckedOut>(std::move(out));
}

// The hidden staging directory beside OUT, made and then used through one descriptor only, and
// what this job created in it. Unless published, the destructor removes exactly the names this
// job created (through the descriptor, wherever the directory was moved), and the directory
// itself only while its name beside OUT still refers to it.
class Staging {
 public:
  // mkdirat(2) with a random suffix, mode 0700 while it is filled (no one else can add a file
  // that would then be signed), given the umask's mode when it becomes OUT.
  static absl::StatusOr<Staging> Create(int parent_fd, const std::string& out_name,
                                        const std::string& shown_out) {
    const std::string shown_parent = DirName(shown_out);
    std::random_device random;
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string name =
          absl::StrFormat(".%s.ckptscan-%08x", out_name, static_cast<uint32_t>(random()));
      const std::string shown = absl::StrCat(shown_parent, "/", name);
      if (::mkdirat(parent_fd, name.c_str(), 0700) != 0) {
        if (errno == EEXIST) continue;
        return Errno("mkdir", shown);
      }
      struct stat made;
      if (::fstatat(parent_fd, name.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0) {
        return Errno("stat", shown);
      }
      base::UniqueFd fd(
          ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd.valid()) return Errno("open the staging directory", shown);
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) return Errno("stat", shown);
      absl::StatusOr<bool> empty = IsEmptyDir(fd.get(), shown);
      if (!empty.ok()) return empty.status();
      if (!S_ISDIR(st.st_mode) || !SameInode(made, st) || st.st_uid != ::geteuid() ||
          (st.st_mode & 077) != 0 || !*empty) {
        // Not the directory just made: touch nothing (the one made stays, empty, wherever it
        // was moved).
        return absl::FailedPreconditionError(absl::StrCat(
            "the staging directory ", shown,
            " was replaced right after it was made (it is not the empty directory this job "
            "created); nothing was converted"));
      }
      return Staging(parent_fd, std::move(name), shown, std::move(fd), st);
    }
    return absl::AlreadyExistsError(absl::StrCat("no free staging name beside ", shown_out));
  }
  Staging(Staging&& o) noexcept
      : parent_fd_(o.parent_fd_),
        name_(std::move(o.name_)),
        shown_(std::move(o.shown_)),
        fd_(std::move(o.fd_)),
        st_(o.st_),
        files_(std::move(o.files_)) {}
  Staging& operator=(Staging&&) = delete;
  ~Staging() {
    if (!fd_.valid()) return;
    // Inside this directory (mode 0700, ours) only this job adds names.
    for (const std::string& f : files_) (void)::unlinkat(fd_.get(), f.c_str(), 0);
    // The directory itself by its name only while that still refers to it (AT_REMOVEDIR
    // follows no symbolic link and removes only an empty directory); one moved elsewhere stays
    // there, empty.
    if (Check().ok()) (void)::unlinkat(parent_fd_, name_.c_str(), AT_REMOVEDIR);
  }
  int fd() const { return fd_.get(); }
  const std::string& shown() const { return shown_; }
  // Records a name AFTER this job created it in the directory (only those are removed).
  void Created(const std::string& name) { files_.push_back(name); }

  // The name beside OUT still refers to this directory (it was not renamed away, and nothing,
  // directory or symbolic link, was put in its place).
  absl::Status Check() const {
    struct stat now;
    if (::fstatat(parent_fd_, name_.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(now.st_mode) || !SameInode(now, st_)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the staging directory ", shown_,
          " was renamed or replaced during the conversion (that name no longer refers to the "
          "directory this job made); nothing was published"));
    }
    return absl::OkStatus();
  }

  // Gives the directory the name OUT (`out_name` beside it) and the umask's mode. `out` is
  // what CheckOutputDir found there:
  //  - nothing: renameat2(RENAME_NOREPLACE), which fails if anything appeared meanwhile;
  //  - that empty directory: renameat2(RENAME_EXCHANGE), then the directory exchanged out
  //    (now under the staging name) must be that same directory (dev and inode), and is removed
  //    with unlinkat(AT_REMOVEDIR), which removes only an empty directory. Anything else there
  //    (OUT replaced after the check) is exchanged back and the conversion fails.
  // Neither call follows a symbolic link. Because the staging name is resolved once more by the
  // rename itself, a swap in the instant after Check() could still move a foreign entry to
  // OUT: OUT is checked to be this directory afterwards, and if it is not the rename is undone
  // and the conversion fails, naming the swap.
  // `step` (tests) is told "renaming" between that check and the rename.
  absl::Status Publish(const std::string& out_name, const std::string& shown_out,
                       const std::optional<CheckedOut>& out,
                       const std::function<void(std::string_view)>& step) {
    if (::fsync(fd_.get()) != 0) return Errno("fsync", shown_);
    if (absl::Status s = Check(); !s.ok()) return s;
    step("renaming");
    const unsigned how = out.has_value() ? RENAME_EXCHANGE : RENAME_NOREPLACE;
    const char* from = name_.c_str();
    const char* to = out_name.c_str();
    if (::renameat2(parent_fd_, from, parent_fd_, to, how) != 0) {
      const int err = errno;
      return absl::ErrnoToStatus(
          err, absl::StrCat("rename ", shown_, " to ", shown_out,
                            err == EEXIST ? " (it appeared during the conversion)"
                            : err == ENOENT && out.has_value()
                                ? " (the empty directory there vanished during the conversion)"
                            : err == EINVAL
                                ? " (the file system does not support renameat2 with "
                                  "RENAME_NOREPLACE or RENAME_EXCHANGE; nothing was published)"
                                : ""));
    }
    auto undo = [&] {
      if (out.has_value()) {
        (void)::renameat2(parent_fd_, from, parent_fd_, to, RENAME_EXCHANGE);
      } else {
        (void)::renameat2(parent_fd_, to, parent_fd_, from, RENAME_NOREPLACE);
      }
    };
    struct stat now;
    if (::fstatat(parent_fd_, to, &now, AT_SYMLINK_NOFOLLOW) != 0 || !SameInode(now, st_)) {
      undo();
      return absl::FailedPreconditionError(
          absl::StrCat("the staging directory ", shown_, " was replaced while it was renamed to ",
                       shown_out, "; the rename was undone and nothing was published"));
    }
    if (out.has_value()) {
      struct stat old;
      if (::fstatat(parent_fd_, from, &old, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(old.st_mode) ||
          !SameInode(old, out->st)) {
        undo();
        return absl::FailedPreconditionError(
            absl::StrCat(shown_out,
                         " was replaced during the conversion (it is no longer the empty directory "
                         "that was checked); nothing was published"));
      }
      // Removes nothing but an empty directory; one filled meanwhile stays, hidden, as it is.
      (void)::unlinkat(parent_fd_, from, AT_REMOVEDIR);
    }
    files_.clear();
    (void)::fchmod(fd_.get(), 0777 & ~CurrentUmask());
    fd_.reset();  // published: nothing to clean up
    return absl::OkStatus();
  }

 private:
  Staging(int parent_fd, std::string name, std::string shown, base::UniqueFd fd,
          const struct stat& st)
      : parent_fd_(parent_fd),
        name_(std::move(name)),
        shown_(std::move(shown)),
        fd_(std::move(fd)),
        st_(st) {}

  int parent_fd_;      // not owned: OUT's directory, open for the whole conversion
  std::string name_;   // ".OUT.ckptscan-XXXXXXXX" in it
  std::string shown_;  // for messages
  base::UniqueFd fd_;  // the directory; invalid once published
  struct stat st_;     // its dev and inode, as made
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
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", AbslView(base::Escaped(shard)), " holds tensor '",
                       AbslView(base::Escaped(n)), "', which the index does not map to it"));
    }
  }
  for (const std::string& n : listed) {
    if (o.names.count(n) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the index maps tensor '", AbslView(base::Escaped(n)), "' to shard ",
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
    // Quantized layers by the index's names: a layer split over two shards is one in both.
    std::map<std::string, std::string_view> all_names;
    for (const auto& [name, file] : index.weight_map) all_names.emplace(name, std::string_view());
    const std::vector<convert::QuantizedLayer> layers =
        convert::FindQuantizedLayers(all_names, /*names_only=*/true);
    if (shards.empty()) {
      return absl::FailedPreconditionError("the index maps no tensor to any shard");
    }
    if (shards.size() > kMaxShards) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the index names ", shards.size(), " shards, over ", kMaxShards));
    }
    absl::StatusOr<OutputDir> parent = OpenOutputDir(request);
    if (!parent.ok()) return parent.status();
    std::string out_dir = request.output;  // as shown in reports and messages
    while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
    absl::StatusOr<std::optional<CheckedOut>> existing =
        CheckOutputDir(parent->fd, parent->name, out_dir);
    if (!existing.ok()) return existing.status();
    absl::StatusOr<Staging> staging = Staging::Create(parent->fd, parent->name, out_dir);
    if (!staging.ok()) return staging.status();
    const std::function<void(std::string_view)> step = [&request](std::string_view name) {
      if (request.staging_hook_for_test) request.staging_hook_for_test(name);
    };
    step("mkdir");

    const std::string in_dir = DirName(request.input);
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total_size = 0, tensors = 0, aliases = 0;
    // The set's dtypes: the shards' entries summed by (source, written, how).
    std::map<std::tuple<std::string, std::string, std::string>, uint64_t> dtypes;
    // Quantized layers per layout: the index's layers (a layer split over two shards counts
    // once), and the float tensors the shards kept.
    std::map<std::string, v1::QuantizedLayers> layouts;
    for (const convert::QuantizedLayer& l : layers) {
      v1::QuantizedLayers& q = layouts[l.layout];
      if (q.layers() == 0) q.set_example(l.prefix);
      q.set_layout(l.layout);
      q.set_layers(q.layers() + 1);
    }
    absl::Status first_error;
    size_t i = 0;
    for (const auto& [file, names] : shards) {
      const std::string out_name = OutputShardName(i++, shards.size());
      ConvertRequest r = request;
      r.input = absl::StrCat(in_dir, "/", file);
      // Created and published in the staging directory through its descriptor only.
      r.output = absl::StrCat(staging->shown(), "/", out_name);
      r.output_dir_fd = staging->fd();
      r.replace = false;
      r.allow_index = false;
      r.quantized_layers = layers;
      r.sign.key = nullptr;  // the set is signed as one model below
      r.staging_hook_for_test = nullptr;
      ShardOutcome outcome;
      const std::string shard = file;
      const std::set<std::string>& listed = names;
      absl::StatusOr<ConvertResult> one = convert_one(r, [&](const convert::Plan& plan) {
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
        staging->Created(out_name);  // published under that name in the staging directory
        one->report.mutable_conversion()->set_output(absl::StrCat(out_dir, "/", out_name));
      }
      if (one->status.ok()) {
        // Summed before the report moves into shard_reports (the index's entry used to read
        // the moved-from report: its dtypes were always empty).
        for (const v1::DtypeConversion& d : one->report.conversion().dtypes()) {
          dtypes[{d.source(), d.written(), d.how()}] += d.tensors();
        }
        for (const v1::QuantizedLayers& q : one->report.conversion().quantized_layers()) {
          v1::QuantizedLayers& set = layouts[q.layout()];
          set.set_kept(set.kept() + q.kept());
        }
      }
      result->shard_reports.push_back(std::move(one->report));
      step(absl::StrCat("shard ", i));
      if (!one->status.ok()) {
        if (first_error.ok()) {
          first_error = absl::Status(
              one->status.code(),
              absl::StrCat("shard ", AbslView(base::Escaped(file)), ": ", one->status.message()));
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
    if (absl::Status s =
            signing::WriteNewFileAt(staging->fd(), kOutputIndexName, text, 0644,
                                    absl::StrCat(staging->shown(), "/", kOutputIndexName));
        !s.ok()) {
      return s;
    }
    staging->Created(kOutputIndexName);
    step("index");
    if (request.sign.key != nullptr) {
      // Signed in place, read back from the staging directory through its descriptor on both
      // cores; the bundle is part of the set, so the set never appears unsigned.
      const absl::Time sign_start = absl::Now();
      absl::StatusOr<std::string> bundle =
          SignDirectoryModel(staging->fd(), parent->name, kSignatureName, request.sign);
      if (!bundle.ok()) return bundle.status();
      if (request.sign.on_signed) request.sign.on_signed(absl::Now() - sign_start);
      if (absl::Status s =
              signing::WriteNewFileAt(staging->fd(), kSignatureName, *bundle, 0644,
                                      absl::StrCat(staging->shown(), "/", kSignatureName));
          !s.ok()) {
        return s;
      }
      staging->Created(kSignatureName);
      step("signed");
    }
    step("rename");
    if (absl::Status s = staging->Publish(parent->name, out_dir, *existing, step); !s.ok())
      return s;
    (void)FsyncDir(parent->fd, DirName(out_dir));
    v1::Conversion* c = result->report.mutable_conversion();
    c->set_output(absl::StrCat(out_dir, "/", kOutputIndexName));
    c->set_tensors(tensors);
    c->set_aliases(aliases);
    c->set_bytes(text.size());
    c->set_dtype(request.to_bf16 ? "bf16" : "keep");
    for (const auto& [key, count] : dtypes) {
      v1::DtypeConversion* d = c->add_dtypes();
      d->set_source(std::get<0>(key));
      d->set_written(std::get<1>(key));
      d->set_how(std::get<2>(key));
      d->set_tensors(count);
    }
    for (auto& [layout, q] : layouts) *c->add_quantized_layers() = std::move(q);
    c->set_declared_quantization(request.declared_quantization);
    if (request.sign.key != nullptr) {
      c->set_signature(absl::StrCat(out_dir, "/", kSignatureName));
      c->set_signer(request.sign.key->public_key().hint());
    }
    return absl::OkStatus();
  }();
}

}  // namespace ckptscan::app
