// ckptscan: decides whether Python pickle / PyTorch checkpoint files are safe
// to load. Commands: scan, convert, keygen, verify, disasm, rules show|check, version
// (docs/cli.md).
// Exit codes: app/verdict.h.
//
// CLI11 reports parse errors by exception; they are caught around parse() and
// nowhere else.

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
#include <nlohmann/json.hpp>
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
#include "clients/disasm.h"
#include "clients/limit_flags.h"
#include "clients/remote.h"
#include "core/base/strings.h"
#include "core/convert/convert.h"
#include "core/safetensors/validator.h"
#include "core/signing/bundle.h"
#include "core/signing/keys.h"
#include "pipeline/jailed_scan.h"
#include "pipeline/local_scan.h"
#include "pipeline/mapped_file.h"
#include "pipeline/output_file.h"
#include "pipeline/sha256.h"
#include "pipeline/shard_set.h"
#include "pipeline/sign_output.h"
#include "rules/catalogue.h"
#include "rules/rule_set.h"
#include "sandbox/availability.h"

#ifndef CKPT_VERSION
#error "CKPT_VERSION must be defined by the build (the CMake project version)"
#endif

namespace ckptscan::clients {
namespace {

using app::ExitCodeFor;
using app::FailOn;
using app::FileReportToText;
using app::kExitError;
using app::kExitSafe;
using app::kExitUsage;
using app::kReportSchema;
using app::ReportToJson;
using app::ReportToJunit;
using app::ReportToSarif;
using app::ReportToText;
using app::TerminalSafe;
using app::VerdictName;

constexpr std::string_view kVersion = CKPT_VERSION;

constexpr char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0   every file SAFE (scan --fail-on dangerous: or SUSPICIOUS)\n"
    "  1   worst verdict SUSPICIOUS or DANGEROUS (findings win over errors)\n"
    "  2   worst verdict ERROR: a file could not be verified (malformed,\n"
    "      unsupported format, over a limit, unreadable, missing, or not the\n"
    "      digest its --manifest lists); also when no file was found or the\n"
    "      report could not be written\n"
    "  64  usage error: bad command, flag, --limit, rules or manifest file\n";

using base::WriteAll;

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

absl::StatusOr<std::shared_ptr<const rules::RuleSet>> LoadRules(const std::string& path) {
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

// How files are parsed: in a jailed ckptscan-worker (the default) or, with
// --no-sandbox, in this process (debugging only).
struct SandboxFlags {
  bool no_sandbox = false;
  double timeout_seconds = 60;
  std::string worker_memory = "8G";
  std::string max_sealed_copy = "4G";
  std::string worker;
};

void AddSandboxFlags(CLI::App* cmd, SandboxFlags* f) {
  cmd->add_flag("--no-sandbox", f->no_sandbox,
                "Parse inside this process, without the jail (debugging "
                "only; prints a warning; never the default)");
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
  cmd->add_option("--worker", f->worker,
                  "The ckptscan-worker binary (default: the one next to "
                  "this ckptscan)")
      ->type_name("PATH");
}

// The jail's options, or nullopt for --no-sandbox (after its warning). Sets
// `exit_code` and prints why when scanning must not start: a bad flag (64), or
// no jail possible here (2: seccomp unavailable, worker missing).
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
        "warning: --no-sandbox: parsing untrusted files inside this process, "
        "without the jail. For debugging only: a file that exploits the "
        "parser would run with your privileges.");
    return std::nullopt;
  }
  if (absl::Status s = sandbox::CheckSeccompAvailable(); !s.ok()) {
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
  return jail;
}

// --server: the daemon instead of the embedded jail (clients/remote.h).
struct ServerFlags {
  std::string server;
  bool by_path = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

void AddServerFlags(CLI::App* cmd, ServerFlags* f, bool with_by_path = true) {
  cmd->add_option("--server", f->server,
                  "Use the ckptscand daemon at ADDR instead of the embedded jail: local (this "
                  "user's default socket), unix:PATH, or HOST:PORT (TLS)")
      ->type_name("ADDR");
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

// The daemon client for --server, or null (after printing why, with `exit_code` set) when it
// cannot be used. Flags that only mean something locally are refused rather than ignored.
std::unique_ptr<RemoteClient> ConnectServer(const ServerFlags& f, const SandboxFlags& sandbox,
                                            const std::string& rules,
                                            const std::vector<std::string>& limits, int* exit_code,
                                            bool allow_plain = false) {
  *exit_code = kExitUsage;
  if (!allow_plain && absl::StartsWith(f.server, "plain:")) {
    PrintError(
        "--server plain:HOST:PORT is for `ckptscan health` only: the daemon serves its "
        "API over the unix socket or TLS");
    return nullptr;
  }
  if (sandbox.no_sandbox || !sandbox.worker.empty() || !rules.empty() || !limits.empty()) {
    PrintError(
        "--server: --no-sandbox, --worker, --rules and --limit are the daemon's to set; "
        "they cannot be used with --server");
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

struct ScanOptions {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string output;
  std::string rules;
  std::string digest = "sha256";
  std::string fail_on = "suspicious";
  std::vector<std::string> excludes;
  std::string manifest;
  std::string sarif_output;
  std::vector<std::string> limits;
  SandboxFlags sandbox;
  ServerFlags server;
};

// A file on this machine by stat(2) (symlinks followed).
absl::StatusOr<app::FileId> FindLocal(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return err == ENOENT ? app::MissingFile(path, err)
                         : absl::ErrnoToStatus(err, TerminalSafe(path));
  }
  return app::FileId{st.st_dev, st.st_ino};
}

// Files on this machine: stat(2) finds them (symlinks followed), a jailed worker (or, with
// --no-sandbox, this process) scans them.
class LocalFiles final : public app::FileSource {
 public:
  LocalFiles(const Engine& engine, const std::optional<pipeline::JailOptions>& jail, bool sha256)
      : engine_(engine), jail_(jail), sha256_(sha256) {}

  v1::FileReport Scan(const std::string& path) override {
    absl::StatusOr<v1::FileReport> file =
        jail_.has_value()
            ? pipeline::ScanFileJailed(path, *engine_.rules, engine_.limits, *jail_)
            : pipeline::ScanFileInProcess(path, *engine_.rules, engine_.limits, sha256_);
    return file.ok() ? *std::move(file) : pipeline::UnreadableFileReport(path, file.status());
  }

  absl::StatusOr<app::FileId> Find(const std::string& path) override { return FindLocal(path); }

 private:
  const Engine& engine_;
  const std::optional<pipeline::JailOptions>& jail_;
  const bool sha256_;
};

// A file the daemon could not be asked about: ERROR, never a pass.
v1::FileReport ServerErrorReport(const std::string& path, const absl::Status& status) {
  v1::FileReport f;
  f.set_path(path);
  app::AddError(&f, v1::ERROR_CODE_SERVER, std::string(status.message()));
  return f;
}

// Files on this machine judged by ckptscand (uploaded, or by path), one at a time: the set is
// walked here (ScanSet), so each call asks for the file alone. The daemon's versions go into the
// report.
class RemoteFiles final : public app::FileSource {
 public:
  RemoteFiles(RemoteClient* remote, bool sha256, v1::Report* report)
      : remote_(remote), report_(report) {
    options_.set_skip_digest(!sha256);
    options_.set_single_file(true);
  }

  v1::FileReport Scan(const std::string& path) override {
    absl::StatusOr<v1::Report> r = remote_->Scan(path, options_);
    if (!r.ok()) return ServerErrorReport(path, r.status());
    if (r->files_size() != 1) {
      return ServerErrorReport(path, absl::DataLossError("the daemon's report has no single file"));
    }
    report_->set_scanner_version(r->scanner_version());
    report_->set_rules_version(r->rules_version());
    return r->files(0);
  }

  // The set is on this machine whichever way its files are sent.
  absl::StatusOr<app::FileId> Find(const std::string& path) override { return FindLocal(path); }

 private:
  RemoteClient* remote_;
  v1::Report* report_;
  v1::ScanOptions options_;
};

int RunScan(const ScanOptions& opt) {
  if (opt.paths.empty() && opt.manifest.empty()) {
    PrintError("scan: give PATH... or --manifest FILE (see ckptscan scan --help)");
    return kExitUsage;
  }
  if (!opt.manifest.empty() && opt.digest == "none") {
    PrintError("scan: --manifest compares digests; it cannot be used with --digest none");
    return kExitUsage;
  }
  std::vector<app::ManifestEntry> manifest;
  if (!opt.manifest.empty()) {
    absl::StatusOr<std::vector<app::ManifestEntry>> m = app::ReadManifest(opt.manifest);
    if (!m.ok()) {
      PrintError(absl::StrCat("--manifest: ", TerminalSafe(base::StdView(m.status().message()))));
      return kExitUsage;
    }
    manifest = *std::move(m);
  }
  const bool sha256 = opt.digest == "sha256";
  v1::Report report = app::NewReport(kVersion, "");
  std::unique_ptr<RemoteClient> remote;
  std::optional<Engine> engine;
  std::optional<pipeline::JailOptions> jail;
  std::unique_ptr<app::FileSource> source;
  if (!opt.server.server.empty()) {
    int setup_exit = 0;
    remote = ConnectServer(opt.server, opt.sandbox, opt.rules, opt.limits, &setup_exit);
    if (remote == nullptr) return setup_exit;
    source = std::make_unique<RemoteFiles>(remote.get(), sha256, &report);
  } else {
    engine = LoadEngine(opt.rules, opt.limits);
    if (!engine) return kExitUsage;
    int setup_exit = 0;
    jail = SetUpSandbox(opt.sandbox, &setup_exit);
    if (setup_exit != 0) return setup_exit;
    if (jail.has_value()) jail->sha256 = sha256;
    report.set_rules_version(engine->rules->version());
    source = std::make_unique<LocalFiles>(*engine, jail, sha256);
  }

  const std::vector<app::ScanTarget> targets = app::ExpandScanPaths(opt.paths, opt.excludes);
  std::string skipped;
  for (const app::ScanTarget& t : targets) {
    if (t.kind != app::ScanTarget::Kind::kSkipped) continue;
    absl::StrAppend(&skipped, "skipped: ", TerminalSafe(t.path), " (", TerminalSafe(t.reason),
                    ")\n");
  }
  app::ScanSet(targets, manifest, source.get(), &report);
  if (report.files_size() == 0) PrintError("no files to scan under the given paths");

  const FailOn fail_on = opt.fail_on == "dangerous" ? FailOn::kDangerous : FailOn::kSuspicious;
  std::string out;
  if (opt.format == "json") {
    out = ReportToJson(report);
  } else if (opt.format == "sarif") {
    out = ReportToSarif(report, rules::Catalogue());
  } else if (opt.format == "junit") {
    out = ReportToJunit(report, fail_on);
  } else {
    out = skipped + ReportToText(report);
  }
  if (opt.format != "text" && !skipped.empty()) {
    (void)WriteAll(STDERR_FILENO,
                   skipped);  // never silent, but keep JSON/SARIF/JUnit parseable
  }
  if (absl::Status s = WriteOutput(opt.output, out); !s.ok()) {
    PrintError(absl::StrCat("cannot write the report: ", s.message()));
    return kExitError;
  }
  if (!opt.sarif_output.empty()) {
    if (absl::Status s = WriteOutput(opt.sarif_output, ReportToSarif(report, rules::Catalogue()));
        !s.ok()) {
      PrintError(absl::StrCat("cannot write the SARIF report: ", s.message()));
      return kExitError;
    }
  }
  return ExitCodeFor(report, fail_on);
}

struct ConvertOptions {
  std::string input;
  std::string output;
  std::string select;
  std::string dtype = "keep";
  bool force = false;
  bool strict = false;
  std::string key;
  std::string sign_method = "files";
  std::string sign_shard_size = "128M";
  std::string cert;
  std::string cert_chain;
  std::string format = "text";
  std::string rules;
  std::vector<std::string> limits;
  SandboxFlags sandbox;
  ServerFlags server;
};

// `convert`: the scan of `scan` (same report, same exit code); only a SAFE input is
// converted, to an unlinked file next to OUT that is validated, then linked as OUT.
// The end of `convert`, local or --server: the report, the exit code, one line on what was
// written. `status` is the conversion's (OK: converted) once the verdict was SAFE.
int FinishConvert(const ConvertOptions& opt, const v1::Report& report, const absl::Status& status) {
  const std::string out = opt.format == "json" ? ReportToJson(report) : ReportToText(report);
  if (absl::Status s = WriteAll(STDOUT_FILENO, out); !s.ok()) {
    PrintError(absl::StrCat("cannot write the report: ", s.message()));
    return kExitError;
  }
  const int scan_exit = ExitCodeFor(report.verdict());
  if (scan_exit != kExitSafe) {
    PrintError(absl::StrCat("not converted: ", TerminalSafe(opt.input), " is ",
                            base::AbslView(VerdictName(report.verdict())),
                            "; nothing was written"));
    return scan_exit;
  }
  if (!status.ok()) {
    PrintError(absl::StrCat("conversion failed, nothing was written: ",
                            TerminalSafe(base::StdView(status.message()))));
    return kExitError;
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
                  : absl::StrCat(shards, " shards and ", pipeline::kOutputIndexName, ", "),
      c.tensors(), " tensors",
      not_written == 0 ? "" : absl::StrCat("; ", not_written, " non-tensor values not written"),
      ")"));
  if (!c.signature().empty()) {
    PrintError(absl::StrCat("signed: ", TerminalSafe(c.signature()), " (key ",
                            TerminalSafe(c.signer()).substr(0, 16), "...)"));
  }
  return kExitSafe;
}

int RunConvert(const ConvertOptions& opt);

// `convert --server`: the daemon scans, converts and signs with its own key; by upload the
// bytes come back and are validated and linked here, by path the daemon writes them.
int RunConvertRemote(const ConvertOptions& opt) {
  if (!opt.key.empty() || !opt.cert.empty() || !opt.cert_chain.empty()) {
    PrintError(
        "--server: the daemon signs with its own key (ckptscan admin public-key shows "
        "it); --key, --cert and --cert-chain cannot be used with --server");
    return kExitUsage;
  }
  int setup_exit = 0;
  std::unique_ptr<RemoteClient> remote =
      ConnectServer(opt.server, opt.sandbox, opt.rules, opt.limits, &setup_exit);
  if (remote == nullptr) return setup_exit;
  struct stat st;
  if (!opt.force && ::lstat(opt.output.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    PrintError(
        absl::StrCat(TerminalSafe(opt.output), ": exists; not converting (--force replaces it)"));
    return kExitError;
  }
  v1::ConvertOptions options;
  options.set_dtype(opt.dtype);
  options.set_select(opt.select);
  options.set_strict(opt.strict);
  options.set_replace(opt.force);
  options.set_sign_method(opt.sign_method);
  absl::StatusOr<v1::ConvertResponse> response = remote->Convert(opt.input, opt.output, options);
  v1::Report report;
  absl::Status status;
  if (response.ok()) {
    report = response->report();
    if (!response->converted()) {
      status = absl::FailedPreconditionError(response->error().empty() ? "not converted"
                                                                       : response->error());
    }
  } else {
    report = app::NewReport(kVersion, "");
    *report.add_files() = ServerErrorReport(opt.input, response.status());
    app::FoldVerdict(&report);
  }
  return FinishConvert(opt, report, status);
}

int RunConvert(const ConvertOptions& opt) {
  if (!opt.server.server.empty()) return RunConvertRemote(opt);
  std::optional<Engine> engine = LoadEngine(opt.rules, opt.limits);
  if (!engine) return kExitUsage;
  const rules::RuleSet& ruleset = *engine->rules;
  int setup_exit = 0;
  const std::optional<pipeline::JailOptions> jail = SetUpSandbox(opt.sandbox, &setup_exit);
  if (setup_exit != 0) return setup_exit;
  // The key is loaded here, before anything is scanned (a key file others can read is refused),
  // and stays in this process: no worker ever sees it.
  std::optional<signing::PrivateKey> key;
  if (!opt.key.empty()) {
    absl::StatusOr<signing::PrivateKey> loaded = signing::PrivateKey::LoadFile(opt.key);
    if (!loaded.ok()) {
      PrintError(absl::StrCat("--key ", TerminalSafe(opt.key), ": ", loaded.status().message()));
      return kExitUsage;
    }
    key = *std::move(loaded);
  }
  pipeline::ConvertRequest request;
  request.input = opt.input;
  request.output = opt.output;
  // OUT's directory is opened once here; the output (or a set's staging directory) is created
  // relative to that descriptor only (pipeline/output_file.h). If it cannot be opened, the
  // conversion still scans and reports, then fails naming it.
  absl::StatusOr<pipeline::OutputDir> out_dir = pipeline::OpenOutputDir(request);
  if (out_dir.ok()) request.output_dir_fd = out_dir->fd;
  // A file OUT is checked here (fail fast); a directory OUT is for a sharded set, which
  // checks it itself (it must be empty).
  struct stat st;
  if (!opt.force && out_dir.ok() &&
      ::fstatat(out_dir->fd, out_dir->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !S_ISDIR(st.st_mode)) {
    PrintError(
        absl::StrCat(TerminalSafe(opt.output), ": exists; not converting (--force replaces it)"));
    return kExitError;
  }
  request.select = opt.select;
  request.to_bf16 = opt.dtype == "bf16";
  request.scanner_version = std::string(kVersion);
  request.rules_version = ruleset.version();
  request.replace = opt.force;
  request.strict = opt.strict;
  request.sign.key = key.has_value() ? &*key : nullptr;
  request.sign.method =
      opt.sign_method == "shards" ? signing::Method::kShards : signing::Method::kFiles;
  absl::StatusOr<uint64_t> shard_size = ParseSizeValue(opt.sign_shard_size);
  if (!shard_size.ok() || *shard_size == 0) {
    PrintError(absl::StrCat("--sign-shard-size ", TerminalSafe(opt.sign_shard_size),
                            ": not a positive size"));
    return kExitUsage;
  }
  request.sign.shard_size = *shard_size;
  for (const auto& [path, pem] : {std::pair{&opt.cert, &request.sign.cert_pem},
                                  std::pair{&opt.cert_chain, &request.sign.chain_pem}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> text =
        signing::ReadSmallFile(*path, signing::Limits{}.max_pem_bytes, "Limits::max_pem_bytes");
    if (!text.ok()) {
      PrintError(absl::StrCat(TerminalSafe(*path), ": ", text.status().message()));
      return kExitUsage;
    }
    *pem = *std::move(text);
  }
  const app::ConvertOutcome outcome = app::Convert(
      request,
      [&](const pipeline::ConvertRequest& r, const pipeline::PlanCheck& check) {
        return jail.has_value()
                   ? pipeline::ConvertFileJailed(r, ruleset, engine->limits, *jail, check)
                   : pipeline::ConvertFileInProcess(r, ruleset, engine->limits, check);
      },
      kVersion, ruleset.version());
  return FinishConvert(opt, outcome.report, outcome.error);
}

struct DisasmOptions {
  std::string file;
  std::string rules;
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
  if (setup_exit != 0) return setup_exit;
  const auto out = [](std::string_view text) { (void)WriteAll(STDOUT_FILENO, text); };

  if (!jail.has_value()) {
    absl::StatusOr<pipeline::MappedFile> file = pipeline::MappedFile::Open(opt.file);
    if (!file.ok()) {
      return PrintFileReport(pipeline::UnreadableFileReport(opt.file, file.status()));
    }
    const v1::FileReport report = Disassemble(opt.file, file->bytes(), ruleset, limits, out);
    return ExitCodeFor(report.verdict());
  }

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

int RunRulesShow(const std::string& rules_path) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> ruleset = LoadRules(rules_path);
  if (!ruleset.ok()) {
    PrintError(absl::StrCat("--rules: ", ruleset.status().message()));
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
  (void)WriteAll(STDOUT_FILENO,
                 absl::StrCat("ckptscan ", base::AbslView(kVersion), "\nrules ", ruleset->version(),
                              "\nreport schema ", base::AbslView(kReportSchema), "\n"));
  return 0;
}

struct KeygenOptions {
  std::string output;
  std::string public_output;
};

// `keygen`: a new ECDSA P-256 key, private PEM created 0600 and never overwritten.
int RunKeygen(const KeygenOptions& opt) {
  const std::string pub =
      opt.public_output.empty() ? absl::StrCat(opt.output, ".pub") : opt.public_output;
  absl::StatusOr<signing::PublicKey> key = signing::GenerateKeyFiles(opt.output, pub);
  if (!key.ok()) {
    PrintError(absl::StrCat("keygen: ", key.status().message()));
    return kExitError;
  }
  (void)WriteAll(STDOUT_FILENO, absl::StrCat("private key: ", TerminalSafe(opt.output),
                                             " (mode 0600)\n", "public key:  ", TerminalSafe(pub),
                                             "\nhint:        ", key->hint(), "\n"));
  return 0;
}

struct VerifyCliOptions {
  std::string model;
  std::string signature;
  std::string pubkey;
  std::vector<std::string> ca_certs;
  bool ignore_unsigned = false;
};

// `verify`: the bundle, the signature, and every file of the model against it.
int RunVerify(const VerifyCliOptions& opt) {
  struct stat st;
  if (::stat(opt.model.c_str(), &st) != 0) {
    PrintError(absl::StrCat("verify: ", TerminalSafe(opt.model), ": ", std::strerror(errno)));
    return kExitError;
  }
  const bool dir = S_ISDIR(st.st_mode);
  const std::string sig = !opt.signature.empty() ? opt.signature
                          : dir ? absl::StrCat(opt.model, "/", pipeline::kSignatureName)
                                : pipeline::SignaturePathFor(opt.model);
  absl::StatusOr<signing::Trust> trust = [&]() -> absl::StatusOr<signing::Trust> {
    if (!opt.pubkey.empty()) {
      absl::StatusOr<signing::PublicKey> pub = signing::PublicKey::LoadFile(opt.pubkey);
      if (!pub.ok()) return pub.status();
      return signing::Trust::Key(*std::move(pub));
    }
    return signing::Trust::CaCertificateFiles(opt.ca_certs);
  }();
  if (!trust.ok()) {
    PrintError(absl::StrCat("verify: ", trust.status().message()));
    return kExitUsage;
  }
  absl::StatusOr<std::string> bundle =
      signing::ReadSmallFile(sig, signing::Limits{}.max_bundle_bytes, "Limits::max_bundle_bytes");
  if (!bundle.ok()) {
    PrintError(absl::StrCat("verify: ", bundle.status().message()));
    return kExitError;
  }
  signing::VerifyOptions options;
  options.ignore_unsigned_files = opt.ignore_unsigned;
  if (dir && opt.signature.empty()) options.ignore_paths = {pipeline::kSignatureName};
  absl::StatusOr<signing::VerifiedBundle> verified =
      signing::VerifyModel(*bundle, *trust, opt.model, options);
  if (!verified.ok()) {
    PrintError(absl::StrCat("verify: FAILED: ", TerminalSafe(opt.model), ": ",
                            TerminalSafe(base::StdView(verified.status().message()))));
    return absl::IsInvalidArgument(verified.status()) || absl::IsNotFound(verified.status())
               ? kExitError
               : 1;
  }
  (void)WriteAll(
      STDOUT_FILENO,
      absl::StrCat(
          TerminalSafe(opt.model), ": OK (", verified->manifest.resources.size(), " signed ",
          verified->manifest.serialization.method == signing::Method::kShards ? "shards"
          : verified->manifest.resources.size() == 1                          ? "file"
                                                                              : "files",
          ", ", verified->method, " method, signer ", TerminalSafe(verified->signer), ")\n"));
  return 0;
}

struct AdminOptions {
  ServerFlags server;
  std::string format = "text";
};

enum class AdminCommand { kStatus, kMetrics, kReloadRules, kPublicKey };

std::string StatusText(const v1::StatusResponse& s) {
  std::string out = absl::StrCat(
      "ckptscand ", s.scanner_version(), ", rules ", s.rules_version(), ", up ", s.uptime_seconds(),
      " s", s.draining() ? " (draining)" : "", "\n", "jobs: ", s.jobs_running(), " running (max ",
      s.max_running(), "), ", s.jobs_queued(), " queued (max ", s.max_queued(), "), ",
      s.jobs_refused(), " refused (queue full)\n", "done:");
  if (s.jobs_done().empty()) absl::StrAppend(&out, " none");
  for (const v1::VerdictCount& c : s.jobs_done()) {
    absl::StrAppend(&out, " ", base::AbslView(VerdictName(c.verdict())), " ", c.count());
  }
  absl::StrAppend(&out, "\nworker failures:");
  if (s.worker_failures().empty()) absl::StrAppend(&out, " none");
  for (const v1::WorkerFailure& f : s.worker_failures()) {
    absl::StrAppend(&out, " ", f.kind(), " ", f.count());
  }
  absl::StrAppend(&out, "\nroots: ", s.roots().empty() ? "none (uploads only)" : "");
  for (int i = 0; i < s.roots_size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", TerminalSafe(s.roots(i)));
  }
  absl::StrAppend(&out, "\nsigner: ", s.signer(), "\njail: ", s.jail_layers(), "\n");
  return out;
}

// `admin status -f json`: the fields by their proto names, verdicts spelled as reports spell
// them ("SAFE") and counts as JSON numbers (protobuf's printer gives "VERDICT_SAFE" and 64-bit
// counts as strings).
std::string StatusJson(const v1::StatusResponse& s) {
  nlohmann::ordered_json j;
  j["scanner_version"] = s.scanner_version();
  j["rules_version"] = s.rules_version();
  j["uptime_seconds"] = s.uptime_seconds();
  j["jobs_running"] = s.jobs_running();
  j["jobs_queued"] = s.jobs_queued();
  j["max_running"] = s.max_running();
  j["max_queued"] = s.max_queued();
  j["jobs_done"] = nlohmann::ordered_json::array();
  for (const v1::VerdictCount& c : s.jobs_done()) {
    j["jobs_done"].push_back(
        {{"verdict", std::string(VerdictName(c.verdict()))}, {"count", c.count()}});
  }
  j["worker_failures"] = nlohmann::ordered_json::array();
  for (const v1::WorkerFailure& f : s.worker_failures()) {
    j["worker_failures"].push_back({{"kind", f.kind()}, {"count", f.count()}});
  }
  j["jobs_refused"] = s.jobs_refused();
  j["draining"] = s.draining();
  j["roots"] = std::vector<std::string>(s.roots().begin(), s.roots().end());
  j["signer"] = s.signer();
  j["jail_layers"] = s.jail_layers();
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

struct HealthOptions {
  ServerFlags server;
  std::string service;
  double timeout_seconds = 5;
};

int RunHealth(const HealthOptions& opt) {
  int setup_exit = 0;
  std::unique_ptr<RemoteClient> remote =
      ConnectServer(opt.server, SandboxFlags{}, "", {}, &setup_exit, /*allow_plain=*/true);
  if (remote == nullptr) return setup_exit;
  absl::StatusOr<bool> serving = remote->Health(opt.service, absl::Seconds(opt.timeout_seconds));
  if (!serving.ok()) {
    PrintError(TerminalSafe(base::StdView(serving.status().message())));
    return kExitError;
  }
  (void)WriteAll(STDOUT_FILENO, *serving ? "SERVING\n" : "NOT_SERVING\n");
  return *serving ? 0 : 1;
}

int RunAdmin(const AdminOptions& opt, AdminCommand command) {
  int setup_exit = 0;
  std::unique_ptr<RemoteClient> remote =
      ConnectServer(opt.server, SandboxFlags{}, "", {}, &setup_exit);
  if (remote == nullptr) return setup_exit;
  std::string text;
  const google::protobuf::Message* message = nullptr;
  absl::StatusOr<v1::StatusResponse> status;
  absl::StatusOr<v1::ReloadRulesResponse> reload;
  absl::StatusOr<v1::MetricsResponse> metrics;
  absl::StatusOr<v1::PublicKeyResponse> key;
  absl::Status failed;
  switch (command) {
    case AdminCommand::kStatus:
      status = remote->Status();
      failed = status.status();
      if (status.ok()) {
        text = StatusText(*status);
        message = &*status;
      }
      break;
    case AdminCommand::kMetrics:
      metrics = remote->Metrics();
      failed = metrics.status();
      if (metrics.ok()) {
        text = metrics->text();
        message = &*metrics;
      }
      break;
    case AdminCommand::kReloadRules:
      reload = remote->ReloadRules();
      failed = reload.status();
      if (reload.ok()) {
        text = absl::StrCat("rules reloaded from ", TerminalSafe(reload->source()), ": ",
                            reload->previous_version(), " -> ", reload->rules_version(), "\n");
        message = &*reload;
      }
      break;
    case AdminCommand::kPublicKey:
      key = remote->PublicKey();
      failed = key.status();
      if (key.ok()) {
        text = key->pem();
        message = &*key;
      }
      break;
  }
  if (!failed.ok()) {
    PrintError(TerminalSafe(base::StdView(failed.message())));
    return kExitError;
  }
  if (opt.format == "json" && command == AdminCommand::kStatus) {
    text = StatusJson(*status);
  } else if (opt.format == "json") {
    google::protobuf::util::JsonPrintOptions json;
    json.add_whitespace = true;
    json.preserve_proto_field_names = true;
    text.clear();
    (void)google::protobuf::util::MessageToJsonString(*message, &text, json);
  }
  if (absl::Status s = WriteAll(STDOUT_FILENO, text); !s.ok()) return kExitError;
  return 0;
}

std::string ScanFooter() {
  return absl::StrCat(
      "Formats (--format):\n"
      "  text   for people: per file its findings and errors; a summary\n"
      "  json   the report of docs/report.md (schema ckptscan.report.v1)\n"
      "  sarif  SARIF 2.1.0 for CI code scanning (GitHub code scanning)\n"
      "  junit  JUnit XML: a testcase per file, failure for SUSPICIOUS and\n"
      "         DANGEROUS (as --fail-on says), error for ERROR\n"
      "\n"
      "Folders are walked recursively in sorted order. Symlinked folders\n"
      "are not followed: they are listed as skipped, as are FIFOs, sockets,\n"
      "devices and what --exclude matches. The format is detected from the\n"
      "content, never from the file name: pickles, torch archives, numpy,\n"
      "safetensors (validated strictly) and sharded-checkpoint indexes\n"
      "(*.index.json), whose every shard must exist beside the index and is\n"
      "scanned too (a missing shard makes the index ERROR).\n"
      "\n"
      "--manifest FILE: every file FILE lists is scanned and its SHA-256\n"
      "compared; a missing file is ERROR, and so is a digest mismatch\n"
      "(error code digest_mismatch): it exits 2 (1 if another file has\n"
      "findings), never 0.\n"
      "\n"
      "Sandbox: each file is parsed by a fresh ckptscan-worker in a jail\n"
      "(seccomp allowlist, rlimits, namespaces where available); only facts\n"
      "come back, and the rules run here. A worker killed for a forbidden\n"
      "system call makes the file DANGEROUS (sandbox.violation); a timeout,\n"
      "crash or limit makes it ERROR. Without seccomp ckptscan refuses to\n"
      "scan (exit 2) unless --no-sandbox is given (debugging only).\n"
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
  CLI::App* scan = app.add_subcommand("scan", "Scan files and folders; print a report");
  scan->add_option("PATH", scan_opt.paths, "Files or folders to scan (optional with --manifest)");
  scan->add_option("--format,-f", scan_opt.format, "Report format: text, json, sarif or junit")
      ->check(CLI::IsMember({"text", "json", "sarif", "junit"}))
      ->capture_default_str();
  scan->add_option("--fail-on", scan_opt.fail_on,
                   "Least verdict that exits 1: suspicious (SUSPICIOUS or DANGEROUS) or "
                   "dangerous (DANGEROUS only; SUSPICIOUS then exits 0, or 2 if that file also "
                   "has an error). ERROR always exits 2")
      ->check(CLI::IsMember({"suspicious", "dangerous"}))
      ->capture_default_str();
  scan->add_option("--exclude", scan_opt.excludes,
                   "Skip files and folders inside a scanned folder whose path relative to it "
                   "matches this fnmatch GLOB ('*' also matches '/'); repeatable; listed as "
                   "skipped")
      ->type_name("GLOB")
      ->allow_extra_args(false);
  scan->add_option("--manifest", scan_opt.manifest,
                   "Scan every file FILE lists and compare its SHA-256: sha256sum output "
                   "(HEX  PATH) or a JSON list of {\"path\", \"sha256\"}; paths relative to "
                   "FILE's folder")
      ->type_name("FILE");
  scan->add_option("--output,-o", scan_opt.output, "Write the report to FILE instead of stdout")
      ->type_name("FILE");
  scan->add_option("--sarif-output", scan_opt.sarif_output,
                   "Also write the report as SARIF 2.1.0 to FILE (for CI: text in the log, "
                   "SARIF for code scanning, from one scan)")
      ->type_name("FILE");
  scan->add_option("--rules", scan_opt.rules,
                   "Rules file (text-format ckptscan.v1.RuleSet) instead of "
                   "the built-in rules")
      ->type_name("FILE");
  scan->add_option("--digest", scan_opt.digest,
                   "File digest in the report: sha256 (read on a second core while the "
                   "worker parses) or none (scan time then does not grow with file size)")
      ->check(CLI::IsMember({"sha256", "none"}))
      ->capture_default_str();
  scan->add_option("--limit", scan_opt.limits, "Set a VM limit, e.g. max_opcodes=1000 (see below)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  AddSandboxFlags(scan, &scan_opt.sandbox);
  AddServerFlags(scan, &scan_opt.server);
  scan->footer(ScanFooter());

  DisasmOptions disasm_opt;
  CLI::App* disasm = app.add_subcommand("disasm",
                                        "Annotated opcode listing of a raw pickle stream, "
                                        "then errors and findings");
  disasm->add_option("FILE", disasm_opt.file, "The file to disassemble")->required();
  disasm->add_option("--rules", disasm_opt.rules, "Rules file instead of the built-in rules")
      ->type_name("FILE");
  disasm->add_option("--limit", disasm_opt.limits, "Set a VM limit (as for scan)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  AddSandboxFlags(disasm, &disasm_opt.sandbox);
  disasm->footer(
      absl::StrCat("The listing is made inside the jailed worker (at most 16 MiB; cut with\n"
                   "a note past that); --no-sandbox streams it from this process.\n\n",
                   "Limits:\n", LimitFlagsHelp(), "\nExit codes: as for scan.\n"));

  ConvertOptions convert_opt;
  CLI::App* convert = app.add_subcommand(
      "convert", "Scan a checkpoint; if it is SAFE, write its tensors as safetensors");
  convert
      ->add_option("IN", convert_opt.input,
                   "The checkpoint to convert, or a sharded checkpoint's index "
                   "(pytorch_model.bin.index.json)")
      ->required();
  convert
      ->add_option("--output,-o", convert_opt.output,
                   "The .safetensors file to write; for an index, the directory to create "
                   "(absent or empty)")
      ->type_name("OUT")
      ->required();
  convert
      ->add_option("--select", convert_opt.select,
                   "Convert only the tensors under this dotted key (e.g. model), the "
                   "prefix dropped")
      ->type_name("KEY");
  convert
      ->add_option("--dtype", convert_opt.dtype,
                   "keep: every tensor keeps its dtype; bf16: float32 and float16 tensors "
                   "become bfloat16 (round to nearest even), other dtypes are kept")
      ->check(CLI::IsMember({"keep", "bf16"}))
      ->capture_default_str();
  convert->add_flag("--force", convert_opt.force, "Replace OUT if it exists");
  CLI::Option* key_opt =
      convert
          ->add_option(
              "--key", convert_opt.key,
              "Sign the output with this private key (from `ckptscan keygen`): an OpenSSF "
              "model-signing bundle, OUT.sig beside a file, model.sig inside a sharded set's "
              "directory")
          ->type_name("KEY");
  convert
      ->add_option("--sign-method", convert_opt.sign_method,
                   "files: one digest per file (what model_signing's own tools write); "
                   "shards: a digest per 128 MiB range, so that signing overlaps the "
                   "conversion and verify uses every core")
      ->check(CLI::IsMember({"files", "shards"}))
      ->capture_default_str();
  CLI::Option* cert_opt =
      convert
          ->add_option(
              "--cert", convert_opt.cert,
              "Sign with the certificate method: this PEM certificate certifies --key's public key "
              "(verify with --cert-chain CA)")
          ->type_name("LEAF")
          ->needs(key_opt);
  convert
      ->add_option("--cert-chain", convert_opt.cert_chain,
                   "With --cert: PEM intermediate certificates to include")
      ->type_name("CHAIN")
      ->needs(cert_opt);
  convert
      ->add_option("--sign-shard-size", convert_opt.sign_shard_size,
                   "With --sign-method shards: bytes per signed range (suffix K, M, G)")
      ->type_name("SIZE")
      ->capture_default_str();
  convert->add_flag("--strict", convert_opt.strict,
                    "Refuse to convert when (the selected part of) IN holds any value that is "
                    "not a tensor (by default such values are listed in the report as not "
                    "written)");
  convert->add_option("--format,-f", convert_opt.format, "Report format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  convert->add_option("--rules", convert_opt.rules, "Rules file instead of the built-in rules")
      ->type_name("FILE");
  convert->add_option("--limit", convert_opt.limits, "Set a VM limit (as for scan)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  AddSandboxFlags(convert, &convert_opt.sandbox);
  AddServerFlags(convert, &convert_opt.server);
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

  KeygenOptions keygen_opt;
  CLI::App* keygen =
      app.add_subcommand("keygen", "Create an ECDSA P-256 signing key for convert --key");
  keygen
      ->add_option("--output,-o", keygen_opt.output,
                   "The private key file to create (PEM, mode 0600; never overwritten)")
      ->type_name("KEY")
      ->required();
  keygen
      ->add_option("--public", keygen_opt.public_output,
                   "The public key file to create (default: KEY.pub)")
      ->type_name("PUB");

  VerifyCliOptions verify_opt;
  CLI::App* verify = app.add_subcommand(
      "verify", "Check an OpenSSF model-signing bundle against a model directory or file");
  verify
      ->add_option("MODEL", verify_opt.model,
                   "The model: a directory (convert of a sharded set) or one file")
      ->required();
  verify
      ->add_option("--signature", verify_opt.signature,
                   "The bundle (default: MODEL/model.sig for a directory, MODEL.sig for a "
                   "file)")
      ->type_name("SIG");
  CLI::Option* pubkey_opt =
      verify->add_option("--pubkey", verify_opt.pubkey, "Trust this public key (PEM)")
          ->type_name("PUB");
  CLI::Option* ca_opt =
      verify
          ->add_option("--cert-chain", verify_opt.ca_certs,
                       "Trust certificates issued under these CA certificates (PEM; repeatable)")
          ->type_name("CA");
  pubkey_opt->excludes(ca_opt);
  verify->add_flag("--ignore-unsigned-files", verify_opt.ignore_unsigned,
                   "Accept files present in MODEL that the bundle does not cover");
  verify->footer(
      "Checks, in order: the bundle's structure (strict JSON, Sigstore bundle v0.3, DSSE,\n"
      "in-toto statement), the signature with the given key or certificate chain, then\n"
      "every file of MODEL: each signed file must be present with its digest, and no\n"
      "unsigned file may have been added. The first failure is printed.\n\n"
      "Exit codes: 0 verified; 1 verification failed (wrong key, bad signature, a\n"
      "file changed, missing or added); 2 the bundle or model could not be read or is\n"
      "malformed; 64 usage.\n");

  CLI::App* rules_cmd = app.add_subcommand("rules", "Show or check rules");
  rules_cmd->require_subcommand(1);
  std::string show_rules;
  CLI::App* show = rules_cmd->add_subcommand("show",
                                             "Print the effective rules (built-in, or "
                                             "--rules FILE) as text-format proto");
  show->add_option("--rules", show_rules, "Rules file instead of the built-in rules")
      ->type_name("FILE");
  std::string check_file;
  CLI::App* check = rules_cmd->add_subcommand(
      "check", "Validate a rules file: exit 0 if valid, 64 with the error otherwise");
  check->add_option("FILE", check_file, "The rules file")->required();

  CLI::App* version = app.add_subcommand("version", "Print the scanner and rules versions");

  HealthOptions health_opt;
  CLI::App* health = app.add_subcommand(
      "health", "Ask a ckptscand whether it serves (gRPC health checking; for probes)");
  health
      ->add_option("--server", health_opt.server.server,
                   "The daemon: local (default), unix:PATH or HOST:PORT (TLS), or "
                   "plain:HOST:PORT for its plaintext health port (--health-tcp)")
      ->type_name("ADDR");
  health->add_option("--service", health_opt.service,
                     "The service to ask about: \"\" (default: the whole server), "
                     "ckptscan.v1.Scanner or ckptscan.v1.Admin");
  health->add_option("--timeout", health_opt.timeout_seconds, "Seconds to wait for the answer")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  health->add_option("--tls-ca", health_opt.server.tls_ca, "As for scan --server")
      ->type_name("FILE");
  health->add_option("--tls-cert", health_opt.server.tls_cert, "Client certificate (mTLS)")
      ->type_name("FILE");
  health->add_option("--tls-key", health_opt.server.tls_key, "The key of --tls-cert")
      ->type_name("FILE");
  health->footer(
      "Exit codes: 0 SERVING; 1 NOT_SERVING (e.g. draining after SIGTERM); 2 no answer\n"
      "(unreachable, timed out, unknown service); 64 usage.\n");

  AdminOptions admin_opt;
  CLI::App* admin = app.add_subcommand("admin", "Operate a ckptscand daemon (Admin service)");
  admin->require_subcommand(1);
  CLI::App* admin_status = admin->add_subcommand(
      "status", "Versions, uptime, jobs running/queued/done, worker failures, jail layers");
  CLI::App* admin_metrics = admin->add_subcommand(
      "metrics", "Print the daemon's Prometheus metrics (text exposition format)");
  CLI::App* admin_reload = admin->add_subcommand(
      "reload-rules", "Reload the daemon's rules file (a bad file leaves the old rules)");
  CLI::App* admin_key =
      admin->add_subcommand("public-key", "Print the daemon's signing public key (PEM)");
  for (CLI::App* sub : {admin_status, admin_metrics, admin_reload, admin_key}) {
    sub->add_option("--server", admin_opt.server.server,
                    "The daemon: local (default: this user's socket), unix:PATH or HOST:PORT")
        ->type_name("ADDR");
    sub->add_option("--tls-ca", admin_opt.server.tls_ca, "As for scan --server")->type_name("FILE");
    sub->add_option("--tls-cert", admin_opt.server.tls_cert, "Client certificate (mTLS)")
        ->type_name("FILE");
    sub->add_option("--tls-key", admin_opt.server.tls_key, "The key of --tls-cert")
        ->type_name("FILE");
    sub->add_option("--format,-f", admin_opt.format, "Output: text or json")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
  }
  admin->footer(
      "Admin calls need an admin identity: on the unix socket a uid in the daemon's\n"
      "--admin-uid list (default: the daemon's own uid and root); over TCP a client\n"
      "certificate whose name is in its --admin-identity list.\n\n"
      "Exit codes: 0 done; 2 the daemon refused or could not be reached (the reason\n"
      "is printed); 64 usage.\n");

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
  if (convert->parsed()) return RunConvert(convert_opt);
  if (show->parsed()) return RunRulesShow(show_rules);
  if (check->parsed()) return RunRulesCheck(check_file);
  if (version->parsed()) return RunVersion();
  if (health->parsed()) return RunHealth(health_opt);
  if (admin_status->parsed()) return RunAdmin(admin_opt, AdminCommand::kStatus);
  if (admin_metrics->parsed()) return RunAdmin(admin_opt, AdminCommand::kMetrics);
  if (admin_reload->parsed()) return RunAdmin(admin_opt, AdminCommand::kReloadRules);
  if (admin_key->parsed()) return RunAdmin(admin_opt, AdminCommand::kPublicKey);
  if (keygen->parsed()) return RunKeygen(keygen_opt);
  if (verify->parsed()) {
    if (verify_opt.pubkey.empty() && verify_opt.ca_certs.empty()) {
      PrintError("verify: give --pubkey PUB or --cert-chain CA");
      return kExitUsage;
    }
    return RunVerify(verify_opt);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace ckptscan::clients

int main(int argc, char** argv) { return ckptscan::clients::Main(argc, argv); }
