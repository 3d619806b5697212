// `ckptscan rules show|check` and `ckptscan version`.
#include <fcntl.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "app/convert.h"
#include "app/manifest.h"
#include "app/report.h"
#include "app/report_format.h"
#include "app/scan_set.h"
#include "app/scan_targets.h"
#include "app/verdict.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "rules/rule_set.h"

namespace ckptscan::clients {
namespace {

using app::kExitError;
using app::kExitUsage;
using app::kReportSchema;
using base::WriteAll;

int RunRulesShow(const RulesFlags& flags) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset = LoadRules(flags);
  if (!ruleset.ok()) {
    PrintError(std::string(ruleset.status().message()));
    return kExitUsage;
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString((*ruleset)->proto(), &text)) {
    PrintError("cannot print the rules");
    return kExitError;
  }
  return WriteAll(STDOUT_FILENO, text).ok() ? 0 : kExitError;
}

int RunRulesCheck(const std::string& path) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset = rules::RuleSet::FromFile(path);
  if (!ruleset.ok()) {
    PrintError(absl::StrCat("rules check: ", ruleset.status().message()));
    return kExitUsage;
  }
  const v1::RuleSet& proto = (*ruleset)->proto();
  (void)WriteAll(STDOUT_FILENO, absl::StrCat(path, ": ok (version ", (*ruleset)->version(), ", ",
                                             proto.allow_size(), " allow entries, ",
                                             proto.deny_size(), " deny entries)\n"));
  return 0;
}

int RunVersion() {
  const std::shared_ptr<const rules::RuleSet> ruleset = rules::RuleSet::Default();
  (void)WriteAll(STDOUT_FILENO, absl::StrCat("ckptscan ", base::AbslView(Version()), "\nrules ",
                                             ruleset->version(), "\nreport schema ",
                                             base::AbslView(kReportSchema), "\n"));
  return 0;
}

}  // namespace

void AddRulesCommands(CLI::App* app, Commands* out) {
  CLI::App* rules_cmd = app->add_subcommand("rules", "Show or check rules");
  rules_cmd->require_subcommand(1);
  auto show_rules = std::make_shared<RulesFlags>();
  CLI::App* show = rules_cmd->add_subcommand(
      "show",
      "Print the effective rules (built-in or --rules FILE, with --rules-overlay and --allow "
      "merged on) as text-format proto");
  AddRulesFlags(show, show_rules.get());
  auto check_file = std::make_shared<std::string>();
  CLI::App* check = rules_cmd->add_subcommand(
      "check", "Validate a rules file: exit 0 if valid, 64 with the error otherwise");
  check->add_option("FILE", *check_file, "The rules file")->required();

  show->footer(
      "Exit codes: 0 printed; 2 the rules could not be printed or written; 64 the rules, an\n"
      "overlay or an --allow entry is invalid.");
  check->footer("Exit codes: 0 the file is valid; 64 it is not (the error says where).");
  rules_cmd->footer("Exit codes: those of `rules show` and `rules check`.");

  CLI::App* version = app->add_subcommand("version", "Print the scanner and rules versions");
  version->footer("Exit code: 0.");
  out->push_back({show, [show_rules] { return RunRulesShow(*show_rules); }});
  out->push_back({check, [check_file] { return RunRulesCheck(*check_file); }});
  out->push_back({version, [] { return RunVersion(); }});
}

}  // namespace ckptscan::clients
