#include "signing/bundle.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>

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
using testing::ReadFile;
using testing::ScratchDir;
using ::testing::StartsWith;
using testing::WriteFile;

std::string Hex(std::string_view s) { return *Sha256Hex(s); }

VerifyOptions SigIgnored() {
  VerifyOptions o;
  o.ignore_paths = {"model.sig"};
  return o;
}

// Signs arbitrary payload bytes into a key-method bundle, bypassing Sign's checks, so tests can
// present well-signed but hostile statements.
std::string SignRaw(const PrivateKey& key, std::string_view payload, std::string_view pae = {}) {
  const std::string message = pae.empty() ? Pae(kPayloadType, payload) : std::string(pae);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EXPECT_EQ(EVP_DigestSignInit(ctx.get(), nullptr, DigestForCurve(key.curve()), nullptr, key.get()),
            1);
  size_t len = 0;
  EXPECT_EQ(EVP_DigestSign(ctx.get(), nullptr, &len,
                           reinterpret_cast<const unsigned char*>(message.data()), message.size()),
            1);
  std::string sig(len, '\0');
  EXPECT_EQ(EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                           reinterpret_cast<const unsigned char*>(message.data()), message.size()),
            1);
  sig.resize(len);
  return "{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\","
         "\"verificationMaterial\":{\"publicKey\":{\"hint\":\"" +
         key.public_key().hint() + "\"},\"tlogEntries\":[]},\"dsseEnvelope\":{\"payload\":\"" +
         Base64Encode(payload) +
         "\",\"payloadType\":\"application/vnd.in-toto+json\",\"signatures\":[{\"sig\":\"" +
         Base64Encode(sig) + "\",\"keyid\":\"\"}]}}";
}

std::string PayloadOf(const std::string& bundle) {
  Json b = Json::parse(bundle);
  return *Base64Decode(b["dsseEnvelope"]["payload"].get<std::string>(), "t");
}

class OmsSignedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "config.json", "{\"hidden\": 4096}");
    WriteFile(dir_ / "weights/model-00001.safetensors", std::string(5000, 'w'));
    WriteFile(dir_ / "weights/model-00002.safetensors", std::string(3000, 'v'));
    testing::NewKeyAndTrust(&key_, &trust_);
    bundle_ = SignDir(dir_.path());
  }

  std::string SignDir(const std::string& path, HashOptions opts = {}) {
    opts.serialization.ignore_paths.push_back("model.sig");
    absl::StatusOr<Manifest> m = HashModel(path, opts);
    EXPECT_TRUE(m.ok()) << m.status();
    absl::StatusOr<std::string> b = Sign(*m, *key_);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *b : "";
  }

  absl::Status Verify(const std::string& bundle, VerifyOptions opts = {}) {
    opts.ignore_paths.push_back("model.sig");
    return VerifyModel(bundle, *trust_, dir_.path(), opts).status();
  }

  ScratchDir dir_;
  std::optional<PrivateKey> key_;
  std::optional<Trust> trust_;
  std::string bundle_;
};

TEST_F(OmsSignedModelTest, RoundTripVerifies) {
  EXPECT_TRUE(Verify(bundle_).ok()) << Verify(bundle_);
  absl::StatusOr<VerifiedBundle> v = VerifyBundle(bundle_, *trust_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->method, "key");
  EXPECT_EQ(v->signer, key_->public_key().hint());
  ASSERT_EQ(v->manifest.resources.size(), 3u);
  EXPECT_EQ(v->manifest.resources[0].name, "config.json");
  EXPECT_EQ(v->manifest.resources[0].digest, Hex("{\"hidden\": 4096}"));
}

TEST_F(OmsSignedModelTest, BundleHasUpstreamLayout) {
  EXPECT_THAT(bundle_,
              StartsWith("{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\","
                         "\"verificationMaterial\":{\"publicKey\":{\"hint\":\"" +
                         key_->public_key().hint() +
                         "\"},\"tlogEntries\":[]},\"dsseEnvelope\":{\"payload\":\""));
  EXPECT_THAT(bundle_, HasSubstr("\",\"payloadType\":\"application/vnd.in-toto+json\","
                                 "\"signatures\":[{\"sig\":\""));
  EXPECT_THAT(bundle_, ::testing::EndsWith("\",\"keyid\":\"\"}]}}"));
  const std::string payload = PayloadOf(bundle_);
  EXPECT_THAT(payload, StartsWith("{\n  \"_type\": \"https://in-toto.io/Statement/v1\",\n"));
  EXPECT_THAT(payload, HasSubstr("\"ignore_paths\": [\n        \".git\",\n"));
  // Same input, same statement bytes (the ECDSA signature itself is randomized).
  EXPECT_EQ(PayloadOf(SignDir(dir_.path())), payload);
}

TEST_F(OmsSignedModelTest, FlippedByteIsADigestMismatchNamingTheFile) {
  std::string w = ReadFile(dir_ / "weights/model-00002.safetensors");
  w[1234] ^= 1;
  WriteFile(dir_ / "weights/model-00002.safetensors", w);
  absl::Status s = Verify(bundle_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr("file \"weights/model-00002.safetensors\": digest mismatch (signed " +
                        Hex(std::string(3000, 'v'))));
}

TEST_F(OmsSignedModelTest, RenamedFileIsMissingPlusUnsignedAdded) {
  std::filesystem::rename(dir_ / "config.json", dir_ / "config2.json");
  absl::Status s = Verify(bundle_);
  EXPECT_THAT(s.message(), HasSubstr("file \"config.json\" is signed but missing"));
  EXPECT_THAT(s.message(), HasSubstr("unsigned file \"config2.json\" was added"));
}

TEST_F(OmsSignedModelTest, AddedFileIsUnsignedUnlessAllowed) {
  WriteFile(dir_ / "weights/extra.bin", "payload");
  absl::Status s = Verify(bundle_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("unsigned file \"weights/extra.bin\" was added"));
  VerifyOptions lenient;
  lenient.ignore_unsigned_files = true;
  EXPECT_TRUE(Verify(bundle_, lenient).ok());
  VerifyOptions ignore;
  ignore.ignore_paths = {"weights/extra.bin"};
  EXPECT_TRUE(Verify(bundle_, ignore).ok());
}

TEST_F(OmsSignedModelTest, RemovedFileIsMissing) {
  std::filesystem::remove(dir_ / "weights/model-00001.safetensors");
  EXPECT_THAT(Verify(bundle_).message(),
              HasSubstr("file \"weights/model-00001.safetensors\" is signed but missing"));
}

TEST_F(OmsSignedModelTest, BundleOfAnotherModelDoesNotMatch) {
  ScratchDir other;
  WriteFile(other / "config.json", "{\"hidden\": 8192}");
  const std::string swapped = SignDir(other.path());
  absl::Status s = Verify(swapped);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("file \"config.json\": digest mismatch"));
  EXPECT_THAT(s.message(), HasSubstr("unsigned file \"weights/model-00001.safetensors\""));
}

TEST_F(OmsSignedModelTest, WrongKeyIsNamedByTheHint) {
  absl::StatusOr<PrivateKey> other = PrivateKey::Generate();
  ASSERT_TRUE(other.ok());
  absl::StatusOr<PublicKey> pub = PublicKey::FromPem(other->public_key().pem());
  ASSERT_TRUE(pub.ok());
  Trust wrong = Trust::Key(*std::move(pub));
  absl::Status s = VerifyModel(bundle_, wrong, dir_.path(), SigIgnored()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("wrong key"));
  EXPECT_THAT(s.message(), HasSubstr(key_->public_key().hint()));

  // Without the hint (as in model_signing < 1.1 bundles) it is the signature that fails.
  std::string no_hint = bundle_;
  const std::string hint = "\"hint\":\"" + key_->public_key().hint() + "\"";
  no_hint.replace(no_hint.find(hint), hint.size(), "\"hint\":\"\"");
  s = VerifyBundle(no_hint, wrong).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("bad signature"));
}

TEST_F(OmsSignedModelTest, EditedPayloadBreaksTheSignature) {
  std::string payload = PayloadOf(bundle_);
  const std::string digest = Hex(std::string(3000, 'v'));
  payload.replace(payload.find(digest), digest.size(), Hex("evil"));
  // Keep the statement self-consistent so that only the signature can catch it.
  Json st = Json::parse(payload);
  Json b = Json::parse(bundle_);
  absl::StatusOr<Manifest> m = ParseStatement(payload, Limits{});
  ASSERT_FALSE(m.ok());  // subject digest no longer matches...
  EXPECT_THAT(m.status().message(), HasSubstr("statement is inconsistent"));
  std::vector<Resource> rs;
  for (const Json& r : st["predicate"]["resources"]) {
    rs.push_back(Resource{r["name"].get<std::string>(), r["digest"].get<std::string>()});
  }
  const std::string old_root = st["subject"][0]["digest"]["sha256"].get<std::string>();
  payload.replace(payload.find(old_root), old_root.size(), HexEncode(*RootDigest(rs)));
  b["dsseEnvelope"]["payload"] = Base64Encode(payload);  // ...so fix it, keep the old signature
  absl::Status s = VerifyBundle(b.dump(), *trust_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("bad signature"));
}

TEST_F(OmsSignedModelTest, TruncatedAndGarbledBundlesAreMalformed) {
  for (size_t cut : {size_t{0}, size_t{1}, bundle_.size() / 2, bundle_.size() - 1}) {
    absl::Status s = VerifyBundle(bundle_.substr(0, cut), *trust_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << cut;
    EXPECT_THAT(std::string(s.message()), StartsWith("bundle: ")) << cut;
  }
  EXPECT_THAT(VerifyBundle(bundle_.substr(0, bundle_.size() - 1), *trust_).status().message(),
              HasSubstr("invalid JSON at byte offset"));
  EXPECT_THAT(VerifyBundle(bundle_ + "x", *trust_).status().message(), HasSubstr("invalid JSON"));
  std::string garbled = bundle_;
  garbled[garbled.find("\"sig\":\"") + 9] = '*';
  EXPECT_THAT(VerifyBundle(garbled, *trust_).status().message(),
              HasSubstr("dsseEnvelope.signatures[0].sig: not standard base64"));
  std::string payload_garbled = bundle_;
  payload_garbled[payload_garbled.find("\"payload\":\"") + 12] = '!';
  EXPECT_THAT(VerifyBundle(payload_garbled, *trust_).status().message(),
              HasSubstr("dsseEnvelope.payload: not standard base64"));
  // Every single-byte flip is rejected and never crashes.
  for (size_t i = 0; i < bundle_.size(); i += 7) {
    std::string b = bundle_;
    b[i] ^= 0x20;
    EXPECT_FALSE(VerifyModel(b, *trust_, dir_.path(), SigIgnored()).ok()) << i;
  }
}

TEST_F(OmsSignedModelTest, StructuralProblemsNameTheField) {
  Json b = Json::parse(bundle_);
  auto check = [&](Json doc, const std::string& expect) {
    absl::Status s = VerifyBundle(doc.dump(), *trust_).status();
    EXPECT_FALSE(s.ok()) << expect;
    EXPECT_THAT(s.message(), HasSubstr(expect));
  };
  Json d = b;
  d["mediaType"] = "application/vnd.dev.sigstore.bundle.v0.1+json";
  check(d, "unsupported mediaType \"application/vnd.dev.sigstore.bundle.v0.1+json\"");
  d = b;
  d["dsseEnvelope"]["payloadType"] = "text/plain";
  check(d, "unsupported dsseEnvelope.payloadType \"text/plain\"");
  d = b;
  d["dsseEnvelope"]["signatures"] = Json::array();
  check(d, "dsseEnvelope.signatures is empty");
  d = b;
  d["dsseEnvelope"]["signatures"] = "x";
  check(d, "dsseEnvelope.signatures must be an array, found a string");
  d = b;
  d["dsseEnvelope"].erase("payload");
  check(d, "missing field dsseEnvelope.payload");
  d = b;
  d["extra"] = 1;
  check(d, "unknown field extra");
  d = b;
  d["verificationMaterial"]["x509CertificateChain"] = Json::object();
  check(d, "more than one of publicKey, x509CertificateChain");
  d = b;
  d["dsseEnvelope"]["signatures"][0]["keyid"] = 5;
  check(d, "keyid must be a string or null");
  d = b;
  d["dsseEnvelope"]["signatures"][0]["keyid"] = nullptr;  // pre-1.1 bundles: accepted
  EXPECT_TRUE(VerifyBundle(d.dump(), *trust_).ok());
  d.erase("dsseEnvelope");
  d["messageSignature"] = Json::object();
  check(d, "holds a messageSignature");
}

TEST_F(OmsSignedModelTest, DuplicateKeysDeepNestingAndSizeLimits) {
  std::string dup = bundle_;
  dup.insert(1, "\"mediaType\":\"x\",");
  EXPECT_THAT(VerifyBundle(dup, *trust_).status().message(),
              HasSubstr("duplicate key \"mediaType\""));
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  absl::Status s = VerifyBundle(deep, *trust_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("Limits::max_json_depth"));
  EXPECT_EQ(base::LimitOf(s).value_or(base::LimitHit{}).name, "max_json_depth") << s;
  Limits small;
  small.max_bundle_bytes = 100;
  s = VerifyBundle(bundle_, *trust_, small).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("Limits::max_bundle_bytes"));
  EXPECT_EQ(base::LimitOf(s).value_or(base::LimitHit{}).name, "max_bundle_bytes") << s;
  EXPECT_EQ(base::LimitOf(s).value_or(base::LimitHit{}).value, 100u) << s;
  small = Limits{};
  small.max_payload_bytes = 100;
  EXPECT_THAT(VerifyBundle(bundle_, *trust_, small).status().message(),
              HasSubstr("Limits::max_payload_bytes"));
  small = Limits{};
  small.max_resources = 2;
  EXPECT_THAT(VerifyBundle(bundle_, *trust_, small).status().message(),
              HasSubstr("Limits::max_resources"));
}

TEST_F(OmsSignedModelTest, HostileButSignedStatementsAreRejected) {
  const std::string root = HexEncode(*RootDigest({{"a", Hex("a")}}));
  auto statement = [&](const std::string& serialization, const std::string& resources,
                       const std::string& root_hex) {
    return "{\"_type\":\"https://in-toto.io/Statement/v1\",\"subject\":[{\"name\":\"m\","
           "\"digest\":{\"sha256\":\"" +
           root_hex +
           "\"}}],\"predicateType\":\"https://model_signing/signature/v1.0\",\"predicate\":{"
           "\"serialization\":" +
           serialization + ",\"resources\":" + resources + "}}";
  };
  const std::string files = R"({"method":"files","hash_type":"sha256","allow_symlinks":false})";
  auto check = [&](const std::string& payload, const std::string& expect) {
    absl::Status s = VerifyBundle(SignRaw(*key_, payload), *trust_).status();
    EXPECT_FALSE(s.ok()) << expect;
    EXPECT_THAT(s.message(), HasSubstr(expect));
  };
  const std::string one =
      "[{\"name\":\"a\",\"algorithm\":\"sha256\",\"digest\":\"" + Hex("a") + "\"}]";
  EXPECT_TRUE(VerifyBundle(SignRaw(*key_, statement(files, one, root)), *trust_).ok());
  check(statement(files, one, Hex("other")), "statement is inconsistent");
  check(statement(files,
                  "[{\"name\":\"../etc/passwd\",\"algorithm\":\"sha256\",\"digest\":\"" + Hex("a") +
                      "\"}]",
                  root),
        "resource name \"../etc/passwd\" has a \"..\" component");
  check(statement(files, "[{\"name\":\"a\",\"algorithm\":\"md5\",\"digest\":\"" + Hex("a") + "\"}]",
                  root),
        "predicate.resources[0].algorithm \"md5\" does not match");
  check(statement(R"({"method":"files","hash_type":"blake3","allow_symlinks":false})", one, root),
        "hash_type \"blake3\" is not supported");
  check(statement(R"({"method":"files","hash_type":"sha256"})", one, root),
        "missing field predicate.serialization.allow_symlinks");
  check(statement(R"({"method":"dirs","hash_type":"sha256","allow_symlinks":false})", one, root),
        "method \"dirs\" is not supported");
  check(statement(R"({"method":"files","hash_type":"sha256","allow_symlinks":false,)"
                  R"("ignore_paths":["."]})",
                  one, root),
        "ignore_paths[0] would exclude the whole model");
  check(statement(R"({"method":"shards","hash_type":"sha256","allow_symlinks":false,)"
                  R"("shard_size":0})",
                  one, root),
        "shard_size must be positive");
  std::string two_subjects = statement(files, one, root);
  two_subjects.replace(two_subjects.find("\"subject\":["), 11, "\"subject\":[{},");
  check(two_subjects, "subject must hold exactly one entry, found 2");
  check("[1,2]", "statement: the statement must be an object");
  std::string wrong_type = statement(files, one, root);
  wrong_type.replace(wrong_type.find("Statement/v1"), 12, "Statement/v0");
  check(wrong_type, "unsupported _type");
  std::string v01 = statement(files, one, root);
  v01.replace(v01.find("https://model_signing/signature/v1.0"), 36,
              "https://model_signing/Digests/v0.1");
  check(v01, "deprecated model_signing 0.2 format");
}

TEST_F(OmsSignedModelTest, UpstreamShardEncodingsAreAccepted) {
  // model_signing writes shard_size through a protobuf Struct (a double: 8.0) and names the
  // algorithm "sha256-sharded-8"; the spec writes 8 and "sha256". Both verify.
  WriteFile(dir_ / "weights/model-00001.safetensors", "0123456789");
  std::filesystem::remove(dir_ / "weights/model-00002.safetensors");
  std::filesystem::remove(dir_ / "config.json");
  const std::string a = Hex("01234567"), b = Hex("89");
  const std::string root = HexEncode(*RootDigest({{"x", a}, {"y", b}}));
  for (const char* variant : {"8.0|sha256-sharded-8", "8|sha256"}) {
    const std::string v = variant;
    const std::string size = v.substr(0, v.find('|')), alg = v.substr(v.find('|') + 1);
    const std::string payload =
        "{\"_type\":\"https://in-toto.io/Statement/v1\",\"subject\":[{\"name\":\"m\",\"digest\":"
        "{\"sha256\":\"" +
        root +
        "\"}}],\"predicateType\":\"https://model_signing/signature/"
        "v1.0\",\"predicate\":{\"serialization\":{\"method\":\"shards\",\"hash_type\":\"sha256\","
        "\"shard_size\":" +
        size + ",\"allow_symlinks\":false},\"resources\":[{\"algorithm\":\"" + alg +
        "\",\"digest\":\"" + a +
        "\",\"name\":\"weights/model-00001.safetensors:0:8\"},"
        "{\"algorithm\":\"" +
        alg + "\",\"digest\":\"" + b + "\",\"name\":\"weights/model-00001.safetensors:8:10\"}]}}";
    EXPECT_TRUE(Verify(SignRaw(*key_, payload)).ok())
        << variant << ": " << Verify(SignRaw(*key_, payload));
  }
}

TEST_F(OmsSignedModelTest, ShardsRoundTripAndTamper) {
  HashOptions opts;
  opts.serialization.method = Method::kShards;
  opts.serialization.shard_size = 1024;
  const std::string bundle = SignDir(dir_.path(), opts);
  EXPECT_THAT(PayloadOf(bundle), HasSubstr("\"shard_size\": 1024,"));
  EXPECT_THAT(PayloadOf(bundle), HasSubstr("\"algorithm\": \"sha256-sharded-1024\""));
  EXPECT_THAT(PayloadOf(bundle),
              HasSubstr("\"name\": \"weights/model-00001.safetensors:4096:5000\""));
  EXPECT_TRUE(Verify(bundle).ok()) << Verify(bundle);
  std::string w = ReadFile(dir_ / "weights/model-00001.safetensors");
  w[4100] = 'x';
  WriteFile(dir_ / "weights/model-00001.safetensors", w);
  EXPECT_THAT(Verify(bundle).message(),
              HasSubstr("shard \"weights/model-00001.safetensors:4096:5000\": digest mismatch"));
}

TEST_F(OmsSignedModelTest, DigestsComputedElsewhereVerify) {
  Manifest m;
  m.model_name = "out";
  m.serialization.ignore_paths = {"model.sig"};
  m.AddFile("weights/model-00002.safetensors", Hex(std::string(3000, 'v')));
  m.AddFile("config.json", Hex("{\"hidden\": 4096}"));
  m.AddFile("weights/model-00001.safetensors", Hex(std::string(5000, 'w')));
  absl::StatusOr<std::string> bundle = Sign(m, *key_);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  EXPECT_TRUE(Verify(*bundle).ok()) << Verify(*bundle);
  EXPECT_TRUE(VerifyManifest(*bundle, *trust_, m).ok());
  Manifest changed = m;
  changed.resources[0].digest = Hex("x");
  EXPECT_THAT(VerifyManifest(*bundle, *trust_, changed).status().message(),
              HasSubstr("file \"weights/model-00002.safetensors\": digest mismatch"));
  Manifest empty;
  empty.model_name = "m";
  EXPECT_THAT(Sign(empty, *key_).status().message(), HasSubstr("nothing to sign"));
  m.AddFile("/abs", Hex("x"));
  EXPECT_THAT(Sign(m, *key_).status().message(), HasSubstr("is absolute"));
}

TEST_F(OmsSignedModelTest, PreOneZeroPaeIsAcceptedForKeys) {
  // model_signing 0.2 signed "DSSEV1 ... b'<python repr>'"; its key verifier falls back to it.
  const std::string payload = PayloadOf(bundle_);
  std::string repr = "b'";
  for (char c : payload) {
    if (c == '\n') {
      repr += "\\n";
    } else if (c == '\'' || c == '\\') {
      repr += std::string("\\") + c;
    } else {
      repr += c;
    }
  }
  repr += "'";
  const std::string pae =
      "DSSEV1 28 application/vnd.in-toto+json " + std::to_string(payload.size()) + " " + repr;
  EXPECT_TRUE(Verify(SignRaw(*key_, payload, pae)).ok());
}

TEST_F(OmsSignedModelTest, P384AndP521KeysRoundTrip) {
  for (Curve c : {Curve::kP384, Curve::kP521}) {
    absl::StatusOr<PrivateKey> key = PrivateKey::Generate(c);
    ASSERT_TRUE(key.ok());
    absl::StatusOr<Manifest> m = HashModel(dir_.path(), HashOptions{});
    ASSERT_TRUE(m.ok());
    absl::StatusOr<std::string> b = Sign(*m, *key);
    ASSERT_TRUE(b.ok()) << b.status();
    Trust t = Trust::Key(*PublicKey::FromPem(key->public_key().pem()));
    EXPECT_TRUE(VerifyModel(*b, t, dir_.path()).ok());
  }
}

// A self-signed certificate for `key` with the given key usage (for the certificate method).
std::string SelfSignedPem(const PrivateKey& key, const char* key_usage) {
  std::unique_ptr<X509, decltype(&X509_free)> x(X509_new(), X509_free);
  X509_set_version(x.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x.get()), 7);
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 3600);
  X509_set_pubkey(x.get(), key.get());
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("ckptscan test signer"), -1, -1,
                             0);
  X509_set_issuer_name(x.get(), name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x.get(), x.get(), nullptr, nullptr, 0);
  for (std::pair<const char*, const char*> e :
       {std::pair<const char*, const char*>{"basicConstraints", "critical,CA:TRUE"},
        {"keyUsage", key_usage}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf(nullptr, &ctx, e.first, e.second);
    X509_add_ext(x.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  EXPECT_GT(X509_sign(x.get(), key.get(), EVP_sha256()), 0);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_X509(bio.get(), x.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

TEST_F(OmsSignedModelTest, CertificateMethodRoundTrip) {
  const std::string cert = SelfSignedPem(*key_, "critical,digitalSignature,keyCertSign");
  absl::StatusOr<Manifest> m = HashModel(dir_.path(), HashOptions{});
  ASSERT_TRUE(m.ok());
  absl::StatusOr<std::string> b = SignWithCertificate(*m, *key_, cert, "");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(*b, HasSubstr("\"verificationMaterial\":{\"x509CertificateChain\":{\"certificates\":"
                            "[{\"rawBytes\":\""));
  absl::StatusOr<Trust> trust = Trust::CaCertificates(cert);
  ASSERT_TRUE(trust.ok()) << trust.status();
  absl::StatusOr<VerifiedBundle> v = VerifyModel(*b, *trust, dir_.path());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->method, "certificate");
  EXPECT_THAT(v->signer, HasSubstr("ckptscan test signer"));
  // Method mismatches are explained.
  EXPECT_THAT(VerifyBundle(*b, *trust_).status().message(), HasSubstr("verify it with the CA"));
  EXPECT_THAT(VerifyBundle(bundle_, *trust).status().message(),
              HasSubstr("verify it with the signer's public key"));
  // A certificate for another key is refused at signing time.
  absl::StatusOr<PrivateKey> other = PrivateKey::Generate();
  EXPECT_THAT(SignWithCertificate(*m, *other, cert, "").status().message(),
              HasSubstr("does not certify"));
  // A certificate that may not sign is refused at verification time.
  const std::string no_sign = SelfSignedPem(*key_, "critical,keyCertSign");
  b = SignWithCertificate(*m, *key_, no_sign, "");
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(VerifyBundle(*b, *Trust::CaCertificates(no_sign)).status().message(),
              HasSubstr("may not sign"));
}

}  // namespace
}  // namespace ckptscan::signing
