// ckptscan: decides whether Python pickle / PyTorch checkpoint files are safe to load.
// Commands: scan, convert, keygen, verify, verify-attestation, disasm, rules show|check, version, health, admin
// (docs/cli.md); each lives in clients/commands/. Exit codes: app/verdict.h.
//
// CLI11 reports parse errors by exception; they are caught around parse() and nowhere else.

#include <CLI/CLI.hpp>
#include <string>

#include "app/engine_flags.h"
#include "app/verdict.h"
#include "clients/cli_common.h"

namespace ckptscan::clients {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{
      "ckptscan: decides whether Python pickle / PyTorch checkpoint files\n"
      "are safe to load. It never imports or runs anything from a file: a\n"
      "symbolic pickle VM lists every global and call, and an exact-name\n"
      "allowlist alone decides SAFE.",
      "ckptscan"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(Version()));
  app.footer(kExitCodesHelp);
  Commands commands;
  AddScanCommand(&app, &commands);
  AddDisasmCommand(&app, &commands);
  AddConvertCommand(&app, &commands);
  AddKeyCommands(&app, &commands);
  AddAttestationCommands(&app, &commands);
  AddRulesCommands(&app, &commands);
  AddDaemonCommands(&app, &commands);
  app::OneValuePerOccurrence(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return app::kExitUsage;
  }
  for (const Command& c : commands) {
    if (c.cmd->parsed()) return Finish(c.run());
  }
  return app::kExitUsage;
}

}  // namespace
}  // namespace ckptscan::clients

int main(int argc, char** argv) { return ckptscan::clients::Main(argc, argv); }
