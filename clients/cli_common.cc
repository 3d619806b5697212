#include "clients/cli_common.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "app/report.h"
#include "base/size_value.h"
#include "base/strings.h"
#include "clients/limit_flags.h"
#include "trusted/availability.h"

#ifndef CKPT_VERSION
#error "CKPT_VERSION must be defined by the build (the CMake project version)"
#endif

namespace ckptscan::clients {

using app::kExitError;
using app::kExitUsage;
using base::WriteAll;

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

void AddRulesFlags(CLI::App* cmd, RulesFlags* f) {
  cmd->add_option("--rules", f->rules,
                  "Rules file (text-format ckptscan.v1.RuleSet) instead of the built-in "
                  "rules")
      ->type_name("FILE");
  cmd->add_option("--rules-overlay", f->overlay,
                  "Local rules merged onto the rules in force (same format; allow and deny "
                  "entries added, none changed): may not allow a name the rules grade "
                  "DANGEROUS; the report's rules version names its SHA-256 (docs/rules.md)")
      ->type_name("FILE");
  cmd->add_option("--allow", f->allow,
                  "Trust one more global, e.g. --allow mypkg.config.RunConfig "
                  "(MODULE:QUALNAME for a dotted qualname): any call and state of it is "
                  "accepted, its arguments still judged; refused for names the rules grade "
                  "DANGEROUS (repeatable)")
      ->type_name("MODULE.NAME");
}

absl::StatusOr<std::shared_ptr<const rules::RuleSet>> LoadRules(const RulesFlags& flags) {
  return pipeline::LoadRules(flags.Source());
}

std::optional<Engine> LoadEngine(const RulesFlags& rules_flags,
                                 const std::vector<std::string>& limit_flags) {
  absl::StatusOr<pickle::Limits> limits = ParseLimitFlags(limit_flags);
  if (!limits.ok()) {
    PrintError(std::string(limits.status().message()));
    return std::nullopt;
  }
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset = LoadRules(rules_flags);
  if (!ruleset.ok()) {
    PrintError(std::string(ruleset.status().message()));
    return std::nullopt;
  }
  return Engine{*std::move(ruleset), *limits};
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

void AddSandboxFlags(CLI::App* cmd, SandboxFlags* f) {
  cmd->add_flag("--no-sandbox", f->no_sandbox,
                "Parse in a worker process without the jail: no seccomp filter, "
                "namespaces or rlimits (debugging only; prints a warning; never "
                "the default)");
  cmd->add_option("--timeout", f->timeout_seconds,
                  "Wall-clock limit per file for the jailed worker")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  cmd->add_option("--worker-memory", f->worker_memory,
                  "Address-space limit of the jailed worker (suffix K, M, G, "
                  "T); the input's mapping is added on top")
      ->type_name("BYTES")
      ->capture_default_str();
  cmd->add_option("--max-sealed-copy-bytes", f->max_sealed_copy,
                  "Largest file copied into sealed memory when it cannot be "
                  "pinned with a read lease (suffix K, M, G, T); a larger one "
                  "is ERROR (docs/security.md)")
      ->type_name("BYTES")
      ->capture_default_str();
  cmd->add_option("--jail-spawn", f->jail_spawn,
                  "How each jailed worker process is made: fork-server (forked by a jailed helper "
                  "that set up the namespaces and the seccomp filter once; one helper per job "
                  "running at once) or per-job "
                  "(a posix_spawn of the worker per file). Default: fork-server, but per-job "
                  "when scan or ls is given a single file (the helper's start costs more than "
                  "it saves for one job)")
      ->type_name("MODE")
      ->check(CLI::IsMember({"fork-server", "per-job"}));
  cmd->add_option("--worker", f->worker,
                  "The ckptscan-worker binary (default: the one next to "
                  "this ckptscan)")
      ->type_name("PATH");
}

std::optional<pipeline::JailOptions> SetUpSandbox(const SandboxFlags& f, int* exit_code) {
  *exit_code = 0;
  absl::StatusOr<uint64_t> memory = ParseSizeValue(f.worker_memory);
  if (!memory.ok() || *memory == 0) {
    PrintError(absl::StrCat("--worker-memory ", f.worker_memory, ": ",
                            memory.ok() ? "must be positive" : memory.status().message()));
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  absl::StatusOr<uint64_t> max_copy = ParseSizeValue(f.max_sealed_copy);
  if (!max_copy.ok()) {
    PrintError(absl::StrCat("--max-sealed-copy-bytes ", f.max_sealed_copy, ": ",
                            max_copy.status().message()));
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  if (f.no_sandbox) {
    PrintError(
        "warning: --no-sandbox: parsing untrusted files in a worker process without the "
        "jail (no seccomp filter, namespaces or rlimits). For debugging only: a file that "
        "exploits the parser would run with your privileges.");
  } else if (absl::Status s = sandbox::CheckSeccompAvailable(); !s.ok()) {
    PrintError(absl::StrCat("refusing to scan: ", s.message(),
                            ". ckptscan parses files only inside a seccomp jail; --no-sandbox "
                            "parses without it (debugging only)."));
    *exit_code = kExitError;
    return std::nullopt;
  }
  absl::StatusOr<std::string> worker = sandbox::FindWorkerBinary(f.worker);
  if (!worker.ok()) {
    PrintError(absl::StrCat("refusing to scan: ", worker.status().message(),
                            " (--worker PATH names another)"));
    *exit_code = kExitError;
    return std::nullopt;
  }
  pipeline::JailOptions jail;
  jail.worker_path = *std::move(worker);
  jail.timeout = absl::Seconds(f.timeout_seconds);
  jail.worker_memory = *memory;
  jail.max_sealed_copy_bytes = *max_copy;
  jail.unjailed = f.no_sandbox;
  jail.spawn_mode = f.jail_spawn == "per-job" ? sandbox::SpawnMode::kSpawnPerJob
                                              : sandbox::SpawnMode::kForkServer;
  return jail;
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

// Whether `server` is what $CKPTSCAN_SERVER says (the flag's default when it is not given).
static bool FromEnv(const std::string& server) {
  const char* env = std::getenv("CKPTSCAN_SERVER");
  return env != nullptr && *env != '\0' && server == env;
}

std::unique_ptr<RemoteClient> ConnectServer(const ServerFlags& f, const SandboxFlags& sandbox,
                                            const RulesFlags& rules,
                                            const std::vector<std::string>& limits, int* exit_code,
                                            bool allow_plain) {
  *exit_code = kExitUsage;
  if (!allow_plain && absl::StartsWith(f.server, "plain:")) {
    PrintError(
        "--server plain:HOST:PORT is for `ckptscan health` only: the daemon serves its "
        "API over the unix socket or TLS");
    return nullptr;
  }
  if (sandbox.no_sandbox || !sandbox.worker.empty() || !sandbox.jail_spawn.empty() || rules.any() ||
      !limits.empty()) {
    PrintError(
        absl::StrCat("--server", FromEnv(f.server) ? " (from CKPTSCAN_SERVER)" : "",
                     ": --no-sandbox, --worker, --jail-spawn, --rules, --rules-overlay, --allow "
                     "and --limit are the daemon's to set; they cannot be used with --server"));
    return nullptr;
  }
  RemoteOptions options;
  options.address = f.server;
  options.by_path = f.by_path;
  options.tls_ca = f.tls_ca;
  options.tls_cert = f.tls_cert;
  options.tls_key = f.tls_key;
  options.timeout = absl::Seconds(sandbox.timeout_seconds);
  absl::StatusOr<std::unique_ptr<RemoteClient>> client = RemoteClient::Create(options);
  if (!client.ok()) {
    PrintError(absl::StrCat("--server: ", client.status().message()));
    // A bad address or option is a usage error; a daemon that is absent or not trusted means
    // nothing could be verified.
    if (client.status().code() != absl::StatusCode::kInvalidArgument) *exit_code = kExitError;
    return nullptr;
  }
  *exit_code = 0;
  return *std::move(client);
}

v1::FileReport ServerErrorReport(const std::string& path, const absl::Status& status) {
  v1::FileReport f;
  f.set_path(path);
  app::AddError(&f, v1::ERROR_CODE_SERVER, std::string(status.message()));
  return f;
}

}  // namespace ckptscan::clients
