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
#include "base/status_macros.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "rules/rule_set.h"
#include "rules/rules_source.h"

namespace ckptscan::clients {
namespace {

using app::kReportSchema;
using base::WriteAll;

CommandResult RunRulesShow(const app::EngineFlags& flags) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset =
      rules::LoadRules({flags.rules, flags.rules_overlay, flags.allow});
  if (!ruleset.ok()) return UsageError(base::StdView(ruleset.status().message()));
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString((*ruleset)->proto(), &text)) {
    return absl::InternalError("cannot print the rules");
  }
  CKPT_RETURN_IF_ERROR(WriteAll(STDOUT_FILENO, text));
  return 0;
}

// A file with a `version` is a whole rule set; one without is an overlay (as --rules-overlay
// takes it), checked by merging it onto the rules it would extend: the built-in ones, or
// `base_rules` (--rules).
CommandResult RunRulesCheck(const std::string& path, const std::string& base_rules) {
  absl::StatusOr<v1::RuleSet> parsed = rules::RuleSet::ReadOverlayFile(path);
  if (!parsed.ok()) return UsageError(absl::StrCat("rules check: ", parsed.status().message()));
  if (parsed->version().empty()) {
    absl::StatusOr<std::shared_ptr<const rules::RuleSet>> merged =
        rules::LoadRules({base_rules, path, {}});
    if (!merged.ok()) {
      return UsageError(absl::StrCat("rules check: ", merged.status().message()));
    }
    (void)WriteAll(STDOUT_FILENO,
                   absl::StrCat(path, ": ok as an overlay (no version) onto ",
                                base_rules.empty() ? "the built-in rules" : base_rules,
                                " (effective version ", (*merged)->version(), ", ",
                                parsed->allow_size(), " allow entries, ", parsed->deny_size(),
                                " deny entries added)\n"));
    return 0;
  }
  if (!base_rules.empty()) {
    return UsageError(absl::StrCat("rules check: ", path,
                                   " has a version, so it is a whole rule set, not an overlay "
                                   "onto --rules; check it without --rules"));
  }
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset = rules::RuleSet::FromFile(path);
  if (!ruleset.ok()) {
    return UsageError(absl::StrCat("rules check: ", ruleset.status().message()));
  }
  const v1::RuleSet& proto = (*ruleset)->proto();
  (void)WriteAll(STDOUT_FILENO, absl::StrCat(path, ": ok (version ", (*ruleset)->version(), ", ",
                                             proto.allow_size(), " allow entries, ",
                                             proto.deny_size(), " deny entries)\n"));
  return 0;
}

CommandResult RunVersion() {
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
  auto show_rules = std::make_shared<app::EngineFlags>();
  CLI::App* show = rules_cmd->add_subcommand(
      "show",
      "Print the effective rules (built-in or --rules FILE, with --rules-overlay and --allow "
      "merged on) as text-format proto");
  app::AddRulesFlags(show, show_rules.get());
  auto check_file = std::make_shared<std::string>();
  auto check_base = std::make_shared<std::string>();
  CLI::App* check = rules_cmd->add_subcommand(
      "check",
      "Validate a rules file (with a version) or an overlay (without one: merged onto the "
      "built-in rules, or onto --rules, exactly as --rules-overlay merges it): exit 0 if valid, "
      "64 with the error otherwise");
  check->add_option("FILE", *check_file, "The rules file or overlay")->required();
  check->add_option("--rules", *check_base,
                    "With an overlay: the rules file it extends (default: the built-in rules)")
      ->type_name("FILE");

  show->footer(
      "Exit codes: 0 printed; 2 the rules could not be printed or written; 64 the rules, an\n"
      "overlay or an --allow entry is invalid.");
  check->footer("Exit codes: 0 the file is valid; 64 it is not (the error says where).");
  rules_cmd->footer("Exit codes: those of `rules show` and `rules check`.");

  CLI::App* version = app->add_subcommand("version", "Print the scanner and rules versions");
  version->footer("Exit code: 0.");
  out->push_back({show, [show_rules] { return RunRulesShow(*show_rules); }});
  out->push_back(
      {check, [check_file, check_base] { return RunRulesCheck(*check_file, *check_base); }});
  out->push_back({version, [] { return RunVersion(); }});
}

}  // namespace ckptscan::clients
