#include "pipeline/output_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/strings.h"

namespace ckptscan::pipeline {

worker::v1::ConvertSpec SpecFor(const ConvertRequest& request, const std::string& sha256) {
  worker::v1::ConvertSpec spec;
  spec.set_select(request.select);
  spec.set_to_bf16(request.to_bf16);
  spec.set_source_sha256(sha256);
  spec.set_scanner_version(request.scanner_version);
  spec.set_strict(request.strict);
  spec.set_rules_version(request.rules_version);
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

// A named, not yet existing path next to `final_path` (for the fallback and for --force).
std::string TempTemplate(const std::string& final_path) {
  auto [dir, base] = SplitPath(final_path);
  std::string t = dir;
  t.append("/.");
  t.append(base);
  t.append(".ckptscan-XXXXXX");
  return t;
}

}  // namespace

absl::StatusOr<OutputFile> OutputFile::Create(const std::string& final_path) {
  const auto [dir, base] = SplitPath(final_path);
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError(absl::StrCat("not a file name: ", final_path));
  }
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (fd >= 0) {
    // O_TMPFILE ignores the umask's usual application to a later link: apply it now.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    (void)::fchmod(fd, 0666 & ~mask);
    return OutputFile(final_path, std::string(), base::UniqueFd(fd));
  }
  const int err = errno;
  if (err != EOPNOTSUPP && err != EISDIR && err != EINVAL) {
    return Errno(err, "cannot create the output in", dir);
  }
  // No O_TMPFILE here: a named temporary, removed unless published.
  std::string temp = TempTemplate(final_path);
  const int named = ::mkostemp(temp.data(), O_CLOEXEC);
  if (named < 0) return Errno(errno, "cannot create the output in", dir);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  (void)::fchmod(named, 0666 & ~mask);
  return OutputFile(final_path, std::move(temp), base::UniqueFd(named));
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : final_path_(std::move(other.final_path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::move(other.fd_)),
      published_(other.published_) {
  other.temp_path_.clear();
  other.published_ = true;  // the moved-from object owns nothing to clean up
}

OutputFile::~OutputFile() {
  if (!published_ && !temp_path_.empty()) (void)::unlink(temp_path_.c_str());
}

absl::StatusOr<base::UniqueFd> OutputFile::DupForWorker() const {
  base::UniqueFd dup(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) return absl::ErrnoToStatus(errno, "dup the output descriptor");
  return dup;
}

absl::StatusOr<safetensors::Layout> OutputFile::Validate(std::string_view expected_header) const {
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) return Errno(errno, "stat the output of", final_path_);
  if (!S_ISREG(st.st_mode)) return absl::InternalError("the output is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return absl::InvalidArgumentError("the output is empty");
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd_.get(), 0);
  if (addr == MAP_FAILED) return Errno(errno, "map the output of", final_path_);
  const std::string_view bytes(static_cast<const char*>(addr), size);
  absl::StatusOr<safetensors::Layout> layout =
      safetensors::Validate(bytes, safetensors::ValidatorLimits{});
  if (layout.ok() && !expected_header.empty() &&
      bytes.substr(0, expected_header.size()) != expected_header) {
    layout = absl::InvalidArgumentError(
        "the output's header is not the one planned from the facts");
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
  if (::fsync(fd_.get()) != 0) return Errno(errno, "fsync the output of", final_path_);
  if (!temp_path_.empty()) {
    // Named fallback: rename (replace) or link + unlink (never over an existing name).
    if (replace) {
      if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
        return Errno(errno, "rename the output to", final_path_);
      }
    } else {
      if (::link(temp_path_.c_str(), final_path_.c_str()) != 0) {
        return Errno(errno, "link the output to", final_path_);
      }
      (void)::unlink(temp_path_.c_str());
    }
    published_ = true;
    temp_path_.clear();
    return absl::OkStatus();
  }
  const std::string proc = absl::StrCat("/proc/self/fd/", fd_.get());
  if (!replace) {
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, final_path_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      return Errno(errno, "link the output to", final_path_);
    }
    published_ = true;
    return absl::OkStatus();
  }
  // Replace: link under a fresh temporary name, then rename over the final name (atomic).
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string temp = TempTemplate(final_path_);
    const int probe = ::mkostemp(temp.data(), O_CLOEXEC);  // reserve a unique name...
    if (probe < 0) return Errno(errno, "create a temporary name for", final_path_);
    ::close(probe);
    (void)::unlink(temp.c_str());  // ...and free it for linkat (EEXIST below retries)
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      if (errno == EEXIST) continue;
      return Errno(errno, "link the output to", temp);
    }
    if (::rename(temp.c_str(), final_path_.c_str()) != 0) {
      const int err = errno;
      (void)::unlink(temp.c_str());
      return Errno(err, "rename the output to", final_path_);
    }
    published_ = true;
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError("no free temporary name next to the output");
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
      absl::StatusOr<OutputFile> sig = OutputFile::Create(sig_path);
      if (!sig.ok()) return sig.status();
      if (absl::Status s = sig->WriteAt(0, bundle); !s.ok()) return s;
      return sig->Publish(request.replace);
    }();
    if (!written.ok()) {
      // A signed output is never left without its signature.
      (void)::unlink(request.output.c_str());
      return absl::Status(written.code(), absl::StrCat("the signature ", sig_path,
                                                       " could not be written (", 
                                                       written.message(),
                                                       "); the output was removed"));
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
  return c;
}

}  // namespace ckptscan::pipeline
