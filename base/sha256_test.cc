#include "base/sha256.h"

#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace ckptscan::base {
namespace {

TEST(Sha256Test, EmptyInputHasTheKnownDigest) {
  absl::StatusOr<std::string> hex = Sha256Hex("");
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(*hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, AbcHasTheKnownDigest) {
  absl::StatusOr<std::string> hex = Sha256Hex("abc");
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(*hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, InputLargerThanOneChunkHashesAsAWhole) {
  // 1,000,000 x 'a' is the FIPS 180-2 long vector; 3 MiB + 1 crosses several 1
  // MiB chunks.
  absl::StatusOr<std::string> hex = Sha256Hex(std::string(1000000, 'a'));
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(*hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::string big((3u << 20) + 1, 'x');
  absl::StatusOr<std::string> chunked = Sha256Hex(big);
  ASSERT_TRUE(chunked.ok());
  EXPECT_EQ(*chunked, "d7e5697503e2fe5e59e91384af0f8566f4269f6fb21d6d31a66d61196fe4f0ae");
}

// A file descriptor holding `data` (an unlinked temporary file).
int TempFd(const std::string& data) {
  char name[] = "/tmp/ckptscan_sha256_XXXXXX";
  int fd = ::mkstemp(name);
  ::unlink(name);
  EXPECT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  return fd;
}

TEST(Sha256Test, FromADescriptorItMatchesTheInMemoryDigestAcrossChunks) {
  const std::string big((3u << 20) + 1, 'x');
  const int fd = TempFd(big);
  absl::StatusOr<std::string> hex = Sha256HexOfFd(fd, big.size());
  ASSERT_TRUE(hex.ok()) << hex.status();
  EXPECT_EQ(*hex, "d7e5697503e2fe5e59e91384af0f8566f4269f6fb21d6d31a66d61196fe4f0ae");
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(big.size()));  // pread: offset kept
  ::close(fd);
}

TEST(Sha256Test, AFileThatShrankUnderUsIsDataLossNotAShortDigest) {
  const int fd = TempFd("abc");
  absl::StatusOr<std::string> hex = Sha256HexOfFd(fd, 10);
  EXPECT_EQ(hex.status().code(), absl::StatusCode::kDataLoss);
  ::close(fd);
}

}  // namespace
}  // namespace ckptscan::base
