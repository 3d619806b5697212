#include "app/engine_flags.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "app/limit_flags.h"
#include "base/escape.h"
#include "base/size_value.h"
#include "base/strings.h"

namespace ckptscan::app {
namespace {

// A size flag's value: a decimal with an optional K, M, G or T suffix; `positive` refuses 0.
absl::StatusOr<uint64_t> SizeFlag(std::string_view flag, const std::string& value, bool positive) {
  absl::StatusOr<uint64_t> size = base::ParseSize(value);
  if (size.ok() && positive && *size == 0) size = absl::InvalidArgumentError("must be positive");
  if (!size.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(base::AbslView(flag), " ", base::Escaped(value),
                                                   ": ", size.status().message()));
  }
  return size;
}

}  // namespace

void AddRulesFlags(CLI::App* cmd, EngineFlags* f) {
  cmd->add_option("--rules", f->rules,
                  "Rules file (text-format ckptscan.v1.RuleSet) instead of the built-in "
                  "rules")
      ->type_name("FILE");
  cmd->add_option("--rules-overlay", f->rules_overlay,
                  "Local rules merged onto the rules in force (same format; allow and deny "
                  "entries added, none changed): may not allow a name the rules grade "
                  "DANGEROUS; the report's rules version names its SHA-256 (docs/rules.md)")
      ->type_name("FILE");
  cmd->add_option("--allow", f->allow,
                  "Trust one more global, e.g. --allow mypkg.config.RunConfig "
                  "(MODULE:QUALNAME for a dotted qualname), as torch's add_safe_globals does: "
                  "any call and state of it is accepted, its arguments still judged; refused for "
                  "names the rules grade DANGEROUS (repeatable)")
      ->type_name("MODULE.NAME");
}

void AddLimitFlag(CLI::App* cmd, EngineFlags* f, std::string_view help) {
  cmd->add_option("--limit", f->limits, std::string(help))
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
}

void AddJailFlags(CLI::App* cmd, EngineFlags* f, std::string_view spawn_default) {
  cmd->add_option("--worker-memory", f->worker_memory,
                  "Address-space limit of a jailed worker (suffix K, M, G, T); the input's "
                  "mapping is added on top")
      ->type_name("BYTES")
      ->capture_default_str();
  cmd->add_option("--max-sealed-copy-bytes", f->max_sealed_copy,
                  "Largest file copied into sealed memory when it cannot be pinned with a read "
                  "lease (suffix K, M, G, T); a larger one is ERROR (docs/security.md)")
      ->type_name("BYTES")
      ->capture_default_str();
  cmd->add_option("--jail-spawn", f->jail_spawn,
                  absl::StrCat("How each jailed worker process is made: fork-server (forked by a "
                               "jailed helper that set up the namespaces and the seccomp filter "
                               "once; a helper per job running at once, up to one per CPU) or "
                               "per-job (a posix_spawn of the worker per file). Default: ",
                               base::AbslView(spawn_default)))
      ->type_name("MODE")
      ->check(CLI::IsMember({"fork-server", "per-job"}));
  cmd->add_option("--max-frame-bytes", f->max_frame_bytes,
                  "Largest result frame a worker may send (its facts, serialized; suffix K, M; "
                  "at most 64M, the default); past it the file is ERROR, limit max_frame_bytes")
      ->type_name("BYTES");
  cmd->add_option("--max-frame-values", f->max_frame_values,
                  absl::StrCat("Most values (graph nodes, globals, ...; 16 list items count "
                               "as one) one file's facts may hold (each costs ~400 bytes "
                               "decoded); past it the file is ERROR, limit max_frame_values "
                               "(default and most: ",
                               sandbox::kMaxFrameValues, ")"))
      ->type_name("N")
      ->check(CLI::Range(uint64_t{1}, sandbox::kMaxFrameValues));
  cmd->add_option("--worker", f->worker,
                  "The ckptscan-worker binary (default: the one next to this binary)")
      ->type_name("PATH");
}

void OneValuePerOccurrence(CLI::App* app) {
  // The command tree is the binary's own (a few levels), walked with a stack all the same.
  std::vector<CLI::App*> pending = {app};
  while (!pending.empty()) {
    CLI::App* cmd = pending.back();
    pending.pop_back();
    for (CLI::Option* option : cmd->get_options()) {
      // Flags take no value; positionals collect the rest by design.
      if (option->get_expected_max() <= 0 || option->get_positional()) continue;
      option->allow_extra_args(false);
    }
    for (CLI::App* sub : cmd->get_subcommands([](CLI::App*) { return true; })) {
      pending.push_back(sub);
    }
  }
}

absl::StatusOr<EngineConfig> ToEngineConfig(const EngineFlags& flags) {
  EngineConfig config;
  config.rules = {flags.rules, flags.rules_overlay, flags.allow};
  absl::StatusOr<LimitSettings> limits = ParseLimitFlags(flags.limits);
  if (!limits.ok()) return limits.status();
  config.limits = limits->vm;
  absl::StatusOr<uint64_t> memory = SizeFlag("--worker-memory", flags.worker_memory, true);
  if (!memory.ok()) return memory.status();
  absl::StatusOr<uint64_t> copy = SizeFlag("--max-sealed-copy-bytes", flags.max_sealed_copy, false);
  if (!copy.ok()) return copy.status();
  if (!flags.max_frame_bytes.empty()) {
    absl::StatusOr<uint64_t> frame = SizeFlag("--max-frame-bytes", flags.max_frame_bytes, true);
    if (!frame.ok()) return frame.status();
    if (*frame > sandbox::kMaxFrameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max-frame-bytes ", base::Escaped(flags.max_frame_bytes),
                       ": at most 64M (", sandbox::kMaxFrameBytes, " bytes)"));
    }
    config.jail.max_frame_bytes = *frame;
  }
  if (flags.max_frame_values != 0) config.jail.max_frame_values = flags.max_frame_values;
  config.jail.format_limits = std::move(limits->format);
  config.jail.worker_path = flags.worker;
  config.jail.worker_memory = *memory;
  config.jail.max_sealed_copy_bytes = *copy;
  config.jail.spawn_mode = flags.jail_spawn == "per-job" ? sandbox::SpawnMode::kSpawnPerJob
                                                         : sandbox::SpawnMode::kForkServer;
  return config;
}

}  // namespace ckptscan::app
