// ckptscand: the scanning daemon model hubs call (docs/daemon.md). Serves the Scanner and Admin
// services (proto/ckptscan/v1/scanner.proto), gRPC health checking and, with --reflection,
// server reflection, on a unix socket (default) and/or TCP with TLS.
//
// With no flags it runs as is on a laptop: a per-user socket, the built-in rules, a signing key
// generated on first start in the state directory, uploads only (by-path calls need --root).
//
// Signals: SIGTERM/SIGINT drain (health NOT_SERVING, no new job, running jobs get
// --drain-seconds to finish, then the process exits 0); SIGHUP reloads the rules (a bad file
// leaves the old rules in force). They are blocked before any thread starts and taken by
// sigwait in main; gRPC threads never see them.

#include <dirent.h>
#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>
#include <prometheus/exposer.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "app/paths.h"
#include "base/size_value.h"
#include "base/strings.h"
#include "base/unique_fd.h"
#include "daemon/confine.h"
#include "daemon/job_slots.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/reflection_guard.h"
#include "daemon/service.h"
#include "daemon/unix_listener.h"
#include "protocol/job.h"
#include "protocol/protocol.h"
#include "trusted/availability.h"
#include "trusted/facts_budget.h"
#include "trusted/jailed_scan.h"
#include "trusted/signing/keys.h"
#include "trusted/spawner.h"

#ifndef CKPT_VERSION
#error "CKPT_VERSION must be defined by the build (the CMake project version)"
#endif

namespace ckptscan::daemon {
namespace {

// Stack size of every thread the daemon starts (see main).
constexpr size_t kThreadStackBytes = 2 << 20;

using base::AbslView;

struct Flags {
  std::string socket;
  std::string socket_mode = "0660";
  bool no_socket = false;
  std::string tcp;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool require_client_cert = false;
  std::vector<uint32_t> admin_uids;
  std::vector<std::string> admin_identities;
  std::vector<uint32_t> path_uids;
  std::vector<std::string> roots;
  std::string rules;
  std::string rules_overlay;
  std::vector<std::string> allow;
  std::string signing_key;
  std::string state_dir;
  std::string spool_dir;
  std::string worker;
  uint32_t max_running = 0;
  uint32_t max_queued = 0;
  double job_timeout = 60;
  std::string worker_memory = "8G";
  std::string max_sealed_copy = "4G";
  std::string jail_spawn = "fork-server";
  std::string max_upload = "64G";
  double drain_seconds = 30;
  bool reflection = false;
  std::string scan_digest = "request";
  std::string sign_method = "files";
  std::string health_tcp;
  double max_connection_age = 300;
  double max_connection_idle = 120;
  uint32_t max_unix_connections = 256;
  uint32_t max_unix_connections_per_uid = 0;  // 0: a quarter of max_unix_connections, at least 1
  int64_t unix_connections_reserved = -1;     // -1: a sixteenth of max_unix_connections
  double first_byte_timeout = 30;
  std::string max_frame_bytes = "64M";
  uint64_t max_frame_values = sandbox::kMaxFrameValues;
  std::string facts_memory = "2G";
  uint32_t max_reflection_streams = 4;
  double reflection_stream_seconds = 10;
  uint32_t metrics_port = 0;
  std::string metrics_address = "127.0.0.1";
};

// Uploads (issue 18): what the uploads in flight may hold, and how long a stream may stall; and
// the job places one caller may hold (its uploads' bucket).
struct UploadFlags {
  double idle_timeout = 30;
  double output_idle_timeout = 30;
  uint32_t max_uploads = 0;             // 0: --max-running + --max-queued
  uint32_t max_uploads_per_caller = 0;  // 0: half of --max-uploads, rounded up
  uint32_t max_jobs_per_caller = 0;     // 0: half of --max-running + --max-queued, rounded up
  std::string max_spool;                // empty: 4 x --max-upload-bytes
};

void AddUploadFlags(CLI::App& app, UploadFlags* u) {
  app.add_option("--upload-idle-timeout", u->idle_timeout,
                 "Seconds an upload may send nothing before its call is cancelled "
                 "(DEADLINE_EXCEEDED) and its spool file dropped")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--output-idle-timeout", u->output_idle_timeout,
                 "Seconds a chunk of ConvertUpload's output may wait for the caller to take it "
                 "before the call is cancelled (DEADLINE_EXCEEDED), freeing its job slot")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--max-uploads", u->max_uploads,
                 "Uploads streaming in at once (they hold no job place until complete); past "
                 "it RESOURCE_EXHAUSTED (default: --max-running + --max-queued)")
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--max-uploads-per-caller", u->max_uploads_per_caller,
                 "Of them, from one caller (a uid, a client certificate; callers without an "
                 "identity share one bucket, \"anonymous\"); past it RESOURCE_EXHAUSTED "
                 "(default: half of --max-uploads, rounded up)")
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--max-jobs-per-caller", u->max_jobs_per_caller,
                 "Job places (running + queued) one caller holds at once, by the same identity "
                 "as --max-uploads-per-caller; past it RESOURCE_EXHAUSTED (default: half of "
                 "--max-running + --max-queued, rounded up; at or above their sum, one caller "
                 "may take every place)")
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--max-spool-bytes", u->max_spool,
                 "Upload bytes spooled at once, daemon-wide (suffix K, M, G, T); past it "
                 "RESOURCE_EXHAUSTED (default: 4 x --max-upload-bytes)")
      ->type_name("SIZE");
}

// The upload flags applied: the timeouts to `options`, the limits (defaults derived from the
// job places and --max-upload-bytes) returned.
absl::StatusOr<UploadLimits> ApplyUploadFlags(const UploadFlags& u, uint32_t job_places,
                                              ServiceOptions* options) {
  options->upload_idle_timeout = absl::Seconds(u.idle_timeout);
  options->output_idle_timeout = absl::Seconds(u.output_idle_timeout);
  UploadLimits limits;
  limits.max_uploads = u.max_uploads != 0 ? u.max_uploads : std::max(1u, job_places);
  limits.max_uploads_per_caller =
      u.max_uploads_per_caller != 0 ? u.max_uploads_per_caller : (limits.max_uploads + 1) / 2;
  limits.max_spool_bytes =
      options->max_upload_bytes > (~0ull >> 2) ? ~0ull : 4 * options->max_upload_bytes;
  if (!u.max_spool.empty()) {
    absl::StatusOr<uint64_t> spool = base::ParseSize(u.max_spool);
    if (!spool.ok() || *spool == 0) {
      return absl::InvalidArgumentError("--max-spool-bytes: not a positive size");
    }
    if (*spool < options->max_upload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-spool-bytes ", *spool, " is below --max-upload-bytes ", options->max_upload_bytes,
          ": the largest upload allowed could never be spooled"));
    }
    limits.max_spool_bytes = *spool;
  }
  return limits;
}

int Fail(std::string_view message) {
  LogLine("startup", "error").Str("error", message).Emit();
  std::fprintf(stderr, "ckptscand: %.*s\n", static_cast<int>(message.size()), message.data());
  return 1;
}

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

absl::StatusOr<signing::PrivateKey> LoadOrCreateKey(const std::string& flag,
                                                    const std::string& state_dir) {
  if (!flag.empty()) return signing::PrivateKey::LoadFile(flag);
  const std::string path = state_dir + "/signing-key.pem";
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return absl::ErrnoToStatus(errno, "stat " + path);
    absl::StatusOr<signing::PublicKey> pub =
        signing::GenerateKeyFiles(path, state_dir + "/signing-key.pub.pem");
    if (!pub.ok()) return pub.status();
    LogLine("signing_key").Str("generated", path).Str("hint", pub->hint()).Emit();
  }
  return signing::PrivateKey::LoadFile(path);
}

// A job on a one-opcode pickle before serving: the jail works here, and which layers it has.
absl::StatusOr<std::string> CheckJail(const pipeline::JailOptions& jail) {
  base::UniqueFd fd(::memfd_create("ckptscand-selftest", MFD_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "memfd_create");
  constexpr std::string_view kNone = "\x80\x02N.";  // pickle.dumps(None, 2)
  if (absl::Status s = base::WriteAll(fd.get(), kNone); !s.ok()) return s;
  pipeline::JailedRun run =
      pipeline::RunJailedJob(std::move(fd), kNone.size(), worker::v1::Job::MODE_SCAN, {}, jail);
  if (!run.result.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the jail self-test failed: ", run.result.message));
  }
  return sandbox::DescribeLayers(run.layers);
}

std::string ReadFileOr(const std::string& path, absl::Status* status) {
  absl::StatusOr<std::string> text = signing::ReadSmallFile(path, 1u << 20, "1 MiB");
  if (!text.ok()) {
    *status = absl::FailedPreconditionError(absl::StrCat(path, ": ", text.status().message()));
    return "";
  }
  return *std::move(text);
}

// Messages of the libraries the daemon links become JSON log lines like its own: protobuf
// reports a request string that is not UTF-8 while the call is refused, with the field's name.
void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  const bool error = level >= google::protobuf::LOGLEVEL_ERROR;
  LogLine("library", error ? "error" : "warning")
      .Str("library", "protobuf")
      .Str("source", absl::StrCat(file, ":", line))
      .Str("message", message)
      .Emit();
}

void GrpcLog(gpr_log_func_args* args) {
  LogLine("library", args->severity == GPR_LOG_SEVERITY_ERROR  ? "error"
                     : args->severity == GPR_LOG_SEVERITY_INFO ? "info"
                                                               : "debug")
      .Str("library", "grpc")
      .Str("source", absl::StrCat(args->file, ":", args->line))
      .Str("message", args->message)
      .Emit();
}

// Raises the soft descriptor limit to the hard one (systemd starts services at 1024 soft, and
// every connection and job holds descriptors), and logs both.
void RaiseDescriptorLimit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t before = lim.rlim_cur;
  if (lim.rlim_cur != lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) lim.rlim_cur = before;
  }
  LogLine("descriptor_limit")
      .Int("soft_at_start", before)
      .Int("soft", lim.rlim_cur)
      .Int("hard", lim.rlim_max)
      .Emit();
}

int Run(int argc, char** argv) {
  google::protobuf::SetLogHandler(&ProtobufLog);
  gpr_set_log_function(&GrpcLog);
  // Before any thread exists, so that every thread inherits the mask and sigwait below is the
  // only taker.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  RaiseDescriptorLimit();
  // glibc gives every thread that allocates an arena of its own; with a thread per call in
  // flight that is resident memory that grows with the peak concurrency ever seen and is never
  // returned. Two arenas keep RSS flat (bench/README.md, "Daemon load").
  ::mallopt(M_ARENA_MAX, 2);
  // Threads get 2 MiB stacks instead of glibc's default (RLIMIT_STACK, usually 8 MiB): the
  // handlers do not recurse, and a thread per call in flight then reserves a quarter of the
  // address space. Under a tight address-space limit (RLIMIT_AS, docs/operations.md) an 8 MiB
  // stack per thread is what ran out first, and gRPC does not survive a thread it cannot
  // create (tests/faults/daemon_faults_test.py, scenario B).
  {
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) == 0) {
      pthread_attr_setstacksize(&attr, kThreadStackBytes);
      pthread_setattr_default_np(&attr);
      pthread_attr_destroy(&attr);
    }
  }

  Flags f;
  CLI::App app{
      "ckptscand: the ckptscan daemon. Scans and converts PyTorch checkpoints for model hubs "
      "over gRPC (Scanner and Admin services, docs/daemon.md); every file is parsed in a "
      "jailed worker.\nWith no flags: a per-user socket, built-in rules, a signing key created "
      "on first start; uploads only."};
  app.set_config("--config", "",
                 "Configuration file (TOML: the flags' long names as keys, e.g. "
                 "max-running = 4, root = [\"/srv/models\"]); flags given on the command "
                 "line win; an unknown key is an error");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--socket", f.socket, "Unix socket to listen on")
      ->type_name("PATH")
      ->default_str(app::DefaultSocketPath());
  app.add_option("--socket-mode", f.socket_mode, "The socket's permission bits (octal)")
      ->capture_default_str();
  app.add_flag("--no-socket", f.no_socket, "No unix socket (TCP with TLS only)");
  app.add_option("--tcp", f.tcp, "Also listen on HOST:PORT, with TLS (--tls-cert, --tls-key)")
      ->type_name("HOST:PORT");
  app.add_option("--tls-cert", f.tls_cert, "PEM certificate chain for --tcp")->type_name("FILE");
  app.add_option("--tls-key", f.tls_key, "PEM private key for --tcp")->type_name("FILE");
  app.add_option("--tls-client-ca", f.tls_client_ca,
                 "PEM CA certificates that client certificates are verified against")
      ->type_name("FILE");
  app.add_flag("--require-client-cert", f.require_client_cert,
               "mTLS: refuse TCP clients without a certificate from --tls-client-ca");
  app.add_option("--admin-uid", f.admin_uids,
                 "A uid allowed to call Admin over the unix socket (repeatable; default: "
                 "this daemon's uid and root)")
      ->type_name("UID");
  app.add_option("--admin-identity", f.admin_identities,
                 "A client certificate allowed to call Admin over mTLS, typed: uri:, dns:, "
                 "email: or ip: for a subject alternative name of that type, cn: for the "
                 "common name (repeatable)")
      ->type_name("TYPE:NAME");
  app.add_option("--path-uid", f.path_uids,
                 "A uid allowed to make by-path calls (ScanPath, ConvertPath) over the unix "
                 "socket; they read and write with this daemon's rights (repeatable; default: "
                 "this daemon's uid and root; other uids upload)")
      ->type_name("UID");
  app.add_option("--root", f.roots,
                 "A directory by-path calls may name (repeatable); files are opened beneath it "
                 "only (openat2 RESOLVE_BENEATH)")
      ->type_name("DIR");
  app.add_option("--rules", f.rules, "Rules file instead of the built-in rules (reloadable)")
      ->type_name("FILE");
  app.add_option("--rules-overlay", f.rules_overlay,
                 "Local rules merged onto the rules in force (allow and deny entries added, "
                 "none changed; may not allow a name the rules grade DANGEROUS); reloadable")
      ->type_name("FILE");
  app.add_option("--allow", f.allow,
                 "Trust one more global (MODULE.NAME or MODULE:QUALNAME), as "
                 "torch's add_safe_globals does; refused for names the rules grade DANGEROUS "
                 "(repeatable)")
      ->type_name("MODULE.NAME");
  app.add_option("--signing-key", f.signing_key,
                 "PEM private key that signs conversions (mode 0600 or stricter; default: "
                 "STATE_DIR/signing-key.pem, created on first start)")
      ->type_name("FILE");
  app.add_option("--state-dir", f.state_dir, "Where the generated key and the spool live")
      ->type_name("DIR")
      ->default_str(app::DefaultStateDir());
  app.add_option("--spool-dir", f.spool_dir,
                 "Where uploads are spooled, as unlinked files (default: STATE_DIR/spool)")
      ->type_name("DIR");
  app.add_option("--worker", f.worker,
                 "The ckptscan-worker binary (default: the one next to ckptscand)")
      ->type_name("PATH");
  app.add_option("--max-running", f.max_running, "Jobs at once (default: one per core)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--max-queued", f.max_queued,
                 "Jobs waiting for a slot; past them RESOURCE_EXHAUSTED (default: 4 per "
                 "running slot)")
      ->check(CLI::Range(0u, 65536u));
  app.add_option("--job-timeout", f.job_timeout, "Wall-clock limit per file, in seconds")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--worker-memory", f.worker_memory,
                 "Address-space limit of a worker (suffix K, M, G, T)")
      ->capture_default_str();
  app.add_option("--max-sealed-copy-bytes", f.max_sealed_copy,
                 "Largest file by path copied into sealed memory when it cannot be pinned "
                 "with a read lease (suffix K, M, G, T); a larger one is ERROR")
      ->capture_default_str();
  app.add_option("--jail-spawn", f.jail_spawn,
                 "How each jailed worker process is made: fork-server (forked by a jailed helper "
                 "that set up the namespaces and the seccomp filter once; one helper per CPU, "
                 "started before serving) or per-job (a posix_spawn of the worker per "
                 "file)")
      ->check(CLI::IsMember({"fork-server", "per-job"}))
      ->capture_default_str();
  app.add_option("--max-upload-bytes", f.max_upload,
                 "Largest upload (suffix K, M, G, T); past it RESOURCE_EXHAUSTED")
      ->capture_default_str();
  app.add_option("--drain-seconds", f.drain_seconds,
                 "On SIGTERM, how long running jobs may take to finish")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--scan-digest", f.scan_digest,
                 "Whether scan reports carry the input's SHA-256: request (as each request's "
                 "ScanOptions.skip_digest says), always (every scan: provenance) or never "
                 "(throughput; a digest costs a read of every byte). Conversions always hash")
      ->check(CLI::IsMember({"request", "always", "never"}))
      ->capture_default_str();
  app.add_flag("--reflection", f.reflection, "Serve gRPC server reflection");
  app.add_option("--health-tcp", f.health_tcp,
                 "Also serve gRPC health checking alone, in plaintext, on HOST:PORT (for probes "
                 "where the main port requires mTLS); nothing else is served there")
      ->type_name("HOST:PORT");
  app.add_option("--metrics-port", f.metrics_port,
                 "Serve Prometheus metrics (text format, /metrics) on this port; 0: off (they "
                 "are always available from `ckptscan admin metrics`)")
      ->check(CLI::Range(0u, 65535u))
      ->capture_default_str();
  app.add_option("--metrics-address", f.metrics_address,
                 "Address the metrics port binds to (loopback unless changed)")
      ->capture_default_str();
  app.add_option("--max-connection-age", f.max_connection_age,
                 "Seconds after which a client connection is asked to reconnect (GOAWAY), so "
                 "that new replicas get traffic; calls in flight get --drain-seconds to finish")
      ->check(CLI::Range(1.0, 86400.0 * 365))
      ->capture_default_str();
  app.add_option("--max-connection-idle", f.max_connection_idle,
                 "Seconds after which a connection with no call in flight is closed (unix and "
                 "TCP)")
      ->check(CLI::Range(0.1, 86400.0 * 365))
      ->capture_default_str();
  app.add_option("--max-unix-connections", f.max_unix_connections,
                 "Unix socket connections at once; one more is closed at accept (keep it well "
                 "under the descriptor limit)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--max-unix-connections-per-uid", f.max_unix_connections_per_uid,
                 "Unix socket connections one uid may hold at once (silent or not); one more "
                 "of that uid displaces its oldest silent one or is closed at accept "
                 "(default: a quarter of "
                 "--max-unix-connections, at least 1)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--unix-connections-reserved", f.unix_connections_reserved,
                 "Unix socket connections only this daemon's uid, root and the --admin-uid uids "
                 "may take: other uids together hold at most --max-unix-connections minus this "
                 "(default: a sixteenth of --max-unix-connections; under it)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--first-byte-timeout", f.first_byte_timeout,
                 "Seconds a new connection may take to send the HTTP/2 client preface (unix) "
                 "or to finish its TLS handshake (TCP) before it is closed")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--max-frame-bytes", f.max_frame_bytes,
                 "Largest result frame a job's worker may send (its facts, serialized; suffix K, "
                 "M; at most 64M); past it the file is ERROR, limit max_frame_bytes")
      ->capture_default_str();
  app.add_option("--max-frame-values", f.max_frame_values,
                 "Most values (graph nodes, globals, ...; 16 list items count as one) one job's "
                 "facts may hold (each costs ~400 bytes decoded); past it ERROR, limit "
                 "max_frame_values")
      ->check(CLI::Range(uint64_t{1}, sandbox::kMaxFrameValues))
      ->capture_default_str();
  app.add_option("--facts-memory", f.facts_memory,
                 "Memory for decoding workers' results, shared by all jobs (estimated: the frame "
                 "plus ~400 bytes a value); a job waits for room, and one larger than all of it "
                 "is ERROR, limit facts_memory")
      ->capture_default_str();
  app.add_option("--max-reflection-streams", f.max_reflection_streams,
                 "With --reflection: reflection streams at once; one more is cancelled")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--reflection-stream-seconds", f.reflection_stream_seconds,
                 "With --reflection: how long a reflection stream may stay open")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--sign-method", f.sign_method, "How conversions are signed: files or shards")
      ->check(CLI::IsMember({"files", "shards"}))
      ->capture_default_str();
  UploadFlags upload_flags;
  AddUploadFlags(app, &upload_flags);
  app.set_version_flag("--version", std::string("ckptscand ") + CKPT_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 64;
  }

  ServiceOptions options;
  options.scanner_version = CKPT_VERSION;
  if (f.socket.empty()) f.socket = app::DefaultSocketPath();
  if (f.state_dir.empty()) f.state_dir = app::DefaultStateDir();
  if (f.spool_dir.empty()) f.spool_dir = f.state_dir + "/spool";
  uint32_t mode = 0;
  if (!absl::numbers_internal::safe_strtou32_base(f.socket_mode, &mode, 8) || mode > 0777) {
    return Fail(absl::StrCat("--socket-mode ", f.socket_mode, ": not an octal mode"));
  }
  absl::StatusOr<uint64_t> memory = base::ParseSize(f.worker_memory);
  absl::StatusOr<uint64_t> upload = base::ParseSize(f.max_upload);
  if (!memory.ok() || *memory == 0) return Fail("--worker-memory: not a positive size");
  if (!upload.ok() || *upload == 0) return Fail("--max-upload-bytes: not a positive size");
  absl::StatusOr<uint64_t> max_copy = base::ParseSize(f.max_sealed_copy);
  if (!max_copy.ok()) return Fail("--max-sealed-copy-bytes: not a size");
  options.max_upload_bytes = *upload;
  options.scan_digest = f.scan_digest == "always"  ? ServiceOptions::ScanDigest::kAlways
                        : f.scan_digest == "never" ? ServiceOptions::ScanDigest::kNever
                                                   : ServiceOptions::ScanDigest::kRequest;
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint32_t max_running = f.max_running != 0 ? f.max_running : cores;
  const uint32_t max_queued = app.count("--max-queued") > 0 ? f.max_queued : 4 * max_running;
  absl::StatusOr<UploadLimits> upload_limits =
      ApplyUploadFlags(upload_flags, max_running + max_queued, &options);
  if (!upload_limits.ok()) return Fail(base::StdView(upload_limits.status().message()));
  // One caller may hold half the job places: another caller always finds one free.
  const uint32_t max_jobs_per_caller =
      upload_flags.max_jobs_per_caller != 0
          ? upload_flags.max_jobs_per_caller
          : std::max(1u, static_cast<uint32_t>((uint64_t{max_running} + max_queued + 1) / 2));
  absl::StatusOr<uint64_t> frame_bytes = base::ParseSize(f.max_frame_bytes);
  if (!frame_bytes.ok() || *frame_bytes == 0 || *frame_bytes > sandbox::kMaxFrameBytes) {
    return Fail(absl::StrCat("--max-frame-bytes: not a size from 1 to ", sandbox::kMaxFrameBytes));
  }
  absl::StatusOr<uint64_t> facts_memory = base::ParseSize(f.facts_memory);
  if (!facts_memory.ok() || *facts_memory == 0) {
    return Fail("--facts-memory: not a positive size");
  }
  if (f.no_socket && f.tcp.empty()) return Fail("--no-socket needs --tcp: nothing to listen on");
  if (!f.tcp.empty() && (f.tls_cert.empty() || f.tls_key.empty())) {
    return Fail("--tcp needs --tls-cert and --tls-key: TCP is served with TLS only");
  }
  if (f.require_client_cert && f.tls_client_ca.empty()) {
    return Fail("--require-client-cert needs --tls-client-ca to verify certificates against");
  }
  options.admin_uids.insert(::geteuid());
  options.admin_uids.insert(0);
  if (!f.admin_uids.empty()) options.admin_uids = {f.admin_uids.begin(), f.admin_uids.end()};
  for (const std::string& id : f.admin_identities) {
    absl::StatusOr<std::string> typed = ParseIdentity(id);
    if (!typed.ok()) return Fail(absl::StrCat("--admin-identity: ", typed.status().message()));
    options.admin_identities.insert(*std::move(typed));
  }
  options.path_uids = {::geteuid(), 0};
  // Never locked out of the unix socket by other uids: the daemon's, root and the Admin uids.
  UnixListenerLimits unix_limits;
  unix_limits.max_connections = f.max_unix_connections;
  unix_limits.first_byte_timeout = absl::Seconds(f.first_byte_timeout);
  unix_limits.max_connections_per_uid = f.max_unix_connections_per_uid != 0
                                            ? f.max_unix_connections_per_uid
                                            : std::max(1u, f.max_unix_connections / 4);
  unix_limits.reserved = f.unix_connections_reserved >= 0
                             ? static_cast<uint32_t>(f.unix_connections_reserved)
                             : f.max_unix_connections / 16;
  unix_limits.privileged_uids = {::geteuid(), 0};
  unix_limits.privileged_uids.insert(options.admin_uids.begin(), options.admin_uids.end());
  if (unix_limits.max_connections_per_uid > f.max_unix_connections) {
    return Fail("--max-unix-connections-per-uid: above --max-unix-connections");
  }
  if (unix_limits.reserved >= f.max_unix_connections) {
    return Fail("--unix-connections-reserved: must be under --max-unix-connections");
  }
  if (!f.path_uids.empty()) options.path_uids = {f.path_uids.begin(), f.path_uids.end()};
  options.sign_method =
      f.sign_method == "shards" ? signing::Method::kShards : signing::Method::kFiles;

  // The jail first: a daemon that cannot jail its workers must not serve.
  if (absl::Status s = sandbox::CheckSeccompAvailable(); !s.ok()) {
    return Fail(absl::StrCat("refusing to start: ", s.message()));
  }
  absl::StatusOr<std::string> worker = sandbox::FindWorkerBinary(f.worker);
  if (!worker.ok()) return Fail(absl::StrCat("refusing to start: ", worker.status().message()));
  options.jail.worker_path = *worker;
  options.jail.timeout = absl::Seconds(f.job_timeout);
  options.jail.worker_memory = *memory;
  options.jail.max_frame_bytes = *frame_bytes;
  options.jail.max_frame_values = f.max_frame_values;
  pipeline::FactsBudget facts_budget(*facts_memory);
  options.jail.max_sealed_copy_bytes = *max_copy;
  options.jail.spawn_mode = f.jail_spawn == "per-job" ? sandbox::SpawnMode::kSpawnPerJob
                                                      : sandbox::SpawnMode::kForkServer;
  // Every fork-server helper (one per CPU) is started here, before any thread serves.
  if (options.jail.spawn_mode == sandbox::SpawnMode::kForkServer) {
    if (absl::Status s = sandbox::ForkServer::StartShared(options.jail.worker_path); !s.ok()) {
      return Fail(absl::StrCat("refusing to start: the fork servers: ", s.message()));
    }
  }
  absl::StatusOr<std::string> layers = CheckJail(options.jail);
  options.jail.facts_budget = &facts_budget;
  if (!layers.ok()) return Fail(absl::StrCat("refusing to start: ", layers.status().message()));

  if (absl::Status s = MakePrivateDir(f.state_dir, 0700); !s.ok()) return Fail(s.ToString());
  if (absl::Status s = MakePrivateDir(f.spool_dir, 0700); !s.ok()) return Fail(s.ToString());
  CleanSpool(f.spool_dir);
  options.spool_dir = f.spool_dir;
  absl::StatusOr<signing::PrivateKey> key = LoadOrCreateKey(f.signing_key, f.state_dir);
  if (!key.ok()) return Fail(absl::StrCat("signing key: ", key.status().message()));
  absl::StatusOr<std::unique_ptr<RulesHolder>> rules =
      RulesHolder::Load({f.rules, f.rules_overlay, f.allow});
  if (!rules.ok()) return Fail(std::string(rules.status().message()));
  std::unique_ptr<ConfinedRoots> roots;
  if (!f.roots.empty()) {
    absl::StatusOr<ConfinedRoots> opened = ConfinedRoots::Open(f.roots);
    if (!opened.ok()) return Fail(absl::StrCat("--root: ", opened.status().message()));
    roots = std::make_unique<ConfinedRoots>(*std::move(opened));
    const std::string key_path =
        f.signing_key.empty() ? f.state_dir + "/signing-key.pem" : f.signing_key;
    for (const auto& [what, path] :
         {std::pair<std::string_view, const std::string&>{"the state directory", f.state_dir},
          {"the spool directory", f.spool_dir},
          {"the signing key", key_path},
          {"the socket", f.socket}}) {
      if (f.no_socket && what == "the socket") continue;
      if (absl::Status s = roots->CheckApart(what, path); !s.ok()) {
        return Fail(absl::StrCat("--root: ", s.message()));
      }
    }
  }
  JobSlots slots(max_running, max_queued, *upload_limits, max_jobs_per_caller);
  const std::string rules_version = (*rules)->Get()->version();
  const std::string rules_source = (*rules)->source();
  const std::shared_ptr<Metrics> metrics = std::make_shared<Metrics>(&slots);
  std::unique_ptr<prometheus::Exposer> exposer;
  if (f.metrics_port != 0) {
    const std::string bind = absl::StrCat(f.metrics_address.find(':') != std::string::npos
                                              ? "[" + f.metrics_address + "]"
                                              : f.metrics_address,
                                          ":", f.metrics_port);
    try {
      exposer = std::make_unique<prometheus::Exposer>(bind, 1);
    } catch (const std::exception& e) {
      return Fail(absl::StrCat("--metrics-port: cannot listen on ", bind, ": ", e.what()));
    }
    exposer->RegisterCollectable(metrics);
  }
  Daemon daemon(options, *std::move(rules), std::move(roots), *std::move(key), &slots,
                metrics.get());
  daemon.stats().SetJailLayers(*layers);

  std::unique_ptr<UnixListener> listener;
  if (rlimit nofile{}; !f.no_socket && ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 &&
                       f.max_unix_connections + 4 * slots.max_running() + 64 > nofile.rlim_cur) {
    // Each connection holds a descriptor, each job a few, gRPC and the daemon about 64.
    LogLine("descriptor_limit", "warning")
        .Int("max_unix_connections", f.max_unix_connections)
        .Int("soft", nofile.rlim_cur)
        .Str("warning", "--max-unix-connections is close to the descriptor limit: lower it")
        .Emit();
  }
  if (!f.no_socket) {
    const size_t slash = f.socket.rfind('/');
    if (slash != std::string::npos && slash > 0 && f.socket == app::DefaultSocketPath()) {
      if (absl::Status s = MakePrivateDir(f.socket.substr(0, slash), 0755); !s.ok()) {
        return Fail(s.ToString());
      }
    }
    absl::StatusOr<std::unique_ptr<UnixListener>> bound =
        UnixListener::Bind(f.socket, static_cast<mode_t>(mode), unix_limits);
    if (!bound.ok()) return Fail(absl::StrCat("--socket: ", bound.status().message()));
    listener = *std::move(bound);
    daemon.SetListener(listener.get());
  }

  grpc::EnableDefaultHealthCheckService(true);
  if (f.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ScannerService scanner(&daemon);
  AdminService admin(&daemon);
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             static_cast<int>(std::min(f.max_connection_age * 1000, 2e9)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             static_cast<int>(std::min(f.drain_seconds * 1000 + 1000, 2e9)));
  // Connections without a call in flight are closed after --max-connection-idle; a TCP one
  // must finish its TLS handshake within --first-byte-timeout (descriptors handed over from the
  // unix listener skip gRPC's handshakers, so the listener holds them back itself until the
  // HTTP/2 preface has arrived).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(std::min(f.max_connection_idle * 1000, 2e9)));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(f.first_byte_timeout * 1000));
  std::unique_ptr<ReflectionGuard> reflection_guard;
  if (f.reflection) {
    reflection_guard = std::make_unique<ReflectionGuard>(
        ReflectionLimits{f.max_reflection_streams, absl::Seconds(f.reflection_stream_seconds)});
    builder.experimental().SetInterceptorCreators(reflection_guard->Factories());
  }
  builder.RegisterService(&scanner);
  builder.RegisterService(&admin);
  // Chunks are at most 1 MiB of data; the margin is for the message framing.
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxChunkBytes + (64u << 10)));
  // Every call in flight holds a thread (synchronous API); the job slots bound the jobs and the
  // uploads in flight, this
  // bounds the rest (health checks, admin calls, calls refused at once).
  grpc::ResourceQuota quota("ckptscand");
  quota.SetMaxThreads(
      static_cast<int>(slots.max_running() + slots.max_queued() + upload_limits->max_uploads + 64));
  builder.SetResourceQuota(quota);
  int tcp_port = 0;
  if (!f.tcp.empty()) {
    absl::Status status;
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    pair.cert_chain = ReadFileOr(f.tls_cert, &status);
    pair.private_key = ReadFileOr(f.tls_key, &status);
    ssl.pem_key_cert_pairs.push_back(pair);
    if (!f.tls_client_ca.empty()) ssl.pem_root_certs = ReadFileOr(f.tls_client_ca, &status);
    if (!status.ok()) return Fail(status.ToString());
    ssl.client_certificate_request =
        f.require_client_cert     ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
        : f.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
    builder.AddListeningPort(f.tcp, grpc::SslServerCredentials(ssl), &tcp_port);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (!f.tcp.empty() && tcp_port == 0)) {
    return Fail(
        absl::StrCat("could not start the gRPC server", f.tcp.empty() ? "" : " on ", f.tcp));
  }
  // Health alone, in plaintext: a server with no service of ours (the default health service
  // is added to every server built after EnableDefaultHealthCheckService).
  std::unique_ptr<grpc::Server> health_server;
  int health_port = 0;
  if (!f.health_tcp.empty()) {
    grpc::ServerBuilder health_builder;
    health_builder.AddListeningPort(f.health_tcp, grpc::InsecureServerCredentials(), &health_port);
    health_server = health_builder.BuildAndStart();
    if (health_server == nullptr || health_port == 0) {
      return Fail(absl::StrCat("could not serve health on ", f.health_tcp, " (--health-tcp)"));
    }
  }
  std::vector<grpc::HealthCheckServiceInterface*> healths = {server->GetHealthCheckService()};
  if (health_server != nullptr) healths.push_back(health_server->GetHealthCheckService());
  for (grpc::HealthCheckServiceInterface* health : healths) {
    for (const char* service : {"", "ckptscan.v1.Scanner", "ckptscan.v1.Admin"}) {
      health->SetServingStatus(service, true);
    }
  }
  if (listener != nullptr) listener->Start(server.get());

  LogLine ready("listening");
  ready.Str("version", CKPT_VERSION).Int("pid", static_cast<uint64_t>(::getpid()));
  if (listener != nullptr) ready.Str("socket", f.socket);
  if (tcp_port != 0) {
    ready.Str("tcp", f.tcp)
        .Int("tcp_port", static_cast<uint64_t>(tcp_port))
        .Bool("mtls", f.require_client_cert);
  }
  if (exposer != nullptr) {
    ready.Str("metrics", absl::StrCat(f.metrics_address, ":", exposer->GetListeningPorts().at(0)));
  }
  if (health_port != 0) {
    ready.Str("health_tcp", f.health_tcp).Int("health_port", static_cast<uint64_t>(health_port));
  }
  std::vector<std::string> root_list;
  if (daemon.roots() != nullptr) root_list = daemon.roots()->roots();
  ready.Str("roots", absl::StrJoin(root_list, ":"))
      .Str("rules_version", rules_version)
      .Str("rules", rules_source)
      .Str("signer", daemon.key().public_key().hint())
      .Int("max_running", slots.max_running())
      .Int("max_queued", slots.max_queued())
      .Int("max_jobs_per_caller", slots.max_jobs_per_caller())
      .Int("max_uploads", upload_limits->max_uploads)
      .Int("max_uploads_per_caller", upload_limits->max_uploads_per_caller)
      .Int("max_spool_bytes", upload_limits->max_spool_bytes)
      .Num("upload_idle_timeout", upload_flags.idle_timeout)
      .Num("output_idle_timeout", upload_flags.output_idle_timeout)
      .Int("facts_memory", facts_budget.total())
      .Int("max_unix_connections", f.max_unix_connections)
      .Int("max_unix_connections_per_uid", unix_limits.max_connections_per_uid)
      .Int("unix_connections_reserved", unix_limits.reserved)
      .Str("jail", *layers)
      .Emit();

  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      (void)ReloadRules(&daemon, "SIGHUP");
      continue;
    }
    break;
  }
  // Drain: probes see NOT_SERVING, no new job is admitted, no new connection is accepted;
  // running jobs get the grace period, then the calls still open are cancelled (which kills
  // their workers) and the process exits.
  const absl::Time drain_start = absl::Now();
  LogLine("draining")
      .Int("running", slots.counts().running)
      .Int("queued", slots.counts().queued)
      .Num("grace_seconds", f.drain_seconds)
      .Emit();
  for (grpc::HealthCheckServiceInterface* health : healths) health->Shutdown();
  slots.Drain();
  if (listener != nullptr) listener->Stop();
  const bool idle = slots.WaitIdle(static_cast<int64_t>(f.drain_seconds * 1000));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Wait();
  if (health_server != nullptr) {
    health_server->Shutdown(std::chrono::system_clock::now());
    health_server->Wait();
  }
  LogLine("stopped")
      .Bool("drained", idle)
      .Num("ms", absl::ToDoubleMilliseconds(absl::Now() - drain_start))
      .Emit();
  return 0;
}

}  // namespace
}  // namespace ckptscan::daemon

int main(int argc, char** argv) { return ckptscan::daemon::Run(argc, argv); }
