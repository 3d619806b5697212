#include "signing/manifest.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "base/unique_fd.h"
#include "signing/strict_json.h"

namespace ckptscan::signing {
namespace {

using base::AbslView;

// Names from the file system or the bundle, safe to print.
std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

bool ParseDecimal(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20 || (s.size() > 1 && s[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (!base::CheckedMul<uint64_t>(v, 10, &v) ||
        !base::CheckedAdd<uint64_t>(v, static_cast<uint64_t>(c - '0'), &v)) {
      return false;
    }
  }
  *out = v;
  return true;
}

// Components of a canonical path ("." has none), for model_signing's PurePosixPath order.
std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  if (path == ".") return out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    out.push_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

bool PathLess(std::string_view a, std::string_view b) {
  const std::vector<std::string_view> ca = Components(a);
  const std::vector<std::string_view> cb = Components(b);
  return std::lexicographical_compare(ca.begin(), ca.end(), cb.begin(), cb.end());
}

bool IsIgnored(std::string_view rel, const std::vector<std::string>& ignores) {
  for (const std::string& e : ignores) {
    if (rel == e) return true;
    if (rel.size() > e.size() && rel.compare(0, e.size(), e) == 0 && rel[e.size()] == '/') {
      return true;
    }
  }
  return false;
}

// Canonical form of a caller-supplied ignore path: "./a/" -> "a"; repeated slashes collapsed.
std::string NormalizeIgnore(std::string_view p) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t slash = p.find('/', start);
    const size_t end = slash == std::string_view::npos ? p.size() : slash;
    std::string_view c = p.substr(start, end - start);
    if (!c.empty() && c != ".") parts.push_back(c);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (!p.empty() && p[0] == '/') return std::string(p);  // left absolute: CheckRelativePath fails
  std::string out;
  for (std::string_view c : parts) {
    if (!out.empty()) out.push_back('/');
    out.append(c);
  }
  return out;
}

struct DirCloser {
  void operator()(DIR* d) const { (void)closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

struct FileEntry {
  std::string rel;
  uint64_t size = 0;
};

absl::Status Enumerate(int root_fd, const std::string& root_path,
                       const std::vector<std::string>& ignores, const Limits& limits,
                       std::vector<FileEntry>* files) {
  struct Pending {
    base::UniqueFd fd;
    std::string rel;  // "" for the root
    size_t depth;
  };
  std::vector<Pending> stack;
  {
    // A new open file description (not a dup): reading it leaves the caller's offset alone.
    base::UniqueFd own(::openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!own.valid()) {
      return absl::ErrnoToStatus(errno, absl::StrCat("open ", Esc(root_path)));
    }
    stack.push_back(Pending{std::move(own), "", 0});
  }
  while (!stack.empty()) {
    Pending dir = std::move(stack.back());
    stack.pop_back();
    const std::string shown = dir.rel.empty() ? root_path : root_path + "/" + dir.rel;
    DirPtr d(::fdopendir(dir.fd.get()));
    if (d == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("opendir ", Esc(shown)));
    (void)dir.fd.release();  // owned by `d` now
    std::vector<std::string> names;
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(d.get());
      if (e == nullptr) {
        if (errno != 0) return absl::ErrnoToStatus(errno, absl::StrCat("readdir ", Esc(shown)));
        break;
      }
      const std::string_view n = e->d_name;
      if (n == "." || n == "..") continue;
      names.emplace_back(n);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      std::string rel = dir.rel.empty() ? name : dir.rel + "/" + name;
      if (IsIgnored(rel, ignores)) continue;
      if (!IsValidUtf8(rel)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "file name \"%s\" is not valid UTF-8 and cannot be signed", AbslView(Esc(rel))));
      }
      struct stat st;
      if (::fstatat(::dirfd(d.get()), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return absl::ErrnoToStatus(errno, absl::StrFormat("stat \"%s\"", AbslView(Esc(rel))));
      }
      if (S_ISLNK(st.st_mode)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "\"%s\" is a symbolic link; ckptscan does not follow symbolic links in a model "
            "(ignore it or replace it with the file)",
            AbslView(Esc(rel))));
      }
      if (S_ISDIR(st.st_mode)) {
        if (dir.depth + 1 > limits.max_directory_depth) {
          return base::LimitError(
              absl::StrFormat(
                  "directory \"%s\" is nested deeper than %d (Limits::max_directory_depth)",
                  AbslView(Esc(rel)), limits.max_directory_depth),
              "max_directory_depth", limits.max_directory_depth);
        }
        base::UniqueFd sub(::openat(::dirfd(d.get()), name.c_str(),
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.valid()) {
          return absl::ErrnoToStatus(errno, absl::StrFormat("open \"%s\"", AbslView(Esc(rel))));
        }
        stack.push_back(Pending{std::move(sub), std::move(rel), dir.depth + 1});
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("\"%s\" is not a regular file or directory (socket, FIFO or device)",
                            AbslView(Esc(rel))));
      }
      if (files->size() >= limits.max_files) {
        return base::LimitError(
            absl::StrFormat("model has more than %d files (Limits::max_files)", limits.max_files),
            "max_files", limits.max_files);
      }
      files->push_back(FileEntry{std::move(rel), static_cast<uint64_t>(st.st_size)});
    }
  }
  return absl::OkStatus();
}

struct WorkItem {
  size_t file;
  uint64_t start;
  uint64_t end;  // exclusive; ignored when whole
  bool whole;
};

class Hasher final {
 public:
  Hasher(int root_fd, std::string single_file_path, const std::vector<FileEntry>& files,
         const std::vector<WorkItem>& items, size_t buffer_bytes)
      : root_fd_(root_fd),
        single_file_path_(std::move(single_file_path)),
        files_(files),
        items_(items),
        buffer_bytes_(std::max<size_t>(buffer_bytes, 4096)),
        digests_(items.size()) {}

  absl::Status Run(int threads) {
    const size_t n = std::max<size_t>(
        1, std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), items_.size()));
    std::vector<std::thread> workers;
    workers.reserve(n - 1);
    for (size_t i = 1; i < n; ++i) workers.emplace_back([this] { Work(); });
    Work();
    for (std::thread& t : workers) t.join();
    absl::MutexLock lock(&mu_);
    return status_;
  }

  const std::vector<Sha256Digest>& digests() const { return digests_; }

 private:
  void Work() {
    std::vector<char> buf(buffer_bytes_);
    for (;;) {
      if (failed_.load(std::memory_order_relaxed)) return;
      const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= items_.size()) return;
      absl::StatusOr<Sha256Digest> d = HashItem(items_[i], &buf);
      if (!d.ok()) {
        absl::MutexLock lock(&mu_);
        if (status_.ok()) status_ = d.status();
        failed_.store(true, std::memory_order_relaxed);
        return;
      }
      digests_[i] = *d;  // each index is written by exactly one worker
    }
  }

  absl::StatusOr<Sha256Digest> HashItem(const WorkItem& item, std::vector<char>* buf) {
    const std::string& rel = files_[item.file].rel;
    const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;
    base::UniqueFd fd(single_file_path_.empty() ? ::openat(root_fd_, rel.c_str(), flags)
                                                : ::open(single_file_path_.c_str(), flags));
    if (!fd.valid()) {
      return absl::ErrnoToStatus(errno, absl::StrFormat("open \"%s\"", AbslView(Esc(rel))));
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("\"%s\" stopped being a regular file while hashing", AbslView(Esc(rel))));
    }
    absl::StatusOr<Sha256Hasher> h = Sha256Hasher::Create();
    if (!h.ok()) return h.status();
    uint64_t off = item.whole ? 0 : item.start;
    for (;;) {
      size_t want = buf->size();
      if (!item.whole) {
        if (off >= item.end) break;
        want = static_cast<size_t>(std::min<uint64_t>(want, item.end - off));
      }
      const ssize_t n = ::pread(fd.get(), buf->data(), want, static_cast<off_t>(off));
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::ErrnoToStatus(errno, absl::StrFormat("read \"%s\"", AbslView(Esc(rel))));
      }
      if (n == 0) {
        if (item.whole) break;
        return absl::FailedPreconditionError(absl::StrFormat(
            "\"%s\" ended at byte %d while hashing bytes [%d, %d): it changed during hashing",
            AbslView(Esc(rel)), off, item.start, item.end));
      }
      if (absl::Status s = h->Update(std::string_view(buf->data(), static_cast<size_t>(n)));
          !s.ok()) {
        return s;
      }
      off += static_cast<uint64_t>(n);
    }
    return h->Finish();
  }

  const int root_fd_;
  const std::string single_file_path_;
  const std::vector<FileEntry>& files_;
  const std::vector<WorkItem>& items_;
  const size_t buffer_bytes_;
  std::vector<Sha256Digest> digests_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> failed_{false};
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

std::string ModelName(const std::string& model_path) {
  std::string p = model_path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    char resolved[PATH_MAX];
    if (::realpath(model_path.c_str(), resolved) != nullptr) {
      const std::string r = resolved;
      base = r.substr(r.rfind('/') + 1);
    }
  }
  return base.empty() ? std::string("model") : base;
}

}  // namespace

std::string_view MethodName(Method m) { return m == Method::kFiles ? "files" : "shards"; }

void Manifest::AddFile(std::string path, std::string sha256_hex) {
  resources.push_back(Resource{std::move(path), std::move(sha256_hex)});
}

void Manifest::AddShard(std::string_view path, uint64_t start, uint64_t end,
                        std::string sha256_hex) {
  resources.push_back(
      Resource{absl::StrCat(AbslView(path), ":", start, ":", end), std::move(sha256_hex)});
}

absl::Status CheckRelativePath(std::string_view path, std::string_view what, const Limits& limits) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s \"%s\" %s", AbslView(what), AbslView(Esc(path)), AbslView(why)));
  };
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(AbslView(what), " is empty"));
  if (path.size() > limits.max_name_bytes) {
    return base::LimitError(absl::StrFormat("%s is %d bytes long, over Limits::max_name_bytes (%d)",
                                            AbslView(what), path.size(), limits.max_name_bytes),
                            "max_name_bytes", limits.max_name_bytes);
  }
  if (path == ".") return absl::OkStatus();
  if (!IsValidUtf8(path)) return bad("is not valid UTF-8");
  if (path.find('\0') != std::string_view::npos) return bad("contains NUL");
  if (path.front() == '/') return bad("is absolute");
  if (path.back() == '/') return bad("ends with '/'");
  for (std::string_view c : Components(path)) {
    if (c.empty()) return bad("has an empty component (\"//\")");
    if (c == "..") return bad("has a \"..\" component");
    if (c == ".") return bad("has a \".\" component (not canonical)");
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardName> ParseShardName(std::string_view name) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard resource name \"%s\" %s (expected \"<path>:<start>:<end>\")",
                        AbslView(Esc(name)), AbslView(why)));
  };
  const size_t c2 = name.rfind(':');
  if (c2 == std::string_view::npos || c2 == 0) return bad("has no range");
  const size_t c1 = name.rfind(':', c2 - 1);
  if (c1 == std::string_view::npos) return bad("has no range");
  ShardName out;
  out.path = name.substr(0, c1);
  if (!ParseDecimal(name.substr(c1 + 1, c2 - c1 - 1), &out.start) ||
      !ParseDecimal(name.substr(c2 + 1), &out.end)) {
    return bad("has a start or end that is not a decimal integer");
  }
  return out;
}

absl::Status ValidateManifest(const Manifest& m, const Limits& limits) {
  if (m.model_name.empty()) return absl::InvalidArgumentError("model name is empty");
  if (m.model_name.size() > limits.max_name_bytes || !IsValidUtf8(m.model_name)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model name \"%s\" is too long or not valid UTF-8", AbslView(Esc(m.model_name))));
  }
  const Serialization& s = m.serialization;
  if (s.method == Method::kShards && s.shard_size == 0) {
    return absl::InvalidArgumentError("shard_size must be positive");
  }
  if (s.ignore_paths.size() > limits.max_ignore_paths) {
    return base::LimitError(absl::StrFormat("%d ignore paths, over Limits::max_ignore_paths (%d)",
                                            s.ignore_paths.size(), limits.max_ignore_paths),
                            "max_ignore_paths", limits.max_ignore_paths);
  }
  for (const std::string& p : s.ignore_paths) {
    if (p == ".") {
      return absl::InvalidArgumentError("ignore path \".\" would exclude the whole model");
    }
    if (absl::Status st = CheckRelativePath(p, "ignore path", limits); !st.ok()) return st;
  }
  if (m.resources.size() > limits.max_resources) {
    return base::LimitError(absl::StrFormat("%d resources, over Limits::max_resources (%d)",
                                            m.resources.size(), limits.max_resources),
                            "max_resources", limits.max_resources);
  }
  std::set<std::string_view> seen;
  for (const Resource& r : m.resources) {
    if (!IsSha256Hex(r.digest)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("resource \"%s\": digest \"%s\" is not 64 lowercase hex digits (SHA-256)",
                          AbslView(Esc(r.name)), AbslView(Esc(r.digest.substr(0, 80)))));
    }
    if (s.method == Method::kFiles) {
      if (absl::Status st = CheckRelativePath(r.name, "resource name", limits); !st.ok()) {
        return st;
      }
    } else {
      absl::StatusOr<ShardName> sn = ParseShardName(r.name);
      if (!sn.ok()) return sn.status();
      if (absl::Status st = CheckRelativePath(sn->path, "resource path", limits); !st.ok()) {
        return st;
      }
      if (sn->start >= sn->end || sn->end - sn->start > s.shard_size ||
          sn->start % s.shard_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("shard resource \"%s\": range [%d, %d) is not a shard of size %d",
                            AbslView(Esc(r.name)), sn->start, sn->end, s.shard_size));
      }
    }
    if (!seen.insert(r.name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("resource \"%s\" is listed twice", AbslView(Esc(r.name))));
    }
  }
  return absl::OkStatus();
}

void SortResources(Method method, std::vector<Resource>* resources) {
  if (method == Method::kFiles) {
    std::stable_sort(resources->begin(), resources->end(),
                     [](const Resource& a, const Resource& b) { return PathLess(a.name, b.name); });
    return;
  }
  auto key = [](const Resource& r) {
    absl::StatusOr<ShardName> s = ParseShardName(r.name);
    return s.ok() ? *s : ShardName{r.name, 0, 0};
  };
  std::stable_sort(resources->begin(), resources->end(),
                   [&key](const Resource& a, const Resource& b) {
                     const ShardName ka = key(a);
                     const ShardName kb = key(b);
                     if (ka.path != kb.path) return PathLess(ka.path, kb.path);
                     if (ka.start != kb.start) return ka.start < kb.start;
                     return ka.end < kb.end;
                   });
}

absl::StatusOr<Sha256Digest> RootDigest(const std::vector<Resource>& resources) {
  absl::StatusOr<Sha256Hasher> h = Sha256Hasher::Create();
  if (!h.ok()) return h.status();
  std::string raw;
  for (const Resource& r : resources) {
    if (!HexDecode(r.digest, &raw)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("resource \"%s\": digest is not lowercase hex", AbslView(Esc(r.name))));
    }
    if (absl::Status s = h->Update(raw); !s.ok()) return s;
  }
  return h->Finish();
}

namespace {

// The manifest's model name and serialization from `options`, ignore paths canonical.
absl::StatusOr<Manifest> StartManifest(std::string model_name, const HashOptions& options) {
  const Limits& limits = options.limits;
  Manifest m;
  m.model_name = std::move(model_name);
  m.serialization = options.serialization;
  std::vector<std::string>& ignores = m.serialization.ignore_paths;
  for (std::string& p : ignores) p = NormalizeIgnore(p);
  if (options.ignore_git_paths) {
    for (std::string_view g : kGitPaths) ignores.emplace_back(g);
  }
  std::sort(ignores.begin(), ignores.end());
  ignores.erase(std::unique(ignores.begin(), ignores.end()), ignores.end());
  if (m.serialization.method == Method::kShards && m.serialization.shard_size == 0) {
    return absl::InvalidArgumentError("shard_size must be positive");
  }
  if (ignores.size() > limits.max_ignore_paths) {
    return base::LimitError(absl::StrFormat("%d ignore paths, over Limits::max_ignore_paths (%d)",
                                            ignores.size(), limits.max_ignore_paths),
                            "max_ignore_paths", limits.max_ignore_paths);
  }
  for (const std::string& p : ignores) {
    if (p == "." || p.empty()) {
      return absl::InvalidArgumentError("ignore path \".\" would exclude the whole model");
    }
    if (absl::Status s = CheckRelativePath(p, "ignore path", limits); !s.ok()) return s;
  }
  return m;
}

// Hashes `files` (beneath `root_fd`, or the one file `single_file`) into `m`.
absl::StatusOr<Manifest> HashFiles(Manifest m, int root_fd, const std::string& single_file,
                                   std::vector<FileEntry> files, const HashOptions& options) {
  const Limits& limits = options.limits;
  if (options.only_files.has_value() && single_file.empty()) {
    std::vector<FileEntry> kept;
    for (FileEntry& f : files) {
      if (options.only_files->count(f.rel) != 0) kept.push_back(std::move(f));
    }
    files = std::move(kept);
  }

  // Work items, counted before anything is allocated for them.
  std::vector<WorkItem> items;
  const bool shards = m.serialization.method == Method::kShards;
  const uint64_t shard = m.serialization.shard_size;
  uint64_t count = 0;
  for (const FileEntry& f : files) {
    const uint64_t n = shards ? (f.size / shard + (f.size % shard != 0 ? 1 : 0)) : 1;
    if (!base::CheckedAdd(count, n, &count) || count > limits.max_resources) {
      return base::LimitError(
          absl::StrFormat("the model would need more than %d resources (Limits::max_resources)%s",
                          limits.max_resources, shards ? "; use a larger shard size" : ""),
          "max_resources", limits.max_resources);
    }
  }
  items.reserve(static_cast<size_t>(count));
  for (size_t i = 0; i < files.size(); ++i) {
    if (!shards) {
      items.push_back(WorkItem{i, 0, 0, true});
      continue;
    }
    // Empty files have no shards (model_signing and the spec omit them).
    for (uint64_t start = 0; start < files[i].size;) {
      const uint64_t len = std::min(shard, files[i].size - start);
      items.push_back(WorkItem{i, start, start + len, false});
      start += len;
    }
  }

  Hasher hasher(root_fd, single_file, files, items, options.read_buffer_bytes);
  if (absl::Status s = hasher.Run(options.threads); !s.ok()) return s;
  m.resources.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const WorkItem& w = items[i];
    std::string hex = HexEncode(hasher.digests()[i]);
    if (w.whole) {
      m.AddFile(files[w.file].rel, std::move(hex));
    } else {
      m.AddShard(files[w.file].rel, w.start, w.end, std::move(hex));
    }
  }
  SortResources(m.serialization.method, &m.resources);
  return m;
}

}  // namespace

absl::StatusOr<Manifest> HashModel(const std::string& model_path, const HashOptions& options) {
  absl::StatusOr<Manifest> m = StartManifest(ModelName(model_path), options);
  if (!m.ok()) return m.status();
  struct stat st;
  if (::lstat(model_path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("model path %s", model_path));
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model path %s is a symbolic link; pass the path it points to", model_path));
  }
  if (S_ISREG(st.st_mode)) {
    // model_signing names the only resource "."
    return HashFiles(*std::move(m), -1, model_path,
                     {FileEntry{".", static_cast<uint64_t>(st.st_size)}}, options);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model path %s is neither a regular file nor a directory", model_path));
  }
  base::UniqueFd root(::open(model_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.valid()) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("open model directory %s", model_path));
  }
  std::vector<FileEntry> files;
  if (absl::Status s =
          Enumerate(root.get(), model_path, m->serialization.ignore_paths, options.limits, &files);
      !s.ok()) {
    return s;
  }
  return HashFiles(*std::move(m), root.get(), std::string(), std::move(files), options);
}

absl::StatusOr<Manifest> HashModelAt(int dir_fd, std::string model_name,
                                     const HashOptions& options) {
  const std::string shown = model_name;
  absl::StatusOr<Manifest> m = StartManifest(std::move(model_name), options);
  if (!m.ok()) return m.status();
  std::vector<FileEntry> files;
  if (absl::Status s =
          Enumerate(dir_fd, shown, m->serialization.ignore_paths, options.limits, &files);
      !s.ok()) {
    return s;
  }
  return HashFiles(*std::move(m), dir_fd, std::string(), std::move(files), options);
}

absl::Status CompareManifests(const Manifest& signed_manifest, const Manifest& actual,
                              bool ignore_unsigned_files) {
  const bool shards = signed_manifest.serialization.method == Method::kShards;
  auto file_of = [shards](const std::string& name) -> std::string {
    if (!shards) return name;
    absl::StatusOr<ShardName> s = ParseShardName(name);
    return s.ok() ? std::string(s->path) : name;
  };
  auto noun = [shards](const std::string& name) {
    return absl::StrFormat("%s \"%s\"", shards ? "shard" : "file", AbslView(Esc(name)));
  };
  std::map<std::string, const std::string*> have;
  std::set<std::string> have_files;
  for (const Resource& r : actual.resources) {
    have.emplace(r.name, &r.digest);
    have_files.insert(file_of(r.name));
  }
  std::set<std::string> signed_files;
  std::set<std::string_view> signed_names;
  std::vector<std::string> problems;
  std::set<std::string> reported;
  for (const Resource& r : signed_manifest.resources) {
    const std::string file = file_of(r.name);
    signed_files.insert(file);
    signed_names.insert(r.name);
    auto it = have.find(r.name);
    if (it == have.end()) {
      if (have_files.count(file) == 0) {
        if (reported.insert(file).second) {
          problems.push_back(
              absl::StrFormat("file \"%s\" is signed but missing", AbslView(Esc(file))));
        }
      } else {
        problems.push_back(absl::StrFormat(
            "%s is signed but the file no longer has that byte range (its size changed)",
            noun(r.name)));
      }
      continue;
    }
    if (*it->second != r.digest) {
      problems.push_back(absl::StrFormat("%s: digest mismatch (signed %s, found %s)", noun(r.name),
                                         r.digest, *it->second));
    }
  }
  if (!ignore_unsigned_files) {
    for (const Resource& r : actual.resources) {
      const std::string file = file_of(r.name);
      if (signed_files.count(file) == 0) {
        if (reported.insert(file).second) {
          problems.push_back(
              absl::StrFormat("unsigned file \"%s\" was added", AbslView(Esc(file))));
        }
      } else if (signed_names.count(r.name) == 0) {
        problems.push_back(absl::StrFormat("%s is not signed (the file grew)", noun(r.name)));
      }
    }
  }
  if (problems.empty()) return absl::OkStatus();
  constexpr size_t kShown = 10;
  std::string msg =
      absl::StrFormat("model does not match the signature (%d problem%s): ", problems.size(),
                      problems.size() == 1 ? "" : "s");
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) {
    if (i > 0) msg += "; ";
    msg += problems[i];
  }
  if (problems.size() > kShown) absl::StrAppend(&msg, "; and ", problems.size() - kShown, " more");
  return absl::DataLossError(msg);
}

}  // namespace ckptscan::signing
