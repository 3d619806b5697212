// What every `ckptscan` subcommand shares: printing errors, writing outputs, the rules and VM
// limits from their flags, the jail's flags (--no-sandbox, --timeout, ...), the daemon's flags
// (--server, --by-path, TLS), and the registry the subcommands add themselves to (main.cc).
//
// Not thread-safe: the CLI's main thread only.
#ifndef CKPTSCAN_CLIENTS_CLI_COMMON_H_
#define CKPTSCAN_CLIENTS_CLI_COMMON_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "app/report_format.h"
#include "app/verdict.h"
#include "ckptscan/v1/report.pb.h"
#include "clients/remote.h"
#include "core/pickle/limits.h"
#include "rules/rule_set.h"
#include "trusted/jailed_scan.h"
#include "trusted/rules_source.h"

namespace ckptscan::clients {

// The scanner's version (the build's CKPT_VERSION).
std::string_view Version();

// The exit codes, for --help footers.
extern const char kExitCodesHelp[];

// A subcommand: registered on the app by its Add*Command, run when the command line named it.
struct Command {
  CLI::App* cmd = nullptr;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

// The subcommands (clients/commands/*.cc), each adding itself to `app` and `out`.
void AddScanCommand(CLI::App* app, Commands* out);
void AddConvertCommand(CLI::App* app, Commands* out);
void AddDisasmCommand(CLI::App* app, Commands* out);
void AddRulesCommands(CLI::App* app, Commands* out);   // rules show|check, version
void AddKeyCommands(CLI::App* app, Commands* out);     // keygen, verify
void AddDaemonCommands(CLI::App* app, Commands* out);  // health, admin ...

// "ckptscan: MESSAGE" on stderr.
void PrintError(std::string_view message);

// `data` to `path`, or to stdout for "" and "-".
absl::Status WriteOutput(const std::string& path, std::string_view data);

// --rules FILE, --rules-overlay FILE, --allow NAME (repeatable): the rules a local command
// judges with (trusted/rules_source.h).
struct RulesFlags {
  std::string rules;
  std::string overlay;
  std::vector<std::string> allow;

  bool any() const { return !rules.empty() || !overlay.empty() || !allow.empty(); }
  pipeline::RulesSource Source() const { return {rules, overlay, allow}; }
};

void AddRulesFlags(CLI::App* cmd, RulesFlags* f);

// The rules of the flags: built-in or --rules, with the overlay merged on.
absl::StatusOr<std::shared_ptr<const rules::RuleSet>> LoadRules(const RulesFlags& flags);

// What scan, convert and disasm share: the rule set and the VM limits, from their flags.
struct Engine {
  std::shared_ptr<const rules::RuleSet> rules;
  pickle::Limits limits;
};

// Prints the usage error and returns nullopt when a flag is bad.
std::optional<Engine> LoadEngine(const RulesFlags& rules,
                                 const std::vector<std::string>& limit_flags);

// How files are parsed: in a jailed ckptscan-worker (the default) or, with
// --no-sandbox, in this process (debugging only).
struct SandboxFlags {
  bool no_sandbox = false;
  double timeout_seconds = 60;
  std::string worker_memory = "8G";
  std::string max_sealed_copy = "4G";
  std::string worker;
  std::string jail_spawn;  // --jail-spawn: "fork-server" or "per-job"; "" = the default
};

void AddSandboxFlags(CLI::App* cmd, SandboxFlags* f);

// The worker's options (with --no-sandbox, after its warning, an unjailed worker's), or nullopt
// with `exit_code` set and the reason printed when scanning must not start: a bad flag (64), or
// no jail possible here (2: seccomp unavailable, worker missing). Every file is parsed in a
// worker process, never in this one.
std::optional<pipeline::JailOptions> SetUpSandbox(const SandboxFlags& f, int* exit_code);

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

// The daemon client for --server, or null (after printing why, with `exit_code` set) when it
// cannot be used. Flags that only mean something locally are refused rather than ignored.
std::unique_ptr<RemoteClient> ConnectServer(const ServerFlags& f, const SandboxFlags& sandbox,
                                            const RulesFlags& rules,
                                            const std::vector<std::string>& limits, int* exit_code,
                                            bool allow_plain = false);

// A file the daemon could not be asked about: ERROR, never a pass.
v1::FileReport ServerErrorReport(const std::string& path, const absl::Status& status);

}  // namespace ckptscan::clients

#endif  // CKPTSCAN_CLIENTS_CLI_COMMON_H_
