#include "app/engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "app/call_options.h"
#include "base/limit_status.h"
#include "base/unique_fd.h"
#include "sandbox/availability.h"
#include "sandbox/fork_client.h"
#include "sandbox/job.h"
#include "sandbox/spawner.h"

namespace ckptscan::app {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(EngineConfig config) {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> rules = rules::LoadRules(config.rules);
  if (!rules.ok()) {
    // A rules file that does not load is the caller's mistake, whatever the reader's code.
    return absl::InvalidArgumentError(rules.status().message());
  }
  // An unjailed worker (ckptscan --no-sandbox) still runs as a child: it needs the binary, not
  // the kernel's seccomp.
  if (!config.jail.unjailed) {
    if (absl::Status s = sandbox::CheckSeccompAvailable(); !s.ok()) {
      return absl::FailedPreconditionError(s.message());
    }
  }
  absl::StatusOr<std::string> worker = sandbox::FindWorkerBinary(config.jail.worker_path);
  if (!worker.ok()) return absl::FailedPreconditionError(worker.status().message());
  config.jail.worker_path = *std::move(worker);
  if (config.start_helpers && !config.jail.unjailed &&
      config.jail.spawn_mode == sandbox::SpawnMode::kForkServer) {
    if (absl::Status s = sandbox::ForkClient::StartShared(config.jail.worker_path); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("the fork servers: ", s.message()));
    }
  }
  std::unique_ptr<sandbox::FactsBudget> budget;
  if (config.facts_memory != 0) {
    budget = std::make_unique<sandbox::FactsBudget>(config.facts_memory);
    config.jail.facts_budget = budget.get();
  }
  return std::unique_ptr<Engine>(
      new Engine(std::move(config), std::move(budget), *std::move(rules)));
}

std::shared_ptr<const rules::RuleSet> Engine::rules() const {
  absl::MutexLock lock(&mu_);
  return rules_;
}

absl::StatusOr<Engine::Reloaded> Engine::ReloadRules() {
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> loaded = rules::LoadRules(config_.rules);
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const rules::RuleSet> fresh = *std::move(loaded);
  absl::MutexLock lock(&mu_);
  Reloaded r{rules_->version(), fresh->version()};
  rules_ = std::move(fresh);
  return r;
}

absl::StatusOr<std::string> Engine::SelfTest() const {
  base::UniqueFd fd(::memfd_create("ckptscan-selftest", MFD_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "memfd_create");
  constexpr std::string_view kNone = "\x80\x02N.";  // pickle.dumps(None, 2)
  if (absl::Status s = base::WriteAll(fd.get(), kNone); !s.ok()) return s;
  const sandbox::JailedRun run =
      sandbox::Run(std::move(fd), kNone.size(), worker::v1::Job::MODE_SCAN, {}, config_.jail);
  if (!run.result.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the jail self-test failed: ", run.result.message));
  }
  return sandbox::DescribeLayers(run.layers);
}

sandbox::JailOptions JailFor(const Engine& engine, const CallOptions& call) {
  sandbox::JailOptions jail = engine.jail();
  jail.sha256 = call.sha256;
  jail.list_tensors = call.list_tensors;
  const absl::Duration left = call.deadline - absl::Now();
  if (left < jail.timeout) jail.timeout = std::max(left, absl::Milliseconds(1));
  jail.cancelled = call.cancelled;
  if (call.spawn_mode.has_value()) jail.spawn_mode = *call.spawn_mode;
  jail.bytes_read = call.bytes_read;
  jail.output_allowance = call.output_allowance;
  jail.on_worker_exit = call.on_worker_exit;
  jail.on_phase = call.on_phase;
  jail.on_pin = call.on_pin;
  return jail;
}

}  // namespace ckptscan::app
