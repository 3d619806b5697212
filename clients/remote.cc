#include "clients/remote.h"

#include <fcntl.h>
#include <grpcpp/create_channel_posix.h>
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "app/output_file.h"
#include "app/paths.h"
#include "app/publish.h"
#include "base/unique_fd.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "signing/keys.h"

namespace ckptscan::clients {
namespace {

constexpr size_t kChunkBytes = 1u << 20;                  // the daemon's cap per upload message
constexpr uint64_t kMinUploadBytesPerSecond = 20u << 20;  // deadline allowance for transfer

// A directory or socket on the way to the per-user default socket: not a symlink, owned by this
// user or root, and (with `no_other_writers`) writable by nobody else.
absl::Status CheckOwned(const std::string& path, bool no_other_writers) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, path);
  const uid_t me = ::geteuid();
  if (S_ISLNK(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(path, " is a symlink"));
  }
  if (st.st_uid != me && st.st_uid != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is owned by uid ", st.st_uid, ", not by you (uid ", me, ") or root"));
  }
  if (no_other_writers && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s is writable by its group or by others (mode %04o)", path, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<base::UniqueFd> ConnectTrustedLocalSocket(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " has no directory"));
  }
  const std::string dir = path.substr(0, slash);
  const auto refused = [&](const absl::Status& why) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing the daemon socket ", path, ": ", why.message(),
        ". Another local user may have put it there to answer in ckptscand's place; remove it "
        "and start your own ckptscand, or name a trusted daemon with --server unix:PATH"));
  };
  if (absl::Status s = CheckOwned(dir, /*no_other_writers=*/true); !s.ok()) {
    return s.code() == absl::StatusCode::kNotFound
               ? absl::UnavailableError(
                     absl::StrCat("no ckptscand socket at ", path, " (is ckptscand running?)"))
               : refused(s);
  }
  if (absl::Status s = CheckOwned(path, /*no_other_writers=*/false); !s.ok()) {
    return s.code() == absl::StatusCode::kNotFound
               ? absl::UnavailableError(
                     absl::StrCat("no ckptscand socket at ", path, " (is ckptscand running?)"))
               : refused(s);
  }
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is too long"));
  }
  path.copy(addr.sun_path, path.size());
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<const struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("connect ", path, ": ",
                                               absl::ErrnoToStatus(errno, "").message(),
                                               " (is ckptscand running?)"));
  }
  // Who listens, as the kernel saw it at listen(): the answer must come from this user or root.
  struct ucred peer = {};
  socklen_t len = sizeof(peer);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
    return absl::ErrnoToStatus(errno, "SO_PEERCRED");
  }
  const uid_t me = ::geteuid();
  if (peer.uid != me && peer.uid != 0) {
    return refused(
        absl::PermissionDeniedError(absl::StrCat("the process listening on it runs as uid ",
                                                 peer.uid, ", not as you (uid ", me, ") or root")));
  }
  return fd;
}

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  absl::StatusOr<std::string> text = signing::ReadSmallFile(path, 1u << 20, "1 MiB");
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", text.status().message()));
  }
  return text;
}

// `path` made absolute against the working directory, without resolving symlinks (the daemon
// resolves them beneath its roots).
absl::StatusOr<std::string> Absolute(const std::string& path) {
  if (absl::StartsWith(path, "/")) return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return absl::ErrnoToStatus(errno, "getcwd");
  return absl::StrCat(cwd, "/", path);
}

// Streams the file at `path` after `header`. False when the daemon ended the call early (its
// status says why).
template <typename Writer>
absl::Status Upload(const std::string& path, int fd, uint64_t size, v1::UploadHeader header,
                    Writer* writer, bool* stopped) {
  *stopped = false;
  v1::UploadChunk chunk;
  header.set_size(size);
  *chunk.mutable_header() = std::move(header);
  if (!writer->Write(chunk)) {
    *stopped = true;
    return absl::OkStatus();
  }
  std::string* data = chunk.mutable_data();
  for (uint64_t offset = 0; offset < size;) {
    data->resize(static_cast<size_t>(std::min<uint64_t>(kChunkBytes, size - offset)));
    const ssize_t got = ::pread(fd, data->data(), data->size(), static_cast<off_t>(offset));
    if (got < 0) return absl::ErrnoToStatus(errno, absl::StrCat("read ", path));
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(path, " shrank while it was being uploaded"));
    }
    data->resize(static_cast<size_t>(got));
    if (!writer->Write(chunk)) {
      *stopped = true;
      return absl::OkStatus();
    }
    offset += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<base::UniqueFd, uint64_t>> OpenInput(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, path);
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(path + ": not a regular file");
  return std::make_pair(std::move(fd), static_cast<uint64_t>(st.st_size));
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& status, const std::string& target) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      // gRPC's codes are absl's, number for number.
      absl::StrCat("ckptscand at ", target, ": ",
                   absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                   ": ", status.error_message()));
}

absl::StatusOr<std::unique_ptr<RemoteClient>> RemoteClient::Create(const RemoteOptions& options) {
  std::string target = options.address;
  // A bare socket path ("/run/ckptscan/ckptscand.sock", "./d.sock") is unix:PATH; gRPC would
  // resolve it as a host name and fail with a DNS error.
  if (absl::StartsWith(target, "/") || absl::StartsWith(target, "./") ||
      absl::StartsWith(target, "../")) {
    target = absl::StrCat("unix:", target);
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kChunkBytes + (1u << 20)));
  if (target.empty() || target == "local") {
    const std::string path = app::DefaultSocketPath();
    target = absl::StrCat("unix:", path);
    // A non-root user's default socket lives where other users may create files first
    // (/tmp/ckptscan-UID without XDG_RUNTIME_DIR): it is trusted only when this user or root
    // owns it and listens on it, and the channel uses exactly the connection that was checked.
    // Root's default is beneath /run, which only root (and the service it starts) can write.
    if (::geteuid() != 0) {
      if (!options.tls_ca.empty() || !options.tls_cert.empty() || !options.tls_key.empty()) {
        return absl::InvalidArgumentError(
            "--tls-* options are for HOST:PORT servers, not unix: or plain:");
      }
      absl::StatusOr<base::UniqueFd> fd = ConnectTrustedLocalSocket(path);
      if (!fd.ok()) return fd.status();
      std::shared_ptr<grpc::Channel> channel =
          grpc::CreateCustomInsecureChannelFromFd(target, fd->release(), args);
      return std::unique_ptr<RemoteClient>(new RemoteClient(options, target, std::move(channel)));
    }
  }
  const bool plain = absl::StartsWith(target, "plain:");
  if (plain) target = target.substr(6);
  if (absl::StartsWith(target, "unix:") || plain) {
    if (!options.tls_ca.empty() || !options.tls_cert.empty() || !options.tls_key.empty()) {
      return absl::InvalidArgumentError(
          "--tls-* options are for HOST:PORT servers, not unix: or plain:");
    }
    // A local socket (the daemon checks our uid), or a plaintext health port.
    creds = grpc::InsecureChannelCredentials();
  } else {
    if (options.tls_cert.empty() != options.tls_key.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
    }
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca.empty()) {
      absl::StatusOr<std::string> ca = ReadPem(options.tls_ca, "--tls-ca");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    if (!options.tls_cert.empty()) {
      absl::StatusOr<std::string> cert = ReadPem(options.tls_cert, "--tls-cert");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem(options.tls_key, "--tls-key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    creds = grpc::SslCredentials(ssl);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(target, creds, args);
  return std::unique_ptr<RemoteClient>(new RemoteClient(options, target, std::move(channel)));
}

RemoteClient::RemoteClient(RemoteOptions options, std::string target,
                           std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      target_(std::move(target)),
      channel_(std::move(channel)),
      scanner_(v1::Scanner::NewStub(channel_)),
      admin_(v1::Admin::NewStub(channel_)) {}

std::chrono::system_clock::time_point RemoteClient::Deadline(uint64_t bytes) const {
  // The job's own limit, the transfer at a slow rate, and a margin for the queue.
  const absl::Duration d = options_.timeout + absl::Seconds(30) +
                           absl::Seconds(static_cast<double>(bytes) / kMinUploadBytesPerSecond);
  return absl::ToChronoTime(absl::Now() + d);
}

absl::StatusOr<v1::Report> RemoteClient::Scan(const std::string& path,
                                              const v1::ScanOptions& options) {
  v1::Report report;
  grpc::ClientContext ctx;
  if (options_.by_path) {
    absl::StatusOr<std::string> absolute = Absolute(path);
    if (!absolute.ok()) return absolute.status();
    ctx.set_deadline(Deadline(0));
    v1::ScanPathRequest request;
    request.set_path(*absolute);
    *request.mutable_options() = options;
    if (grpc::Status s = scanner_->ScanPath(&ctx, request, &report); !s.ok()) {
      return FromGrpc(s, target_);
    }
  } else {
    absl::StatusOr<std::pair<base::UniqueFd, uint64_t>> in = OpenInput(path);
    if (!in.ok()) return in.status();
    ctx.set_deadline(Deadline(in->second));
    std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> writer =
        scanner_->ScanUpload(&ctx, &report);
    v1::UploadHeader header;
    header.set_name(path);
    *header.mutable_options() = options;
    bool stopped = false;
    absl::Status sent = Upload(path, in->first.get(), in->second, header, writer.get(), &stopped);
    if (!sent.ok()) {
      ctx.TryCancel();
      (void)writer->Finish();
      return sent;
    }
    if (!stopped) writer->WritesDone();
    if (grpc::Status s = writer->Finish(); !s.ok()) return FromGrpc(s, target_);
  }
  // The report names the file as it was given here.
  for (v1::FileReport& f : *report.mutable_files()) f.set_path(path);
  return report;
}

absl::StatusOr<v1::ConvertResponse> RemoteClient::Convert(const std::string& input,
                                                          const std::string& output,
                                                          const v1::ConvertOptions& options) {
  v1::ConvertResponse response;
  grpc::ClientContext ctx;
  if (options_.by_path) {
    absl::StatusOr<std::string> in = Absolute(input);
    absl::StatusOr<std::string> out = Absolute(output);
    if (!in.ok()) return in.status();
    if (!out.ok()) return out.status();
    ctx.set_deadline(Deadline(0));
    v1::ConvertPathRequest request;
    request.set_input(*in);
    request.set_output(*out);
    *request.mutable_options() = options;
    if (grpc::Status s = scanner_->ConvertPath(&ctx, request, &response); !s.ok()) {
      return FromGrpc(s, target_);
    }
    if (response.report().files_size() > 0) {
      response.mutable_report()->mutable_files(0)->set_path(input);
    }
    return response;
  }

  absl::StatusOr<std::pair<base::UniqueFd, uint64_t>> in = OpenInput(input);
  if (!in.ok()) return in.status();
  // The output file exists before anything is sent: a destination we cannot write is found
  // before the daemon does any work.
  absl::StatusOr<app::OutputFile> out = app::OutputFile::Create(output);
  if (!out.ok()) return out.status();
  ctx.set_deadline(Deadline(2 * in->second));
  std::unique_ptr<grpc::ClientReaderWriter<v1::UploadChunk, v1::ConvertChunk>> stream =
      scanner_->ConvertUpload(&ctx);
  v1::UploadHeader header;
  header.set_name(input);
  *header.mutable_convert() = options;
  bool stopped = false;
  absl::Status sent = Upload(input, in->first.get(), in->second, header, stream.get(), &stopped);
  if (!sent.ok()) {
    ctx.TryCancel();
    (void)stream->Finish();
    return sent;
  }
  if (!stopped) stream->WritesDone();
  v1::ConvertChunk chunk;
  bool have_response = false;
  uint64_t received = 0;
  absl::Status local;
  while (stream->Read(&chunk)) {
    if (chunk.kind_case() == v1::ConvertChunk::kResponse && !have_response) {
      response = std::move(*chunk.mutable_response());
      have_response = true;
    } else if (chunk.kind_case() == v1::ConvertChunk::kData && have_response &&
               response.converted()) {
      if (received + chunk.data().size() > response.output_size()) {
        local = absl::DataLossError("the daemon sent more bytes than it announced");
        break;
      }
      if (absl::Status s = out->WriteAt(received, chunk.data()); !s.ok()) {
        local = s;
        break;
      }
      received += chunk.data().size();
    } else {
      local = absl::DataLossError("the daemon's answer is out of order");
      break;
    }
  }
  if (!local.ok()) ctx.TryCancel();
  if (grpc::Status s = stream->Finish(); !s.ok() && local.ok()) return FromGrpc(s, target_);
  if (!local.ok()) return local;
  if (!have_response) return absl::DataLossError("the daemon ended the call without an answer");
  if (response.report().files_size() > 0) {
    response.mutable_report()->mutable_files(0)->set_path(input);
  }
  if (!response.converted()) return response;  // nothing was linked: `out` vanishes
  if (received != response.output_size()) {
    return absl::DataLossError(absl::StrCat("the daemon announced ", response.output_size(),
                                            " bytes and sent ", received));
  }
  // The bytes come from the daemon we chose to trust; they are still checked like a worker's
  // before they get a name.
  if (absl::StatusOr<safetensors::Layout> layout = out->Validate(); !layout.ok()) {
    return absl::DataLossError(
        absl::StrCat("the daemon's output is not valid safetensors: ", layout.status().message()));
  }
  if (absl::Status s = out->Publish(options.replace()); !s.ok()) return s;
  v1::Conversion* c = response.mutable_report()->mutable_files(0)->mutable_conversion();
  c->set_output(output);
  if (!response.signature().empty()) {
    const std::string sig_path = app::SignaturePathFor(output);
    absl::Status written = [&]() -> absl::Status {
      // Beside the output, in the directory it was created in (opened once).
      absl::StatusOr<app::OutputFile> sig =
          app::OutputFile::CreateAt(out->dir_fd(), app::SignaturePathFor(out->name()), sig_path);
      if (!sig.ok()) return sig.status();
      if (absl::Status s = sig->WriteAt(0, response.signature()); !s.ok()) return s;
      return sig->Publish(options.replace());
    }();
    if (!written.ok()) {
      (void)out->Unpublish();  // a signed output is never left without its signature
      return absl::Status(written.code(),
                          absl::StrCat("the signature ", sig_path, " could not be written (",
                                       written.message(), "); the output was removed"));
    }
    c->set_signature(sig_path);
  }
  return response;
}

absl::StatusOr<v1::StatusResponse> RemoteClient::Status() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::StatusResponse response;
  if (grpc::Status s = admin_->Status(&ctx, {}, &response); !s.ok()) return FromGrpc(s, target_);
  return response;
}

absl::StatusOr<v1::MetricsResponse> RemoteClient::Metrics() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::MetricsResponse response;
  if (grpc::Status s = admin_->Metrics(&ctx, {}, &response); !s.ok()) return FromGrpc(s, target_);
  return response;
}

absl::StatusOr<v1::ReloadRulesResponse> RemoteClient::ReloadRules() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::ReloadRulesResponse response;
  if (grpc::Status s = admin_->ReloadRules(&ctx, {}, &response); !s.ok()) {
    return FromGrpc(s, target_);
  }
  return response;
}

absl::StatusOr<bool> RemoteClient::Health(const std::string& service, absl::Duration timeout) {
  std::unique_ptr<grpc::health::v1::Health::Stub> health =
      grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  if (grpc::Status s = health->Check(&ctx, request, &response); !s.ok()) {
    return FromGrpc(s, target_);
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::StatusOr<v1::PublicKeyResponse> RemoteClient::PublicKey() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::PublicKeyResponse response;
  if (grpc::Status s = admin_->PublicKey(&ctx, {}, &response); !s.ok()) {
    return FromGrpc(s, target_);
  }
  return response;
}

}  // namespace ckptscan::clients
