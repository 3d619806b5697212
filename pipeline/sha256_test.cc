#include "pipeline/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace ckptscan::pipeline {
namespace {

TEST(Sha256Test, EmptyInputHasTheKnownDigest) {
  absl::StatusOr<std::string> hex = Sha256Hex("");
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(*hex,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, AbcHasTheKnownDigest) {
  absl::StatusOr<std::string> hex = Sha256Hex("abc");
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(*hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, InputLargerThanOneChunkHashesAsAWhole) {
  // 1,000,000 x 'a' is the FIPS 180-2 long vector; 3 MiB + 1 crosses several 1
  // MiB chunks.
  absl::StatusOr<std::string> hex = Sha256Hex(std::string(1000000, 'a'));
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(*hex,
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::string big((3u << 20) + 1, 'x');
  absl::StatusOr<std::string> chunked = Sha256Hex(big);
  ASSERT_TRUE(chunked.ok());
  EXPECT_EQ(*chunked,
            "d7e5697503e2fe5e59e91384af0f8566f4269f6fb21d6d31a66d61196fe4f0ae");
}

}  // namespace
}  // namespace ckptscan::pipeline
