// oms_tool: a test-only command line over signing/ (not installed).
//
//   oms_tool keygen PRIVATE_PEM PUBLIC_PEM
//   oms_tool sign MODEL_DIR PRIVATE_PEM OUT_BUNDLE [--shards N] [--ignore PATH]...
//   oms_tool verify MODEL_PATH BUNDLE (--key PUBLIC_PEM | --ca CA_PEM...) [--ignore PATH]...
//                   [--ignore-unsigned-files] [--leaf-time]
//
// The bundle file's name is excluded from signing and verification when it lives inside the
// model directory. Exit codes: 0 OK, 1 verification or signing failed, 64 usage.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "signing/bundle.h"
#include "signing/keys.h"
#include "signing/manifest.h"

namespace {

using namespace ckptscan::signing;  // NOLINT: a tiny test tool

int Usage() {
  std::fprintf(stderr,
               "usage: oms_tool keygen PRIVATE_PEM PUBLIC_PEM\n"
               "       oms_tool sign MODEL_DIR PRIVATE_PEM OUT_BUNDLE [--shards N] "
               "[--ignore PATH]...\n"
               "       oms_tool verify MODEL_PATH BUNDLE (--key PUB_PEM | --ca CA_PEM...) "
               "[--ignore PATH]... [--ignore-unsigned-files] [--leaf-time]\n");
  return 64;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "oms_tool: %s\n", std::string(s.ToString()).c_str());
  return 1;
}

// The bundle's name relative to the model directory, or "" when it lives elsewhere.
std::string NameInside(const std::string& model, const std::string& bundle) {
  std::error_code ec;
  const std::filesystem::path m = std::filesystem::canonical(model, ec);
  if (ec) return "";
  const std::filesystem::path b = std::filesystem::weakly_canonical(bundle, ec);
  if (ec) return "";
  const std::filesystem::path rel = b.lexically_relative(m);
  if (rel.empty() || *rel.begin() == ".." || rel == ".") return "";
  return rel.generic_string();
}

int Keygen(const std::vector<std::string>& a) {
  if (a.size() != 2) return Usage();
  absl::StatusOr<PublicKey> pub = GenerateKeyFiles(a[0], a[1]);
  if (!pub.ok()) return Fail(pub.status());
  std::printf("%s\n", pub->hint().c_str());
  return 0;
}

int SignCmd(const std::vector<std::string>& a) {
  if (a.size() < 3) return Usage();
  HashOptions opts;
  for (size_t i = 3; i < a.size(); ++i) {
    if (a[i] == "--shards" && i + 1 < a.size()) {
      uint64_t n = 0;
      if (!absl::SimpleAtoi(a[++i], &n)) return Usage();
      opts.serialization.method = Method::kShards;
      opts.serialization.shard_size = n;
    } else if (a[i] == "--ignore" && i + 1 < a.size()) {
      opts.serialization.ignore_paths.push_back(a[++i]);
    } else {
      return Usage();
    }
  }
  if (std::string inside = NameInside(a[0], a[2]); !inside.empty()) {
    opts.serialization.ignore_paths.push_back(inside);
  }
  absl::StatusOr<PrivateKey> key = PrivateKey::LoadFile(a[1]);
  if (!key.ok()) return Fail(key.status());
  absl::StatusOr<Manifest> m = HashModel(a[0], opts);
  if (!m.ok()) return Fail(m.status());
  absl::StatusOr<std::string> bundle = Sign(*m, *key);
  if (!bundle.ok()) return Fail(bundle.status());
  if (absl::Status s = WriteNewFile(a[2], *bundle, 0644); !s.ok()) return Fail(s);
  return 0;
}

int VerifyCmd(const std::vector<std::string>& a) {
  if (a.size() < 2) return Usage();
  VerifyOptions opts;
  std::string key_path;
  std::vector<std::string> ca;
  CertificateTime time = CertificateTime::kNow;
  for (size_t i = 2; i < a.size(); ++i) {
    if (a[i] == "--key" && i + 1 < a.size()) {
      key_path = a[++i];
    } else if (a[i] == "--ca" && i + 1 < a.size()) {
      ca.push_back(a[++i]);
    } else if (a[i] == "--ignore" && i + 1 < a.size()) {
      opts.ignore_paths.push_back(a[++i]);
    } else if (a[i] == "--ignore-unsigned-files") {
      opts.ignore_unsigned_files = true;
    } else if (a[i] == "--leaf-time") {
      time = CertificateTime::kLeafNotBefore;
    } else {
      return Usage();
    }
  }
  if (key_path.empty() == ca.empty()) return Usage();
  if (std::string inside = NameInside(a[0], a[1]); !inside.empty()) {
    opts.ignore_paths.push_back(inside);
  }
  absl::StatusOr<std::string> bundle =
      ReadSmallFile(a[1], opts.limits.max_bundle_bytes, "max_bundle_bytes");
  if (!bundle.ok()) return Fail(bundle.status());
  absl::StatusOr<Trust> trust = [&]() -> absl::StatusOr<Trust> {
    if (!key_path.empty()) {
      absl::StatusOr<PublicKey> k = PublicKey::LoadFile(key_path);
      if (!k.ok()) return k.status();
      return Trust::Key(*std::move(k));
    }
    return Trust::CaCertificateFiles(ca, time);
  }();
  if (!trust.ok()) return Fail(trust.status());
  absl::StatusOr<VerifiedBundle> v = VerifyModel(*bundle, *trust, a[0], opts);
  if (!v.ok()) return Fail(v.status());
  std::printf("OK: %zu resources verified (%s method, signer %s)\n", v->manifest.resources.size(),
              v->method.c_str(), v->signer.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "keygen") return Keygen(args);
  if (cmd == "sign") return SignCmd(args);
  if (cmd == "verify") return VerifyCmd(args);
  return Usage();
}
