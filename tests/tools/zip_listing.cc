// zip_listing: prints the directory each release of Python's zipfile would read from each file
// (our model of it, core/zip/zipfile_view.h), one JSON object per line, for
// tests/differential/zipfile_diff.py and tests/fixtures/zipfile_releases/check_releases.py.
//
//   zip_listing --stdin   (one path per line)
//
// {"file": ..., "releases": {"3.11": LISTING, "3.11+zip64check": LISTING, ...}}, where
// LISTING is {"ok": true|false, "error": "...", "concat": N, "zip64": true|false,
//  "entries": [[name (UTF-8) as hex, header_offset, compress_size, file_size, method,
//               local_ok], ...],
//  "opened": [index, ...]}
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "core/zip/zipfile_view.h"
#include "nlohmann/json.hpp"

namespace {

std::string Hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

nlohmann::json Listing(const std::string& data, ckptscan::zip::ZipfileRelease release) {
  nlohmann::json out;
  absl::StatusOr<ckptscan::zip::ZipfileDirectory> d =
      ckptscan::zip::ReadZipfileDirectory(data, release);
  out["ok"] = d.ok();
  if (!d.ok()) {
    out["error"] = std::string(d.status().message());
    return out;
  }
  out["concat"] = d->concat;
  out["zip64"] = d->zip64;
  nlohmann::json entries = nlohmann::json::array();
  for (const ckptscan::zip::Entry& e : d->entries) {
    entries.push_back({Hex(e.name), e.local_header_offset, e.compressed_size, e.uncompressed_size,
                       e.method, e.local_header_ok});
  }
  out["entries"] = std::move(entries);
  out["opened"] = d->opened;
  return out;
}

nlohmann::json Describe(const std::string& path) {
  nlohmann::json out;
  out["file"] = path;
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json releases = nlohmann::json::object();
  for (ckptscan::zip::ZipfileRelease r : ckptscan::zip::kZipfileReleases) {
    releases[std::string(ckptscan::zip::ZipfileReleaseName(r))] = Listing(data, r);
  }
  out["releases"] = std::move(releases);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) != "--stdin") {
    std::cerr << "usage: zip_listing --stdin\n";
    return 64;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty()) std::cout << Describe(line).dump() << "\n";
  }
  std::cout.flush();
  return 0;
}
