// Finding a member by name as torch does: miniz's heap sort of the central directory by ASCII
// case-folded name (which decides which of two equal names wins) and the binary search over it
// (Archive::Locate, Archive::LocateRecord).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/strings.h"
#include "core/zip/zip_reader.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip {
namespace {

using base::AbslView;
using internal::CString;
using internal::MzToLower;

// mz_zip_reader_filename_less.
bool FilenameLess(std::string_view l, std::string_view r) {
  size_t n = std::min(l.size(), r.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char a = MzToLower(static_cast<unsigned char>(l[i]));
    unsigned char b = MzToLower(static_cast<unsigned char>(r[i]));
    if (a != b) return a < b;
  }
  return l.size() < r.size();
}

// mz_zip_filename_compare: <0, 0, >0.
int FilenameCompare(std::string_view l, std::string_view r) {
  size_t n = std::min(l.size(), r.size());
  for (size_t i = 0; i < n; ++i) {
    int a = MzToLower(static_cast<unsigned char>(l[i]));
    int b = MzToLower(static_cast<unsigned char>(r[i]));
    if (a != b) return a - b;
  }
  return l.size() < r.size() ? -1 : (l.size() > r.size() ? 1 : 0);
}

}  // namespace

namespace internal {

// mz_zip_reader_sort_central_dir_offsets_by_filename: an in-place heap sort (not stable; which of
// two equal names ends up where is decided here, step for step as miniz does it).
std::vector<uint32_t> MinizSortedOrder(const std::vector<Entry>& entries) {
  const uint64_t size = entries.size();
  std::vector<uint32_t> idx(size);
  for (uint32_t i = 0; i < size; ++i) idx[i] = i;
  if (size <= 1) return idx;
  auto less = [&](uint32_t a, uint32_t b) {
    return FilenameLess(entries[a].name, entries[b].name);
  };
  auto sift = [&](uint64_t root, uint64_t end) {
    for (;;) {
      uint64_t child = root * 2 + 1;
      if (child >= end) break;
      if (child + 1 < end && less(idx[child], idx[child + 1])) ++child;
      if (!less(idx[root], idx[child])) break;
      std::swap(idx[root], idx[child]);
      root = child;
    }
  };
  for (uint64_t start = (size - 2) >> 1;; --start) {
    sift(start, size);
    if (start == 0) break;
  }
  for (uint64_t end = size - 1; end > 0; --end) {
    std::swap(idx[end], idx[0]);
    sift(0, end);
  }
  return idx;
}

}  // namespace internal

const Entry* Archive::Locate(std::string_view name) const {
  const std::string_view query = CString(name);
  int64_t lo = 0, hi = static_cast<int64_t>(sorted_.size()) - 1;
  while (lo <= hi) {
    int64_t mid = lo + ((hi - lo) >> 1);
    const Entry& e = entries_[sorted_[mid]];
    int cmp = FilenameCompare(e.name, query);
    if (cmp == 0) return &e;
    if (cmp < 0) {
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return nullptr;
}

const Entry* Archive::LocateRecord(std::string_view record) const {
  return Locate(absl::StrCat(prefix_, "/", AbslView(record)));
}

}  // namespace ckptscan::zip
