#include "signing/encoding.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::signing {
namespace {

using ::testing::HasSubstr;

TEST(OmsBase64Test, Rfc4648Vectors) {
  const std::pair<std::string, std::string> kCases[] = {{"", ""},
                                                        {"f", "Zg=="},
                                                        {"fo", "Zm8="},
                                                        {"foo", "Zm9v"},
                                                        {"foob", "Zm9vYg=="},
                                                        {"fooba", "Zm9vYmE="},
                                                        {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : kCases) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    absl::StatusOr<std::string> back = Base64Decode(encoded, "t");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, plain);
  }
}

TEST(OmsBase64Test, RoundTripsEveryByteAndLength) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t n = 0; n <= all.size(); n += 7) {
    absl::StatusOr<std::string> back = Base64Decode(Base64Encode(all.substr(0, n)), "t");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, all.substr(0, n));
  }
}

TEST(OmsBase64Test, RejectsNonStandardText) {
  EXPECT_THAT(Base64Decode("Zm9", "sig").status().message(), HasSubstr("multiple of 4"));
  EXPECT_THAT(Base64Decode("Zm9v\n", "sig").status().message(), HasSubstr("multiple of 4"));
  EXPECT_THAT(Base64Decode("Zm 9", "sig").status().message(), HasSubstr("outside the alphabet"));
  EXPECT_THAT(Base64Decode("Zm-_", "sig").status().message(), HasSubstr("outside the alphabet"));
  EXPECT_THAT(Base64Decode("Z=9v", "sig").status().message(), HasSubstr("'=' before the end"));
  EXPECT_THAT(Base64Decode("Z===", "sig").status().message(), HasSubstr("'=' before the end"));
  EXPECT_THAT(Base64Decode("Zm9v", "sig").status().code(), absl::StatusCode::kOk);
}

TEST(OmsHexTest, LowercaseOnly) {
  std::string out;
  EXPECT_TRUE(HexDecode("00ff10", &out));
  EXPECT_EQ(out, std::string("\x00\xff\x10", 3));
  EXPECT_FALSE(HexDecode("00FF", &out));
  EXPECT_FALSE(HexDecode("0", &out));
  EXPECT_FALSE(HexDecode("0g", &out));
  EXPECT_EQ(HexEncode(std::string("\x00\xab", 2)), "00ab");
  EXPECT_TRUE(IsSha256Hex(std::string(64, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));
}

TEST(OmsSha256Test, KnownDigests) {
  EXPECT_EQ(*Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(*Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  absl::StatusOr<Sha256Hasher> h = Sha256Hasher::Create();
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Update("a").ok());
  ASSERT_TRUE(h->Update("bc").ok());
  EXPECT_EQ(HexEncode(*h->Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace ckptscan::signing
