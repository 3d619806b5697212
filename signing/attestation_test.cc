#include "signing/attestation.h"

#include <openssl/evp.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/limit_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "signing/encoding.h"
#include "signing/statement.h"
#include "signing/strict_json.h"
#include "signing/test_util.h"

namespace ckptscan::signing {
namespace {

using ::testing::HasSubstr;

const std::string kDigestA(64, 'a');
const std::string kDigestB(64, 'b');
const std::string kDigestC(64, 'c');

AttestedFile SafeFile() {
  AttestedFile f;
  f.name = "model.pt";
  f.sha256 = kDigestA;
  f.verdict = AttestedVerdict::kSafe;
  f.format = "torch-zip";
  f.kind = "model";
  f.complete = true;
  f.pickles = 1;
  f.globals = 3;
  f.tensors = 4;
  return f;
}

AttestedFile SuspiciousFile() {
  AttestedFile f = SafeFile();
  f.name = "sub/odd.pkl";
  f.sha256 = kDigestB;
  f.verdict = AttestedVerdict::kSuspicious;
  f.format = "pickle";
  f.rule_ids = {"pickle.unknown_global"};
  return f;
}

AttestedFile ErrorFile() {
  AttestedFile f = SafeFile();
  f.name = "broken.bin";
  f.sha256 = kDigestC;
  f.verdict = AttestedVerdict::kError;
  f.kind = "";
  f.complete = false;
  f.errors = {"limit:max_opcodes"};
  return f;
}

ScanAttestation Sample() {
  ScanAttestation a;
  a.scanner_version = "0.1.0";
  a.rules_version = "2026.12.3";
  a.rules_sha256 = std::string(64, 'd');
  a.limits = {{"max_opcodes", 1000000}, {"max_compression_ratio", 1100}};
  a.time_created = "2026-12-10T09:30:00Z";
  a.files = {SafeFile(), SuspiciousFile(), ErrorFile()};
  return a;
}

class AttestationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::NewKeyAndTrust(&key_, &trust_);
    absl::StatusOr<std::string> bundle = SignAttestation(Sample(), *key_);
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    bundle_ = *std::move(bundle);
  }

  Json Statement() const {
    Json b = Json::parse(bundle_);
    return Json::parse(*Base64Decode(b["dsseEnvelope"]["payload"].get<std::string>(), "test"));
  }

  // The statement edited by `edit`, then signed again with the trusted key: a hostile but
  // well-signed attestation (the signer's key leaked, or a bug in a producer).
  absl::Status ResignedEdit(const std::function<void(Json&)>& edit) const {
    Json statement = Statement();
    edit(statement);
    absl::StatusOr<std::string> bundle = SignPayload(statement.dump(2), *key_);
    if (!bundle.ok()) return bundle.status();
    return VerifyAttestation(*bundle, *trust_).status();
  }

  std::optional<PrivateKey> key_;
  std::optional<Trust> trust_;
  std::string bundle_;
};

TEST_F(AttestationTest, RoundTripKeepsEveryField) {
  absl::StatusOr<VerifiedAttestation> v = VerifyAttestation(bundle_, *trust_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->method, "key");
  EXPECT_EQ(v->signer, key_->public_key().hint());
  const ScanAttestation& a = v->attestation;
  EXPECT_EQ(a.scanner_version, "0.1.0");
  EXPECT_EQ(a.rules_version, "2026.12.3");
  EXPECT_EQ(a.rules_sha256, std::string(64, 'd'));
  EXPECT_EQ(a.time_created, "2026-12-10T09:30:00Z");
  ASSERT_EQ(a.limits.size(), 2u);  // sorted by name as JSON objects are written
  EXPECT_EQ(a.limits[0].name, "max_compression_ratio");
  EXPECT_EQ(a.limits[1].value, 1000000u);
  ASSERT_EQ(a.files.size(), 3u);
  EXPECT_EQ(a.files[0].name, "model.pt");
  EXPECT_EQ(a.files[0].sha256, kDigestA);
  EXPECT_EQ(a.files[0].verdict, AttestedVerdict::kSafe);
  EXPECT_TRUE(a.files[0].complete);
  EXPECT_EQ(a.files[0].tensors, 4u);
  EXPECT_EQ(a.files[1].rule_ids, std::vector<std::string>{"pickle.unknown_global"});
  EXPECT_EQ(a.files[2].verdict, AttestedVerdict::kError);
  EXPECT_FALSE(a.files[2].complete);
  EXPECT_EQ(a.files[2].errors, std::vector<std::string>{"limit:max_opcodes"});
}

TEST_F(AttestationTest, StatementFollowsSvr) {
  const Json s = Statement();
  EXPECT_EQ(s["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(s["predicateType"], "https://in-toto.io/attestation/svr/v0.1");
  EXPECT_EQ(s["predicate"]["verifier"]["id"],
            "https://github.com/ckptscan/ckptscan/releases/tag/v0.1.0");
  EXPECT_EQ(s["predicate"]["timeCreated"], "2026-12-10T09:30:00Z");
  // One SUSPICIOUS and one ERROR file: no property holds for every subject.
  EXPECT_EQ(s["predicate"]["properties"], Json::array());
  EXPECT_EQ(s["subject"][1]["digest"]["sha256"], kDigestB);
}

TEST_F(AttestationTest, PropertiesClaimOnlyWhatEveryFileHas) {
  EXPECT_EQ(PropertiesOf({SafeFile()}),
            (std::vector<std::string>{"CKPTSCAN_READ_COMPLETE", "CKPTSCAN_NOT_DANGEROUS",
                                      "CKPTSCAN_VERDICT_SAFE"}));
  EXPECT_EQ(PropertiesOf({SafeFile(), SuspiciousFile()}),
            (std::vector<std::string>{"CKPTSCAN_READ_COMPLETE", "CKPTSCAN_NOT_DANGEROUS"}));
  EXPECT_TRUE(PropertiesOf({SafeFile(), ErrorFile()}).empty());
  EXPECT_TRUE(PropertiesOf({}).empty());
}

TEST_F(AttestationTest, SameAttestationSameBytes) {
  EXPECT_EQ(*WriteAttestation(Sample()), *WriteAttestation(Sample()));
}

// Every leaf of the signed statement changed in turn, the signature left as it was.
TEST_F(AttestationTest, EveryStatementFieldTamperedIsRefused) {
  const Json original = Statement();
  Json bundle = Json::parse(bundle_);
  size_t leaves = 0;
  std::vector<Json::json_pointer> stack = {Json::json_pointer()};
  while (!stack.empty()) {
    const Json::json_pointer ptr = stack.back();
    stack.pop_back();
    const Json& v = original.at(ptr);
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) stack.push_back(ptr / it.key());
      continue;
    }
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) stack.push_back(ptr / i);
      continue;
    }
    ++leaves;
    Json edited = original;
    Json& leaf = edited.at(ptr);
    if (leaf.is_string()) {
      leaf = leaf.get<std::string>() + "x";
    } else if (leaf.is_boolean()) {
      leaf = !leaf.get<bool>();
    } else {
      leaf = leaf.get<uint64_t>() + 1;
    }
    bundle["dsseEnvelope"]["payload"] = Base64Encode(edited.dump(2));
    absl::StatusOr<VerifiedAttestation> v2 = VerifyAttestation(bundle.dump(), *trust_);
    EXPECT_TRUE(absl::IsUnauthenticated(v2.status())) << ptr.to_string() << ": " << v2.status();
  }
  EXPECT_GT(leaves, 40u);
}

// Every leaf of the bundle outside the payload (media type, key hint, payload type, signature,
// key id) changed in turn.
TEST_F(AttestationTest, EveryBundleFieldTamperedIsRefused) {
  const Json original = Json::parse(bundle_);
  for (const char* field :
       {"/mediaType", "/verificationMaterial/publicKey/hint", "/dsseEnvelope/payloadType",
        "/dsseEnvelope/signatures/0/sig", "/dsseEnvelope/signatures/0/keyid"}) {
    Json edited = original;
    Json& leaf = edited.at(Json::json_pointer(field));
    std::string s = leaf.get<std::string>();
    // Base64 stays base64: change a character in the middle of the signature.
    if (std::string_view(field) == "/dsseEnvelope/signatures/0/sig") {
      s[s.size() / 2] = s[s.size() / 2] == 'A' ? 'B' : 'A';
    } else {
      s += "x";
    }
    leaf = s;
    EXPECT_FALSE(VerifyAttestation(edited.dump(), *trust_).ok()) << field;
  }
  Json extra = original;
  extra["dsseEnvelope"]["signatures"].push_back(original["dsseEnvelope"]["signatures"][0]);
  EXPECT_THAT(VerifyAttestation(extra.dump(), *trust_).status().message(),
              HasSubstr("exactly one"));
}

TEST_F(AttestationTest, WrongKeyIsRefused) {
  absl::StatusOr<PrivateKey> other = PrivateKey::Generate();
  ASSERT_TRUE(other.ok());
  absl::StatusOr<PublicKey> pub = PublicKey::FromPem(other->public_key().pem());
  ASSERT_TRUE(pub.ok());
  absl::StatusOr<VerifiedAttestation> v = VerifyAttestation(bundle_, Trust::Key(*std::move(pub)));
  EXPECT_TRUE(absl::IsUnauthenticated(v.status())) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("wrong key"));
}

TEST_F(AttestationTest, OtherPayloadTypeIsRefused) {
  Json b = Json::parse(bundle_);
  b["dsseEnvelope"]["payloadType"] = "application/json";
  EXPECT_THAT(VerifyAttestation(b.dump(), *trust_).status().message(),
              HasSubstr("unsupported dsseEnvelope.payloadType"));
}

// A well-signed statement edited so that it lies or breaks a rule; each must be refused, with
// the message that names what is wrong.
struct HostileEdit {
  const char* name;
  std::function<void(Json&)> edit;
  const char* message;
};

class HostileStatementTest : public AttestationTest,
                             public ::testing::WithParamInterface<HostileEdit> {};

TEST_P(HostileStatementTest, IsRefused) {
  EXPECT_THAT(ResignedEdit(GetParam().edit).message(), HasSubstr(GetParam().message));
}

Json& File(Json& j, int i) { return j["predicate"]["ckptscanFiles"][i]; }

INSTANTIATE_TEST_SUITE_P(
    Attestation, HostileStatementTest,
    ::testing::Values(
        HostileEdit{"ModelSigningPredicate",
                    [](Json& j) { j["predicateType"] = std::string(kPredicateType); },
                    "is not a scan attestation's"},
        HostileEdit{"DuplicateSubjectNames",
                    [](Json& j) {
                      j["subject"][1]["name"] = "model.pt";
                      File(j, 1)["name"] = "model.pt";
                    },
                    "names another subject too"},
        HostileEdit{"UppercaseDigest",
                    [](Json& j) { j["subject"][0]["digest"]["sha256"] = std::string(64, 'A'); },
                    "subject[0].digest.sha256 is not 64 lowercase hex"},
        HostileEdit{"ShortDigest",
                    [](Json& j) { j["subject"][0]["digest"]["sha256"] = std::string(63, 'a'); },
                    "is not 64 lowercase hex"},
        HostileEdit{"SecondDigestAlgorithm",
                    [](Json& j) { j["subject"][0]["digest"]["sha512"] = std::string(128, 'a'); },
                    "unknown field \"sha512\""},
        HostileEdit{"SafeClaimForUncoveredErrorFile",
                    [](Json& j) { File(j, 2)["verdict"] = "SAFE"; },
                    "has verdict SAFE but its reading did not complete"},
        HostileEdit{"ErrorFileClaimedComplete",
                    [](Json& j) {
                      File(j, 2)["complete"] = true;
                      File(j, 2)["errors"] = Json::array();
                      File(j, 2)["kind"] = "model";
                    },
                    "has verdict ERROR but claims a complete reading"},
        HostileEdit{"CompleteWithErrors", [](Json& j) { File(j, 0)["errors"] = {"malformed"}; },
                    "is complete but lists errors"},
        HostileEdit{"PropertyTheFilesDoNotSupport",
                    [](Json& j) {
                      j["predicate"]["properties"] = Json::array({"CKPTSCAN_VERDICT_SAFE"});
                    },
                    "predicate.properties do not match the files"},
        HostileEdit{"FileRecordMissing",
                    [](Json& j) { j["predicate"]["ckptscanFiles"].erase(2); },
                    "has 2 entries for 3 subjects"},
        HostileEdit{"FileRecordOfAnotherName", [](Json& j) { File(j, 0)["name"] = "other.pt"; },
                    "is not subject[0]'s name"},
        HostileEdit{"VerifierIdOfAnotherVersion",
                    [](Json& j) { j["predicate"]["verifier"]["ckptscanVersion"] = "9.9.9"; },
                    "is not the id of ckptscan 9.9.9"},
        HostileEdit{"UnknownFieldInOurExtension",
                    [](Json& j) { File(j, 0)["coverage"] = "full"; },
                    "unknown field \"coverage\""},
        HostileEdit{"BadTime",
                    [](Json& j) { j["predicate"]["timeCreated"] = "2026-12-10 09:30:00"; },
                    "predicate.timeCreated is not an RFC 3339 UTC time"},
        HostileEdit{"NegativeCount", [](Json& j) { File(j, 0)["pickles"] = -1; },
                    "must be a non-negative integer"},
        HostileEdit{"FractionalCount", [](Json& j) { File(j, 0)["tensors"] = 1.5; },
                    "must be a non-negative integer"},
        HostileEdit{"LimitOfNoName",
                    [](Json& j) { j["predicate"]["verifier"]["ckptscanLimits"]["Max-X"] = 1; },
                    "has a key that is no limit name"}),
    [](const ::testing::TestParamInfo<HostileEdit>& info) { return std::string(info.param.name); });

TEST_F(AttestationTest, AttestationOfAnotherScannerVersionReadsAsThatVersion) {
  Json statement = Statement();
  statement["predicate"]["verifier"]["ckptscanVersion"] = "0.0.9";
  statement["predicate"]["verifier"]["id"] =
      "https://github.com/ckptscan/ckptscan/releases/tag/v0.0.9";
  absl::StatusOr<std::string> bundle = SignPayload(statement.dump(2), *key_);
  ASSERT_TRUE(bundle.ok());
  absl::StatusOr<VerifiedAttestation> v = VerifyAttestation(*bundle, *trust_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->attestation.scanner_version, "0.0.9");
}

TEST_F(AttestationTest, UnknownSvrFieldIsIgnoredAsInTotoSays) {
  EXPECT_TRUE(ResignedEdit([](Json& j) { j["predicate"]["expires"] = "2027-01-01T00:00:00Z"; })
                  .ok());
}

TEST_F(AttestationTest, HugeBundleIsRefusedByNamedLimit) {
  Limits small;
  small.max_bundle_bytes = bundle_.size() - 1;
  absl::StatusOr<VerifiedAttestation> v = VerifyAttestation(bundle_, *trust_, small);
  EXPECT_TRUE(absl::IsResourceExhausted(v.status()));
  EXPECT_THAT(v.status().message(), HasSubstr("Limits::max_bundle_bytes"));
}

TEST_F(AttestationTest, TooManySubjectsIsRefusedByNamedLimit) {
  Limits small;
  small.max_attested_files = 2;
  absl::StatusOr<VerifiedAttestation> v = VerifyAttestation(bundle_, *trust_, small);
  EXPECT_TRUE(absl::IsResourceExhausted(v.status()));
  EXPECT_THAT(v.status().message(), HasSubstr("Limits::max_attested_files"));
}

TEST_F(AttestationTest, TooLongListIsRefusedByNamedLimit) {
  ScanAttestation a = Sample();
  a.files[1].rule_ids.assign(11, "r");
  Limits small;
  small.max_attested_list_entries = 10;
  EXPECT_THAT(WriteAttestation(a, small).status().message(),
              HasSubstr("Limits::max_attested_list_entries"));
}

TEST(AttestationWriteTest, RefusesWhatItWouldNotRead) {
  ScanAttestation a = Sample();
  a.files.clear();
  EXPECT_THAT(WriteAttestation(a).status().message(), HasSubstr("nothing was attested"));
  a = Sample();
  a.files[0].name = std::string("\xff", 1);
  EXPECT_THAT(WriteAttestation(a).status().message(), HasSubstr("is not valid UTF-8"));
  a = Sample();
  a.limits.push_back({"max_opcodes", 1});
  EXPECT_THAT(WriteAttestation(a).status().message(), HasSubstr("names max_opcodes twice"));
}

TEST(AttestedVerdictTest, NamesRoundTrip) {
  for (AttestedVerdict v : {AttestedVerdict::kSafe, AttestedVerdict::kSuspicious,
                            AttestedVerdict::kDangerous, AttestedVerdict::kError}) {
    EXPECT_EQ(ParseAttestedVerdict(AttestedVerdictName(v)), v);
  }
  EXPECT_FALSE(ParseAttestedVerdict("safe").has_value());
}

}  // namespace
}  // namespace ckptscan::signing
