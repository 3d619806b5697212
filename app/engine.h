// The engine every scan and conversion runs on, whichever surface asked: the rules in force
// (reloadable), the pickle VM's limits and the jail's options. `ckptscan` builds one per
// command and ckptscand one for its lifetime, both from the flags they share
// (app/engine_flags.h).
//
// Create() refuses to build an engine that could not scan: rules that do not load
// (InvalidArgument), no seccomp here or no worker binary (FailedPrecondition). It does not run
// a job; SelfTest() runs one.
//
// Thread-safe: rules() may be called while ReloadRules() swaps them; the rest is immutable.
//
//   CKPT_ASSIGN_OR_RETURN(std::unique_ptr<app::Engine> engine, app::Engine::Create(config));
//   absl::StatusOr<v1::FileReport> r =
//       app::ScanFile(path, *engine->rules(), engine->limits(), engine->jail());
#ifndef CKPTSCAN_APP_ENGINE_H_
#define CKPTSCAN_APP_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/pickle/limits.h"
#include "rules/rule_set.h"
#include "rules/rules_source.h"
#include "sandbox/facts_budget.h"
#include "sandbox/run.h"

namespace ckptscan::app {

struct EngineConfig {
  rules::RulesSource rules;
  pickle::Limits limits;
  // The jail every job runs in. worker_path is the --worker flag ("" = the binary next to this
  // one); Create() resolves it. facts_budget is set by Create() from facts_memory.
  sandbox::JailOptions jail;
  // Memory for decoding workers' results, shared by all jobs (0: no budget beyond each job's
  // max_frame_values); a job waits for room up to its timeout (sandbox/facts_budget.h).
  uint64_t facts_memory = 0;
  // Start every fork-server helper now (a server, before any thread serves) rather than on
  // first use.
  bool start_helpers = false;
};

class Engine final {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(EngineConfig config);

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The rules in force (a snapshot: a reload does not change the set a caller holds).
  std::shared_ptr<const rules::RuleSet> rules() const;
  // "built-in", "FILE + overlay ...": for logs.
  std::string rules_source() const { return config_.rules.Describe(); }

  struct Reloaded {
    std::string previous_version;
    std::string version;
  };
  // Reads the rules' files again; compiled and checked whole before anything changes, so a bad
  // file leaves the old rules in force.
  absl::StatusOr<Reloaded> ReloadRules();

  const pickle::Limits& limits() const { return config_.limits; }
  // The jail options every job starts from (a call adds its deadline and observers).
  const sandbox::JailOptions& jail() const { return config_.jail; }
  // The facts budget's total bytes (0: none).
  uint64_t facts_memory() const { return budget_ ? budget_->total() : 0; }

  // A job on a one-opcode pickle: that the jail works here, and which layers it has
  // ("seccomp, ..."); FailedPrecondition when the job fails.
  absl::StatusOr<std::string> SelfTest() const;

 private:
  Engine(EngineConfig config, std::unique_ptr<sandbox::FactsBudget> budget,
         std::shared_ptr<const rules::RuleSet> rules)
      : config_(std::move(config)), budget_(std::move(budget)), rules_(std::move(rules)) {}

  EngineConfig config_;
  const std::unique_ptr<sandbox::FactsBudget> budget_;  // config_.jail.facts_budget points here
  mutable absl::Mutex mu_;
  std::shared_ptr<const rules::RuleSet> rules_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_ENGINE_H_
