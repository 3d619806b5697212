// Gitignore-style path patterns for `scan --include` / `--exclude`.
//
// Matched against a path relative to the folder being scanned ("sub/config.json"):
//   - a pattern with no '/' but a trailing one matches a name at any depth: "config.json"
//     matches "config.json" and "sub/config.json", "*.json" every JSON file;
//   - a pattern with a '/' at its start or in its middle is anchored at the folder:
//     "sub/*.bin", "/model.bin";
//   - a trailing '/' matches folders only ("cache/");
//   - in a component, '*' matches any run of characters, '?' one character, "[...]" a class
//     (fnmatch(3) within one component: never across a '/'); a component "**" matches any
//     number of components ("**/x", "a/**", "a/**/b");
//   - a folder that matches covers everything below it (MatchesUnder).
// Negation ("!pattern") is not supported: Create refuses it, so that it cannot silently mean
// something else. Hand-written because fnmatch(3) has no "**" and no gitignore anchoring;
// matching is a table over components (at most pattern x path components), no recursion.
//
// Thread-safe: immutable after Create.
#ifndef CKPTSCAN_APP_PATH_GLOB_H_
#define CKPTSCAN_APP_PATH_GLOB_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckptscan::app {

class PathGlob final {
 public:
  static absl::StatusOr<PathGlob> Create(std::string_view pattern);

  // Whether `relative` (components separated by '/', no leading '/') itself matches.
  bool Matches(std::string_view relative, bool is_dir) const;
  // Whether `relative` or a folder above it matches (the folder covers what is inside).
  bool MatchesUnder(std::string_view relative, bool is_dir) const;

  const std::string& pattern() const { return pattern_; }

 private:
  PathGlob(std::string pattern, std::vector<std::string> components, bool dir_only)
      : pattern_(std::move(pattern)), components_(std::move(components)), dir_only_(dir_only) {}

  std::string pattern_;
  std::vector<std::string> components_;  // anchored; "**" for any number of components
  bool dir_only_;
};

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_PATH_GLOB_H_
