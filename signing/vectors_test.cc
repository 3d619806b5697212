// Conformance against upstream vectors (tests/fixtures/oms/README.md says where they come
// from): every bundle model_signing 1.0.0, 1.0.1 and 1.1.0 wrote verifies over its model
// files, and every invalid vector of the OMS spec is rejected for the reason it was made for.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "signing/bundle.h"
#include "signing/encoding.h"
#include "signing/statement.h"
#include "signing/strict_json.h"
#include "signing/test_util.h"

namespace ckptscan::signing {
namespace {

using testing::FixtureDir;
using ::testing::HasSubstr;
using testing::ReadFile;

const std::string kMt = FixtureDir() + "/model-transparency";
const std::string kSpec = FixtureDir() + "/model-signing-spec/v1.0";

Trust KeyTrust() {
  absl::StatusOr<PublicKey> k = PublicKey::LoadFile(kMt + "/keys/certificate/signing-key-pub.pem");
  EXPECT_TRUE(k.ok()) << k.status();
  return Trust::Key(*std::move(k));
}

Trust CaTrust(CertificateTime time = CertificateTime::kNow) {
  absl::StatusOr<Trust> t =
      Trust::CaCertificateFiles({kMt + "/keys/certificate/ca-cert.pem"}, time);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// As model-transparency's own scripts/tests/test-verify-*.sh run them: model.sig excluded as
// the signature file, ignore-me passed with --ignore-paths where the release did not record it.
absl::Status VerifyUpstream(const std::string& version_dir, const Trust& trust,
                            const std::string& model = "") {
  VerifyOptions o;
  o.ignore_paths = {"model.sig", "ignore-me"};
  const std::string dir = kMt + "/" + version_dir;
  return VerifyModel(ReadFile(dir + "/model.sig"), trust, model.empty() ? dir : dir + "/" + model,
                     o)
      .status();
}

TEST(OmsUpstreamVectorsTest, EllipticKeyBundlesOfEveryReleaseVerify) {
  const Trust trust = KeyTrust();
  // v1.0.0 signed the single file signme-1 (resource name "."), with publicKey.rawBytes.
  EXPECT_TRUE(VerifyUpstream("v1.0.0-elliptic-key", trust, "signme-1").ok())
      << VerifyUpstream("v1.0.0-elliptic-key", trust, "signme-1");
  EXPECT_TRUE(VerifyUpstream("v1.0.1-elliptic-key", trust).ok())
      << VerifyUpstream("v1.0.1-elliptic-key", trust);
  EXPECT_TRUE(VerifyUpstream("v1.1.0-elliptic-key", trust).ok())
      << VerifyUpstream("v1.1.0-elliptic-key", trust);
}

TEST(OmsUpstreamVectorsTest, CertificateBundlesOfEveryReleaseVerifyAgainstTheCa) {
  for (CertificateTime time : {CertificateTime::kNow, CertificateTime::kLeafNotBefore}) {
    const Trust trust = CaTrust(time);
    for (const char* v : {"v1.0.0-certificate", "v1.0.1-certificate", "v1.1.0-certificate"}) {
      absl::Status s = VerifyUpstream(v, trust);
      EXPECT_TRUE(s.ok()) << v << ": " << s;
    }
  }
}

TEST(OmsUpstreamVectorsTest, V110BundleRecordsItsIgnorePathsSoNoExtraIgnoreIsNeeded) {
  VerifyOptions o;  // model.sig and ignore-me are in the bundle's ignore_paths
  EXPECT_TRUE(VerifyModel(ReadFile(kMt + "/v1.1.0-elliptic-key/model.sig"), KeyTrust(),
                          kMt + "/v1.1.0-elliptic-key", o)
                  .ok());
  // v1.0.1 did not record them: its ignore-me is then an unsigned file.
  absl::Status s = VerifyModel(ReadFile(kMt + "/v1.0.1-elliptic-key/model.sig"), KeyTrust(),
                               kMt + "/v1.0.1-elliptic-key", o)
                       .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("unsigned file \"ignore-me\" was added"));
}

TEST(OmsUpstreamVectorsTest, WrongTrustIsRefused) {
  // Elliptic-key bundle against another key: the hint says so.
  absl::StatusOr<PrivateKey> other = PrivateKey::Generate(Curve::kP384);
  ASSERT_TRUE(other.ok());
  const Trust wrong = Trust::Key(*PublicKey::FromPem(other->public_key().pem()));
  absl::Status s = VerifyUpstream("v1.1.0-elliptic-key", wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("wrong key"));
  // v1.0.1 has rawBytes instead of a hint: the recorded key is compared.
  s = VerifyUpstream("v1.0.1-elliptic-key", wrong);
  EXPECT_THAT(s.message(), HasSubstr("wrong key: the bundle records public key e8450dec"));
  // Certificate bundle with the intermediate as the only anchor: not a complete chain.
  absl::StatusOr<Trust> intermediate =
      Trust::CaCertificateFiles({kMt + "/keys/certificate/int-ca-cert.pem"});
  ASSERT_TRUE(intermediate.ok());
  s = VerifyUpstream("v1.1.0-certificate", *intermediate);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("untrusted certificate chain"));
}

TEST(OmsUpstreamVectorsTest, CertificateChainWithoutTheIntermediateIsUntrusted) {
  Json b = Json::parse(ReadFile(kMt + "/v1.1.0-certificate/model.sig"));
  b["verificationMaterial"]["x509CertificateChain"]["certificates"].erase(1);
  absl::Status s = VerifyBundle(b.dump(), CaTrust()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("untrusted certificate chain: unable to get local issuer"));
}

TEST(OmsUpstreamVectorsTest, OurStatementWriterMatchesModelSigning101ByteForByte) {
  for (const char* v : {"v1.0.1-elliptic-key", "v1.0.1-certificate", "v1.0.0-certificate"}) {
    const std::string bundle = ReadFile(kMt + "/" + v + "/model.sig");
    const Json b = Json::parse(bundle);
    absl::StatusOr<std::string> payload =
        Base64Decode(b["dsseEnvelope"]["payload"].get<std::string>(), "payload");
    ASSERT_TRUE(payload.ok());
    absl::StatusOr<Manifest> m = ParseStatement(*payload, Limits{});
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->model_name, v);
    absl::StatusOr<std::string> ours = WriteStatement(*m);
    ASSERT_TRUE(ours.ok());
    EXPECT_EQ(*ours, *payload) << v;
  }
}

TEST(OmsSpecVectorsTest, ValidKeyAndCertificateBundlesVerify) {
  // The spec's valid bundles sign signme-1/2 of model-transparency's v1.1.0 model.
  VerifyOptions o;
  o.ignore_paths = {"model.sig"};
  absl::Status s = VerifyModel(ReadFile(kSpec + "/valid/key.bundle.json"), KeyTrust(),
                               kMt + "/v1.1.0-elliptic-key", o)
                       .status();
  EXPECT_TRUE(s.ok()) << s;
  s = VerifyModel(ReadFile(kSpec + "/valid/certificate.bundle.json"), CaTrust(),
                  kMt + "/v1.1.0-elliptic-key", o)
          .status();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(OmsSpecVectorsTest, ValidSigstoreBundleParsesButKeylessIsUnimplemented) {
  absl::Status s =
      VerifyBundle(ReadFile(kSpec + "/valid/sigstore.bundle.json"), KeyTrust()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("sigstore (keyless) method"));
}

struct InvalidVector {
  const char* file;
  absl::StatusCode code;
  const char* reason;
};

TEST(OmsSpecVectorsTest, EveryInvalidVectorIsRejectedForItsReason) {
  const InvalidVector kVectors[] = {
      {"invalid/empty.bundle.json", absl::StatusCode::kInvalidArgument, "bundle: empty (0 bytes)"},
      {"invalid/missing-envelope.bundle.json", absl::StatusCode::kInvalidArgument,
       "bundle: missing field dsseEnvelope"},
      {"invalid/missing-verification-material.bundle.json", absl::StatusCode::kInvalidArgument,
       "bundle: missing field verificationMaterial"},
      {"invalid/missing-tlog-entries.bundle.json", absl::StatusCode::kInvalidArgument,
       "bundle: verificationMaterial.tlogEntries is missing: the sigstore method"},
      {"invalid-payload/wrong-predicate.bundle.json", absl::StatusCode::kInvalidArgument,
       "statement: unsupported predicateType \"https://example.com/wrong-predicate/v1.0\""},
  };
  for (const Trust& trust : {KeyTrust(), CaTrust()}) {
    for (const InvalidVector& v : kVectors) {
      absl::Status s = VerifyBundle(ReadFile(kSpec + "/" + v.file), trust).status();
      EXPECT_EQ(s.code(), v.code) << v.file << ": " << s;
      EXPECT_THAT(s.message(), HasSubstr(v.reason)) << v.file;
    }
  }
}

}  // namespace
}  // namespace ckptscan::signing
