#include "signing/keys.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "signing/encoding.h"
#include "signing/test_util.h"

namespace ckptscan::signing {
namespace {

using testing::FixtureDir;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::ScratchDir;
using testing::WriteFile;

unsigned ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string PemOf(EVP_PKEY* pkey, bool encrypt) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (encrypt) {
    char pass[] = "secret";
    EXPECT_EQ(PEM_write_bio_PKCS8PrivateKey(bio.get(), pkey, EVP_aes_256_cbc(), pass, 6, nullptr,
                                            nullptr),
              1);
  } else {
    EXPECT_EQ(PEM_write_bio_PrivateKey(bio.get(), pkey, nullptr, nullptr, 0, nullptr, nullptr), 1);
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

TEST(OmsKeysTest, GeneratedKeyFilesArePrivate0600AndPublicPem) {
  ScratchDir dir;
  absl::StatusOr<PublicKey> pub = GenerateKeyFiles(dir / "k.pem", dir / "k.pub");
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(pub->curve(), Curve::kP256);
  EXPECT_EQ(ModeOf(dir / "k.pem"), 0600u);
  EXPECT_EQ(ModeOf(dir / "k.pub"), 0644u);
  EXPECT_EQ(ReadFile(dir / "k.pub"), pub->pem());
  EXPECT_THAT(ReadFile(dir / "k.pem"), HasSubstr("-----BEGIN PRIVATE KEY-----"));

  absl::StatusOr<PrivateKey> key = PrivateKey::LoadFile(dir / "k.pem");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_TRUE(key->public_key().Equals(*pub));
  absl::StatusOr<PublicKey> reread = PublicKey::LoadFile(dir / "k.pub");
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_EQ(reread->hint(), pub->hint());
  // The hint is the SHA-256 of the PEM text, as model_signing computes it.
  EXPECT_EQ(pub->hint(), *Sha256Hex(ReadFile(dir / "k.pub")));
}

TEST(OmsKeysTest, GenerateNeverOverwritesAnExistingFile) {
  ScratchDir dir;
  WriteFile(dir / "k.pem", "precious");
  absl::StatusOr<PublicKey> pub = GenerateKeyFiles(dir / "k.pem", dir / "k.pub");
  EXPECT_EQ(pub.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(pub.status().message(), HasSubstr("refusing to overwrite"));
  EXPECT_EQ(ReadFile(dir / "k.pem"), "precious");
  EXPECT_FALSE(std::filesystem::exists(dir / "k.pub"));
}

TEST(OmsKeysTest, ExistingPublicFileLeavesNoPrivateKeyBehind) {
  ScratchDir dir;
  WriteFile(dir / "k.pub", "x");
  absl::StatusOr<PublicKey> pub = GenerateKeyFiles(dir / "k.pem", dir / "k.pub");
  EXPECT_EQ(pub.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(std::filesystem::exists(dir / "k.pem"));
}

TEST(OmsKeysTest, GroupReadablePrivateKeyIsRefusedNamingFileAndMode) {
  ScratchDir dir;
  ASSERT_TRUE(GenerateKeyFiles(dir / "k.pem", "").ok());
  ASSERT_EQ(::chmod((dir / "k.pem").c_str(), 0640), 0);
  absl::StatusOr<PrivateKey> key = PrivateKey::LoadFile(dir / "k.pem");
  EXPECT_EQ(key.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(key.status().message(), HasSubstr(dir / "k.pem"));
  EXPECT_THAT(key.status().message(), HasSubstr("mode 0640"));
  ASSERT_EQ(::chmod((dir / "k.pem").c_str(), 0604), 0);
  EXPECT_EQ(PrivateKey::LoadFile(dir / "k.pem").status().code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(::chmod((dir / "k.pem").c_str(), 0400), 0);
  EXPECT_TRUE(PrivateKey::LoadFile(dir / "k.pem").ok());
}

TEST(OmsKeysTest, P384AndP521AreAccepted) {
  for (Curve c : {Curve::kP384, Curve::kP521}) {
    absl::StatusOr<PrivateKey> key = PrivateKey::Generate(c);
    ASSERT_TRUE(key.ok()) << key.status();
    absl::StatusOr<std::string> pem = key->ToPem();
    ASSERT_TRUE(pem.ok());
    absl::StatusOr<PrivateKey> back = PrivateKey::FromPem(*pem);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->curve(), c);
  }
}

TEST(OmsKeysTest, NonEcdsaKeysAndOtherCurvesAreRefused) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> ed(
      EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), EVP_PKEY_free);
  ASSERT_NE(ed, nullptr);
  absl::StatusOr<PrivateKey> k = PrivateKey::FromPem(PemOf(ed.get(), false));
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(k.status().message(), HasSubstr("ED25519 is not supported"));

  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> k1(EVP_EC_gen("secp256k1"), EVP_PKEY_free);
  ASSERT_NE(k1, nullptr);
  k = PrivateKey::FromPem(PemOf(k1.get(), false));
  EXPECT_THAT(k.status().message(), HasSubstr("curve secp256k1 is not supported"));
}

TEST(OmsKeysTest, EncryptedKeyIsRefusedWithoutPrompting) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok());
  absl::StatusOr<PrivateKey> k = PrivateKey::FromPem(PemOf(key->get(), true));
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(k.status().message(), HasSubstr("passphrase-protected"));
}

TEST(OmsKeysTest, GarbageIsNotAKey) {
  EXPECT_THAT(PrivateKey::FromPem("hello").status().message(), HasSubstr("not a PEM private key"));
  EXPECT_THAT(PublicKey::FromPem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
                  .status()
                  .message(),
              HasSubstr("not a PEM public key"));
  EXPECT_EQ(PublicKey::LoadFile("/nonexistent/k.pub").status().code(), absl::StatusCode::kNotFound);
}

TEST(OmsKeysTest, UpstreamPublicKeyWithTextPreambleGivesUpstreamHint) {
  // model-transparency's key file starts with certtool's text dump; OpenSSL skips it.
  absl::StatusOr<PublicKey> pub = PublicKey::LoadFile(
      FixtureDir() + "/model-transparency/keys/certificate/signing-key-pub.pem");
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(pub->curve(), Curve::kP384);
  EXPECT_EQ(pub->hint(), "e8450dec4eb99dae995da9af1bc2cc9f76ed669ee2e744f57abba763df3e3f8e");
}

}  // namespace
}  // namespace ckptscan::signing
