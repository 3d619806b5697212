// `ckptscan scan`: files, folders, --manifest; locally in the jail or through ckptscand
// (--server). The set is walked by app::ScanSet on either path.
#include <fcntl.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
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

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "app/attest.h"
#include "app/convert.h"
#include "app/limit_flags.h"
#include "app/manifest.h"
#include "app/output_file.h"
#include "app/report.h"
#include "app/report_format.h"
#include "app/scan_file.h"
#include "app/scan_set.h"
#include "app/scan_targets.h"
#include "app/verdict.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "clients/progress.h"
#include "rules/catalogue.h"
#include "signing/attestation.h"
#include "signing/keys.h"

namespace ckptscan::clients {
namespace {

using app::ExitCodeFor;
using app::FailOn;
using app::ReportToJson;
using app::ReportToJunit;
using app::ReportToSarif;
using app::ReportToText;
using app::TerminalSafe;
using base::WriteAll;

struct ScanOptions {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string output;
  // "auto": sha256 with --manifest (which compares digests), none otherwise.
  std::string digest = "auto";
  std::string fail_on = "suspicious";
  std::vector<std::string> includes;
  std::vector<std::string> excludes;
  size_t max_walk_entries = app::kDefaultMaxWalkEntries;
  std::string unknown = "error";
  std::string manifest;
  std::string sarif_output;
  int jobs = 0;          // 0: one per core this process may run on
  std::string attest;    // --attest OUT: a signed scan attestation (app/attest.h)
  std::string key;       // --key: the private key that signs it
  bool tensors = false;  // --tensors: every tensor in the report (ckptscan ls sets it)
  bool table = false;    // ckptscan ls: the text format is the tensor table
  VerbosityFlags verbosity;
  LocalFlags local;
  ServerFlags server;
};

// scan -j's default: the CPUs this process may run on (sched_getaffinity), at least 1.
int DefaultJobs() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// Files on this machine judged by ckptscand (uploaded, or by path), one at a time: the set is
// walked here (ScanSet), so each call asks for the file alone. The daemon's versions go into the
// report.
class RemoteFiles final : public app::FileSource {
 public:
  RemoteFiles(RemoteClient* remote, bool sha256, bool tensors, v1::Report* report)
      : remote_(remote), report_(report) {
    options_.set_skip_digest(!sha256);
    options_.set_list_tensors(tensors);
    options_.set_single_file(true);
  }

  v1::FileReport Scan(const std::string& path) override {
    absl::StatusOr<v1::Report> r = remote_->Scan(path, options_);
    if (!r.ok()) return ServerErrorReport(path, r.status());
    if (r->files_size() != 1) {
      return ServerErrorReport(path, absl::DataLossError("the daemon's report has no single file"));
    }
    absl::MutexLock lock(&mu_);  // files are scanned from several threads (-j)
    report_->set_scanner_version(r->scanner_version());
    report_->set_rules_version(r->rules_version());
    return r->files(0);
  }

  // The set is on this machine whichever way its files are sent.
  absl::StatusOr<app::FileId> Find(const std::string& path) override {
    return app::FindLocal(path);
  }

 private:
  RemoteClient* remote_;
  absl::Mutex mu_;
  v1::Report* report_ ABSL_GUARDED_BY(mu_);
  v1::ScanOptions options_;
};

// Another source's files, counted for the progress line and, with --verbose, each printed on
// stderr with its verdict and time (from any scanning thread: the meter prints one line at a
// time, its progress line erased first).
class WatchedFiles final : public app::FileSource {
 public:
  WatchedFiles(app::FileSource* inner, ProgressMeter* meter, bool verbose)
      : inner_(inner), meter_(meter), verbose_(verbose) {}

  v1::FileReport Scan(const std::string& path) override {
    const absl::Time start = absl::Now();
    v1::FileReport r = inner_->Scan(path);
    meter_->FileDone();
    if (verbose_) {
      const std::string line = absl::StrCat(
          TerminalSafe(path), ": ", base::AbslView(app::VerdictName(r.verdict())), " in ",
          absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Microseconds(10))));
      meter_->PrintLine(absl::StrCat("ckptscan: ", line));
    }
    return r;
  }

  absl::StatusOr<app::FileId> Find(const std::string& path) override { return inner_->Find(path); }

 private:
  app::FileSource* inner_;
  ProgressMeter* meter_;
  bool verbose_;
};

// --attest OUT: where the attestation goes, settled before anything is scanned: OUT's directory
// opened once (the bundle is created relative to it), OUT checked absent, the key loaded (a
// key file others can read is refused; the key stays in this process, no worker sees it).
struct AttestOutput {
  app::OutputDir dir;
  signing::PrivateKey key;
};

absl::StatusOr<AttestOutput> PrepareAttestation(const ScanOptions& opt) {
  if (!opt.server.server.empty()) {
    return UsageError(
        "--attest cannot be used with --server: the daemon's verdicts would be signed with a "
        "key of this machine (scan locally to attest)");
  }
  if (opt.key.empty()) {
    return UsageError(
        "--attest needs --key KEY: the private key that signs the attestation (ckptscan keygen "
        "makes one; verify-attestation checks it with the public half)");
  }
  if (opt.digest == "none") {
    return UsageError(
        "--attest binds each verdict to the file's SHA-256; it cannot be used with --digest none");
  }
  absl::StatusOr<signing::PrivateKey> key = signing::PrivateKey::LoadFile(opt.key);
  if (!key.ok()) {
    return UsageError(absl::StrCat("--key ", TerminalSafe(opt.key), ": ", key.status().message()));
  }
  absl::StatusOr<app::OutputDir> dir = app::OpenOutputDir(opt.attest);
  if (!dir.ok()) {
    return UsageError(absl::StrCat("--attest ", TerminalSafe(opt.attest), ": ",
                                   dir.status().message()));
  }
  // Publish refuses an existing OUT too; this says so before the scan rather than after it.
  struct stat st;
  if (::fstatat(dir->fd, dir->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "--attest ", TerminalSafe(opt.attest),
        ": exists; not scanning (an attestation is never overwritten: remove it first)"));
  }
  return AttestOutput{*std::move(dir), *std::move(key)};
}

// The report signed as a scan attestation and published as OUT: written to an unnamed file in
// OUT's directory, linked under OUT only once whole (a failure leaves nothing).
absl::Status WriteAttestation(const ScanOptions& opt, const v1::Report& report,
                              const app::Engine& engine, AttestOutput& out) {
  app::AttestContext context;
  context.scan_paths = opt.paths;
  if (context.scan_paths.empty()) context.scan_paths.push_back(app::ManifestFolder(opt.manifest));
  CKPT_ASSIGN_OR_RETURN(context.rules_sha256, app::RulesDigest(engine.rules()->proto()));
  for (const app::LimitInForce& l :
       app::LimitsInForce(engine.limits(), engine.jail().format_limits)) {
    context.limits.push_back({std::string(l.name), l.value});
  }
  context.time = absl::Now();
  absl::StatusOr<signing::ScanAttestation> attestation = app::AttestationOf(report, context);
  absl::StatusOr<std::string> bundle =
      attestation.ok() ? signing::SignAttestation(*attestation, out.key)
                       : absl::StatusOr<std::string>(attestation.status());
  if (!bundle.ok()) {
    return absl::Status(bundle.status().code(),
                        absl::StrCat("--attest: not written: ", bundle.status().message()));
  }
  absl::StatusOr<app::OutputFile> file =
      app::OutputFile::CreateAt(out.dir.fd, out.dir.name, opt.attest);
  absl::Status written = file.ok() ? file->WriteAt(0, *bundle) : file.status();
  if (written.ok()) written = file->Publish(/*replace=*/false);
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("--attest: not written: ", written.message()));
  }
  PrintError(absl::StrCat("attested: ", report.files_size(), " files in ",
                          TerminalSafe(opt.attest), " (key ",
                          out.key.public_key().hint().substr(0, 16), "...)"));
  return absl::OkStatus();
}

CommandResult RunScan(const ScanOptions& opt) {
  if (opt.paths.empty() && opt.manifest.empty()) {
    return UsageError("scan: give PATH... or --manifest FILE (see ckptscan scan --help)");
  }
  if (!opt.manifest.empty() && opt.digest == "none") {
    return UsageError("scan: --manifest compares digests; it cannot be used with --digest none");
  }
  std::optional<AttestOutput> attest_out;
  if (!opt.attest.empty()) {
    CKPT_ASSIGN_OR_RETURN(AttestOutput prepared, PrepareAttestation(opt));
    attest_out.emplace(std::move(prepared));
  } else if (!opt.key.empty()) {
    return UsageError("--key signs an attestation: give --attest OUT too");
  }
  std::vector<app::ManifestEntry> manifest;
  if (!opt.manifest.empty()) {
    absl::StatusOr<std::vector<app::ManifestEntry>> m = app::ReadManifest(opt.manifest);
    if (!m.ok()) {
      return UsageError(
          absl::StrCat("--manifest: ", TerminalSafe(base::StdView(m.status().message()))));
    }
    manifest = *std::move(m);
  }
  // --manifest alone: the manifest's folder is walked too, so that a file it does not list is
  // found (manifest.unlisted).
  std::vector<std::string> paths = opt.paths;
  if (paths.empty()) paths.push_back(app::ManifestFolder(opt.manifest));
  app::WalkOptions walk{opt.includes, opt.excludes, opt.max_walk_entries};
  absl::StatusOr<app::Expansion> expansion = app::ExpandScanPaths(paths, walk);
  if (!expansion.ok()) {
    return UsageError(
        absl::StrCat("scan: ", TerminalSafe(base::StdView(expansion.status().message()))));
  }
  std::vector<app::ScanTarget> targets = std::move(expansion->targets);
  // auto: a digest when one is compared, with a manifest's or with the digests Hugging Face
  // cache blobs are named by; none otherwise (it costs a read of every byte of every file).
  bool compared = !opt.manifest.empty();
  for (const app::ScanTarget& t : targets) compared = compared || !t.expected_sha256.empty();
  // --attest: the digest that binds each verdict to the bytes the worker parsed.
  const bool sha256 = opt.digest == "sha256" || (opt.digest == "auto" && compared) ||
                      attest_out.has_value();
  v1::Report report = app::NewReport(Version(), "");
  std::unique_ptr<RemoteClient> remote;
  std::unique_ptr<app::Engine> engine;
  app::CallOptions call;
  call.sha256 = sha256;
  call.list_tensors = opt.tensors;
  std::unique_ptr<app::FileSource> source;
  if (!opt.server.server.empty()) {
    CKPT_ASSIGN_OR_RETURN(remote, ConnectServer(opt.server, &opt.local));
    source = std::make_unique<RemoteFiles>(remote.get(), sha256, opt.tensors, &report);
  } else {
    CKPT_ASSIGN_OR_RETURN(engine, MakeEngine(opt.local));
    report.set_rules_version(engine->rules()->version());
  }

  if (!opt.manifest.empty()) {
    // The manifest lists digests; it does not list itself.
    const absl::StatusOr<app::FileId> self = app::FindLocal(opt.manifest);
    for (app::ScanTarget& t : targets) {
      if (t.kind != app::ScanTarget::Kind::kFile || !self.ok()) continue;
      const absl::StatusOr<app::FileId> id = app::FindLocal(t.path);
      if (id.ok() && *id == *self) {
        t.kind = app::ScanTarget::Kind::kSkipped;
        t.reason = "the manifest itself";
      }
    }
  }
  // Progress on a terminal: files found (an index's shards join as they are found) and, with a
  // digest, the bytes to hash.
  ProgressMeter meter(ProgressMeter::ShouldDraw(opt.verbosity.quiet), opt.table ? "ls" : "scan");
  for (const app::ScanTarget& t : targets) {
    if (t.kind != app::ScanTarget::Kind::kFile) continue;
    meter.AddFiles(1);
    struct stat st;
    if (sha256 && !remote && ::stat(t.path.c_str(), &st) == 0) {
      meter.AddBytesTotal(static_cast<uint64_t>(st.st_size));
    }
  }
  meter.AddFiles(manifest.size());
  call.bytes_read = meter.bytes();
  // One file: a worker spawned for it costs less than starting the fork server's helper
  // (its namespaces and filters) and forking from it once. An index's shards then spawn too.
  size_t files = manifest.size();
  for (const app::ScanTarget& t : targets) files += t.kind == app::ScanTarget::Kind::kFile;
  if (opt.local.engine.jail_spawn.empty() && files <= 1) {
    call.spawn_mode = sandbox::SpawnMode::kSpawnPerJob;
  }
  if (engine != nullptr) {
    source = std::make_unique<app::JailedFiles>(app::OpenLocal, app::FindLocal, engine->rules(),
                                                engine->limits(), app::JailFor(*engine, call));
  }
  const int jobs = opt.jobs > 0 ? opt.jobs : DefaultJobs();
  if (opt.verbosity.verbose) {
    PrintError(absl::StrCat(
        targets.size(), " paths, -j ", jobs, ", digest ", sha256 ? "sha256" : "none", ", ",
        remote ? absl::StrCat("daemon ", TerminalSafe(remote->target()))
        : opt.local.no_sandbox
            ? std::string("unjailed worker (--no-sandbox)")
            : absl::StrCat("jailed worker ", TerminalSafe(engine->jail().worker_path))));
  }
  WatchedFiles watched(source.get(), &meter, opt.verbosity.verbose);
  app::ScanSetOptions set_options;
  set_options.unknown = opt.unknown == "warn"   ? app::UnknownPolicy::kWarn
                        : opt.unknown == "skip" ? app::UnknownPolicy::kSkip
                                                : app::UnknownPolicy::kError;
  set_options.report_unlisted = !opt.manifest.empty();
  set_options.jobs = jobs;
  app::ScanSet(targets, manifest, &watched, &report, set_options);
  meter.Stop();  // the progress line is erased before anything else is printed
  for (const std::string& pattern : expansion->unmatched) {
    PrintError(absl::StrCat("warning: ", TerminalSafe(pattern), " matched nothing"));
  }
  std::string skipped;
  for (const v1::SkippedPath& t : report.skipped()) {
    absl::StrAppend(&skipped, "skipped: ", TerminalSafe(t.path()), " (", TerminalSafe(t.reason()),
                    ")\n");
  }
  if (report.files_size() == 0) PrintError("no files to scan under the given paths");

  const FailOn fail_on = opt.fail_on == "dangerous" ? FailOn::kDangerous : FailOn::kSuspicious;
  const int exit_code = ExitCodeFor(report, fail_on);
  std::string out;
  if (opt.format == "json") {
    out = ReportToJson(report);
  } else if (opt.format == "sarif") {
    out = ReportToSarif(report, rules::Catalogue(), exit_code);
  } else if (opt.format == "junit") {
    out = ReportToJunit(report, fail_on);
  } else if (opt.table) {
    out = skipped + app::TensorTableText(report);
  } else {
    out =
        (opt.verbosity.quiet ? std::string() : skipped) + ReportToText(report, opt.verbosity.quiet);
  }
  if (opt.format != "text" && !skipped.empty() && !opt.verbosity.quiet) {
    (void)WriteAll(STDERR_FILENO,
                   skipped);  // never silent, but keep JSON/SARIF/JUnit parseable
  }
  if (absl::Status s = WriteOutput(opt.output, out); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot write the report: ", s.message()));
  }
  if (!opt.sarif_output.empty()) {
    if (absl::Status s =
            WriteOutput(opt.sarif_output, ReportToSarif(report, rules::Catalogue(), exit_code));
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot write the SARIF report: ", s.message()));
    }
  }
  if (attest_out.has_value()) {
    CKPT_RETURN_IF_ERROR(WriteAttestation(opt, report, *engine, *attest_out));
  }
  return exit_code;
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
      "devices, .git folders and what --include/--exclude leave out. In a\n"
      "Hugging Face cache (models--ORG--NAME) the snapshots are scanned,\n"
      "each file once; blobs/ and refs/ are skipped, and a blob named by a\n"
      "SHA-256 must have that digest.\n"
      "\n"
      "Every file is classified by its content, never by its name:\n"
      "  model    pickles, torch archives, numpy, joblib, safetensors\n"
      "           (validated strictly), sharded-checkpoint indexes (every\n"
      "           shard must exist beside the index and is scanned too)\n"
      "  data     UTF-8 text, JSON, PNG/JPEG/GIF/WebP images, SentencePiece\n"
      "           models, empty files: SAFE when valid as a whole (and when\n"
      "           the same bytes are no pickle that names anything)\n"
      "  archive  any other zip: each member is classified as a file\n"
      "  unknown  none of these: ERROR (see --unknown)\n"
      "A config's auto_map and custom_pipelines and *.py files are\n"
      "repo.remote_code (SUSPICIOUS); chat templates with sandbox-escape\n"
      "constructs, YAML python/ tags (*.yaml, *.yml) and Hydra _target_ keys\n"
      "naming code that runs code or touches the system are DANGEROUS.\n"
      "\n"
      "Patterns (--include, --exclude) are gitignore-style: without a '/'\n"
      "they match a name at any depth (config.json, *.json); with one they\n"
      "are anchored at the scanned folder (sub/*.bin); a trailing '/'\n"
      "matches folders only; '**' matches any number of folders; '*' never\n"
      "crosses a '/'. A pattern that matches nothing is warned about. An\n"
      "index (*.index.json) and its shards are scanned even when a pattern\n"
      "matches them, and the report says so.\n"
      "\n"
      "--manifest FILE: every file FILE lists is scanned and its SHA-256\n"
      "compared; a missing file is ERROR, and so is a digest mismatch\n"
      "(error code digest_mismatch): it exits 2 (1 if another file has\n"
      "findings), never 0. Without PATH, FILE's folder is scanned as well:\n"
      "a file there that FILE does not list is SUSPICIOUS (manifest.unlisted).\n"
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
      app::LimitFlagsHelp(), "\n", kExitCodesHelp);
}

}  // namespace

void AddScanCommand(CLI::App* app, Commands* out) {
  auto scan_opt = std::make_shared<ScanOptions>();
  CLI::App* scan = app->add_subcommand("scan", "Scan files and folders; print a report");
  scan->add_option("PATH", scan_opt->paths, "Files or folders to scan (optional with --manifest)");
  scan->add_option("--format,-f", scan_opt->format, "Report format: text, json, sarif or junit")
      ->check(CLI::IsMember({"text", "json", "sarif", "junit"}))
      ->capture_default_str();
  scan->add_option("--fail-on", scan_opt->fail_on,
                   "Least verdict that exits 1: suspicious (SUSPICIOUS or DANGEROUS) or "
                   "dangerous (DANGEROUS only; SUSPICIOUS then exits 0, or 2 if that file also "
                   "has an error). ERROR always exits 2")
      ->check(CLI::IsMember({"suspicious", "dangerous"}))
      ->capture_default_str();
  scan->add_option("--include", scan_opt->includes,
                   "Inside a scanned folder, scan only files whose path relative to it matches "
                   "this gitignore-style GLOB (see below); repeatable; the others are listed as "
                   "skipped")
      ->type_name("GLOB")
      ->allow_extra_args(false);
  scan->add_option("--exclude", scan_opt->excludes,
                   "Skip files and folders inside a scanned folder whose path relative to it "
                   "matches this gitignore-style GLOB (see below); repeatable; listed as "
                   "skipped")
      ->type_name("GLOB")
      ->allow_extra_args(false);
  scan->add_option("--max-walk-entries", scan_opt->max_walk_entries,
                   "Files and folders one scanned folder's walk may list. Folder links are "
                   "followed wherever they point (each folder once), so a link can reach a "
                   "whole filesystem: past this many the walk stops with an ERROR")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  scan->add_option("--unknown", scan_opt->unknown,
                   "A file in no format ckptscan verifies: error (ERROR, exit 2), warn "
                   "(SUSPICIOUS, finding file.unknown_format) or skip (listed as skipped)")
      ->check(CLI::IsMember({"error", "warn", "skip"}))
      ->capture_default_str();
  scan->add_option("--manifest", scan_opt->manifest,
                   "Scan every file FILE lists and compare its SHA-256: sha256sum output "
                   "(HEX  PATH) or a JSON list of {\"path\", \"sha256\"}; paths relative to "
                   "FILE's folder")
      ->type_name("FILE");
  scan->add_option("--output,-o", scan_opt->output, "Write the report to FILE instead of stdout")
      ->type_name("FILE");
  scan->add_option("--sarif-output", scan_opt->sarif_output,
                   "Also write the report as SARIF 2.1.0 to FILE (for CI: text in the log, "
                   "SARIF for code scanning, from one scan)")
      ->type_name("FILE");
  scan->add_option("--digest", scan_opt->digest,
                   "File digest in the report: sha256 (read on a second core while the "
                   "worker parses; binds the verdict to the bytes hashed), none (the report's "
                   "sha256 is empty; scan time does not grow with file size) or auto (sha256 "
                   "when a digest is compared: --manifest, Hugging Face cache blobs; none "
                   "otherwise)")
      ->check(CLI::IsMember({"auto", "sha256", "none"}))
      ->capture_default_str();
  scan->add_option("--attest", scan_opt->attest,
                   "Also write a signed scan attestation to OUT (a new file): a Sigstore bundle "
                   "whose in-toto statement lists every scanned file with its SHA-256 (computed "
                   "whatever --digest says) and records per file the verdict, what was read, "
                   "the rule ids, and the rules, limits and version in force; any verdict is "
                   "attested. Needs --key. Check it with ckptscan verify-attestation")
      ->type_name("OUT");
  scan->add_option("--key", scan_opt->key,
                   "With --attest: the private key that signs it (PEM, from ckptscan keygen, "
                   "mode 0600)")
      ->type_name("KEY");
  scan->add_flag("--tensors", scan_opt->tensors,
                 "List every tensor in the report (name, dtype, shape, bytes, storage; JSON: "
                 "tensor_list). ckptscan ls prints them as a table");
  scan->add_option("--jobs,-j", scan_opt->jobs,
                   "Scan up to N files at once (folders, manifests, an index's shards), each in "
                   "its own jailed worker; the report is the same, in the same order, whatever N. "
                   "Default: the number of CPUs this process may use")
      ->type_name("N")
      ->check(CLI::Range(1, 256));
  AddVerbosityFlags(scan, &scan_opt->verbosity);
  AddLocalFlags(scan, &scan_opt->local, "Set a limit of the pickle VM or a format reader, e.g. max_opcodes=1000 or max_compression_ratio=1000 (see below)");
  AddServerFlags(scan, &scan_opt->server);
  scan->footer(ScanFooter());
  out->push_back({scan, [scan_opt] { return RunScan(*scan_opt); }});

  // ls: a scan that lists every tensor, as a table (the same jail, verdict and exit codes).
  auto ls_opt = std::make_shared<ScanOptions>();
  ls_opt->tensors = true;
  ls_opt->table = true;
  CLI::App* ls = app->add_subcommand(
      "ls", "List a checkpoint's tensors (name, dtype, shape, bytes, shared storage)");
  ls->add_option("PATH", ls_opt->paths, "Files or folders to list")->required();
  ls->add_option("--format,-f", ls_opt->format, "text (a table per file) or json (the report)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  ls->add_option("--output,-o", ls_opt->output, "Write to FILE instead of stdout")
      ->type_name("FILE");
  ls->add_option("--jobs,-j", ls_opt->jobs, "List up to N files at once")
      ->type_name("N")
      ->check(CLI::Range(1, 256));
  AddVerbosityFlags(ls, &ls_opt->verbosity);
  AddLocalFlags(ls, &ls_opt->local, "Set a limit of the pickle VM or a format reader, e.g. max_compression_ratio=1000");
  AddServerFlags(ls, &ls_opt->server);
  ls->footer(absl::StrCat(
      "The file is read in the jailed worker exactly as `ckptscan scan` reads it; the verdict\n"
      "and any findings are printed above each table, and the exit code is scan's. Tensors\n"
      "are listed for the pickle-based formats (torch zip and legacy files, pickles, joblib,\n"
      "numpy) and GGUF; for others the file's tensor count and bytes are printed.\n\n",
      kExitCodesHelp));
  out->push_back({ls, [ls_opt] { return RunScan(*ls_opt); }});
}

}  // namespace ckptscan::clients
