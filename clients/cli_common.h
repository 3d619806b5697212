// What every `ckptscan` subcommand shares: how a command ends (its result, mapped to one exit
// code and message by Finish), writing outputs, the engine from the flags both binaries share
// (app/engine_flags.h) plus the CLI's own jail flags (--no-sandbox, --timeout), the daemon's
// flags (--server, --by-path, TLS), and the registry the subcommands add themselves to
// (main.cc).
//
// Not thread-safe: the CLI's main thread only.
#ifndef CKPTSCAN_CLIENTS_CLI_COMMON_H_
#define CKPTSCAN_CLIENTS_CLI_COMMON_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "app/engine.h"
#include "app/engine_flags.h"
#include "ckptscan/v1/report.pb.h"
#include "clients/remote.h"

namespace ckptscan::clients {

// The scanner's version (the build's CKPT_VERSION).
std::string_view Version();

// The exit codes, for --help footers.
extern const char kExitCodesHelp[];

// How a command ends: the exit code its outcome calls for (0, 1 or 2: app/verdict.h; the
// report or result already written), or an error. Finish prints an error as
// "ckptscan: MESSAGE" and exits 64 for a UsageError (a bad flag, rules file, limit or
// manifest), 1 for a Rejected (a check that ran and failed: verify), 2 for anything else (the
// command could not do its work).
using CommandResult = absl::StatusOr<int>;
absl::Status UsageError(std::string_view message);
absl::Status Rejected(std::string_view message);
// `status` (not OK) marked as a usage error, its code and message kept.
absl::Status AsUsageError(const absl::Status& status);
int Finish(const CommandResult& result);

// A subcommand: registered on the app by its Add*Command, run when the command line named it.
struct Command {
  CLI::App* cmd = nullptr;
  std::function<CommandResult()> run;
};
using Commands = std::vector<Command>;

// The subcommands (clients/commands/*.cc), each adding itself to `app` and `out`.
void AddScanCommand(CLI::App* app, Commands* out);
void AddConvertCommand(CLI::App* app, Commands* out);
void AddDisasmCommand(CLI::App* app, Commands* out);
void AddRulesCommands(CLI::App* app, Commands* out);   // rules show|check, version
void AddKeyCommands(CLI::App* app, Commands* out);     // keygen, verify
void AddAttestationCommands(CLI::App* app, Commands* out);  // verify-attestation
void AddDaemonCommands(CLI::App* app, Commands* out);  // health, admin ...

// "ckptscan: MESSAGE" on stderr: notes and warnings beside a result (errors go to Finish).
void PrintError(std::string_view message);

// `data` to `path`, or to stdout for "" and "-".
absl::Status WriteOutput(const std::string& path, std::string_view data);

// The local engine's flags: those ckptscand shares (rules, limits, jail) and the CLI's own.
struct LocalFlags {
  app::EngineFlags engine;
  bool no_sandbox = false;      // --no-sandbox: an unjailed worker child (debugging only)
  double timeout_seconds = 60;  // --timeout: wall clock per file
};

// Every local flag (scan, ls, convert, disasm); `limit_help` is --limit's help text.
void AddLocalFlags(CLI::App* cmd, LocalFlags* f, std::string_view limit_help);

// The engine of the flags: usage errors for bad values or rules; an error (exit 2) when no jail
// is possible here (no seccomp, no worker binary) unless --no-sandbox, after whose warning
// workers run unjailed. Every file is parsed in a worker process, never in this one.
absl::StatusOr<std::unique_ptr<app::Engine>> MakeEngine(const LocalFlags& f);

// --quiet / --verbose (exclusive): what is printed beside the report on stderr.
struct VerbosityFlags {
  bool quiet = false;    // no progress line; text reports leave SAFE files out
  bool verbose = false;  // the settings, then one line per file with its time
};

void AddVerbosityFlags(CLI::App* cmd, VerbosityFlags* f);

// --server: the daemon instead of the embedded jail (clients/remote.h).
struct ServerFlags {
  std::string server;  // --server, or $CKPTSCAN_SERVER when the flag is not given
  bool by_path = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

void AddServerFlags(CLI::App* cmd, ServerFlags* f, bool with_by_path = true);

// The daemon client for --server. Flags that only mean something locally (`local`, may be
// null) are refused rather than ignored (a usage error), as is a bad address; a daemon that is
// absent or not trusted is an error (exit 2).
absl::StatusOr<std::unique_ptr<RemoteClient>> ConnectServer(const ServerFlags& f,
                                                            const LocalFlags* local,
                                                            bool allow_plain = false);

// A file the daemon could not be asked about: ERROR, never a pass.
v1::FileReport ServerErrorReport(const std::string& path, const absl::Status& status);

}  // namespace ckptscan::clients

#endif  // CKPTSCAN_CLIENTS_CLI_COMMON_H_
