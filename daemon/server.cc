#include "daemon/server.h"

#include <dirent.h>
#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "app/paths.h"
#include "base/status_macros.h"
#include "daemon/log.h"
#include "daemon/upload.h"
#include "signing/keys.h"

#ifndef CKPT_VERSION
#error "CKPT_VERSION must be defined by the build (the CMake project version)"
#endif

namespace ckptscan::daemon {
namespace {

// mkdir -p with `mode` for the directories it creates; an existing last component must be a
// directory owned by us (a socket or key directory someone else controls is refused).
absl::Status MakePrivateDir(const std::string& path, mode_t mode) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", prefix));
    }
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(path + " is not a directory");
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " belongs to uid ", st.st_uid,
                                                      ", not to this daemon's uid ", ::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    // Another user could swap what it holds (the key, the spool, the socket) for their own.
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is writable by its group or by others (mode %04o); run chmod go-w on it", path,
        st.st_mode & 07777));
  }
  return absl::OkStatus();
}

// Job directories a crashed daemon left in the spool (uploads themselves are O_TMPFILE).
void CleanSpool(const std::string& spool) {
  DIR* dir = ::opendir(spool.c_str());
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind("job-", 0) != 0) continue;
    const std::string job = spool + "/" + name;
    for (const char* f : {"model.safetensors", "model.safetensors.sig"}) {
      (void)::unlink((job + "/" + f).c_str());
    }
    (void)::rmdir(job.c_str());
  }
  ::closedir(dir);
}

std::string KeyPath(const DaemonConfig& c) {
  return c.signing_key.empty() ? c.state_dir + "/signing-key.pem" : c.signing_key;
}

absl::StatusOr<signing::PrivateKey> LoadOrCreateKey(const DaemonConfig& c) {
  if (!c.signing_key.empty()) return signing::PrivateKey::LoadFile(c.signing_key);
  const std::string path = KeyPath(c);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return absl::ErrnoToStatus(errno, "stat " + path);
    absl::StatusOr<signing::PublicKey> pub =
        signing::GenerateKeyFiles(path, c.state_dir + "/signing-key.pub.pem");
    if (!pub.ok()) return pub.status();
    LogLine("signing_key").Str("generated", path).Str("hint", pub->hint()).Emit();
  }
  return signing::PrivateKey::LoadFile(path);
}

// The roots, each kept apart from the daemon's own files (a by-path call must never name them).
absl::StatusOr<std::unique_ptr<ConfinedRoots>> OpenRoots(const DaemonConfig& c) {
  if (c.roots.empty()) return nullptr;
  absl::StatusOr<ConfinedRoots> opened = ConfinedRoots::Open(c.roots);
  if (!opened.ok())
    return absl::Status(opened.status().code(),
                        absl::StrCat("--root: ", opened.status().message()));
  auto roots = std::make_unique<ConfinedRoots>(*std::move(opened));
  const std::string key_path = KeyPath(c);
  for (const auto& [what, path] :
       {std::pair<std::string_view, const std::string&>{"the state directory", c.state_dir},
        {"the spool directory", c.service.spool_dir},
        {"the signing key", key_path},
        {"the socket", c.socket}}) {
    if (c.no_socket && what == "the socket") continue;
    if (absl::Status s = roots->CheckApart(what, path); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--root: ", s.message()));
    }
  }
  return roots;
}

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  absl::StatusOr<std::string> text = signing::ReadSmallFile(path, 1u << 20, "1 MiB");
  if (!text.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", text.status().message()));
  }
  return text;
}

int Millis(absl::Duration d) {
  return static_cast<int>(std::min(absl::ToDoubleMilliseconds(d), 2e9));
}

// Messages of the libraries the daemon links become JSON log lines like its own (protobuf
// reports a request string that is not UTF-8, with the field's name, while the call is refused).
void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  // A request can make the libraries log (a string that is not UTF-8): rate limited as a caller.
  if (LogLimiter* limiter = LibraryLogLimiter(); limiter != nullptr && !limiter->Admit("library")) {
    return;
  }
  LogLine("library", level >= google::protobuf::LOGLEVEL_ERROR ? "error" : "warning")
      .Str("library", "protobuf")
      .Str("source", absl::StrCat(file, ":", line))
      .Str("message", message)
      .Emit();
}

void GrpcLog(gpr_log_func_args* args) {
  if (LogLimiter* limiter = LibraryLogLimiter(); limiter != nullptr && !limiter->Admit("library")) {
    return;
  }
  LogLine("library", args->severity == GPR_LOG_SEVERITY_ERROR  ? "error"
                     : args->severity == GPR_LOG_SEVERITY_INFO ? "info"
                                                               : "debug")
      .Str("library", "grpc")
      .Str("source", absl::StrCat(args->file, ":", args->line))
      .Str("message", args->message)
      .Emit();
}

}  // namespace

void RouteLibraryLogs() {
  google::protobuf::SetLogHandler(&ProtobufLog);
  gpr_set_log_function(&GrpcLog);
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(DaemonConfig config) {
  std::unique_ptr<Server> server(new Server(std::move(config)));
  CKPT_RETURN_IF_ERROR(server->Build());
  CKPT_RETURN_IF_ERROR(server->Listen());
  server->LogListening();
  return server;
}

Server::~Server() { SetLibraryLogLimiter(nullptr); }

absl::Status Server::Build() {
  // The jail first: a daemon that cannot jail its workers must not serve.
  absl::StatusOr<std::unique_ptr<app::Engine>> engine = app::Engine::Create(config_.engine);
  if (!engine.ok()) {
    if (absl::IsInvalidArgument(engine.status())) return engine.status();  // the rules
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to start: ", engine.status().message()));
  }
  engine_ = *std::move(engine);
  absl::StatusOr<std::string> layers = engine_->SelfTest();
  if (!layers.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to start: ", layers.status().message()));
  }
  jail_layers_ = *std::move(layers);
  CKPT_RETURN_IF_ERROR(MakePrivateDir(config_.state_dir, 0700));
  CKPT_RETURN_IF_ERROR(MakePrivateDir(config_.service.spool_dir, 0700));
  CleanSpool(config_.service.spool_dir);
  absl::StatusOr<signing::PrivateKey> key = LoadOrCreateKey(config_);
  if (!key.ok()) {
    return absl::Status(key.status().code(), absl::StrCat("signing key: ", key.status().message()));
  }
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ConfinedRoots> roots, OpenRoots(config_));
  slots_ = std::make_unique<JobSlots>(config_.max_running, config_.max_queued, config_.uploads,
                                      config_.max_jobs_per_caller, config_.reserved_job_places);
  metrics_ = std::make_shared<Metrics>(slots_.get());
  metrics_->BuildInfo(CKPT_VERSION);
  metrics_->RulesInForce(engine_->rules()->version(), /*reload=*/false);
  if (config_.metrics_port != 0) {
    const std::string& address = config_.metrics_address;
    const std::string bind =
        absl::StrCat(address.find(':') != std::string::npos ? "[" + address + "]" : address, ":",
                     config_.metrics_port);
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(bind, 1);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("--metrics-port: cannot listen on ", bind, ": ", e.what()));
    }
    exposer_->RegisterCollectable(metrics_);
  }
  daemon_ = std::make_unique<Daemon>(config_.service, engine_.get(), std::move(roots),
                                     *std::move(key), slots_.get(), metrics_.get());
  daemon_->stats().SetJailLayers(jail_layers_);
  SetLibraryLogLimiter(&daemon_->log_limiter());
  return absl::OkStatus();
}

absl::Status Server::Listen() {
  const DaemonConfig& c = config_;
  if (rlimit nofile{};
      !c.no_socket && ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 &&
      c.unix_limits.max_connections + 4 * slots_->max_running() + 64 > nofile.rlim_cur) {
    // Each connection holds a descriptor, each job a few, gRPC and the daemon about 64.
    LogLine("descriptor_limit", "warning")
        .Int("max_unix_connections", c.unix_limits.max_connections)
        .Int("soft", nofile.rlim_cur)
        .Str("warning", "--max-unix-connections is close to the descriptor limit: lower it")
        .Emit();
  }
  if (!c.no_socket) {
    const size_t slash = c.socket.rfind('/');
    if (slash != std::string::npos && slash > 0 && c.socket == app::DefaultSocketPath()) {
      CKPT_RETURN_IF_ERROR(MakePrivateDir(c.socket.substr(0, slash), 0755));
    }
    absl::StatusOr<std::unique_ptr<UnixListener>> bound =
        UnixListener::Bind(c.socket, c.socket_mode, c.unix_limits);
    if (!bound.ok()) {
      return absl::Status(bound.status().code(),
                          absl::StrCat("--socket: ", bound.status().message()));
    }
    listener_ = *std::move(bound);
    daemon_->SetListener(listener_.get());
  }

  grpc::EnableDefaultHealthCheckService(true);
  if (c.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  scanner_ = std::make_unique<ScannerService>(daemon_.get());
  admin_ = std::make_unique<AdminService>(daemon_.get());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, Millis(c.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             Millis(c.drain + absl::Seconds(1)));
  // Connections without a call in flight are closed after --max-connection-idle; a TCP one
  // must finish its TLS handshake within --first-byte-timeout (descriptors handed over from the
  // unix listener skip gRPC's handshakers, so the listener holds them back itself until the
  // HTTP/2 preface has arrived).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, Millis(c.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, Millis(c.first_byte_timeout));
  // Streams at once per connection, on every server: gRPC 1.51 leaves it unlimited.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(c.max_streams_per_connection));
  watch_guard_ = std::make_unique<ReflectionGuard>(c.health_watch_limits, kHealthWatchStreams);
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guards =
        watch_guard_->Factories();
    if (c.reflection) {
      reflection_guard_ = std::make_unique<ReflectionGuard>(c.reflection_limits);
      for (auto& f : reflection_guard_->Factories()) guards.push_back(std::move(f));
    }
    builder.experimental().SetInterceptorCreators(std::move(guards));
  }
  builder.RegisterService(scanner_.get());
  builder.RegisterService(admin_.get());
  // Chunks are at most 1 MiB of data; the margin is for the message framing.
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxChunkBytes + (64u << 10)));
  // Every call in flight holds a thread (synchronous API); the job slots bound the jobs and the
  // uploads in flight, this bounds the rest (health checks, admin calls, calls refused at once).
  grpc::ResourceQuota quota("ckptscand");
  quota.SetMaxThreads(
      static_cast<int>(slots_->max_running() + slots_->max_queued() + c.uploads.max_uploads + 64));
  // gRPC's own memory (connections, streams, buffers), bounded under pressure. It does not
  // bound a rapid-reset flood (HEADERS + RST_STREAM pairs: ~15 KB a pair stays; docs/security.md).
  quota.Resize(static_cast<size_t>(c.grpc_memory));
  builder.SetResourceQuota(quota);
  if (!c.tcp.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    CKPT_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(c.tls_cert));
    CKPT_ASSIGN_OR_RETURN(pair.private_key, ReadPem(c.tls_key));
    ssl.pem_key_cert_pairs.push_back(pair);
    if (!c.tls_client_ca.empty()) {
      CKPT_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(c.tls_client_ca));
    }
    ssl.client_certificate_request =
        c.require_client_cert     ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
        : c.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
    builder.AddListeningPort(c.tcp, grpc::SslServerCredentials(ssl), &tcp_port_);
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || (!c.tcp.empty() && tcp_port_ == 0)) {
    return absl::UnavailableError(
        absl::StrCat("could not start the gRPC server", c.tcp.empty() ? "" : " on ", c.tcp));
  }
  // Health alone, in plaintext: a server with no service of ours (the default health service
  // is added to every server built after EnableDefaultHealthCheckService).
  if (!c.health_tcp.empty()) {
    grpc::ServerBuilder health_builder;
    health_builder.AddListeningPort(c.health_tcp, grpc::InsecureServerCredentials(), &health_port_);
    // Unauthenticated: as bounded as the main server (streams per connection, Watch streams,
    // memory), with few threads (Check is answered at once).
    health_builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                      static_cast<int>(c.max_streams_per_connection));
    health_builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                                      Millis(c.max_connection_idle));
    health_builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, Millis(c.max_connection_age));
    health_builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                                      Millis(c.first_byte_timeout));
    health_builder.experimental().SetInterceptorCreators(watch_guard_->Factories());
    grpc::ResourceQuota health_quota("ckptscand-health");
    health_quota.SetMaxThreads(16);
    health_quota.Resize(static_cast<size_t>(c.grpc_memory / 4));
    health_builder.SetResourceQuota(health_quota);
    health_server_ = health_builder.BuildAndStart();
    if (health_server_ == nullptr || health_port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("could not serve health on ", c.health_tcp, " (--health-tcp)"));
    }
  }
  healths_ = {server_->GetHealthCheckService()};
  if (health_server_ != nullptr) healths_.push_back(health_server_->GetHealthCheckService());
  for (grpc::HealthCheckServiceInterface* health : healths_) {
    for (const char* service : {"", "ckptscan.v1.Scanner", "ckptscan.v1.Admin"}) {
      health->SetServingStatus(service, true);
    }
  }
  if (listener_ != nullptr) listener_->Start(server_.get());
  return absl::OkStatus();
}

void Server::LogListening() const {
  const DaemonConfig& c = config_;
  LogLine ready("listening");
  ready.Str("version", CKPT_VERSION).Int("pid", static_cast<uint64_t>(::getpid()));
  if (listener_ != nullptr) ready.Str("socket", c.socket);
  if (tcp_port_ != 0) {
    ready.Str("tcp", c.tcp)
        .Int("tcp_port", static_cast<uint64_t>(tcp_port_))
        .Bool("mtls", c.require_client_cert);
  }
  if (exposer_ != nullptr) {
    ready.Str("metrics", absl::StrCat(c.metrics_address, ":", exposer_->GetListeningPorts().at(0)));
  }
  if (health_port_ != 0) {
    ready.Str("health_tcp", c.health_tcp).Int("health_port", static_cast<uint64_t>(health_port_));
  }
  std::vector<std::string> root_list;
  if (daemon_->roots() != nullptr) root_list = daemon_->roots()->roots();
  ready.Str("roots", absl::StrJoin(root_list, ":"))
      .Str("rules_version", engine_->rules()->version())
      .Str("rules", engine_->rules_source())
      .Str("signer", daemon_->key().public_key().hint())
      .Int("max_running", slots_->max_running())
      .Int("max_queued", slots_->max_queued())
      .Int("max_jobs_per_caller", slots_->max_jobs_per_caller())
      .Int("reserved_job_places", slots_->reserved_job_places())
      .Int("reserved_uploads", c.uploads.reserved_uploads)
      .Int("max_uploads", c.uploads.max_uploads)
      .Int("max_uploads_per_caller", c.uploads.max_uploads_per_caller)
      .Int("max_spool_bytes", c.uploads.max_spool_bytes)
      .Num("max_output_expansion", c.service.max_output_expansion)
      .Int("max_streams_per_connection", c.max_streams_per_connection)
      .Int("grpc_memory", c.grpc_memory)
      .Int("max_health_watches", c.health_watch_limits.max_streams)
      .Int("max_output_bytes", c.service.max_output_bytes)
      .Num("upload_idle_timeout", absl::ToDoubleSeconds(c.service.upload_idle_timeout))
      .Num("output_idle_timeout", absl::ToDoubleSeconds(c.service.output_idle_timeout))
      .Int("facts_memory", engine_->facts_memory())
      .Int("max_unix_connections", c.unix_limits.max_connections)
      .Int("max_unix_connections_per_uid", c.unix_limits.max_connections_per_uid)
      .Int("unix_connections_reserved", c.unix_limits.reserved)
      .Str("jail", jail_layers_)
      .Emit();
}

void Server::Serve(const sigset_t& signals) {
  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      (void)ReloadRules(daemon_.get(), "SIGHUP");
      continue;
    }
    break;
  }
  Drain();
}

void Server::Drain() {
  // Probes see NOT_SERVING, no new job is admitted, no new connection is accepted; running jobs
  // get the grace period, then the calls still open are cancelled (which kills their workers).
  const absl::Time drain_start = absl::Now();
  LogLine("draining")
      .Int("running", slots_->counts().running)
      .Int("queued", slots_->counts().queued)
      .Num("grace_seconds", absl::ToDoubleSeconds(config_.drain))
      .Emit();
  for (grpc::HealthCheckServiceInterface* health : healths_) health->Shutdown();
  slots_->Drain();
  if (listener_ != nullptr) listener_->Stop();
  const bool idle = slots_->WaitIdle(absl::ToInt64Milliseconds(config_.drain));
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  if (health_server_ != nullptr) {
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_->Wait();
  }
  LogLine("stopped")
      .Bool("drained", idle)
      .Num("ms", absl::ToDoubleMilliseconds(absl::Now() - drain_start))
      .Emit();
}

}  // namespace ckptscan::daemon
