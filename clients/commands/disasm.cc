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
#include "app/limit_flags.h"
#include "app/manifest.h"
#include "app/report.h"
#include "app/report_format.h"
#include "app/scan_file.h"
#include "app/scan_set.h"
#include "app/scan_targets.h"
#include "app/verdict.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "clients/disasm.h"

namespace ckptscan::clients {
namespace {

using app::ExitCodeFor;
using app::FileReportToText;
using base::WriteAll;

struct DisasmOptions {
  std::string file;
  LocalFlags local;
};

CommandResult RunDisasm(const DisasmOptions& opt) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<app::Engine> engine, MakeEngine(opt.local));
  const std::shared_ptr<const rules::RuleSet> rules = engine->rules();
  const app::Disassembly d =
      app::DisassembleFile(opt.file, *rules, engine->limits(), engine->jail());
  if (!d.run.result.ok()) {
    (void)WriteAll(STDOUT_FILENO, FileReportToText(d.report));
  } else {
    WriteJailedDisassembly(d.run.trace, d.run.trace_truncated, d.run.facts, d.report,
                           [](std::string_view text) { (void)WriteAll(STDOUT_FILENO, text); });
  }
  return ExitCodeFor(d.report.verdict());
}

}  // namespace

void AddDisasmCommand(CLI::App* app, Commands* out) {
  auto disasm_opt = std::make_shared<DisasmOptions>();
  CLI::App* disasm = app->add_subcommand("disasm",
                                         "Annotated opcode listing of a raw pickle stream, "
                                         "then errors and findings");
  disasm->add_option("FILE", disasm_opt->file, "The file to disassemble")->required();
  AddLocalFlags(disasm, &disasm_opt->local, "Set a limit of the pickle VM or a format reader (as for scan)");
  disasm->footer(
      absl::StrCat("The listing is made inside the worker (at most 16 MiB; cut with a note\n"
                   "past that), with or without --no-sandbox.\n\n",
                   "Limits:\n", app::LimitFlagsHelp(), "\nExit codes: as for scan.\n"));
  out->push_back({disasm, [disasm_opt] { return RunDisasm(*disasm_opt); }});
}

}  // namespace ckptscan::clients
