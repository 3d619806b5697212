// PinnedInput: a read lease when nobody writes the file, a sealed copy when someone could, a
// named limit on the copy, and a lease that no longer holds once a writer opened the file.
#include "sandbox/pinned_input.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/limit_status.h"
#include "gtest/gtest.h"

namespace ckptscan::sandbox {
namespace {

constexpr uint64_t kUnlimited = ~uint64_t{0};

// A temporary file holding `bytes`; removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& bytes) {
    path_ = testing::TempDir() + "/pinned_input_test_XXXXXX";
    const int fd = ::mkstemp(path_.data());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  base::UniqueFd OpenReadOnly() const {
    return base::UniqueFd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  }

 private:
  std::string path_;
};

std::string ReadAll(int fd, size_t size) {
  std::string out(size, '\0');
  EXPECT_EQ(::pread(fd, out.data(), size, 0), static_cast<ssize_t>(size));
  return out;
}

// A writable shared mapping of the whole file, its descriptor closed: the file stays open for
// writing through the mapping (what the attack holds).
struct SharedMapping {
  explicit SharedMapping(const std::string& path, size_t size) : size(size) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    addr = static_cast<char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(addr, MAP_FAILED);
    ::close(fd);
  }
  ~SharedMapping() { ::munmap(addr, size); }
  char* addr;
  size_t size;
};

TEST(PinnedInputTest, AFileNobodyWritesIsLeased) {
  const std::string bytes(10000, 'x');
  TempFile file(bytes);
  absl::StatusOr<PinnedInput> pin = PinnedInput::Pin(file.OpenReadOnly(), bytes.size(), 0);
  ASSERT_TRUE(pin.ok()) << pin.status();  // no copy is needed, so a limit of 0 does not apply
  EXPECT_EQ(pin->kind(), PinnedInput::Kind::kLease);
  EXPECT_EQ(pin->Describe(), "lease");
  EXPECT_EQ(::fcntl(pin->fd(), F_GETLEASE), F_RDLCK);
  EXPECT_TRUE(pin->Check().ok());
  EXPECT_EQ(ReadAll(pin->fd(), bytes.size()), bytes);
  absl::StatusOr<base::UniqueFd> worker = pin->DupForWorker();
  ASSERT_TRUE(worker.ok());
  pin->Release();
  EXPECT_EQ(::fcntl(worker->get(), F_GETLEASE), F_UNLCK);  // the same open file description
  EXPECT_FALSE(pin->Check().ok());
}

TEST(PinnedInputTest, TheLeaseIsGivenBackWhenThePinGoes) {
  TempFile file("abc");
  base::UniqueFd fd = file.OpenReadOnly();
  base::UniqueFd watch(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
  {
    absl::StatusOr<PinnedInput> pin = PinnedInput::Pin(std::move(fd), 3, kUnlimited);
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(::fcntl(watch.get(), F_GETLEASE), F_RDLCK);
  }
  EXPECT_EQ(::fcntl(watch.get(), F_GETLEASE), F_UNLCK);
  // Nobody holds a lease: a writer opens at once.
  base::UniqueFd writer(::open(file.path().c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  EXPECT_TRUE(writer.valid()) << std::strerror(errno);
}

// Any open for writing breaks the lease (here a non-blocking one, refused with EWOULDBLOCK; a
// blocking one would wait for the release). The break notification (SIGURG) must not hurt
// this process; Check() then fails with the message the report carries.
TEST(PinnedInputTest, AWriterOpeningTheFileBreaksTheLease) {
  const std::string bytes(5000, 'y');
  TempFile file(bytes);
  absl::StatusOr<PinnedInput> pin = PinnedInput::Pin(file.OpenReadOnly(), bytes.size(), 0);
  ASSERT_TRUE(pin.ok()) << pin.status();
  ASSERT_EQ(pin->kind(), PinnedInput::Kind::kLease);
  errno = 0;
  base::UniqueFd writer(::open(file.path().c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  EXPECT_FALSE(writer.valid());
  EXPECT_EQ(errno, EWOULDBLOCK);
  EXPECT_TRUE(pin->Broken());
  const absl::Status s = pin->Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("opened for writing during the scan"), std::string::npos) << s;
  // Truncating would break it too; a broken lease never comes back.
  EXPECT_TRUE(pin->Broken());
}

TEST(PinnedInputTest, AWritableSharedMappingForcesASealedCopy) {
  const std::string benign(3 * 4096 + 17, 'b');
  TempFile file(benign);
  SharedMapping map(file.path(), benign.size());
  absl::StatusOr<PinnedInput> pin =
      PinnedInput::Pin(file.OpenReadOnly(), benign.size(), kUnlimited);
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_EQ(pin->kind(), PinnedInput::Kind::kSealedCopy);
  EXPECT_NE(pin->Describe().find("open for writing"), std::string::npos) << pin->Describe();
  EXPECT_EQ(::fcntl(pin->fd(), F_GET_SEALS),
            F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // The writer rewrites the file through its mapping: the copy keeps the bytes it took.
  map.addr[0] = 'M';
  map.addr[benign.size() - 1] = 'M';
  EXPECT_EQ(ReadAll(pin->fd(), benign.size()), benign);
  EXPECT_TRUE(pin->Check().ok());
  // Nobody can change the copy: not through its descriptor, not by resizing it, and the seals
  // cannot be taken off.
  EXPECT_EQ(::pwrite(pin->fd(), "M", 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(pin->fd(), 1), 0);
  EXPECT_NE(::fcntl(pin->fd(), F_ADD_SEALS, F_SEAL_WRITE), 0);
  void* shared = ::mmap(nullptr, benign.size(), PROT_READ | PROT_WRITE, MAP_SHARED, pin->fd(), 0);
  EXPECT_EQ(shared, MAP_FAILED);
  // The worker's descriptor reads the same sealed bytes.
  absl::StatusOr<base::UniqueFd> worker = pin->DupForWorker();
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ(ReadAll(worker->get(), benign.size()), benign);
}

TEST(PinnedInputTest, AFileOverTheCopyLimitThatCannotBeLeasedIsRefusedByName) {
  const std::string bytes(8192, 'z');
  TempFile file(bytes);
  SharedMapping map(file.path(), bytes.size());
  absl::StatusOr<PinnedInput> pin = PinnedInput::Pin(file.OpenReadOnly(), bytes.size(), 8191);
  ASSERT_FALSE(pin.ok());
  EXPECT_EQ(pin.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string m(pin.status().message());
  EXPECT_NE(m.find("max_sealed_copy_bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("--max-sealed-copy-bytes"), std::string::npos) << m;
  const std::optional<base::LimitHit> hit = base::LimitOf(pin.status());
  ASSERT_TRUE(hit.has_value()) << pin.status();
  EXPECT_EQ(hit->name, "max_sealed_copy_bytes");
  EXPECT_EQ(hit->value, 8191u);
  EXPECT_NE(m.find("8192 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("8191 bytes"), std::string::npos) << m;
  // At the limit it is copied.
  EXPECT_TRUE(PinnedInput::Pin(file.OpenReadOnly(), bytes.size(), 8192).ok());
}

TEST(PinnedInputTest, AnEmptyFileIsPinnedEitherWay) {
  TempFile file("");
  absl::StatusOr<PinnedInput> leased = PinnedInput::Pin(file.OpenReadOnly(), 0, 0);
  ASSERT_TRUE(leased.ok()) << leased.status();
  EXPECT_TRUE(leased->Check().ok());
  leased->Release();
  base::UniqueFd writer(::open(file.path().c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(writer.valid());
  absl::StatusOr<PinnedInput> copied = PinnedInput::Pin(file.OpenReadOnly(), 0, 0);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->kind(), PinnedInput::Kind::kSealedCopy);
}

// A file that shrinks while it is copied is not pinned at all.
TEST(PinnedInputTest, AFileShorterThanItsSizeIsDataLoss) {
  TempFile file("0123456789");
  base::UniqueFd writer(::open(file.path().c_str(), O_RDWR | O_CLOEXEC));  // no lease: a copy
  absl::StatusOr<PinnedInput> pin = PinnedInput::Pin(file.OpenReadOnly(), 20, kUnlimited);
  ASSERT_FALSE(pin.ok());
  EXPECT_EQ(pin.status().code(), absl::StatusCode::kDataLoss) << pin.status();
}

// With a SIGURG handler installed, a lease break would run it: no lease then, a copy.
TEST(PinnedInputTest, AProcessThatHandlesSigurgGetsACopy) {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = [](int) {};
  ASSERT_EQ(::sigaction(SIGURG, &sa, &old), 0);
  TempFile file("abc");
  absl::StatusOr<PinnedInput> pin = PinnedInput::Pin(file.OpenReadOnly(), 3, kUnlimited);
  ::sigaction(SIGURG, &old, nullptr);
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_EQ(pin->kind(), PinnedInput::Kind::kSealedCopy);
  EXPECT_NE(pin->Describe().find("SIGURG"), std::string::npos) << pin->Describe();
}

}  // namespace
}  // namespace ckptscan::sandbox
