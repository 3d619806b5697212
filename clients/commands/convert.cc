// `ckptscan convert`: scan, then (SAFE only) write safetensors, optionally bf16 and signed;
// locally or through ckptscand (--server). One policy and report: app::Convert.
#include "app/convert.h"

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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "app/limit_flags.h"
#include "app/manifest.h"
#include "app/output_file.h"
#include "app/report.h"
#include "app/report_format.h"
#include "app/scan_set.h"
#include "app/scan_targets.h"
#include "app/shard_set.h"
#include "app/verdict.h"
#include "base/size_value.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "clients/progress.h"
#include "sandbox/run.h"
#include "signing/bundle.h"
#include "signing/keys.h"

namespace ckptscan::clients {
namespace {

using app::ExitCodeFor;
using app::kExitSafe;
using app::ReportToJson;
using app::ReportToText;
using app::TerminalSafe;
using app::VerdictName;
using base::WriteAll;

struct ConvertOptions {
  std::string input;
  std::string output;
  std::string select;
  std::string dtype = "keep";
  bool force = false;
  bool strict = false;
  std::vector<std::string> allow_dtypes;
  bool cast_quantized = false;
  std::string key;
  std::string sign_method = "files";
  std::string sign_shard_size = "128M";
  std::string cert;
  std::string cert_chain;
  std::string format = "text";
  std::string max_output_bytes;  // "" = four times the input plus 1 GiB
  VerbosityFlags verbosity;
  LocalFlags local;
  ServerFlags server;
};

// The conversion's options as every surface states them: the daemon gets them as they are, a
// local conversion parses them with app::ApplyConvertOptions as the daemon does.
v1::ConvertOptions ConvertOptionsOf(const ConvertOptions& opt) {
  v1::ConvertOptions options;
  options.set_dtype(opt.dtype);
  options.set_select(opt.select);
  options.set_strict(opt.strict);
  options.set_replace(opt.force);
  options.set_sign_method(opt.sign_method);
  for (const std::string& d : opt.allow_dtypes) options.add_allow_dtypes(d);
  options.set_cast_quantized(opt.cast_quantized);
  return options;
}

// `convert`: the scan of `scan` (same report, same exit code); only a SAFE input is
// converted, to an unlinked file next to OUT that is validated, then linked as OUT.
// The end of `convert`, local or --server: the report, the exit code, one line on what was
// written. `status` is the conversion's (OK: converted) once the verdict was SAFE.
CommandResult FinishConvert(const ConvertOptions& opt, const v1::Report& report,
                            const absl::Status& status) {
  const std::string out = opt.format == "json" ? ReportToJson(report) : ReportToText(report);
  if (absl::Status s = WriteAll(STDOUT_FILENO, out); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot write the report: ", s.message()));
  }
  const int scan_exit = ExitCodeFor(report.verdict());
  if (scan_exit != kExitSafe) {
    PrintError(absl::StrCat("not converted: ", TerminalSafe(opt.input), " is ",
                            base::AbslView(VerdictName(report.verdict())),
                            "; nothing was written"));
    return scan_exit;
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("conversion failed, nothing was written: ",
                                                    TerminalSafe(base::StdView(status.message()))));
  }
  const v1::Conversion& c = report.files(0).conversion();
  uint64_t not_written = c.not_written_total();
  for (int i = 1; i < report.files_size(); ++i) {
    not_written += report.files(i).conversion().not_written_total();
  }
  const int shards = report.files_size() - 1;
  PrintError(absl::StrCat(
      "converted: ", TerminalSafe(opt.input), " -> ", TerminalSafe(opt.output), " (",
      shards == 0 ? absl::StrCat(c.bytes(), " bytes, ")
                  : absl::StrCat(shards, " shards and ", app::kOutputIndexName, ", "),
      c.tensors(), " tensors",
      not_written == 0 ? "" : absl::StrCat("; ", not_written, " non-tensor values not written"),
      ")"));
  if (!c.signature().empty()) {
    PrintError(absl::StrCat("signed: ", TerminalSafe(c.signature()), " (key ",
                            TerminalSafe(c.signer()).substr(0, 16), "...)"));
  }
  return kExitSafe;
}

CommandResult RunConvert(const ConvertOptions& opt);

// `convert --server`: the daemon scans, converts and signs with its own key; by upload the
// bytes come back and are validated and linked here, by path the daemon writes them.
CommandResult RunConvertRemote(const ConvertOptions& opt) {
  if (!opt.key.empty() || !opt.cert.empty() || !opt.cert_chain.empty()) {
    return UsageError(
        "--server: the daemon signs with its own key (ckptscan admin public-key shows "
        "it); --key, --cert and --cert-chain cannot be used with --server");
  }
  if (!opt.max_output_bytes.empty()) {
    return UsageError(
        "--server: the daemon bounds its outputs itself (its --max-output-expansion and "
        "--max-output-bytes); --max-output-bytes cannot be used with --server");
  }
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> remote,
                        ConnectServer(opt.server, &opt.local));
  CKPT_RETURN_IF_ERROR(
      app::CheckOutputAbsent(AT_FDCWD, opt.output, TerminalSafe(opt.output), opt.force, "--force"));
  absl::StatusOr<v1::ConvertResponse> response =
      remote->Convert(opt.input, opt.output, ConvertOptionsOf(opt));
  v1::Report report;
  absl::Status status;
  if (response.ok()) {
    report = response->report();
    if (!response->converted()) {
      status = absl::FailedPreconditionError(response->error().empty() ? "not converted"
                                                                       : response->error());
    }
  } else {
    report = app::NewReport(Version(), "");
    *report.add_files() = ServerErrorReport(opt.input, response.status());
    app::FoldVerdict(&report);
  }
  return FinishConvert(opt, report, status);
}

// The signing options of the flags: the key (loaded here, before anything is scanned: a key
// file others can read is refused; it stays in this process, no worker ever sees it), the
// certificates, the shard size.
absl::Status LoadSigning(const ConvertOptions& opt, std::optional<signing::PrivateKey>* key,
                         app::SignOptions* sign) {
  if (!opt.key.empty()) {
    absl::StatusOr<signing::PrivateKey> loaded = signing::PrivateKey::LoadFile(opt.key);
    if (!loaded.ok()) {
      return UsageError(
          absl::StrCat("--key ", TerminalSafe(opt.key), ": ", loaded.status().message()));
    }
    *key = *std::move(loaded);
    sign->key = &**key;
  }
  absl::StatusOr<uint64_t> shard_size = app::ParseSizeValue(opt.sign_shard_size);
  if (!shard_size.ok() || *shard_size == 0) {
    return UsageError(absl::StrCat("--sign-shard-size ", TerminalSafe(opt.sign_shard_size),
                                   ": not a positive size"));
  }
  sign->shard_size = *shard_size;
  for (const auto& [path, pem] :
       {std::pair{&opt.cert, &sign->cert_pem}, std::pair{&opt.cert_chain, &sign->chain_pem}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> text =
        signing::ReadSmallFile(*path, signing::Limits{}.max_pem_bytes, "Limits::max_pem_bytes");
    if (!text.ok()) {
      return UsageError(absl::StrCat(TerminalSafe(*path), ": ", text.status().message()));
    }
    *pem = *std::move(text);
  }
  return absl::OkStatus();
}

CommandResult RunConvert(const ConvertOptions& opt) {
  if (opt.cast_quantized && opt.dtype != "bf16") {
    return UsageError(
        "--cast-quantized only means something with --dtype bf16 (nothing else is cast)");
  }
  if (!opt.server.server.empty()) return RunConvertRemote(opt);
  app::ConvertRequest request;
  if (absl::Status s =
          app::ApplyConvertOptions(ConvertOptionsOf(opt), signing::Method::kFiles, &request);
      !s.ok()) {
    return AsUsageError(s);
  }
  std::optional<signing::PrivateKey> key;
  CKPT_RETURN_IF_ERROR(LoadSigning(opt, &key, &request.sign));
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<app::Engine> engine, MakeEngine(opt.local));
  // Progress on a terminal: the input's bytes as they are hashed (the digest goes into the
  // output's provenance; the worker converts meanwhile).
  ProgressMeter meter(ProgressMeter::ShouldDraw(opt.verbosity.quiet), "convert");
  if (struct stat in; ::stat(opt.input.c_str(), &in) == 0 && S_ISREG(in.st_mode) &&
                      !absl::EndsWith(opt.input, ".json")) {
    meter.AddBytesTotal(static_cast<uint64_t>(in.st_size));
  }
  app::CallOptions call;
  call.bytes_read = meter.bytes();
  // What one file's output may hold, settled before it exists (the worker's RLIMIT_FSIZE, and
  // a plan over it is refused before a byte is written), named in the refusal.
  std::optional<uint64_t> max_output;
  if (!opt.max_output_bytes.empty()) {
    absl::StatusOr<uint64_t> bytes = base::ParseSize(opt.max_output_bytes);
    if (!bytes.ok() || *bytes == 0) {
      return UsageError(absl::StrCat("--max-output-bytes ", TerminalSafe(opt.max_output_bytes),
                                     ": not a positive size (suffix K, M, G, T)"));
    }
    max_output = *bytes;
  }
  call.output_allowance =
      [max_output](uint64_t input_bytes) -> absl::StatusOr<sandbox::OutputAllowance> {
    if (max_output.has_value()) return sandbox::OutputAllowance{*max_output, "max_output_bytes"};
    return sandbox::OutputAllowance{sandbox::DefaultOutputBytes(input_bytes),
                                    "max_output_bytes: 4 x the input + 1 GiB by default; "
                                    "--max-output-bytes sets it"};
  };
  const absl::Time started = absl::Now();
  if (opt.verbosity.verbose) {
    meter.PrintLine(
        absl::StrCat("ckptscan: converting ", TerminalSafe(opt.input), " to ",
                     TerminalSafe(opt.output), ", dtype ", opt.dtype, ", ",
                     opt.local.no_sandbox
                         ? std::string("unjailed worker (--no-sandbox)")
                         : absl::StrCat("jailed worker ", TerminalSafe(engine->jail().worker_path)),
                     opt.key.empty() ? "" : ", signed"));
  }
  request.input = opt.input;
  request.output = opt.output;
  // OUT's directory is opened once here; the output (or a set's staging directory) is created
  // relative to that descriptor only (app/output_file.h). If it cannot be opened, the
  // conversion still scans and reports, then fails naming it.
  absl::StatusOr<app::OutputDir> out_dir = app::OpenOutputDir(request);
  if (out_dir.ok()) {
    request.output_dir_fd = out_dir->fd;
    CKPT_RETURN_IF_ERROR(app::CheckOutputAbsent(out_dir->fd, out_dir->name,
                                                TerminalSafe(opt.output), opt.force, "--force"));
  }
  const app::ConvertOutcome outcome = app::Convert(*engine, std::move(request), call, Version());
  meter.Stop();
  if (opt.verbosity.verbose) {
    PrintError(absl::StrCat(
        base::AbslView(app::VerdictName(outcome.report.verdict())), " in ",
        absl::FormatDuration(absl::Trunc(absl::Now() - started, absl::Milliseconds(1)))));
  }
  return FinishConvert(opt, outcome.report, outcome.error);
}

}  // namespace

void AddConvertCommand(CLI::App* app, Commands* out) {
  auto convert_opt = std::make_shared<ConvertOptions>();
  CLI::App* convert = app->add_subcommand(
      "convert", "Scan a checkpoint; if it is SAFE, write its tensors as safetensors");
  convert
      ->add_option("IN", convert_opt->input,
                   "The checkpoint to convert, or a sharded checkpoint's index "
                   "(pytorch_model.bin.index.json)")
      ->required();
  convert
      ->add_option("--output,-o", convert_opt->output,
                   "The .safetensors file to write; for an index, the directory to create "
                   "(absent or empty)")
      ->type_name("OUT")
      ->required();
  convert
      ->add_option("--select", convert_opt->select,
                   "Convert only the tensors under this dotted key (e.g. model), the "
                   "prefix dropped")
      ->type_name("KEY");
  convert
      ->add_option("--dtype", convert_opt->dtype,
                   "keep: every tensor keeps its dtype; bf16: float32 and float16 tensors "
                   "become bfloat16 (round to nearest even), other dtypes are kept, and so are "
                   "the float tensors of layers that GPTQ, AWQ or bitsandbytes quantized (their "
                   "kernels read scales in the saved dtype; see --cast-quantized)")
      ->check(CLI::IsMember({"keep", "bf16"}))
      ->capture_default_str();
  convert
      ->add_option("--allow-dtype", convert_opt->allow_dtypes,
                   "Write tensors of this safetensors dtype as is although the widely deployed "
                   "safetensors cannot read the file. Only C64: by default complex64 tensors are "
                   "written as float32 with a trailing dimension of 2 (the same bytes, as "
                   "torch.view_as_real gives; their names listed in __metadata__ "
                   "ckptscan.complex64_as_real), because no safetensors before 0.7.0 (Debian 13 "
                   "has 0.4.5) reads a file holding C64")
      ->type_name("DTYPE")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check([](const std::string& v) {
        absl::Status s = convert::CheckAllowDtype(v);
        return s.ok() ? std::string() : std::string(s.message());
      });
  convert->add_flag("--cast-quantized", convert_opt->cast_quantized,
                    "With --dtype bf16, cast the float tensors of quantized layers (GPTQ, AWQ, "
                    "bitsandbytes: scales, bias, absmax) too; the report lists those layers "
                    "either way");
  convert->add_flag("--force", convert_opt->force, "Replace OUT if it exists");
  CLI::Option* key_opt =
      convert
          ->add_option(
              "--key", convert_opt->key,
              "Sign the output with this private key (from `ckptscan keygen`): an OpenSSF "
              "model-signing bundle, OUT.sig beside a file, model.sig inside a sharded set's "
              "directory")
          ->type_name("KEY");
  convert
      ->add_option("--sign-method", convert_opt->sign_method,
                   "files: one digest per file (what model_signing's own tools write); "
                   "shards: a digest per 128 MiB range, so that signing overlaps the "
                   "conversion and verify uses every core")
      ->check(CLI::IsMember({"files", "shards"}))
      ->capture_default_str();
  CLI::Option* cert_opt =
      convert
          ->add_option(
              "--cert", convert_opt->cert,
              "Sign with the certificate method: this PEM certificate certifies --key's public key "
              "(verify with --cert-chain CA)")
          ->type_name("LEAF")
          ->needs(key_opt);
  convert
      ->add_option("--cert-chain", convert_opt->cert_chain,
                   "With --cert: PEM intermediate certificates to include")
      ->type_name("CHAIN")
      ->needs(cert_opt);
  convert
      ->add_option("--sign-shard-size", convert_opt->sign_shard_size,
                   "With --sign-method shards: bytes per signed range (suffix K, M, G)")
      ->type_name("SIZE")
      ->capture_default_str();
  convert->add_flag("--strict", convert_opt->strict,
                    "Refuse to convert when (the selected part of) IN holds any value that is "
                    "not a tensor (by default such values are listed in the report as not "
                    "written)");
  convert
      ->add_option("--max-output-bytes", convert_opt->max_output_bytes,
                   "Largest output one file's conversion may write (suffix K, M, G, T; default: "
                   "four times the input plus 1 GiB: a few bytes can describe a tensor of "
                   "gigabytes, a stride-0 view); a larger one is not converted, naming "
                   "max_output_bytes")
      ->type_name("SIZE");
  convert->add_option("--format,-f", convert_opt->format, "Report format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  AddVerbosityFlags(convert, &convert_opt->verbosity);
  AddLocalFlags(convert, &convert_opt->local, "Set a limit of the pickle VM or a format reader (as for scan)");
  AddServerFlags(convert, &convert_opt->server);
  convert->footer(
      "IN is scanned exactly as `scan` does (the report goes to stdout). Only a SAFE\n"
      "file is converted: the jailed worker writes the safetensors bytes to an unlinked\n"
      "file in OUT's directory; this process judges the facts, checks that the output\n"
      "has exactly the header planned from them and passes the strict validator, then\n"
      "links it as OUT. Anything else writes nothing.\n\n"
      "Every tensor is written under its dotted path (state_dict.fc.weight); values\n"
      "that are not tensors (epochs, hyperparameters, RNG state) are not written and\n"
      "are listed in the report. Tied weights are stored once; the other names are\n"
      "recorded in __metadata__ as aliases (removed name -> kept name).\n\n"
      "Sharded checkpoints: IN is the index (pytorch_model.bin.index.json, read in a\n"
      "worker like any input); every shard it names in its directory is scanned and\n"
      "converted in its own worker, and must hold exactly the tensors the index maps\n"
      "to it. OUT is a directory that must be absent or empty: the set\n"
      "(model-00001-of-0000M.safetensors ... and model.safetensors.index.json) is\n"
      "written into a hidden staging directory beside it and renamed to OUT only when\n"
      "every shard converted; otherwise nothing is left.\n\n"
      "Exit codes: as for scan (1 SUSPICIOUS/DANGEROUS, 2 ERROR); also 2 when OUT\n"
      "exists without --force or the conversion fails (nothing is written).\n");
  out->push_back({convert, [convert_opt] { return RunConvert(*convert_opt); }});
}

}  // namespace ckptscan::clients
