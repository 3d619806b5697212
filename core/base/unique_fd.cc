#include "core/base/unique_fd.h"

#include <unistd.h>

namespace ckptscan::base {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0 && fd_ != fd) (void)::close(fd_);
  fd_ = fd;
}

}  // namespace ckptscan::base
