// `ckptscan keygen` and `ckptscan verify`: signing keys and OpenSSF model-signing bundles.
#include "signing/keys.h"

#include <fcntl.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "app/convert.h"
#include "app/manifest.h"
#include "app/publish.h"
#include "app/report.h"
#include "app/report_format.h"
#include "app/scan_set.h"
#include "app/scan_targets.h"
#include "app/shard_set.h"
#include "app/verdict.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "signing/bundle.h"
#include "signing/keys.h"

namespace ckptscan::clients {
namespace {

using app::TerminalSafe;
using base::WriteAll;

struct KeygenOptions {
  std::string output;
  std::string public_output;
};

// The public key's file beside private key KEY: KEY without ".pem", then ".pub.pem"
// (key.pem -> key.pub.pem), as ckptscand names its own pair (signing-key.pub.pem).
std::string PublicKeyPathFor(const std::string& private_key) {
  const size_t stem =
      absl::EndsWith(private_key, ".pem") ? private_key.size() - 4 : private_key.size();
  return absl::StrCat(private_key.substr(0, stem), ".pub.pem");
}

// `keygen`: a new ECDSA P-256 key, private PEM created 0600 and never overwritten.
CommandResult RunKeygen(const KeygenOptions& opt) {
  const std::string pub =
      opt.public_output.empty() ? PublicKeyPathFor(opt.output) : opt.public_output;
  absl::StatusOr<signing::PublicKey> key = signing::GenerateKeyFiles(opt.output, pub);
  if (!key.ok()) {
    return absl::Status(key.status().code(), absl::StrCat("keygen: ", key.status().message()));
  }
  (void)WriteAll(STDOUT_FILENO, absl::StrCat("private key: ", TerminalSafe(opt.output),
                                             " (mode 0600)\n", "public key:  ", TerminalSafe(pub),
                                             "\nhint:        ", key->hint(), "\n"));
  return 0;
}

struct VerifyCliOptions {
  std::string model;
  std::string signature;
  std::string pubkey;
  std::vector<std::string> ca_certs;
  bool ignore_unsigned = false;
};

// `verify`: the bundle, the signature, and every file of the model against it.
CommandResult RunVerify(const VerifyCliOptions& opt) {
  if (absl::EndsWith(opt.pubkey, ".pem.pub")) {
    // Accepted: the name keygen gave public keys before it followed the daemon's scheme.
    PrintError(absl::StrCat("verify: warning: ", TerminalSafe(opt.pubkey),
                            " has the old public-key name; keygen now writes KEY.pub.pem "
                            "beside KEY.pem (rename it to match)"));
  }
  struct stat st;
  if (::stat(opt.model.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("verify: ", TerminalSafe(opt.model)));
  }
  const bool dir = S_ISDIR(st.st_mode);
  const std::string sig = !opt.signature.empty() ? opt.signature
                          : dir                  ? absl::StrCat(opt.model, "/", app::kSignatureName)
                                                 : app::SignaturePathFor(opt.model);
  absl::StatusOr<signing::Trust> trust = [&]() -> absl::StatusOr<signing::Trust> {
    if (!opt.pubkey.empty()) {
      absl::StatusOr<signing::PublicKey> pub = signing::PublicKey::LoadFile(opt.pubkey);
      if (!pub.ok()) return pub.status();
      return signing::Trust::Key(*std::move(pub));
    }
    return signing::Trust::CaCertificateFiles(opt.ca_certs);
  }();
  if (!trust.ok()) return UsageError(absl::StrCat("verify: ", trust.status().message()));
  absl::StatusOr<std::string> bundle =
      signing::ReadSmallFile(sig, signing::Limits{}.max_bundle_bytes, "Limits::max_bundle_bytes");
  if (!bundle.ok()) {
    return absl::Status(bundle.status().code(),
                        absl::StrCat("verify: ", bundle.status().message()));
  }
  signing::VerifyOptions options;
  options.ignore_unsigned_files = opt.ignore_unsigned;
  if (dir && opt.signature.empty()) options.ignore_paths = {app::kSignatureName};
  absl::StatusOr<signing::VerifiedBundle> verified =
      signing::VerifyModel(*bundle, *trust, opt.model, options);
  if (!verified.ok()) {
    const std::string message =
        absl::StrCat("verify: FAILED: ", TerminalSafe(opt.model), ": ",
                     TerminalSafe(base::StdView(verified.status().message())));
    // A bundle or model that cannot be read or is malformed could not be checked (2); anything
    // else is a check that failed (1).
    return absl::IsInvalidArgument(verified.status()) || absl::IsNotFound(verified.status())
               ? absl::Status(verified.status().code(), message)
               : Rejected(message);
  }
  (void)WriteAll(
      STDOUT_FILENO,
      absl::StrCat(
          TerminalSafe(opt.model), ": OK (", verified->manifest.resources.size(), " signed ",
          verified->manifest.serialization.method == signing::Method::kShards ? "shards"
          : verified->manifest.resources.size() == 1                          ? "file"
                                                                              : "files",
          ", ", verified->method, " method, signer ", TerminalSafe(verified->signer), ")\n"));
  return 0;
}

}  // namespace

void AddKeyCommands(CLI::App* app, Commands* out) {
  auto keygen_opt = std::make_shared<KeygenOptions>();
  CLI::App* keygen =
      app->add_subcommand("keygen", "Create an ECDSA P-256 signing key for convert --key");
  keygen
      ->add_option("--output,-o", keygen_opt->output,
                   "The private key file to create (PEM, mode 0600; never overwritten)")
      ->type_name("KEY")
      ->required();
  keygen
      ->add_option("--public", keygen_opt->public_output,
                   "The public key file to create (default: KEY.pub.pem for KEY.pem, as "
                   "ckptscand names its pair)")
      ->type_name("PUB");
  keygen->footer(
      "Exit codes: 0 the key pair was written; 2 it could not be (an existing file is never\n"
      "overwritten); 64 usage error.");
  out->push_back({keygen, [keygen_opt] { return RunKeygen(*keygen_opt); }});

  auto verify_opt = std::make_shared<VerifyCliOptions>();
  CLI::App* verify = app->add_subcommand(
      "verify", "Check an OpenSSF model-signing bundle against a model directory or file");
  verify
      ->add_option("MODEL", verify_opt->model,
                   "The model: a directory (convert of a sharded set) or one file")
      ->required();
  verify
      ->add_option("--signature", verify_opt->signature,
                   "The bundle (default: MODEL/model.sig for a directory, MODEL.sig for a "
                   "file)")
      ->type_name("SIG");
  CLI::Option* pubkey_opt =
      verify->add_option("--pubkey", verify_opt->pubkey, "Trust this public key (PEM)")
          ->type_name("PUB");
  CLI::Option* ca_opt =
      verify
          ->add_option("--cert-chain", verify_opt->ca_certs,
                       "Trust certificates issued under these CA certificates (PEM; repeatable)")
          ->type_name("CA");
  pubkey_opt->excludes(ca_opt);
  verify->add_flag("--ignore-unsigned-files", verify_opt->ignore_unsigned,
                   "Accept files present in MODEL that the bundle does not cover");
  verify->footer(
      "Checks, in order: the bundle's structure (strict JSON, Sigstore bundle v0.3, DSSE,\n"
      "in-toto statement), the signature with the given key or certificate chain, then\n"
      "every file of MODEL: each signed file must be present with its digest, and no\n"
      "unsigned file may have been added. The first failure is printed.\n\n"
      "Exit codes: 0 verified; 1 verification failed (wrong key, bad signature, a\n"
      "file changed, missing or added); 2 the bundle or model could not be read or is\n"
      "malformed; 64 usage.\n");
  out->push_back({verify, [verify_opt]() -> CommandResult {
                    if (verify_opt->pubkey.empty() && verify_opt->ca_certs.empty()) {
                      return UsageError("verify: give --pubkey PUB or --cert-chain CA");
                    }
                    return RunVerify(*verify_opt);
                  }});
}

}  // namespace ckptscan::clients
