// libFuzzer target: what a repository's configs make loaders run, read from the same bytes as
// a YAML file (core/torch/repo_yaml.h) and as a JSON document (core/torch/repo_json.h).
//
// Invariants: the YAML scan stops only at a named limit (ResourceExhausted, at an offset inside
// the input); it keeps at most max_tags tags and max_targets targets, each at an offset inside
// the input on a line that exists, a tag written as it begins ('!', cut at max_scalar_bytes)
// and python exactly when it resolves to tag:yaml.org,2002:python/; the JSON reading keeps at
// most kMaxAutoMapEntries auto_map and custom_pipelines entries and kMaxConfigTargets targets,
// each place cut at kMaxWhereBytes, every offset inside the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/torch/repo_json.h"
#include "core/torch/repo_yaml.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr size_t kMaxInputBytes = 256 << 10;
constexpr std::string_view kPython = "tag:yaml.org,2002:python/";

void CheckYaml(std::string_view bytes) {
  using namespace ckptscan::torch;
  YamlLimits limits;
  limits.max_tags = 8;
  limits.max_targets = 8;
  limits.max_nesting = 64;
  limits.max_anchors = 16;
  limits.max_tag_directives = 4;
  limits.max_scalar_bytes = 64;
  const YamlScan s = ScanYaml(bytes, limits);
  const size_t lines = 1 + static_cast<size_t>(std::count(bytes.begin(), bytes.end(), '\n')) +
                       static_cast<size_t>(std::count(bytes.begin(), bytes.end(), '\r')) +
                       static_cast<size_t>(std::count(bytes.begin(), bytes.end(), '\x85')) +
                       static_cast<size_t>(std::count(bytes.begin(), bytes.end(), '\xa8')) +
                       static_cast<size_t>(std::count(bytes.begin(), bytes.end(), '\xa9'));
  CKPT_FUZZ_CHECK(s.status.ok() || s.status.code() == absl::StatusCode::kResourceExhausted,
                  "status %s", s.status.ToString().c_str());
  CKPT_FUZZ_CHECK(s.error_offset <= bytes.size(), "error at %llu",
                  static_cast<unsigned long long>(s.error_offset));
  CKPT_FUZZ_CHECK(s.tags.size() <= limits.max_tags, "%zu tags", s.tags.size());
  CKPT_FUZZ_CHECK(s.targets.size() <= limits.max_targets, "%zu targets", s.targets.size());
  for (const YamlTag& t : s.tags) {
    CKPT_FUZZ_CHECK(t.offset < bytes.size() && bytes[t.offset] == '!', "tag at %llu",
                    static_cast<unsigned long long>(t.offset));
    CKPT_FUZZ_CHECK(t.line >= 1 && t.line <= lines, "tag line %llu",
                    static_cast<unsigned long long>(t.line));
    CKPT_FUZZ_CHECK(
        !t.written.empty() && t.written[0] == '!' && t.written.size() <= limits.max_scalar_bytes,
        "written %s", t.written.c_str());
    CKPT_FUZZ_CHECK(t.python == (t.resolved.substr(0, kPython.size()) == kPython), "python %s",
                    t.resolved.c_str());
    CKPT_FUZZ_CHECK(t.count >= 1, "count 0");
  }
  for (const YamlTarget& t : s.targets) {
    CKPT_FUZZ_CHECK(t.offset < bytes.size(), "target at %llu",
                    static_cast<unsigned long long>(t.offset));
    CKPT_FUZZ_CHECK(t.line >= 1 && t.line <= lines, "target line %llu",
                    static_cast<unsigned long long>(t.line));
    CKPT_FUZZ_CHECK(!t.value.empty() && t.value.size() <= limits.max_scalar_bytes, "value %s",
                    t.value.c_str());
  }
}

void CheckJson(std::string_view bytes) {
  using namespace ckptscan::torch;
  IndexLimits limits;
  limits.max_depth = 64;
  RepoJson r;
  uint64_t offset = 0;
  if (!ReadRepoJson(bytes, limits, &r, &offset).ok()) {
    CKPT_FUZZ_CHECK(offset <= bytes.size(), "error at %llu",
                    static_cast<unsigned long long>(offset));
    return;
  }
  CKPT_FUZZ_CHECK(r.auto_map.size() <= kMaxAutoMapEntries && r.auto_map.size() <= r.auto_map_total,
                  "%zu auto_map entries", r.auto_map.size());
  CKPT_FUZZ_CHECK(
      r.pipelines.size() <= kMaxAutoMapEntries && r.pipelines.size() <= r.pipelines_total,
      "%zu pipelines", r.pipelines.size());
  CKPT_FUZZ_CHECK(r.targets.size() <= kMaxConfigTargets && r.targets.size() <= r.targets_total,
                  "%zu targets", r.targets.size());
  CKPT_FUZZ_CHECK(r.targets_dropped_code <= r.targets_total - r.targets.size(), "dropped %llu",
                  static_cast<unsigned long long>(r.targets_dropped_code));
  for (const ConfigTarget& t : r.targets) {
    CKPT_FUZZ_CHECK(t.offset < bytes.size(), "target at %llu",
                    static_cast<unsigned long long>(t.offset));
    CKPT_FUZZ_CHECK(t.where.size() <= kMaxWhereBytes + 3, "place of %zu bytes", t.where.size());
  }
  for (const CustomPipeline& p : r.pipelines) {
    CKPT_FUZZ_CHECK(p.offset < bytes.size(), "impl at %llu",
                    static_cast<unsigned long long>(p.offset));
  }
  if (r.has_base_model) {
    CKPT_FUZZ_CHECK(r.base_model_offset < bytes.size(), "base model at %llu",
                    static_cast<unsigned long long>(r.base_model_offset));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  CheckYaml(bytes);
  CheckJson(bytes);
  return 0;
}
