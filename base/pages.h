// DropMappedPages: tells the kernel that a range of a read-only *file* mapping will not be
// read again soon, so that its pages leave this process's resident set (they stay in the
// page cache and fault back in from the file if touched). Streaming a large input through a
// mapping this way keeps the resident set bounded by the chunk size, not the file size.
//
// Only for ranges of a file mapping that was never written: MADV_DONTNEED discards private
// changes, and on anonymous memory (a std::string, the heap) it zeroes the pages.
#ifndef CKPTSCAN_BASE_PAGES_H_
#define CKPTSCAN_BASE_PAGES_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string_view>

namespace ckptscan::base {

inline void DropMappedPages(std::string_view range) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data()) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) & ~(page - 1);
  if (end > begin) {
    (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_PAGES_H_
