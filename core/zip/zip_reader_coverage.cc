// What the archive's records leave unaccounted for or share: given every span the members,
// descriptors and directory records occupy, reports overlaps, gaps, bytes prepended before the
// first member and bytes appended after the end record.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/strings.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip::internal {

using base::AbslView;
using records::kLocalSig;

void CheckCoverage(std::string_view data, std::vector<Span> spans, AnomalySink& anomalies) {
  const uint64_t size = data.size();
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  uint64_t covered = 0;  // end of the furthest-reaching span so far
  const Span* owner = nullptr;
  for (const Span& s : spans) {
    if (s.begin < covered && owner != nullptr) {
      anomalies.Add(
          AnomalyKind::kOverlap, s.member, s.begin,
          absl::StrFormat("%s %s [%d, %d) overlaps %s %s, which runs to %d", AbslView(s.what),
                          AbslView(Quoted(s.member)), s.begin, s.end, AbslView(owner->what),
                          AbslView(Quoted(owner->member)), covered));
    } else if (s.begin > covered) {
      std::string_view hole = data.substr(covered, s.begin - covered);
      if (covered == 0 && hole.substr(0, 4) != kLocalSig) {
        anomalies.Add(AnomalyKind::kPrependedData, "", 0,
                      absl::StrFormat("%d bytes before the first member (a file that is another "
                                      "format followed by a zip)",
                                      hole.size()));
      } else {
        size_t sig = hole.find(kLocalSig);
        anomalies.Add(AnomalyKind::kGap, "", covered,
                      absl::StrFormat("%d bytes [%d, %d) referenced by nothing%s", hole.size(),
                                      covered, s.begin,
                                      sig == std::string_view::npos
                                          ? ""
                                          : absl::StrFormat(", with a local header signature at "
                                                            "byte offset %d",
                                                            covered + sig)));
      }
    }
    if (s.end > covered) {
      covered = s.end;
      owner = &s;
    }
  }
  if (covered < size) {
    anomalies.Add(AnomalyKind::kAppendedData, "", covered,
                  absl::StrFormat("%d bytes after the end of the archive", size - covered));
  }
}

}  // namespace ckptscan::zip::internal
