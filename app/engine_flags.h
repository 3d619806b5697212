// The flags `ckptscan` and `ckptscand` share, defined once: the rules (--rules,
// --rules-overlay, --allow), the pickle VM's limits (--limit NAME=VALUE) and the jail
// (--worker, --worker-memory, --max-sealed-copy-bytes, --jail-spawn, the result frame's caps
// --max-frame-bytes and --max-frame-values). Each binary adds what only it has: its deadline
// (`ckptscan --timeout`, `ckptscand --job-timeout`), `ckptscan --no-sandbox`, the daemon's
// memory caps. ToEngineConfig turns the values into an
// app::EngineConfig (app/engine.h).
//
// Not thread-safe: filled by CLI11 on the main thread, read once.
#ifndef CKPTSCAN_APP_ENGINE_FLAGS_H_
#define CKPTSCAN_APP_ENGINE_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "app/engine.h"
#include "sandbox/protocol.h"

namespace ckptscan::app {

struct EngineFlags {
  std::string rules;                // --rules FILE ("" = the built-in rules)
  std::string rules_overlay;        // --rules-overlay FILE
  std::vector<std::string> allow;   // --allow NAME, repeatable
  std::vector<std::string> limits;  // --limit NAME=VALUE, repeatable
  std::string worker;               // --worker PATH ("" = next to this binary)
  std::string worker_memory = "8G";
  std::string max_sealed_copy = "4G";
  std::string jail_spawn;  // --jail-spawn: "fork-server" or "per-job"; "" = fork-server
  std::string max_frame_bytes;  // --max-frame-bytes ("" = sandbox::kMaxFrameBytes, 64M)
  uint64_t max_frame_values = 0;  // --max-frame-values (0 = sandbox::kMaxFrameValues)

  // Whether a rules or limit flag was given (a client of a daemon refuses them: they are the
  // daemon's to set).
  bool AnyRulesOrLimits() const {
    return !rules.empty() || !rules_overlay.empty() || !allow.empty() || !limits.empty() ||
           !max_frame_bytes.empty() || max_frame_values != 0;
  }
};

// --rules, --rules-overlay, --allow.
void AddRulesFlags(CLI::App* cmd, EngineFlags* f);
// --limit NAME=VALUE (repeatable); `help` says what it limits here.
void AddLimitFlag(CLI::App* cmd, EngineFlags* f, std::string_view help);
// --worker, --worker-memory, --max-sealed-copy-bytes, --jail-spawn, --max-frame-bytes,
// --max-frame-values (the result frame's caps). `spawn_default` ends the
// --jail-spawn help with what this binary does by default.
void AddJailFlags(CLI::App* cmd, EngineFlags* f, std::string_view spawn_default);

// Every option of `app` and of its subcommands takes exactly one value per occurrence, so a
// repeatable option never swallows the positional arguments after it (`--allow NAME FILE` is
// one allowed name and one file). Call once, after every option is added, before parsing.
void OneValuePerOccurrence(CLI::App* app);

// The flags' values as an engine configuration: limits, sizes and the spawn mode parsed
// (InvalidArgument naming the flag), the rules' source. The rest of `config.jail` (the timeout,
// unjailed, frame caps) is left at its defaults for the binary to set.
absl::StatusOr<EngineConfig> ToEngineConfig(const EngineFlags& flags);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_ENGINE_FLAGS_H_
