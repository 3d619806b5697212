#include "app/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/strings.h"

namespace ckptscan::app {
namespace {

using base::AbslView;

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// 64 hex digits, lowercased; empty when `s` is not one.
std::string NormalizeDigest(std::string_view s) {
  if (s.size() != 64) return "";
  std::string out(s);
  for (char& c : out) {
    if (!IsHex(c)) return "";
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string Join(std::string_view manifest_path, std::string_view path) {
  if (!path.empty() && path[0] == '/') return std::string(path);
  const size_t slash = manifest_path.rfind('/');
  if (slash == std::string_view::npos) return std::string(path);
  return absl::StrCat(AbslView(manifest_path.substr(0, slash + 1)), AbslView(path));
}

}  // namespace

std::string ManifestFolder(std::string_view manifest_path) {
  const size_t slash = manifest_path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(manifest_path.substr(0, slash));
}

namespace {

std::string Shown(std::string_view s) { return base::Escaped(s.substr(0, 200)); }

absl::StatusOr<std::vector<ManifestEntry>> ParseSha256Sum(std::string_view text,
                                                          std::string_view manifest_path,
                                                          const ManifestLimits& limits) {
  std::vector<ManifestEntry> out;
  uint64_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(AbslView(manifest_path), ":", line_number,
                                                     ": ", AbslView(why), ": \"", Shown(line),
                                                     "\""));
    };
    const bool escaped = line[0] == '\\';
    if (escaped) line.remove_prefix(1);
    if (line.size() < 66 || (line.substr(64, 2) != "  " && line.substr(64, 2) != " *")) {
      return bad("not a sha256sum line (64 hex digits, two spaces or \" *\", a path)");
    }
    const std::string digest = NormalizeDigest(line.substr(0, 64));
    if (digest.empty()) return bad("the digest is not 64 hex digits");
    std::string_view raw = line.substr(66);
    std::string path;
    if (escaped) {
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] != '\\') {
          path.push_back(raw[i]);
        } else if (i + 1 < raw.size() && raw[i + 1] == '\\') {
          path.push_back('\\');
          ++i;
        } else if (i + 1 < raw.size() && raw[i + 1] == 'n') {
          path.push_back('\n');
          ++i;
        } else {
          return bad("a bad escape in the path");
        }
      }
    } else {
      path = std::string(raw);
    }
    if (path.find('\0') != std::string::npos) return bad("a NUL in the path");
    if (out.size() >= limits.max_entries) {
      return absl::ResourceExhaustedError(absl::StrCat(AbslView(manifest_path), ": more than ",
                                                       limits.max_entries,
                                                       " entries (ManifestLimits::max_entries)"));
    }
    out.push_back(ManifestEntry{Join(manifest_path, path), digest});
  }
  return out;
}

absl::StatusOr<std::vector<ManifestEntry>> ParseJson(std::string_view text,
                                                     std::string_view manifest_path,
                                                     const ManifestLimits& limits) {
  using Json = nlohmann::json;
  // Strict: duplicate keys are refused, as every other JSON input of ckptscan refuses them.
  std::string duplicate;
  std::vector<std::vector<std::string>> keys;
  Json::parser_callback_t cb = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      for (const std::string& seen : keys.back()) {
        if (seen == k && duplicate.empty()) duplicate = k;
      }
      keys.back().push_back(k);
    }
    return true;
  };
  const Json doc = Json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  auto bad = [&](std::string why) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(manifest_path), ": ", AbslView(why)));
  };
  if (doc.is_discarded()) return bad("not valid JSON");
  if (!duplicate.empty()) return bad(absl::StrCat("the key \"", Shown(duplicate), "\" twice"));
  if (!doc.is_array()) return bad("a JSON manifest must be an array of {\"path\", \"sha256\"}");
  if (doc.size() > limits.max_entries) {
    return absl::ResourceExhaustedError(absl::StrCat(AbslView(manifest_path), ": more than ",
                                                     limits.max_entries,
                                                     " entries (ManifestLimits::max_entries)"));
  }
  std::vector<ManifestEntry> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const Json& e = doc[i];
    const auto path = e.is_object() ? e.find("path") : e.end();
    const auto sha = e.is_object() ? e.find("sha256") : e.end();
    if (!e.is_object() || path == e.end() || sha == e.end() || !path->is_string() ||
        !sha->is_string()) {
      return bad(absl::StrCat("entry ", i, ": needs \"path\" and \"sha256\" strings"));
    }
    const std::string& p = path->get_ref<const std::string&>();
    if (p.empty() || p.find('\0') != std::string::npos) {
      return bad(absl::StrCat("entry ", i, ": an empty path or a NUL in it"));
    }
    const std::string digest = NormalizeDigest(sha->get_ref<const std::string&>());
    if (digest.empty()) {
      return bad(absl::StrCat("entry ", i, ": \"sha256\" is not 64 hex digits"));
    }
    out.push_back(ManifestEntry{Join(manifest_path, p), digest});
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ManifestEntry>> ParseManifest(std::string_view text,
                                                         std::string_view manifest_path,
                                                         const ManifestLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(AbslView(manifest_path), ": over ",
                                                     limits.max_bytes,
                                                     " bytes (ManifestLimits::max_bytes)"));
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  absl::StatusOr<std::vector<ManifestEntry>> entries =
      first != std::string_view::npos && text[first] == '['
          ? ParseJson(text, manifest_path, limits)
          : ParseSha256Sum(text, manifest_path, limits);
  if (entries.ok() && entries->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(manifest_path), ": lists no file"));
  }
  return entries;
}

absl::StatusOr<std::vector<ManifestEntry>> ReadManifest(const std::string& path,
                                                        const ManifestLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > limits.max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": over ", limits.max_bytes, " bytes (ManifestLimits::max_bytes)"));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  return ParseManifest(text, path, limits);
}

}  // namespace ckptscan::app
