// torch's own safe loader as a floor: every global torch 2.6's weights_only unpickler accepts by
// default (recorded from Debian 13's torch into tests/fixtures/modern/torch_safe_globals.json)
// is on the default allowlist, or docs/rules.md lists it with the reason it is not.
#include <fnmatch.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rules/rule_set.h"

namespace ckptscan::rules {
namespace {

std::string Read(const std::string& relative) {
  std::ifstream in(std::string(CKPT_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "a.{B,C}D" -> {"a.BD", "a.CD"}; one brace group at most, as the docs table writes them.
std::vector<std::string> ExpandBraces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  const size_t close = pattern.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return {pattern};
  std::vector<std::string> out;
  for (absl::string_view alt :
       absl::StrSplit(absl::string_view(pattern).substr(open + 1, close - open - 1), ',')) {
    out.push_back(absl::StrCat(pattern.substr(0, open), alt, pattern.substr(close + 1)));
  }
  return out;
}

// The first column of the table after the torch-floor-exceptions marker: patterns with `*`
// (fnmatch) and one {a,b} group.
std::vector<std::string> DocumentedExceptions() {
  const std::string docs = Read("docs/rules.md");
  const size_t marker = docs.find("<!-- torch-floor-exceptions");
  std::vector<std::string> patterns;
  if (marker == std::string::npos) return patterns;
  bool in_table = false;
  for (absl::string_view line : absl::StrSplit(docs.substr(marker), '\n')) {
    if (!absl::StartsWith(line, "|")) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    if (cells.size() < 3) continue;
    // Every `code span` of the cell is one pattern (a brace group holds commas of its own).
    std::vector<absl::string_view> spans = absl::StrSplit(cells[1], '`');
    for (size_t i = 1; i < spans.size(); i += 2) {
      for (std::string p : ExpandBraces(std::string(spans[i]))) patterns.push_back(p);
    }
  }
  return patterns;
}

TEST(TorchFloorTest, EveryDefaultSafeGlobalOfTorchIsAllowlistedOrExplained) {
  const std::string text = Read("tests/fixtures/modern/torch_safe_globals.json");
  ASSERT_FALSE(text.empty()) << "tests/fixtures/modern/torch_safe_globals.json is missing";
  const nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.contains("globals")) << "no \"globals\" list";
  const std::vector<std::string> torch_globals = j["globals"].get<std::vector<std::string>>();
  ASSERT_GT(torch_globals.size(), 100u) << "torch 2.6 accepts about 130 names by default";

  std::set<std::string> allowed;
  for (const v1::AllowedGlobal& a : RuleSet::Default()->proto().allow()) {
    allowed.insert(absl::StrCat(a.module(), ".", a.name()));
  }
  const std::vector<std::string> exceptions = DocumentedExceptions();
  ASSERT_FALSE(exceptions.empty()) << "docs/rules.md has no torch-floor-exceptions table";

  std::set<std::string> used;
  int explained = 0;
  for (const std::string& name : torch_globals) {
    if (allowed.count(name) > 0) continue;
    bool found = false;
    for (const std::string& p : exceptions) {
      if (fnmatch(p.c_str(), name.c_str(), 0) == 0) {
        found = true;
        used.insert(p);
      }
    }
    EXPECT_TRUE(found) << name
                       << " is accepted by torch's weights_only loader but neither allowlisted "
                          "nor listed with a reason in docs/rules.md";
    explained += found ? 1 : 0;
  }
  // A row that no longer matches anything torch accepts is stale.
  for (const std::string& p : exceptions) {
    EXPECT_EQ(used.count(p), 1u) << "docs/rules.md lists " << p
                                 << " but torch's safe globals hold no such name";
  }
  std::printf("torch %s: %zu default safe globals, %zu allowlisted here, %d explained in docs\n",
              j.value("torch", std::string("?")).c_str(), torch_globals.size(),
              torch_globals.size() - static_cast<size_t>(explained), explained);
}

}  // namespace
}  // namespace ckptscan::rules
