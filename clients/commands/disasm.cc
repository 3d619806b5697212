// `ckptscan disasm`: the annotated opcode listing of a pickle, made in the jail.
#include "clients/disasm.h"

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
#include "base/mapped_file.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "clients/disasm.h"
#include "clients/limit_flags.h"
#include "trusted/jailed_scan.h"
#include "trusted/judge_facts.h"

namespace ckptscan::clients {
namespace {

using app::ExitCodeFor;
using app::FileReportToText;
using app::kExitUsage;
using base::WriteAll;

struct DisasmOptions {
  std::string file;
  RulesFlags rules;
  std::vector<std::string> limits;
  SandboxFlags sandbox;
};

int PrintFileReport(const v1::FileReport& report) {
  (void)WriteAll(STDOUT_FILENO, FileReportToText(report));
  return ExitCodeFor(report.verdict());
}

int RunDisasm(const DisasmOptions& opt) {
  std::optional<Engine> engine = LoadEngine(opt.rules, opt.limits);
  if (!engine) return kExitUsage;
  const rules::RuleSet& ruleset = *engine->rules;
  const pickle::Limits& limits = engine->limits;
  int setup_exit = 0;
  const std::optional<pipeline::JailOptions> jail = SetUpSandbox(opt.sandbox, &setup_exit);
  if (!jail.has_value()) return setup_exit;
  const auto out = [](std::string_view text) { (void)WriteAll(STDOUT_FILENO, text); };

  absl::StatusOr<base::UniqueFd> fd = pipeline::OpenRegularFile(opt.file);
  struct stat st;
  if (fd.ok() && ::fstat(fd->get(), &st) != 0) {
    fd = absl::ErrnoToStatus(errno, absl::StrCat("fstat ", opt.file));
  }
  if (!fd.ok()) {
    return PrintFileReport(pipeline::UnreadableFileReport(opt.file, fd.status()));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const pipeline::JailedRun run =
      pipeline::RunJailedJob(*std::move(fd), size, worker::v1::Job::MODE_DISASM, limits, *jail);
  v1::FileReport report = pipeline::ReportForRun(run, *jail, ruleset);
  report.set_path(opt.file);
  report.set_size(size);
  if (!run.result.ok()) return PrintFileReport(report);
  WriteJailedDisassembly(run.trace, run.trace_truncated, run.facts, report, out);
  return ExitCodeFor(report.verdict());
}

}  // namespace

void AddDisasmCommand(CLI::App* app, Commands* out) {
  auto disasm_opt = std::make_shared<DisasmOptions>();
  CLI::App* disasm = app->add_subcommand("disasm",
                                         "Annotated opcode listing of a raw pickle stream, "
                                         "then errors and findings");
  disasm->add_option("FILE", disasm_opt->file, "The file to disassemble")->required();
  AddRulesFlags(disasm, &disasm_opt->rules);
  disasm->add_option("--limit", disasm_opt->limits, "Set a VM limit (as for scan)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  AddSandboxFlags(disasm, &disasm_opt->sandbox);
  disasm->footer(
      absl::StrCat("The listing is made inside the worker (at most 16 MiB; cut with a note\n"
                   "past that), with or without --no-sandbox.\n\n",
                   "Limits:\n", LimitFlagsHelp(), "\nExit codes: as for scan.\n"));
  out->push_back({disasm, [disasm_opt] { return RunDisasm(*disasm_opt); }});
}

}  // namespace ckptscan::clients
