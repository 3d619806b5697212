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
#include "core/pickle/joblib_companions.h"
#include "core/pickle/literals.h"
#include "core/safetensors/validator.h"
#include "core/torch/keras_config.h"
#include "core/torch/legacy.h"
#include "core/torch/numpy.h"
#include "core/torch/repo_json.h"
#include "core/torch/tar.h"
#include "core/torch/tensors.h"
#include "core/zip/zipfile_view.h"

namespace ckptscan::formats {

namespace {

// The first pickle's globals as text: offset, how, module and name of each, in order (each
// entry ends in ';', so a prefix of entries is a prefix of the text).
std::string GlobalsText(const pickle::PickleFacts& p) {
  std::string out;
  for (const pickle::GlobalRef& g : p.graph.globals) {
    absl::StrAppend(&out, g.offset, "/", static_cast<int>(g.via), "/", g.module.size(), ":",
                    g.module, "/", g.name.size(), ":", g.name, ";");
  }
  return out;
}

// Pickles joblib read inline (object arrays) follow the first one at depth 0 and lie inside
// it; the stream's next pickle starts at or after its end.
size_t InlinePickles(const pickle::StreamFacts& s) {
  size_t n = 0;
  for (size_t i = 1; i < s.pickles.size() && s.pickles[i].depth == 0 &&
                     s.pickles[i].start < s.pickles[0].end;
       ++i) {
    ++n;
  }
  return n;
}

}  // namespace

std::string FirstPickleKey(const pickle::StreamFacts& s) {
  if (s.pickles.empty()) return s.stream_error.has_value() ? "stream error" : "";
  const pickle::PickleFacts& p = s.pickles[0];
  std::string key = absl::StrCat(p.start, "-", p.end, ":", GlobalsText(p));
  if (p.error.has_value()) {
    absl::StrAppend(&key, "error ", static_cast<int>(p.error->code), "@", p.error->offset);
  }
  for (size_t i = 1; i <= InlinePickles(s); ++i) absl::StrAppend(&key, "+", s.pickles[i].start);
  return key;
}

FirstPickle FirstPickle::Of(const pickle::StreamFacts& s) {
  FirstPickle f;
  f.key = FirstPickleKey(s);
  if (s.pickles.empty()) return f;
  f.present = true;
  f.globals = GlobalsText(s.pickles[0]);
  f.end = s.pickles[0].end;
  return f;
}

bool FirstPickle::Covers(const pickle::StreamFacts& other) const {
  if (FirstPickleKey(other) == key) return true;
  // Another unpickler that stopped (raised) no further into the bytes than this reading got,
  // having imported a prefix of its globals at the same offsets, found nothing this reading
  // does not hold (a torch data.pkl read by pickle._Unpickler, which has no persistent_load).
  if (!present || other.pickles.empty() || InlinePickles(other) != 0) return false;
  const pickle::PickleFacts& p = other.pickles[0];
  if (!p.error.has_value() || p.error->code != pickle::VmError::Code::kMalformed) return false;
  const std::string mine = GlobalsText(p);
  return p.end <= end && globals.compare(0, mine.size(), mine) == 0;
}

void Reader::PickleReading(std::string_view data, std::string_view label, bool anomaly) {
  pickle::StreamFacts s = vm_.ScanStream(data, 0);
  c_first_ = FirstPickle::Of(s);
  if (!MustKeep(s)) return;
  if (anomaly && HasContent(s)) {
    Anomaly("polyglot", std::string(label), 0,
            "the bytes are also a pickle that imports or calls something");
  }
  out_->members.push_back(
      torch::MemberFacts{std::string(label), std::move(s), /*alternative=*/true});
}

void Reader::ReadJoblibCompat(std::string_view data) {
  // joblib.load hands "ZF" files (joblib < 0.10) to load_compatibility.
  out_->format = "joblib-compat";
  const std::string member = "(joblib.load: ZF)";
  absl::StatusOr<compress::JoblibCompat> z =
      compress::DecompressJoblibCompat(data, options_.compress);
  if (!z.ok()) {
    Error(z.status(), std::string(z.status().message()), member, 0);
    return;
  }
  const compress::Decompressed& d = z->stream;
  const uint64_t at = z->stream_offset;
  // read_zfile: int(length_field, 16), then zlib.decompress(rest, 15, length), which refuses a
  // negative length and one past a Py_ssize_t (2^63 - 1).
  std::optional<uint64_t> declared;
  absl::StatusOr<pickle::IntValue> length = pickle::PyIntFromBytes(z->length_field, 16);
  if (length.ok() && length->fits && length->value >= 0 && length->value <= INT64_MAX) {
    declared = static_cast<uint64_t>(length->value);
  }
  if (!declared.has_value()) {
    Error(v1::ERROR_CODE_MALFORMED,
          absl::StrCat("joblib ZF header: the length field \"", Esc(z->length_field),
                       "\" is no length Python's int(text, 16) and zlib.decompress take; "
                       "joblib.load fails"),
          member, 2);
  }
  if (d.end == compress::End::kLimit) {
    Error(d.stop,
          absl::StrCat(d.stop.message(), "; scanned: the ", d.bytes.size(),
                       " bytes decompressed before"),
          member, at + d.stop_offset);
  } else if (!d.stop.ok()) {
    // zlib.decompress raises on a truncated or corrupt stream: joblib.load fails before its
    // unpickler reads a byte. What was decoded is scanned all the same.
    Error(d.stop, absl::StrCat(d.stop.message(), "; joblib.load fails"), member,
          at + d.stop_offset);
  } else if (declared.has_value() && *declared != d.bytes.size()) {
    // read_zfile asserts the length (python -O skips the assert: the pickle is scanned).
    Error(v1::ERROR_CODE_MALFORMED,
          absl::StrCat("joblib ZF header: the length field says ", *declared,
                       " bytes, the zlib stream holds ", d.bytes.size(),
                       "; joblib.load fails its assertion"),
          member, 2);
  }
  if (d.bytes.empty()) return;
  // ZipNumpyUnpickler: pickle._Unpickler over the data, one load(); what follows its STOP is
  // read on as for joblib's compressed files (a trailing pickle is judged too).
  pickle::Vm unpickler(vm_.limits(), pickle::Loader::kPython);
  torch::MemberFacts m{member, unpickler.ScanStream(d.bytes, 0, options_.trace),
                       /*alternative=*/false};
  JoblibCompanions(member, m.stream);
  out_->members.push_back(std::move(m));
  if (d.trailing_bytes > 0) {
    Anomaly("trailing_data", member, at + d.trailing_offset,
            absl::StrCat(d.trailing_bytes,
                         " bytes after the zlib stream, which zlib.decompress ignores"));
  }
}

void Reader::JoblibCompanions(std::string_view member, const pickle::StreamFacts& s) {
  if (s.pickles.empty()) return;
  const uint64_t cap = options_.zip.max_anomalies_per_kind;
  // joblib.load reads one pickle: the first. Every companion is found (the graph bounds
  // them); at most `cap` of each kind are reported, then how many more.
  const std::vector<pickle::JoblibCompanion> found =
      pickle::JoblibCompanions(s.pickles[0].graph, s.pickles[0].graph.calls.size());
  struct Tally {
    const char* kind;
    uint64_t count = 0;
    uint64_t last_offset = 0;
  } path{"companion_path"}, unpickled{"companion_pickle"}, raw{"companion_data"};
  for (const pickle::JoblibCompanion& c : found) {
    const bool plain = !c.truncated && pickle::IsPlainFileName(c.filename);
    Tally& k = !plain ? path : c.unpickled ? unpickled : raw;
    k.last_offset = c.offset;
    if (++k.count > cap) continue;
    const std::string name = absl::StrCat("\"", Esc(std::string_view(c.filename).substr(0, 200)),
                                          c.truncated || c.filename.size() > 200 ? "…" : "", "\"");
    const char* wrapper = c.unpickled ? "NDArrayWrapper" : "ZNDArrayWrapper";
    std::string message;
    if (!plain) {
      message = absl::StrCat(
          "a joblib < 0.10 ", wrapper, " names its array's file ", name,
          ", which is no plain file name: joblib.load opens os.path.join(the pickle's folder, "
          "name), outside that folder or nowhere",
          c.unpickled ? ", and unpickles what it finds there (numpy.load(allow_pickle=True))" : "");
    } else if (c.unpickled) {
      message = absl::StrCat(
          "joblib.load reads this NDArrayWrapper's array from the file ", name,
          " beside the pickle with numpy.load(allow_pickle=True), which unpickles that file when "
          "it holds an object array or is no .npy: what loads depends on it; scan it too");
    } else {
      message = absl::StrCat("joblib.load reads this ZNDArrayWrapper's array bytes from the zlib ",
                             "file ", name, " beside the pickle (raw data, never unpickled)");
    }
    Anomaly(k.kind, std::string(member), c.offset, std::move(message),
            /*must_flag=*/!plain || c.unpickled, "joblib");
  }
  for (const Tally* k : {&path, &unpickled, &raw}) {
    if (k->count <= cap) continue;
    Anomaly(k->kind, std::string(member), k->last_offset,
            absl::StrCat(k->count - cap, " more array files of this kind (",
                         "zip.max_anomalies_per_kind is ", cap, ")"),
            /*must_flag=*/k != &raw, "joblib");
  }
}

void Reader::PurePythonReading(std::string_view data) {
  // joblib.load reads the first pickle (one Unpickler.load) with its NumpyUnpickler, a
  // pickle._Unpickler; where the C unpickler's reading of these bytes (or joblib's own, for a
  // joblib file) covers it (FirstPickle::Covers), that reading holds its findings already.
  pickle::Vm joblib(vm_.limits(), pickle::Loader::kJoblib);
  pickle::StreamFacts s = joblib.ScanStream(data, 0, nullptr, pickle::Pickles::kFirst);
  const std::string key = FirstPickleKey(s);
  const bool names_arrays = NamesJoblibArrays(s);
  if (!joblib_first_.Covers(s)) JoblibCompanions("(as joblib.load)", s);
  if (!c_first_.Covers(s) && !joblib_first_.Covers(s) && MustKeep(s)) {
    if (HasContent(s)) {
      Anomaly("polyglot", "(as joblib.load)", 0,
              "joblib.load's pure-Python unpickler reads these bytes on where pickle.load "
              "stops, or otherwise, and imports or calls something");
    }
    out_->members.push_back(torch::MemberFacts{"(as joblib.load)", std::move(s),
                                               /*alternative=*/true});
  }
  if (!names_arrays) return;
  // joblib.load read an array placeholder's bytes as data: pickle._Unpickler itself (dill and
  // others build on it) reads them as opcodes.
  pickle::Vm python(vm_.limits(), pickle::Loader::kPython);
  pickle::StreamFacts p = python.ScanStream(data, 0, nullptr, pickle::Pickles::kFirst);
  if (!c_first_.Covers(p) && FirstPickleKey(p) != key && !joblib_first_.Covers(p) &&
      MustKeep(p)) {
    out_->members.push_back(torch::MemberFacts{"(as pickle._Unpickler)", std::move(p),
                                               /*alternative=*/true});
  }
}

bool Reader::ReadJoblibCompressed(std::string_view data, compress::Codec codec, bool own) {
  const std::string_view name = compress::CodecName(codec);
  const std::string member = absl::StrCat("(joblib.load: ", base::AbslView(name), ")");
  absl::StatusOr<compress::Decompressed> d =
      compress::DecompressJoblib(data, codec, options_.compress);
  if (d.ok() && d->bytes.empty() &&
      (d->end == compress::End::kCorrupt || d->end == compress::End::kTruncated)) {
    // joblib.load raises before its unpickler reads a byte: nothing of the file runs there.
    // joblib takes any file whose first byte is 'x' for zlib (and "BZh" for bz2): a README or
    // a vocabulary starting with that letter is read as the other loaders read it.
    if (own) {
      Anomaly("not_compressed", member, d->stop_offset,
              absl::StrCat("the first bytes are ", base::AbslView(name),
                           "'s, but the stream is not (", d->stop.message(),
                           "): joblib.load fails before it unpickles a byte; read as the other "
                           "loaders read it"));
    }
    return false;
  }
  if (own) out_->format = std::string(CompressedFormat(codec));
  if (!d.ok()) {
    Error(d.status(), std::string(d.status().message()), member, 0);
    return true;
  }
  pickle::Vm joblib(vm_.limits(), pickle::Loader::kJoblib);
  torch::MemberFacts m{member, joblib.ScanStream(d->bytes, 0, own ? options_.trace : nullptr),
                       /*alternative=*/!own};
  if (!own && HasContent(m.stream)) {
    Anomaly("polyglot", member, 0,
            "joblib.load decompresses the file into a pickle that imports or calls something");
  }
  JoblibCompanions(member, m.stream);
  if (own || MustKeep(m.stream)) out_->members.push_back(std::move(m));
  if (!d->stop.ok()) {
    Error(d->stop,
          absl::StrCat(d->stop.message(), "; joblib.load reads no further (scanned: the ",
                       d->bytes.size(), " bytes decompressed before)"),
          member, d->stop_offset);
  }
  if (d->trailing_bytes == 0) return true;
  const bool first_only = codec == compress::Codec::kZlib || codec == compress::Codec::kGzip;
  Anomaly("trailing_data", member, d->trailing_offset,
          first_only
              ? absl::StrCat(d->trailing_bytes, " bytes after the first ", base::AbslView(name),
                             " stream, which joblib.load never decompresses (other tools, "
                             "such as gzip.open, read on: scanned as well)")
              : absl::StrCat(d->trailing_bytes, " bytes after the last ", base::AbslView(name),
                             " stream that do not start another, which joblib.load ignores"));
  if (!first_only) return true;
  // Every stream, one after another, as tools that read every member (gzip.open, zlib's
  // tools) see them: a payload after the first stream, or a pickle spread over several,
  // is found even though joblib.load never reaches it. joblib's bytes are scanned already.
  const uint64_t trailing_offset = d->trailing_offset;
  d->bytes = std::string();
  absl::StatusOr<compress::Decompressed> all =
      compress::DecompressJoblib(data, codec, options_.compress, compress::Streams::kAll);
  if (!all.ok() || all->streams < 2) return true;
  const std::string all_member = absl::StrCat("(every ", base::AbslView(name), " stream)");
  torch::MemberFacts r{all_member, vm_.ScanStream(all->bytes, 0), /*alternative=*/true};
  if (MustKeep(r.stream)) out_->members.push_back(std::move(r));
  if (all->end == compress::End::kLimit) {
    Error(all->stop, std::string(all->stop.message()), all_member,
          std::max(all->stop_offset, trailing_offset));
  }
  return true;
}

}  // namespace ckptscan::formats
