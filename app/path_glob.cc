#include "app/path_glob.h"

#include <fnmatch.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/strings.h"

namespace ckptscan::app {
namespace {

std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > start) out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

bool ComponentMatches(const std::string& pattern, std::string_view name) {
  const std::string n(name);
  return ::fnmatch(pattern.c_str(), n.c_str(), 0) == 0;
}

}  // namespace

absl::StatusOr<PathGlob> PathGlob::Create(std::string_view pattern) {
  if (pattern.empty()) return absl::InvalidArgumentError("an empty pattern");
  if (pattern[0] == '!') {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", base::AbslView(pattern), "\": negated patterns (!) are not supported"));
  }
  std::string_view p = pattern;
  bool dir_only = false;
  while (p.size() > 1 && p.back() == '/') {
    dir_only = true;
    p.remove_suffix(1);
  }
  const bool anchored = p.find('/') != std::string_view::npos;
  std::vector<std::string> components;
  if (!anchored) components.emplace_back("**");
  for (std::string_view c : Components(p)) components.emplace_back(c);
  if (components.empty() || (components.size() == 1 && components[0] == "**" && !anchored)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", base::AbslView(pattern), "\" matches no path"));
  }
  return PathGlob(std::string(pattern), std::move(components), dir_only);
}

bool PathGlob::Matches(std::string_view relative, bool is_dir) const {
  if (dir_only_ && !is_dir) return false;
  const std::vector<std::string_view> path = Components(relative);
  const size_t np = components_.size();
  const size_t nc = path.size();
  // reach[j]: the first i pattern components match the first j path components.
  std::vector<char> reach(nc + 1, 0);
  reach[0] = 1;
  for (size_t i = 0; i < np; ++i) {
    std::vector<char> next(nc + 1, 0);
    if (components_[i] == "**") {
      bool any = false;
      for (size_t j = 0; j <= nc; ++j) {
        any = any || reach[j];
        next[j] = any;  // "**" takes any number of components
      }
    } else {
      for (size_t j = 0; j < nc; ++j) {
        if (reach[j] && ComponentMatches(components_[i], path[j])) next[j + 1] = 1;
      }
    }
    reach = std::move(next);
  }
  return reach[nc] != 0;
}

bool PathGlob::MatchesUnder(std::string_view relative, bool is_dir) const {
  if (Matches(relative, is_dir)) return true;
  for (size_t slash = relative.rfind('/'); slash != std::string_view::npos && slash > 0;
       slash = relative.rfind('/', slash - 1)) {
    if (Matches(relative.substr(0, slash), /*is_dir=*/true)) return true;
    if (slash == 0) break;
  }
  return false;
}

}  // namespace ckptscan::app
