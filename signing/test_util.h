// Test-only helpers for signing/'s tests: a scratch directory removed at scope exit, file
// I/O, and the fixture paths.
#ifndef CKPTSCAN_SIGNING_TEST_UTIL_H_
#define CKPTSCAN_SIGNING_TEST_UTIL_H_

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "signing/bundle.h"
#include "signing/keys.h"

namespace ckptscan::signing::testing {

inline std::string FixtureDir() { return std::string(CKPT_SOURCE_DIR) + "/tests/fixtures/oms"; }

class ScratchDir final {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "/oms_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view rel) const { return path_ + "/" + std::string(rel); }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, std::string_view contents) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh P-256 key, and a Trust in its public half (read back from its PEM, as a verifier
// holds it).
inline void NewKeyAndTrust(std::optional<PrivateKey>* key, std::optional<Trust>* trust) {
  absl::StatusOr<PrivateKey> k = PrivateKey::Generate();
  ASSERT_TRUE(k.ok()) << k.status();
  key->emplace(*std::move(k));
  absl::StatusOr<PublicKey> pub = PublicKey::FromPem((*key)->public_key().pem());
  ASSERT_TRUE(pub.ok()) << pub.status();
  trust->emplace(Trust::Key(*std::move(pub)));
}

}  // namespace ckptscan::signing::testing

#endif  // CKPTSCAN_SIGNING_TEST_UTIL_H_
