#include "daemon/flags.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "app/engine_flags.h"
#include "app/paths.h"
#include "base/size_value.h"
#include "base/strings.h"
#include "sandbox/protocol.h"

#ifndef CKPT_VERSION
#error "CKPT_VERSION must be defined by the build (the CMake project version)"
#endif

namespace ckptscan::daemon {
namespace {

absl::Status Invalid(std::string_view message) {
  return absl::InvalidArgumentError(base::AbslView(message));
}

struct Flags {
  app::EngineFlags engine;
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
  std::string signing_key;
  std::string state_dir;
  std::string spool_dir;
  uint32_t max_running = 0;
  uint32_t max_queued = 0;
  double job_timeout = 60;
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
  std::string facts_memory = "2G";
  uint32_t max_reflection_streams = 4;
  double reflection_stream_seconds = 10;
  uint32_t max_health_watches = 64;
  double health_watch_seconds = 300;
  uint32_t max_streams_per_connection = 100;
  std::string grpc_memory = "256M";
  uint32_t metrics_port = 0;
  std::string metrics_address = "127.0.0.1";
  double max_output_expansion = 4;
  std::string max_output_bytes;  // empty: no cap but --max-spool-bytes
  double log_lines_per_second = 10;
  uint32_t log_burst = 100;
};

// Uploads: what the uploads in flight may hold, and how long a stream may stall; and
// the job places one caller may hold (its uploads' bucket).
struct UploadFlags {
  double idle_timeout = 30;
  std::string min_rate = "64K";
  double deadline = 21600;
  double output_idle_timeout = 30;
  uint32_t max_uploads = 0;             // 0: --max-running + --max-queued
  uint32_t max_uploads_per_caller = 0;  // 0: half of --max-uploads, rounded up
  uint32_t max_jobs_per_caller = 0;     // 0: half of --max-running + --max-queued, rounded up
  std::string max_spool;                // empty: 4 x --max-upload-bytes
  int64_t reserved_job_places = -1;     // -1: 1 when there are at least 2 job places
  int64_t reserved_uploads = -1;        // -1: 1 when --max-uploads is at least 2
};

void AddUploadFlags(CLI::App& app, UploadFlags* u) {
  app.add_option("--upload-idle-timeout", u->idle_timeout,
                 "Seconds an upload may send nothing before its call is cancelled "
                 "(DEADLINE_EXCEEDED) and its spool file dropped")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--upload-min-rate", u->min_rate,
                 "Bytes a second an upload must average from its start once its first "
                 "--upload-idle-timeout has passed (suffix K, M); slower, it is cancelled "
                 "(DEADLINE_EXCEEDED), so a trickle cannot hold an upload place; 0: no minimum")
      ->type_name("SIZE")
      ->capture_default_str();
  app.add_option("--upload-deadline", u->deadline,
                 "Seconds within which an upload must be whole, however fast it is sent")
      ->check(CLI::Range(1.0, 86400.0 * 30))
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
  app.add_option("--reserved-job-places", u->reserved_job_places,
                 "Of the job places (--max-running + --max-queued), how many only the operator "
                 "may take: root, this daemon's uid and the admins (--admin-uid, "
                 "--admin-identity); every other caller together holds the rest (default: 1 "
                 "when there are at least 2 places)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--reserved-uploads", u->reserved_uploads,
                 "Of the upload places (--max-uploads), how many only the operator may take "
                 "(default: 1 when --max-uploads is at least 2)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
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
  absl::StatusOr<uint64_t> rate = base::ParseSize(u.min_rate);
  if (!rate.ok()) return absl::InvalidArgumentError("--upload-min-rate: not a size");
  options->upload_min_rate = *rate;
  options->upload_deadline = absl::Seconds(u.deadline);
  UploadLimits limits;
  limits.max_uploads = u.max_uploads != 0 ? u.max_uploads : std::max(1u, job_places);
  limits.max_uploads_per_caller =
      u.max_uploads_per_caller != 0 ? u.max_uploads_per_caller : (limits.max_uploads + 1) / 2;
  limits.reserved_uploads = u.reserved_uploads >= 0 ? static_cast<uint32_t>(u.reserved_uploads)
                            : limits.max_uploads >= 2 ? 1
                                                      : 0;
  if (limits.reserved_uploads >= limits.max_uploads) {
    return absl::InvalidArgumentError(absl::StrCat("--reserved-uploads ", limits.reserved_uploads,
                                                   ": must be under --max-uploads ",
                                                   limits.max_uploads));
  }
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

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
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
  app.add_option("--max-running", f.max_running, "Jobs at once (default: one per core)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--max-queued", f.max_queued,
                 "Jobs waiting for a slot; past them RESOURCE_EXHAUSTED (default: 4 per "
                 "running slot)")
      ->check(CLI::Range(0u, 65536u));
  app.add_option("--job-timeout", f.job_timeout, "Wall-clock limit per file, in seconds")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  // The flags ckptscan shares: the rules (read again on SIGHUP and `ckptscan admin
  // reload-rules`), the VM's limits, the jail.
  app::AddRulesFlags(&app, &f.engine);
  app::AddLimitFlag(&app, &f.engine,
                    "Set a limit of the pickle VM or a format reader for every job, e.g. "
                    "max_compression_ratio=1000 (the names and "
                    "defaults of `ckptscan scan --help`; repeatable)");
  app::AddJailFlags(&app, &f.engine, "fork-server, every helper started before serving");
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
  app.add_option("--max-health-watches", f.max_health_watches,
                 "grpc.health.v1.Health/Watch streams open at once, the main and the health "
                 "servers together; one more is cancelled (logged as stream_cancelled)")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  app.add_option("--health-watch-seconds", f.health_watch_seconds,
                 "How long a health Watch stream may stay open before it is cancelled (the "
                 "prober opens a new one)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--max-streams-per-connection", f.max_streams_per_connection,
                 "Streams (calls) at once on one HTTP/2 connection, every server "
                 "(GRPC_ARG_MAX_CONCURRENT_STREAMS); one more is refused by gRPC")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  app.add_option("--grpc-memory", f.grpc_memory,
                 "Memory gRPC may use for its connections and calls, per server (its "
                 "ResourceQuota; suffix K, M, G): its buffers under pressure (it does not bound a "
                 "flood of HEADERS + RST_STREAM pairs: docs/security.md)")
      ->type_name("SIZE")
      ->capture_default_str();
  app.add_option("--max-output-expansion", f.max_output_expansion,
                 "A conversion's output may hold at most this many times its input's bytes "
                 "(plus 16 KiB for the header the daemon writes); it is reserved against "
                 "--max-spool-bytes before a byte is written. A few bytes can describe a tensor "
                 "of gigabytes (a stride-0 view), and views of a shared storage are written out "
                 "once each; past it the conversion is refused naming the limit")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  app.add_option("--max-output-bytes", f.max_output_bytes,
                 "The outputs of one conversion call (a sharded set's shards together) at most "
                 "(suffix K, M, G, T; default: no cap but --max-spool-bytes)")
      ->type_name("SIZE");
  app.add_option("--log-lines-per-second", f.log_lines_per_second,
                 "Log lines one caller's calls may write a second (job and admin lines, each "
                 "caller apart; library messages count as the caller \"library\"); past its "
                 "burst the rest are counted and reported once a second (log_suppressed)")
      ->check(CLI::Range(0.01, 1e6))
      ->capture_default_str();
  app.add_option("--log-burst", f.log_burst,
                 "Log lines one caller may write at once before --log-lines-per-second applies")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--sign-method", f.sign_method, "How conversions are signed: files or shards")
      ->check(CLI::IsMember({"files", "shards"}))
      ->capture_default_str();
  UploadFlags upload_flags;
  AddUploadFlags(app, &upload_flags);
  app.set_version_flag("--version", std::string("ckptscand ") + CKPT_VERSION);
  app.footer(
      "--rules, --rules-overlay and --allow are read again on SIGHUP and on `ckptscan admin\n"
      "reload-rules`; a bad file leaves the rules in force.");
  app::OneValuePerOccurrence(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return CommandLine{std::nullopt, app.exit(e) == 0 ? 0 : 64};
  }

  DaemonConfig c;
  ServiceOptions& options = c.service;
  options.scanner_version = CKPT_VERSION;
  if (f.socket.empty()) f.socket = app::DefaultSocketPath();
  if (f.state_dir.empty()) f.state_dir = app::DefaultStateDir();
  if (f.spool_dir.empty()) f.spool_dir = f.state_dir + "/spool";
  uint32_t mode = 0;
  if (!absl::numbers_internal::safe_strtou32_base(f.socket_mode, &mode, 8) || mode > 0777) {
    return Invalid(absl::StrCat("--socket-mode ", f.socket_mode, ": not an octal mode"));
  }
  absl::StatusOr<app::EngineConfig> engine = app::ToEngineConfig(f.engine);
  if (!engine.ok()) return engine.status();
  c.engine = *std::move(engine);
  absl::StatusOr<uint64_t> upload = base::ParseSize(f.max_upload);
  if (!upload.ok() || *upload == 0) return Invalid("--max-upload-bytes: not a positive size");
  options.max_upload_bytes = *upload;
  options.scan_digest = f.scan_digest == "always"  ? ServiceOptions::ScanDigest::kAlways
                        : f.scan_digest == "never" ? ServiceOptions::ScanDigest::kNever
                                                   : ServiceOptions::ScanDigest::kRequest;
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint32_t max_running = f.max_running != 0 ? f.max_running : cores;
  const uint32_t max_queued = app.count("--max-queued") > 0 ? f.max_queued : 4 * max_running;
  c.max_running = max_running;
  c.max_queued = max_queued;
  absl::StatusOr<UploadLimits> upload_limits =
      ApplyUploadFlags(upload_flags, max_running + max_queued, &options);
  if (!upload_limits.ok()) return upload_limits.status();
  c.uploads = *upload_limits;
  // One caller may hold half the job places: another caller always finds one free.
  c.max_jobs_per_caller =
      upload_flags.max_jobs_per_caller != 0
          ? upload_flags.max_jobs_per_caller
          : std::max(1u, static_cast<uint32_t>((uint64_t{max_running} + max_queued + 1) / 2));
  const uint64_t places = uint64_t{max_running} + max_queued;
  c.reserved_job_places =
      upload_flags.reserved_job_places >= 0
          ? static_cast<uint32_t>(std::min<int64_t>(upload_flags.reserved_job_places, 1 << 20))
      : places >= 2 ? 1
                    : 0;
  if (c.reserved_job_places >= places) {
    return Invalid(absl::StrCat("--reserved-job-places ", c.reserved_job_places,
                                ": must be under the job places (--max-running + --max-queued = ",
                                places, ")"));
  }
  absl::StatusOr<uint64_t> facts_memory = base::ParseSize(f.facts_memory);
  if (!facts_memory.ok() || *facts_memory == 0) {
    return Invalid("--facts-memory: not a positive size");
  }
  if (f.no_socket && f.tcp.empty()) return Invalid("--no-socket needs --tcp: nothing to listen on");
  if (!f.tcp.empty() && (f.tls_cert.empty() || f.tls_key.empty())) {
    return Invalid("--tcp needs --tls-cert and --tls-key: TCP is served with TLS only");
  }
  if (f.require_client_cert && f.tls_client_ca.empty()) {
    return Invalid("--require-client-cert needs --tls-client-ca to verify certificates against");
  }
  options.admin_uids.insert(::geteuid());
  options.admin_uids.insert(0);
  if (!f.admin_uids.empty()) options.admin_uids = {f.admin_uids.begin(), f.admin_uids.end()};
  for (const std::string& id : f.admin_identities) {
    absl::StatusOr<std::string> typed = ParseIdentity(id);
    if (!typed.ok()) return Invalid(absl::StrCat("--admin-identity: ", typed.status().message()));
    options.admin_identities.insert(*std::move(typed));
  }
  options.path_uids = {::geteuid(), 0};
  // Never locked out of the unix socket by other uids: the daemon's, root and the Admin uids.
  UnixListenerLimits& unix_limits = c.unix_limits;
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
    return Invalid("--max-unix-connections-per-uid: above --max-unix-connections");
  }
  if (unix_limits.reserved >= f.max_unix_connections) {
    return Invalid("--unix-connections-reserved: must be under --max-unix-connections");
  }
  if (!f.path_uids.empty()) options.path_uids = {f.path_uids.begin(), f.path_uids.end()};
  options.sign_method =
      f.sign_method == "shards" ? signing::Method::kShards : signing::Method::kFiles;
  options.max_output_expansion = f.max_output_expansion;
  if (!f.max_output_bytes.empty()) {
    absl::StatusOr<uint64_t> out = base::ParseSize(f.max_output_bytes);
    if (!out.ok() || *out == 0) return Invalid("--max-output-bytes: not a positive size");
    options.max_output_bytes = *out;
  }
  options.log_rate.lines_per_second = f.log_lines_per_second;
  options.log_rate.burst = f.log_burst;

  c.engine.jail.timeout = absl::Seconds(f.job_timeout);
  c.engine.facts_memory = *facts_memory;
  c.engine.start_helpers = true;  // every fork-server helper before any thread serves
  options.spool_dir = f.spool_dir;
  c.socket = f.socket;
  c.socket_mode = static_cast<mode_t>(mode);
  c.no_socket = f.no_socket;
  c.tcp = f.tcp;
  c.tls_cert = f.tls_cert;
  c.tls_key = f.tls_key;
  c.tls_client_ca = f.tls_client_ca;
  c.require_client_cert = f.require_client_cert;
  c.health_tcp = f.health_tcp;
  c.metrics_port = f.metrics_port;
  c.metrics_address = f.metrics_address;
  c.reflection = f.reflection;
  c.reflection_limits = {f.max_reflection_streams, absl::Seconds(f.reflection_stream_seconds)};
  c.health_watch_limits = {f.max_health_watches, absl::Seconds(f.health_watch_seconds)};
  c.max_streams_per_connection = f.max_streams_per_connection;
  {
    absl::StatusOr<uint64_t> memory = base::ParseSize(f.grpc_memory);
    if (!memory.ok() || *memory < (16u << 20) || *memory > (1ull << 40)) {
      return Invalid("--grpc-memory: a size from 16M to 1T");
    }
    c.grpc_memory = *memory;
  }
  c.max_connection_age = absl::Seconds(f.max_connection_age);
  c.max_connection_idle = absl::Seconds(f.max_connection_idle);
  c.first_byte_timeout = absl::Seconds(f.first_byte_timeout);
  c.drain = absl::Seconds(f.drain_seconds);
  c.roots = f.roots;
  c.signing_key = f.signing_key;
  c.state_dir = f.state_dir;
  return CommandLine{std::move(c), 0};
}

}  // namespace ckptscan::daemon
