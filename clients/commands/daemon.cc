// `ckptscan health` and `ckptscan admin status|metrics|reload-rules|public-key`: operating a
// ckptscand.
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
#include "absl/time/time.h"
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
#include "clients/remote.h"

namespace ckptscan::clients {
namespace {

using app::TerminalSafe;
using app::VerdictName;
using base::WriteAll;

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

CommandResult RunHealth(const HealthOptions& opt) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> remote,
                        ConnectServer(opt.server, nullptr, /*allow_plain=*/true));
  absl::StatusOr<bool> serving = remote->Health(opt.service, absl::Seconds(opt.timeout_seconds));
  if (!serving.ok()) {
    return absl::Status(serving.status().code(),
                        TerminalSafe(base::StdView(serving.status().message())));
  }
  (void)WriteAll(STDOUT_FILENO, *serving ? "SERVING\n" : "NOT_SERVING\n");
  return *serving ? 0 : 1;
}

CommandResult RunAdmin(const AdminOptions& opt, AdminCommand command) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteClient> remote, ConnectServer(opt.server, nullptr));
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
    return absl::Status(failed.code(), TerminalSafe(base::StdView(failed.message())));
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
  CKPT_RETURN_IF_ERROR(WriteAll(STDOUT_FILENO, text));
  return 0;
}

}  // namespace

void AddDaemonCommands(CLI::App* app, Commands* out) {
  auto health_opt = std::make_shared<HealthOptions>();
  CLI::App* health = app->add_subcommand(
      "health", "Ask a ckptscand whether it serves (gRPC health checking; for probes)");
  health
      ->add_option("--server", health_opt->server.server,
                   "The daemon: local (default), unix:PATH or HOST:PORT (TLS), or "
                   "plain:HOST:PORT for its plaintext health port (--health-tcp); "
                   "$CKPTSCAN_SERVER when set")
      ->type_name("ADDR")
      ->envname("CKPTSCAN_SERVER");
  health->add_option("--service", health_opt->service,
                     "The service to ask about: \"\" (default: the whole server), "
                     "ckptscan.v1.Scanner or ckptscan.v1.Admin");
  health->add_option("--timeout", health_opt->timeout_seconds, "Seconds to wait for the answer")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  health->add_option("--tls-ca", health_opt->server.tls_ca, "As for scan --server")
      ->type_name("FILE");
  health->add_option("--tls-cert", health_opt->server.tls_cert, "Client certificate (mTLS)")
      ->type_name("FILE");
  health->add_option("--tls-key", health_opt->server.tls_key, "The key of --tls-cert")
      ->type_name("FILE");
  health->footer(
      "Exit codes: 0 SERVING; 1 NOT_SERVING (e.g. draining after SIGTERM); 2 no answer\n"
      "(unreachable, timed out, unknown service); 64 usage.\n");
  out->push_back({health, [health_opt] { return RunHealth(*health_opt); }});

  auto admin_opt = std::make_shared<AdminOptions>();
  CLI::App* admin = app->add_subcommand("admin", "Operate a ckptscand daemon (Admin service)");
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
    sub->add_option("--server", admin_opt->server.server,
                    "The daemon: local (default: this user's socket, or $CKPTSCAN_SERVER when "
                    "set), unix:PATH or HOST:PORT")
        ->type_name("ADDR")
        ->envname("CKPTSCAN_SERVER");
    sub->add_option("--tls-ca", admin_opt->server.tls_ca, "As for scan --server")
        ->type_name("FILE");
    sub->add_option("--tls-cert", admin_opt->server.tls_cert, "Client certificate (mTLS)")
        ->type_name("FILE");
    sub->add_option("--tls-key", admin_opt->server.tls_key, "The key of --tls-cert")
        ->type_name("FILE");
    sub->add_option("--format,-f", admin_opt->format, "Output: text or json")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
  }
  admin->footer(
      "Admin calls need an admin identity: on the unix socket a uid in the daemon's\n"
      "--admin-uid list (default: the daemon's own uid and root); over TCP a client\n"
      "certificate whose name is in its --admin-identity list.\n\n"
      "Exit codes: 0 done; 2 the daemon refused or could not be reached (the reason\n"
      "is printed); 64 usage.\n");
  for (const auto& [sub, what] : {std::pair{admin_status, AdminCommand::kStatus},
                                  std::pair{admin_metrics, AdminCommand::kMetrics},
                                  std::pair{admin_reload, AdminCommand::kReloadRules},
                                  std::pair{admin_key, AdminCommand::kPublicKey}}) {
    out->push_back({sub, [admin_opt, what = what] { return RunAdmin(*admin_opt, what); }});
  }
}

}  // namespace ckptscan::clients
