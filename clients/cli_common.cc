#include "clients/cli_common.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "app/report.h"
#include "app/verdict.h"
#include "base/strings.h"

#ifndef CKPT_VERSION
#error "CKPT_VERSION must be defined by the build (the CMake project version)"
#endif

namespace ckptscan::clients {
namespace {

using app::kExitError;
using app::kExitUsage;
using base::WriteAll;

// The payload that marks how a command's error exits (Finish).
constexpr char kExitPayload[] = "type.ckptscan/cli.exit";

absl::Status WithExit(absl::Status status, absl::string_view code) {
  status.SetPayload(kExitPayload, absl::Cord(code));
  return status;
}

// Whether `server` is what $CKPTSCAN_SERVER says (the flag's default when it is not given).
bool FromEnv(const std::string& server) {
  const char* env = std::getenv("CKPTSCAN_SERVER");
  return env != nullptr && *env != '\0' && server == env;
}

}  // namespace

std::string_view Version() { return CKPT_VERSION; }

const char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0   every file SAFE (scan --fail-on dangerous: or SUSPICIOUS)\n"
    "  1   worst verdict SUSPICIOUS or DANGEROUS (findings win over errors)\n"
    "  2   worst verdict ERROR: a file could not be verified (malformed,\n"
    "      unsupported format, over a limit, unreadable, missing, or not the\n"
    "      digest its --manifest lists); also when no file was found or the\n"
    "      report could not be written\n"
    "  64  usage error: bad command, flag, --limit, rules or manifest file\n";

absl::Status UsageError(std::string_view message) {
  return WithExit(absl::InvalidArgumentError(base::AbslView(message)), "usage");
}

absl::Status Rejected(std::string_view message) {
  return WithExit(absl::FailedPreconditionError(base::AbslView(message)), "rejected");
}

absl::Status AsUsageError(const absl::Status& status) { return WithExit(status, "usage"); }

int Finish(const CommandResult& result) {
  if (result.ok()) return *result;
  PrintError(base::StdView(result.status().message()));
  const absl::optional<absl::Cord> kind = result.status().GetPayload(kExitPayload);
  if (kind == "usage") return kExitUsage;
  if (kind == "rejected") return 1;
  return kExitError;
}

void PrintError(std::string_view message) {
  (void)WriteAll(STDERR_FILENO, absl::StrCat("ckptscan: ", base::AbslView(message), "\n"));
}

absl::Status WriteOutput(const std::string& path, std::string_view data) {
  if (path.empty() || path == "-") return WriteAll(STDOUT_FILENO, data);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  absl::Status s = WriteAll(fd, data);
  if (::close(fd) != 0 && s.ok()) s = absl::ErrnoToStatus(errno, absl::StrCat("close ", path));
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return absl::OkStatus();
}

void AddLocalFlags(CLI::App* cmd, LocalFlags* f, std::string_view limit_help) {
  app::AddRulesFlags(cmd, &f->engine);
  app::AddLimitFlag(cmd, &f->engine, limit_help);
  cmd->add_flag("--no-sandbox", f->no_sandbox,
                "Parse in a worker process without the jail: no seccomp filter, "
                "namespaces or rlimits (debugging only; prints a warning; never "
                "the default)");
  cmd->add_option("--timeout", f->timeout_seconds,
                  "Wall-clock limit per file for the jailed worker")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app::AddJailFlags(cmd, &f->engine,
                    "fork-server, but per-job when scan or ls is given a single file (the "
                    "helper's start costs more than it saves for one job)");
}

absl::StatusOr<std::unique_ptr<app::Engine>> MakeEngine(const LocalFlags& f) {
  absl::StatusOr<app::EngineConfig> config = app::ToEngineConfig(f.engine);
  if (!config.ok()) return AsUsageError(config.status());
  config->jail.timeout = absl::Seconds(f.timeout_seconds);
  config->jail.unjailed = f.no_sandbox;
  if (f.no_sandbox) {
    PrintError(
        "warning: --no-sandbox: parsing untrusted files in a worker process without the "
        "jail (no seccomp filter, namespaces or rlimits). For debugging only: a file that "
        "exploits the parser would run with your privileges.");
  }
  absl::StatusOr<std::unique_ptr<app::Engine>> engine = app::Engine::Create(*std::move(config));
  if (absl::IsInvalidArgument(engine.status())) return AsUsageError(engine.status());
  if (!engine.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to scan: ", engine.status().message(),
        ". ckptscan parses files only inside a seccomp jail, in the ckptscan-worker next to it "
        "(--worker PATH names another; --no-sandbox parses without the jail, debugging only)."));
  }
  return engine;
}

void AddVerbosityFlags(CLI::App* cmd, VerbosityFlags* f) {
  CLI::Option* quiet = cmd->add_flag(
      "--quiet,-q", f->quiet,
      "No progress line on the terminal; a text report lists only the files that are not SAFE "
      "(the summary still counts every file). Errors are still printed");
  CLI::Option* verbose =
      cmd->add_flag("--verbose,-v", f->verbose,
                    "On stderr: the settings in force, then one line per file with its verdict "
                    "and how long it took");
  quiet->excludes(verbose);
}

void AddServerFlags(CLI::App* cmd, ServerFlags* f, bool with_by_path) {
  cmd->add_option("--server", f->server,
                  "Use the ckptscand daemon at ADDR instead of the embedded jail: local (this "
                  "user's default socket), unix:PATH (or a bare path starting with /, ./ or "
                  "../), or HOST:PORT (TLS). Default: $CKPTSCAN_SERVER when it is set and not "
                  "empty")
      ->type_name("ADDR")
      ->envname("CKPTSCAN_SERVER");
  if (with_by_path) {
    cmd->add_flag("--by-path", f->by_path,
                  "With --server: send paths (the daemon opens them beneath its --root "
                  "directories, with its own rights: on its unix socket only its --path-uid "
                  "uids may) instead of uploading the bytes");
  }
  cmd->add_option("--tls-ca", f->tls_ca,
                  "With --server HOST:PORT: CA certificates (PEM) that the daemon's "
                  "certificate must chain to (default: the system's)")
      ->type_name("FILE");
  cmd->add_option("--tls-cert", f->tls_cert,
                  "With --server HOST:PORT: client certificate (PEM) for mTLS")
      ->type_name("FILE");
  cmd->add_option("--tls-key", f->tls_key, "The key of --tls-cert (PEM)")->type_name("FILE");
}

absl::StatusOr<std::unique_ptr<RemoteClient>> ConnectServer(const ServerFlags& f,
                                                            const LocalFlags* local,
                                                            bool allow_plain) {
  if (!allow_plain && absl::StartsWith(f.server, "plain:")) {
    return UsageError(
        "--server plain:HOST:PORT is for `ckptscan health` only: the daemon serves its "
        "API over the unix socket or TLS");
  }
  if (local != nullptr && (local->no_sandbox || !local->engine.worker.empty() ||
                           !local->engine.jail_spawn.empty() || local->engine.AnyRulesOrLimits())) {
    return UsageError(
        absl::StrCat("--server", FromEnv(f.server) ? " (from CKPTSCAN_SERVER)" : "",
                     ": --no-sandbox, --worker, --jail-spawn, --rules, --rules-overlay, --allow, "
                     "--limit, --max-frame-bytes and --max-frame-values are the daemon's to set; "
                     "they cannot be used with --server"));
  }
  RemoteOptions options;
  options.address = f.server;
  options.by_path = f.by_path;
  options.tls_ca = f.tls_ca;
  options.tls_cert = f.tls_cert;
  options.tls_key = f.tls_key;
  if (local != nullptr) options.timeout = absl::Seconds(local->timeout_seconds);
  absl::StatusOr<std::unique_ptr<RemoteClient>> client = RemoteClient::Create(options);
  if (!client.ok()) {
    // A bad address or option is a usage error; a daemon that is absent or not trusted means
    // nothing could be verified.
    absl::Status s(client.status().code(), absl::StrCat("--server: ", client.status().message()));
    return absl::IsInvalidArgument(client.status()) ? AsUsageError(s) : s;
  }
  return client;
}

v1::FileReport ServerErrorReport(const std::string& path, const absl::Status& status) {
  v1::FileReport f;
  f.set_path(path);
  app::AddError(&f, v1::ERROR_CODE_SERVER, std::string(status.message()));
  return f;
}

}  // namespace ckptscan::clients
