#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/compress/decompress.h"
#include "core/content/content.h"
#include "core/content/template_check.h"
#include "core/formats/reader.h"
#include "core/safetensors/validator.h"
#include "core/torch/keras_config.h"
#include "core/torch/legacy.h"
#include "core/torch/numpy.h"
#include "core/torch/repo_json.h"
#include "core/torch/tar.h"
#include "core/torch/tensors.h"
#include "core/zip/zipfile_view.h"

namespace ckptscan::formats {

void Reader::PickleReading(std::string_view data, std::string_view label, bool anomaly) {
  pickle::StreamFacts s = vm_.ScanStream(data, 0);
  if (!MustKeep(s)) return;
  if (anomaly && HasContent(s)) {
    Anomaly("polyglot", std::string(label), 0,
            "the bytes are also a pickle that imports or calls something");
  }
  out_->members.push_back(
      torch::MemberFacts{std::string(label), std::move(s), /*alternative=*/true});
}

void Reader::ReadJoblibCompressed(std::string_view data, compress::Codec codec, bool own) {
  const std::string_view name = compress::CodecName(codec);
  const std::string member = absl::StrCat("(joblib.load: ", base::AbslView(name), ")");
  if (own) out_->format = std::string(CompressedFormat(codec));
  absl::StatusOr<compress::Decompressed> d =
      compress::DecompressJoblib(data, codec, options_.compress);
  if (!d.ok()) {
    Error(d.status(), std::string(d.status().message()), member, 0);
    return;
  }
  if (d->bytes.empty() &&
      (d->end == compress::End::kCorrupt || d->end == compress::End::kTruncated)) {
    // joblib.load raises before its unpickler reads a byte: an error of the file when it is
    // the file's own reading, nothing to judge otherwise.
    if (own) {
      Error(d->stop, absl::StrCat(d->stop.message(), "; joblib.load fails"), member,
            d->stop_offset);
    }
    return;
  }
  pickle::Vm joblib(vm_.limits(), pickle::Loader::kJoblib);
  torch::MemberFacts m{member, joblib.ScanStream(d->bytes, 0, own ? options_.trace : nullptr),
                       /*alternative=*/!own};
  if (!own && HasContent(m.stream)) {
    Anomaly("polyglot", member, 0,
            "joblib.load decompresses the file into a pickle that imports or calls something");
  }
  if (own || MustKeep(m.stream)) out_->members.push_back(std::move(m));
  if (!d->stop.ok()) {
    Error(d->stop,
          absl::StrCat(d->stop.message(), "; joblib.load reads no further (scanned: the ",
                       d->bytes.size(), " bytes decompressed before)"),
          member, d->stop_offset);
  }
  if (d->trailing_bytes == 0) return;
  const bool first_only = codec == compress::Codec::kZlib || codec == compress::Codec::kGzip;
  Anomaly("trailing_data", member, d->trailing_offset,
          first_only
              ? absl::StrCat(d->trailing_bytes, " bytes after the first ", base::AbslView(name),
                             " stream, which joblib.load never decompresses (other tools, "
                             "such as gzip.open, read on: scanned as well)")
              : absl::StrCat(d->trailing_bytes, " bytes after the last ", base::AbslView(name),
                             " stream that do not start another, which joblib.load ignores"));
  if (!first_only) return;
  // Every stream, one after another, as tools that read every member (gzip.open, zlib's
  // tools) see them: a payload after the first stream, or a pickle spread over several,
  // is found even though joblib.load never reaches it. joblib's bytes are scanned already.
  const uint64_t trailing_offset = d->trailing_offset;
  d->bytes = std::string();
  absl::StatusOr<compress::Decompressed> all =
      compress::DecompressJoblib(data, codec, options_.compress, compress::Streams::kAll);
  if (!all.ok() || all->streams < 2) return;
  const std::string all_member = absl::StrCat("(every ", base::AbslView(name), " stream)");
  torch::MemberFacts r{all_member, vm_.ScanStream(all->bytes, 0), /*alternative=*/true};
  if (MustKeep(r.stream)) out_->members.push_back(std::move(r));
  if (all->end == compress::End::kLimit) {
    Error(all->stop, std::string(all->stop.message()), all_member,
          std::max(all->stop_offset, trailing_offset));
  }
}

}  // namespace ckptscan::formats
