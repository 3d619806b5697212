// ckptscan: decides whether Python pickle / PyTorch checkpoint files are safe
// to load. Commands: scan, disasm, rules show|check, version (docs/cli.md).
// Exit codes: clients/verdict.h.
//
// CLI11 reports parse errors by exception; they are caught around parse() and
// nowhere else.

#include <fcntl.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "clients/disasm.h"
#include "clients/limit_flags.h"
#include "clients/report_format.h"
#include "clients/scan_targets.h"
#include "clients/verdict.h"
#include "core/base/strings.h"
#include "pipeline/local_scan.h"
#include "pipeline/mapped_file.h"
#include "pipeline/sha256.h"
#include "rules/catalogue.h"
#include "rules/rule_set.h"

#ifndef CKPT_VERSION
#error "CKPT_VERSION must be defined by the build (the CMake project version)"
#endif

namespace ckptscan::clients {
namespace {

constexpr std::string_view kVersion = CKPT_VERSION;

constexpr char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0   every file SAFE\n"
    "  1   worst verdict SUSPICIOUS or DANGEROUS (findings win over errors)\n"
    "  2   worst verdict ERROR: a file could not be verified (malformed,\n"
    "      unsupported format, over a limit, unreadable); also when no file\n"
    "      was found or the report could not be written\n"
    "  64  usage error: bad command, flag, --limit or rules file\n";

// Writes all of `data` to `fd`, retrying short writes.
absl::Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

void PrintError(std::string_view message) {
  (void)WriteAll(STDERR_FILENO,
                 absl::StrCat("ckptscan: ", base::AbslView(message), "\n"));
}

absl::Status WriteOutput(const std::string& path, std::string_view data) {
  if (path.empty() || path == "-") return WriteAll(STDOUT_FILENO, data);
  const int fd = ::open(
      path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  absl::Status s = WriteAll(fd, data);
  if (::close(fd) != 0 && s.ok())
    s = absl::ErrnoToStatus(errno, absl::StrCat("close ", path));
  if (!s.ok())
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const rules::RuleSet>> LoadRules(
    const std::string& path) {
  if (path.empty()) return rules::RuleSet::Default();
  return rules::RuleSet::FromFile(path);
}

// What scan and disasm share: the rule set and the VM limits, from their flags.
struct Engine {
  std::shared_ptr<const rules::RuleSet> rules;
  pickle::Limits limits;
};

// Prints the usage error and returns nullopt when a flag is bad.
std::optional<Engine> LoadEngine(const std::string& rules_path,
                                 const std::vector<std::string>& limit_flags) {
  absl::StatusOr<pickle::Limits> limits = ParseLimitFlags(limit_flags);
  if (!limits.ok()) {
    PrintError(std::string(limits.status().message()));
    return std::nullopt;
  }
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset = LoadRules(rules_path);
  if (!ruleset.ok()) {
    PrintError(absl::StrCat("--rules: ", ruleset.status().message()));
    return std::nullopt;
  }
  return Engine{*std::move(ruleset), *limits};
}

struct ScanOptions {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string output;
  std::string rules;
  std::vector<std::string> limits;
};

int RunScan(const ScanOptions& opt) {
  std::optional<Engine> engine = LoadEngine(opt.rules, opt.limits);
  if (!engine) return kExitUsage;
  const rules::RuleSet& ruleset = *engine->rules;
  const pickle::Limits& limits = engine->limits;

  v1::Report report;
  report.set_schema(std::string(kReportSchema));
  report.set_scanner_version(std::string(kVersion));
  report.set_rules_version(ruleset.version());
  std::string skipped;
  for (const ScanTarget& t : ExpandScanPaths(opt.paths)) {
    switch (t.kind) {
      case ScanTarget::Kind::kSkipped:
        absl::StrAppend(&skipped, "skipped: ", TerminalSafe(t.path), " (",
                        t.reason, ")\n");
        break;
      case ScanTarget::Kind::kUnreadable:
        *report.add_files() = pipeline::UnreadableFileReport(t.path, t.status);
        break;
      case ScanTarget::Kind::kFile: {
        absl::StatusOr<v1::FileReport> file =
            pipeline::ScanFileInProcess(t.path, ruleset, limits);
        *report.add_files() =
            file.ok() ? *std::move(file)
                      : pipeline::UnreadableFileReport(t.path, file.status());
        break;
      }
    }
  }
  // Nothing scanned is nothing verified: ERROR, never SAFE.
  v1::Verdict verdict =
      report.files_size() == 0 ? v1::VERDICT_ERROR : v1::VERDICT_SAFE;
  for (const v1::FileReport& f : report.files())
    verdict = rules::WorseVerdict(verdict, f.verdict());
  report.set_verdict(verdict);
  if (report.files_size() == 0)
    PrintError("no files to scan under the given paths");

  std::string out;
  if (opt.format == "json") {
    out = ReportToJson(report);
  } else if (opt.format == "sarif") {
    out = ReportToSarif(report, rules::Catalogue());
  } else {
    out = skipped + ReportToText(report);
  }
  if (opt.format != "text" && !skipped.empty()) {
    (void)WriteAll(STDERR_FILENO,
                   skipped);  // never silent, but keep JSON/SARIF parseable
  }
  if (absl::Status s = WriteOutput(opt.output, out); !s.ok()) {
    PrintError(absl::StrCat("cannot write the report: ", s.message()));
    return kExitError;
  }
  return ExitCodeFor(report.verdict());
}

struct DisasmOptions {
  std::string file;
  std::string rules;
  std::vector<std::string> limits;
};

int RunDisasm(const DisasmOptions& opt) {
  std::optional<Engine> engine = LoadEngine(opt.rules, opt.limits);
  if (!engine) return kExitUsage;
  const rules::RuleSet& ruleset = *engine->rules;
  const pickle::Limits& limits = engine->limits;
  absl::StatusOr<pipeline::MappedFile> file =
      pipeline::MappedFile::Open(opt.file);
  if (!file.ok()) {
    const v1::FileReport report =
        pipeline::UnreadableFileReport(opt.file, file.status());
    (void)WriteAll(STDOUT_FILENO, FileReportToText(report));
    return ExitCodeFor(report.verdict());
  }
  const v1::FileReport report = Disassemble(
      opt.file, file->bytes(), ruleset, limits,
      [](std::string_view text) { (void)WriteAll(STDOUT_FILENO, text); });
  return ExitCodeFor(report.verdict());
}

int RunRulesShow(const std::string& rules_path) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset =
      LoadRules(rules_path);
  if (!ruleset.ok()) {
    PrintError(absl::StrCat("--rules: ", ruleset.status().message()));
    return kExitUsage;
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString((*ruleset)->proto(),
                                                   &text)) {
    PrintError("cannot print the rules");
    return kExitError;
  }
  return WriteAll(STDOUT_FILENO, text).ok() ? 0 : kExitError;
}

int RunRulesCheck(const std::string& path) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset =
      rules::RuleSet::FromFile(path);
  if (!ruleset.ok()) {
    PrintError(absl::StrCat("rules check: ", ruleset.status().message()));
    return kExitUsage;
  }
  const v1::RuleSet& proto = (*ruleset)->proto();
  (void)WriteAll(STDOUT_FILENO,
                 absl::StrCat(path, ": ok (version ", (*ruleset)->version(),
                              ", ", proto.allow_size(), " allow entries, ",
                              proto.deny_size(), " deny entries)\n"));
  return 0;
}

int RunVersion() {
  const std::shared_ptr<const rules::RuleSet> ruleset =
      rules::RuleSet::Default();
  (void)WriteAll(STDOUT_FILENO,
                 absl::StrCat("ckptscan ", base::AbslView(kVersion), "\nrules ",
                              ruleset->version(), "\nreport schema ",
                              base::AbslView(kReportSchema), "\n"));
  return 0;
}

std::string ScanFooter() {
  return absl::StrCat(
      "Formats (--format):\n"
      "  text   for people: per file its findings and errors; a summary\n"
      "  json   the report of docs/report.md (schema ckptscan.report.v1)\n"
      "  sarif  SARIF 2.1.0 for CI code scanning\n"
      "\n"
      "Folders are walked recursively in sorted order. Symlinked folders\n"
      "are not followed: they are listed as skipped, as are FIFOs, sockets\n"
      "and devices. The format is detected from the content, never from\n"
      "the file name.\n"
      "\n"
      "Limits (--limit NAME=VALUE, repeatable). VALUE is decimal, with an\n"
      "optional suffix K, M, G or T (2^10, 2^20, 2^30, 2^40):\n",
      LimitFlagsHelp(), "\n", kExitCodesHelp);
}

int Main(int argc, char** argv) {
  CLI::App app{
      "ckptscan: decides whether Python pickle / PyTorch checkpoint files\n"
      "are safe to load. It never imports or runs anything from a file: a\n"
      "symbolic pickle VM lists every global and call, and an exact-name\n"
      "allowlist alone decides SAFE.",
      "ckptscan"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(kVersion));
  app.footer(kExitCodesHelp);

  ScanOptions scan_opt;
  CLI::App* scan =
      app.add_subcommand("scan", "Scan files and folders; print a report");
  scan->add_option("PATH", scan_opt.paths, "Files or folders to scan")
      ->required();
  scan->add_option("--format,-f", scan_opt.format,
                   "Report format: text, json or sarif")
      ->check(CLI::IsMember({"text", "json", "sarif"}))
      ->capture_default_str();
  scan->add_option("--output,-o", scan_opt.output,
                   "Write the report to FILE instead of stdout")
      ->type_name("FILE");
  scan->add_option("--rules", scan_opt.rules,
                   "Rules file (text-format ckptscan.v1.RuleSet) instead of "
                   "the built-in rules")
      ->type_name("FILE");
  scan->add_option("--limit", scan_opt.limits,
                   "Set a VM limit, e.g. max_opcodes=1000 (see below)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  scan->footer(ScanFooter());

  DisasmOptions disasm_opt;
  CLI::App* disasm =
      app.add_subcommand("disasm",
                         "Annotated opcode listing of a raw pickle stream, "
                         "then errors and findings");
  disasm->add_option("FILE", disasm_opt.file, "The file to disassemble")
      ->required();
  disasm
      ->add_option("--rules", disasm_opt.rules,
                   "Rules file instead of the built-in rules")
      ->type_name("FILE");
  disasm
      ->add_option("--limit", disasm_opt.limits, "Set a VM limit (as for scan)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  disasm->footer(absl::StrCat("Limits:\n", LimitFlagsHelp(),
                              "\nExit codes: as for scan.\n"));

  CLI::App* rules_cmd = app.add_subcommand("rules", "Show or check rules");
  rules_cmd->require_subcommand(1);
  std::string show_rules;
  CLI::App* show =
      rules_cmd->add_subcommand("show",
                                "Print the effective rules (built-in, or "
                                "--rules FILE) as text-format proto");
  show->add_option("--rules", show_rules,
                   "Rules file instead of the built-in rules")
      ->type_name("FILE");
  std::string check_file;
  CLI::App* check = rules_cmd->add_subcommand(
      "check",
      "Validate a rules file: exit 0 if valid, 64 with the error otherwise");
  check->add_option("FILE", check_file, "The rules file")->required();

  CLI::App* version =
      app.add_subcommand("version", "Print the scanner and rules versions");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return kExitUsage;
  }

  if (scan->parsed()) return RunScan(scan_opt);
  if (disasm->parsed()) return RunDisasm(disasm_opt);
  if (show->parsed()) return RunRulesShow(show_rules);
  if (check->parsed()) return RunRulesCheck(check_file);
  if (version->parsed()) return RunVersion();
  return kExitUsage;
}

}  // namespace
}  // namespace ckptscan::clients

int main(int argc, char** argv) { return ckptscan::clients::Main(argc, argv); }
