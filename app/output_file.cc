#include "app/output_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/strings.h"

namespace ckptscan::app {

worker::v1::ConvertSpec SpecFor(const ConvertRequest& request, const std::string& sha256) {
  worker::v1::ConvertSpec spec;
  spec.set_select(request.select);
  spec.set_to_bf16(request.to_bf16);
  spec.set_source_sha256(sha256);
  spec.set_scanner_version(request.scanner_version);
  spec.set_strict(request.strict);
  spec.set_rules_version(request.rules_version);
  for (const std::string& d : request.allow_dtypes) spec.add_allow_dtypes(d);
  spec.set_cast_quantized(request.cast_quantized);
  spec.set_declared_quantization(request.declared_quantization);
  for (const convert::QuantizedLayer& l : request.quantized_layers) {
    worker::v1::QuantizedLayerSpec* q = spec.add_quantized_layers();
    q->set_prefix(l.prefix);
    q->set_layout(l.layout);
  }
  return spec;
}
namespace {

absl::Status Errno(int err, std::string_view what, std::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(base::AbslView(what), " ", base::AbslView(path)));
}

// The directory of `path` ("." for a bare name) and its last component.
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  if (slash == 0) return {"/", path.substr(1)};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

bool IsPlainName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// ".NAME.ckptscan-XXXXXXXX": a fresh hidden name next to `name` (the fallback, --force).
std::string TempName(const std::string& name) {
  static thread_local std::mt19937 random{std::random_device{}()};
  return absl::StrFormat(".%s.ckptscan-%08x", name, static_cast<uint32_t>(random()));
}

// Same dev and inode.
bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

mode_t CurrentUmask() {
  // Read, never set: umask(2) is process-wide, and setting it to 0 even briefly would let a
  // file another thread (another daemon job) creates meanwhile be writable by everyone.
  // /proc/self/status has had "Umask:" since Linux 4.7; without it, 022.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) != 0) continue;
    mode_t mask = 0;
    for (char c : std::string_view(line).substr(6)) {
      if (c >= '0' && c <= '7') mask = static_cast<mode_t>(mask * 8 + (c - '0'));
    }
    return mask & 0777;
  }
  return 022;
}

absl::StatusOr<OutputDir> OpenOutputDir(const ConvertRequest& request) {
  std::string path = request.output;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto [dir, name] = SplitPath(path);
  if (!IsPlainName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("output \"", request.output, "\" does not end in a file or directory name"));
  }
  OutputDir out;
  out.name = std::move(name);
  if (request.output_dir_fd >= 0) {
    out.fd = request.output_dir_fd;
    return out;
  }
  out.owned.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!out.owned.valid()) return Errno(errno, "cannot open the output's directory", dir);
  out.fd = out.owned.get();
  return out;
}

absl::StatusOr<OutputDir> OpenOutputDir(const std::string& output) {
  ConvertRequest request;
  request.output = output;
  return OpenOutputDir(request);
}

absl::StatusOr<OutputFile> OutputFile::Create(const std::string& final_path) {
  absl::StatusOr<OutputDir> dir = OpenOutputDir(final_path);
  if (!dir.ok()) return dir.status();
  return CreateAt(dir->fd, dir->name, final_path);
}

absl::StatusOr<OutputFile> OutputFile::CreateAt(int dir_fd, const std::string& name,
                                                std::string shown) {
  if (!IsPlainName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("not a file name: ", shown));
  }
  base::UniqueFd dir(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return Errno(errno, "dup the directory of", shown);
  // O_TMPFILE and the fallback ignore the umask's usual application to a later link: apply it.
  const mode_t mode = 0666 & ~CurrentUmask();
  const int fd = ::openat(dir.get(), ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (fd >= 0) {
    (void)::fchmod(fd, mode);
    return OutputFile(std::move(dir), name, std::move(shown), std::string(), base::UniqueFd(fd));
  }
  const int err = errno;
  if (err != EOPNOTSUPP && err != EISDIR && err != EINVAL) {
    return Errno(err, "cannot create the output", shown);
  }
  // No O_TMPFILE here: a named temporary, removed unless published.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string temp = TempName(name);
    const int named =
        ::openat(dir.get(), temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (named < 0) {
      if (errno == EEXIST) continue;
      return Errno(errno, "cannot create the output", shown);
    }
    (void)::fchmod(named, mode);
    return OutputFile(std::move(dir), name, std::move(shown), std::move(temp),
                      base::UniqueFd(named));
  }
  return absl::AlreadyExistsError(absl::StrCat("no free temporary name next to ", shown));
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : dir_(std::move(other.dir_)),
      name_(std::move(other.name_)),
      shown_(std::move(other.shown_)),
      temp_name_(std::move(other.temp_name_)),
      fd_(std::move(other.fd_)),
      published_(other.published_) {
  other.temp_name_.clear();
  other.published_ = true;  // the moved-from object owns nothing to clean up
}

OutputFile::~OutputFile() {
  if (!published_ && !temp_name_.empty()) (void)::unlinkat(dir_.get(), temp_name_.c_str(), 0);
}

absl::StatusOr<base::UniqueFd> OutputFile::DupForWorker() const {
  base::UniqueFd dup(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) return absl::ErrnoToStatus(errno, "dup the output descriptor");
  return dup;
}

absl::StatusOr<safetensors::Layout> OutputFile::Validate(std::string_view expected_header) const {
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) return Errno(errno, "stat the output of", shown_);
  if (!S_ISREG(st.st_mode)) return absl::InternalError("the output is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return absl::InvalidArgumentError("the output is empty");
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd_.get(), 0);
  if (addr == MAP_FAILED) return Errno(errno, "map the output of", shown_);
  const std::string_view bytes(static_cast<const char*>(addr), size);
  // The worker wrote these bytes: the header is compared with the one planned here first, so
  // the validator then reads a header this side wrote, never one the worker chose.
  absl::StatusOr<safetensors::Layout> layout =
      absl::InvalidArgumentError("the output's header is not the one planned from the facts");
  if (expected_header.empty() || bytes.substr(0, expected_header.size()) == expected_header) {
    layout = safetensors::Validate(bytes, safetensors::ValidatorLimits{});
  }
  ::munmap(addr, size);
  if (!layout.ok()) {
    return absl::Status(layout.status().code(),
                        absl::StrCat("the output failed validation: ", layout.status().message()));
  }
  return layout;
}

absl::Status OutputFile::Publish(bool replace) {
  if (published_) return absl::FailedPreconditionError("already published");
  if (::fsync(fd_.get()) != 0) return Errno(errno, "fsync the output of", shown_);
  const int dir = dir_.get();
  if (!temp_name_.empty()) {
    // Named fallback: rename (replace) or link + unlink (never over an existing name).
    if (replace) {
      if (::renameat(dir, temp_name_.c_str(), dir, name_.c_str()) != 0) {
        return Errno(errno, "rename the output to", shown_);
      }
    } else {
      if (::linkat(dir, temp_name_.c_str(), dir, name_.c_str(), 0) != 0) {
        return Errno(errno, "link the output to", shown_);
      }
      (void)::unlinkat(dir, temp_name_.c_str(), 0);
    }
    published_ = true;
    temp_name_.clear();
    return absl::OkStatus();
  }
  const std::string proc = absl::StrCat("/proc/self/fd/", fd_.get());
  if (!replace) {
    if (::linkat(AT_FDCWD, proc.c_str(), dir, name_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      return Errno(errno, "link the output to", shown_);
    }
    published_ = true;
    return absl::OkStatus();
  }
  // Replace: link under a fresh temporary name, then rename over the final name (atomic).
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string temp = TempName(name_);
    if (::linkat(AT_FDCWD, proc.c_str(), dir, temp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      if (errno == EEXIST) continue;
      return Errno(errno, "link the output to a temporary name beside", shown_);
    }
    if (::renameat(dir, temp.c_str(), dir, name_.c_str()) != 0) {
      const int err = errno;
      (void)::unlinkat(dir, temp.c_str(), 0);
      return Errno(err, "rename the output to", shown_);
    }
    published_ = true;
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError("no free temporary name next to the output");
}

absl::Status OutputFile::Unpublish() {
  if (!published_) return absl::OkStatus();
  struct stat ours, named;
  if (::fstat(fd_.get(), &ours) != 0) return Errno(errno, "stat the output of", shown_);
  if (::fstatat(dir_.get(), name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0) {
    return Errno(errno, "stat", shown_);
  }
  if (!SameFile(ours, named)) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown_, " no longer names the output written; it was left alone"));
  }
  if (::unlinkat(dir_.get(), name_.c_str(), 0) != 0) return Errno(errno, "unlink", shown_);
  published_ = false;
  return absl::OkStatus();
}

absl::Status OutputFile::WriteAt(uint64_t offset, std::string_view bytes) {
  return base::PwriteAll(fd_.get(), offset, bytes, "write the output's header");
}

absl::StatusOr<v1::Conversion> ValidateAndPublish(OutputFile& out, const convert::Plan& plan,
                                                  const ConvertRequest& request,
                                                  const ShardDigests* early) {
  absl::StatusOr<safetensors::Layout> layout = out.Validate(plan.header.bytes);
  if (!layout.ok()) return layout.status();
  if (layout->file_size != plan.header.file_size) {
    return absl::InvalidArgumentError(absl::StrCat("the output is ", layout->file_size,
                                                   " bytes, the plan ", plan.header.file_size));
  }
  // Signed before it is published: the digest is read back here from the validated file.
  std::string bundle;
  if (request.sign.key != nullptr) {
    const size_t slash = request.output.find_last_of('/');
    const absl::Time sign_start = absl::Now();
    absl::StatusOr<std::string> signed_bundle = SignFileModel(
        out.fd(), layout->file_size,
        slash == std::string::npos ? request.output : request.output.substr(slash + 1),
        request.sign, early, plan.header.bytes.size());
    if (!signed_bundle.ok()) return signed_bundle.status();
    if (request.sign.on_signed) request.sign.on_signed(absl::Now() - sign_start);
    bundle = *std::move(signed_bundle);
  }
  if (absl::Status s = out.Publish(request.replace); !s.ok()) return s;
  v1::Conversion c;
  if (request.sign.key != nullptr) {
    const std::string sig_path = SignaturePathFor(request.output);
    absl::Status written = [&]() -> absl::Status {
      absl::StatusOr<OutputFile> sig =
          OutputFile::CreateAt(out.dir_fd(), SignaturePathFor(out.name()), sig_path);
      if (!sig.ok()) return sig.status();
      if (absl::Status s = sig->WriteAt(0, bundle); !s.ok()) return s;
      return sig->Publish(request.replace);
    }();
    if (!written.ok()) {
      // A signed output is never left without its signature.
      (void)out.Unpublish();
      return absl::Status(written.code(),
                          absl::StrCat("the signature ", sig_path, " could not be written (",
                                       written.message(), "); the output was removed"));
    }
    c.set_signature(sig_path);
    c.set_signer(request.sign.key->public_key().hint());
  }
  c.set_output(request.output);
  c.set_tensors(layout->tensors.size());
  c.set_aliases(plan.aliases.size());
  c.set_bytes(layout->file_size);
  c.set_dtype(request.to_bf16 ? "bf16" : "keep");
  for (const torch::OtherValue& v : plan.not_written) {
    v1::NotWritten* n = c.add_not_written();
    n->set_path(v.name);
    n->set_type(v.type);
  }
  c.set_not_written_total(plan.not_written_total);
  for (const convert::Plan::DtypeUse& u : plan.dtypes) {
    v1::DtypeConversion* d = c.add_dtypes();
    d->set_source(u.source);
    d->set_written(u.written);
    d->set_how(u.how);
    d->set_tensors(u.tensors);
  }
  c.set_declared_quantization(plan.declared_quantization);
  for (const convert::Plan::LayoutUse& u : plan.quantized_layers) {
    v1::QuantizedLayers* q = c.add_quantized_layers();
    q->set_layout(u.layout);
    q->set_layers(u.layers);
    q->set_kept(u.kept);
    q->set_example(u.example);
  }
  return c;
}

}  // namespace ckptscan::app
