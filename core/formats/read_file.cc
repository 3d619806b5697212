#include "core/formats/read_file.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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
namespace {

// A file recognised by its leading bytes that no reading of ours verifies: fail closed.
struct Magic {
  std::string_view bytes;
  std::string_view format;
  std::string_view message;
};

constexpr std::string_view kCompressed =
    "compressed files are not scanned; decompress it and scan the contents";

// joblib's compression prefixes (zlib, gzip, bz2, lzma, xz, lz4) are read by
// ReadJoblibCompressed instead: none of these overlaps them.
constexpr Magic kMagics[] = {
    {{"\x37\x7a\xbc\xaf\x27\x1c", 6}, "7z", "7z archives are not scanned"},
    {{"Rar!\x1a\x07", 6}, "rar", "rar archives are not scanned"},
    {{"\x28\xb5\x2f\xfd", 4}, "zstd", kCompressed},
    // Keras .h5 and other HDF5 files: recognised, not verified (no jailed HDF5 reader yet).
    {{"\x89HDF\r\n\x1a\n", 8}, "hdf5", "HDF5 files (Keras .h5) are not verified"},
};

}  // namespace

// The report's format of a compressed joblib file ("bzip2", as the format was named before
// joblib's files were read, for joblib's "bz2").
std::string_view CompressedFormat(compress::Codec codec) {
  return codec == compress::Codec::kBz2 ? "bzip2" : compress::CodecName(codec);
}

// A safetensors file: an 8-byte little-endian header length N, then the JSON header's '{'.
// N's four high bytes must be zero (any N the validator accepts is below 2^32): a pickle that
// happens to hold '{' at byte 8 (a protocol 0 text argument) is not taken for one.
bool IsSafetensors(std::string_view b) {
  return b.size() > 8 && b[8] == '{' && b[4] == 0 && b[5] == 0 && b[6] == 0 && b[7] == 0;
}

// A reading worth reporting names a global (persistent ids alone are what any bytes starting
// with "P" give).
bool HasContent(const pickle::StreamFacts& s) {
  for (const pickle::PickleFacts& p : s.pickles) {
    if (!p.graph.globals.empty()) return true;
  }
  return false;
}

// Whether another loader's reading of some bytes must be kept: it names a global, or it
// stopped where the real loader would read on (a limit, a stricter rule of ours). Dropping the
// second kind would judge the file by a prefix of what that loader reads.
bool MustKeep(const pickle::StreamFacts& s) { return HasContent(s) || !s.StopsWhereLoaderStops(); }

// A joblib.dump pickle: NumpyArrayWrapper (joblib >= 0.10) or NDArrayWrapper (older).
bool NamesJoblibArrays(const pickle::StreamFacts& s) {
  for (const pickle::PickleFacts& p : s.pickles) {
    for (const pickle::GlobalRef& g : p.graph.globals) {
      if (g.resolved_module == "joblib.numpy_pickle" &&
          (g.resolved_name == "NumpyArrayWrapper" || g.resolved_name == "NDArrayWrapper")) {
        return true;
      }
    }
  }
  return false;
}

// Records that torch.save writes beside data.pkl and the storages (torch/serialization.py
// _save, torch 1.13 to 2.x).
bool IsKnownRecord(std::string_view record) {
  return record == "version" || record == ".data/version" || record == "byteorder" ||
         record == ".data/serialization_id" || record == ".format_version" ||
         record == ".storage_alignment";
}

// A stream whose first opcode CPython itself rejects (an unknown opcode, or one that fails
// before anything is read): no pickle loader reads anything from these bytes.
bool RejectedAtStart(const pickle::StreamFacts& s) {
  if (s.pickles.size() != 1 || s.stream_error.has_value()) return false;
  const pickle::PickleFacts& p = s.pickles[0];
  return p.error.has_value() && p.error->offset == 0 &&
         p.error->code == pickle::VmError::Code::kMalformed && p.graph.globals.empty();
}

// A complete first pickle: the bytes are a pickle whatever else they may be.
bool CompletePickle(const pickle::StreamFacts& s) {
  return !s.pickles.empty() && !s.pickles[0].error.has_value() && !s.stream_error.has_value();
}

// Text that opens with a Jinja block ("{{", "{%", "{#", after white space): a template, and no
// JSON (an object's first token is a string or "}").
bool StartsLikeJinja(std::string_view data) {
  const size_t i = data.find_first_not_of(" \t\r\n");
  return i != std::string_view::npos && i + 1 < data.size() && data[i] == '{' &&
         (data[i + 1] == '{' || data[i + 1] == '%' || data[i + 1] == '#');
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsWeightsName(std::string_view file_name) {
  const size_t dot = file_name.rfind('.');
  if (dot == std::string_view::npos) return false;
  const std::string ext = absl::AsciiStrToLower(std::string(file_name.substr(dot + 1)));
  static constexpr std::string_view kExtensions[] = {
      "bin",  "pt",  "pth",   "ckpt",  "pkl",     "pickle", "joblib", "npy",  "npz",
      "safetensors", "gguf", "ggml", "onnx", "h5", "hdf5", "keras", "msgpack", "model", "nemo"};
  return std::find(std::begin(kExtensions), std::end(kExtensions), ext) != std::end(kExtensions);
}

// The length of the Unicode White_Space character `s` starts with (Go's unicode.IsSpace,
// which bytes.TrimSpace uses), or 0.
size_t LeadingSpace(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  if (b(0) == ' ' || (b(0) >= '\t' && b(0) <= '\r')) return 1;
  if (s.size() >= 2 && b(0) == 0xC2 && (b(1) == 0x85 || b(1) == 0xA0)) return 2;  // NEL, NBSP
  if (s.size() < 3) return 0;
  if (b(0) == 0xE1 && b(1) == 0x9A && b(2) == 0x80) return 3;                       // U+1680
  if (b(0) == 0xE2 && b(1) == 0x80 &&
      ((b(2) >= 0x80 && b(2) <= 0x8A) || b(2) == 0xA8 || b(2) == 0xA9 || b(2) == 0xAF)) {
    return 3;  // U+2000-200A, U+2028, U+2029, U+202F
  }
  if (b(0) == 0xE2 && b(1) == 0x81 && b(2) == 0x9F) return 3;  // U+205F
  if (b(0) == 0xE3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

std::optional<LfsPointer> ReadLfsPointer(std::string_view data) {
  // git-lfs decodes a pointer from at most the first 1,024 bytes of a blob, trimmed of white
  // space (lfs/pointer.go: DecodeFrom, decodeKV(bytes.TrimSpace(...))), and takes three version
  // URLs (its own, hawser's and git-media's, v1Aliases).
  constexpr size_t kMaxPointerBytes = 1024;
  data = data.substr(0, kMaxPointerBytes);
  for (size_t n; (n = LeadingSpace(data)) > 0;) data.remove_prefix(n);
  const size_t eol = data.find('\n');
  const std::string_view first = data.substr(0, eol);
  if (first.rfind("version ", 0) != 0 ||
      (first.find("git-lfs") == std::string_view::npos &&
       first.find("hawser") == std::string_view::npos &&
       first.find("git-media") == std::string_view::npos)) {
    return std::nullopt;
  }
  LfsPointer p{"no oid line", "no size line"};
  for (absl::string_view piece : absl::StrSplit(base::AbslView(data), '\n')) {
    const std::string_view line = base::StdView(piece);
    if (line.rfind("oid ", 0) == 0) p.oid = Esc(line);
    if (line.rfind("size ", 0) == 0) p.size = Esc(line);
  }
  return p;
}

std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

// The first bytes of a file, escaped, for a message.
std::string Leading(std::string_view data) {
  return Esc(data.substr(0, std::min<size_t>(data.size(), 8)));
}

torch::FileFacts ReadFile(std::string_view data, const pickle::Vm& vm, const ReadOptions& options) {
  torch::FileFacts out;
  Reader(vm, options, &out).File(data);
  return out;
}

Sniff::Sniff(std::string_view data, const content::Limits& content) {
  zip = data.substr(0, 4) == kZipMagic;
  npy = torch::IsNpy(data);
  joblib_compat = compress::IsJoblibCompat(data);
  gguf = data.substr(0, gguf::kMagic.size()) == gguf::kMagic;
  for (const Magic& m : kMagics) {
    if (data.substr(0, m.bytes.size()) == m.bytes) {
      unsupported_format = m.format;
      unsupported_message = m.message;
      break;
    }
  }
  codec = compress::DetectJoblibCodec(data);
  // Python's tarfile (torch.load's tar branch, tried on every file that is no zip) takes any
  // file whose first block is a valid header, whatever its magic.
  tar = torch::IsTarHeader(data);
  safetensors = IsSafetensors(data);
  image = content::SniffImage(data);
  json = torch::LooksLikeJson(data) && !StartsLikeJinja(data);
  if (!data.empty() && data[0] == '\x0a') {
    // A SentencePiece model starts with its first piece (field 1, length-delimited); 0x0a is
    // no pickle opcode.
    sentencepiece = content::CheckSentencePiece(data, content);
  }
  onnx = onnx_check::LooksLikeModel(data);
}

namespace {

// What each loader that opens a file by path does with its bytes: its own dispatch on the
// first bytes, as its source does it. Every reading picked here is run (once, whichever
// loaders share it), and the worst verdict of them all is the file's.
struct LoaderDispatch {
  std::string_view loader;
  Reading (*pick)(const Sniff& b);
};

constexpr LoaderDispatch kLoaders[] = {
    // torch/serialization.py load: _is_zipfile (the first four bytes), else _legacy_load,
    // which tries tarfile.open first and falls back to pickle.load from offset 0.
    {"torch.load", [](const Sniff& b) { return b.zip ? Reading::kZip
                                               : b.tar ? Reading::kTar
                                                       : Reading::kPickle; }},
    // numpy/lib/npyio.py load: "PK\3\4" is an .npz (NpzFile over zipfile), "\x93NUMPY" an
    // .npy (format.read_array), anything else pickle.load (allow_pickle=True).
    {"numpy.load", [](const Sniff& b) { return b.zip ? Reading::kZip
                                               : b.npy ? Reading::kNpy
                                                       : Reading::kPickle; }},
    // joblib/numpy_pickle.py load: "ZF" is joblib < 0.10's format, a compressor's magic is
    // decompressed; anything else, whatever it is, is read by its NumpyUnpickler, a
    // pickle._Unpickler (the pure-Python one).
    {"joblib.load", [](const Sniff& b) { return b.joblib_compat ? Reading::kJoblibCompat
                                                : b.codec.has_value() ? Reading::kJoblibCompressed
                                                                      : Reading::kPurePython; }},
    {"pickle.load", [](const Sniff&) { return Reading::kPickle; }},
    // zipfile.ZipFile (zipfile-based tools, picklescan, unzip): the end record, anywhere in
    // the last 64 KiB.
    {"zipfile", [](const Sniff& b) { return b.zip ? Reading::kZip : Reading::kZipInTail; }},
};

// The file's format: the first of these that takes the bytes, in torch.load's order and then
// by each format's own signature. Its reading is the file's own (its errors are the file's);
// the other loaders' readings are alternative ones.
Reading FormatReading(const Sniff& b) {
  if (b.zip) return Reading::kZip;
  if (b.npy) return Reading::kNpy;
  if (b.joblib_compat) return Reading::kJoblibCompat;
  if (b.gguf) return Reading::kGguf;
  if (!b.unsupported_format.empty()) return Reading::kUnsupported;
  if (b.codec.has_value() && !b.tar && !b.safetensors) return Reading::kJoblibCompressed;
  if (b.tar) return Reading::kTar;
  if (b.safetensors) return Reading::kSafetensors;
  if (b.image.has_value()) return Reading::kImage;
  if (b.json) return Reading::kJson;
  if (b.sentencepiece.outcome != content::Check::Outcome::kNotClass) {
    return Reading::kSentencePiece;
  }
  if (b.onnx) return Reading::kOnnx;
  return Reading::kPickle;
}

// The order readings run in (and their findings are listed in), after the file's own one.
constexpr Reading kAlternativeOrder[] = {Reading::kTar, Reading::kJoblibCompressed,
                                         Reading::kPickle, Reading::kPurePython,
                                         Reading::kZipInTail};

}  // namespace

void Reader::File(std::string_view data) {
  if (data.empty()) {
    // Nothing for any loader to read, and nothing to run: data. Under a weights name, though,
    // the weights are missing (a failed download or checkout), and nothing was verified.
    out_->format = "empty";
    if (IsWeightsName(options_.file_name)) {
      Error(v1::ERROR_CODE_NOT_PRESENT,
            absl::StrCat("an empty file where a loader reads weights (",
                         base::AbslView(base::Quoted(options_.file_name)),
                         "): the weights are not present, so nothing was verified"),
            "", 0);
    }
    return;
  }
  const Sniff b(data, options_.content);
  Reading own = FormatReading(b);
  bool joblib_read = false;
  if (own == Reading::kJoblibCompressed) {
    joblib_read = true;
    if (!ReadJoblibCompressed(data, *b.codec, /*own=*/true)) {
      // joblib.load fails before it decompresses a byte: the file's own reading is the one its
      // bytes take without the compressor's prefix, as the other loaders read it (the
      // alternatives below still follow each loader's own dispatch on the real bytes).
      Sniff rest = b;
      rest.codec.reset();
      own = FormatReading(rest);
      Run(own, data, rest, /*own=*/true);
    }
  } else {
    Run(own, data, b, /*own=*/true);
  }
  for (Reading r : kAlternativeOrder) {
    if (r == own || (r == Reading::kJoblibCompressed && joblib_read)) continue;
    for (const LoaderDispatch& l : kLoaders) {
      if (l.pick(b) == r) {
        Run(r, data, b, /*own=*/false);
        break;
      }
    }
  }
}

void Reader::Run(Reading r, std::string_view data, const Sniff& b, bool own) {
  switch (r) {
    case Reading::kZip:
      Zip(data, "", 0, depth_, /*top=*/true, /*classify=*/true);
      return;
    case Reading::kNpy:
      out_->format = "npy";
      torch::ReadNpy(data, "", "", 0, true, vm_, out_, options_.max_npy_header_bytes);
      return;
    case Reading::kJoblibCompat:
      ReadJoblibCompat(data);
      return;
    case Reading::kGguf:
      Gguf(data);
      return;
    case Reading::kUnsupported:
      out_->format = std::string(b.unsupported_format);
      Error(v1::ERROR_CODE_UNSUPPORTED,
            absl::StrCat(base::AbslView(b.unsupported_format), ": ",
                         base::AbslView(b.unsupported_message)),
            "", 0);
      return;
    case Reading::kJoblibCompressed:
      (void)ReadJoblibCompressed(data, *b.codec, own);
      return;
    case Reading::kTar:
      if (own) {
        Tar(data);
      } else {
        TarAlternative(data);
      }
      return;
    case Reading::kSafetensors:
      Safetensors(data);
      return;
    case Reading::kImage:
      Image(data, *b.image);
      return;
    case Reading::kJson:
      torch::ReadShardIndex(data, options_.index, out_);
      if (out_->format == "json" && out_->errors.empty()) {
        JsonDocument(data);
      } else if (torch::IsYamlName(options_.file_name)) {
        // No JSON, but YAML (a flow mapping) to PyYAML, which reads it by the file's name.
        YamlDocument(data);
      }
      return;
    case Reading::kSentencePiece:
      out_->format = "sentencepiece";
      if (!b.sentencepiece.valid()) {
        Error(b.sentencepiece.status,
              absl::StrCat("sentencepiece: ", b.sentencepiece.status.message()), "",
              b.sentencepiece.offset);
      }
      return;
    case Reading::kOnnx:
      // A protobuf ModelProto starts with its ir_version (field 1, a varint: 0x08), which is
      // no pickle opcode: pickle.load rejects the first byte.
      Onnx(data);
      return;
    case Reading::kPickle:
      if (own) {
        PickleFile(data);
      } else {
        PickleReading(data, "(as pickle)", true);
      }
      return;
    case Reading::kPurePython:
      PurePythonReading(data);
      return;
    case Reading::kZipInTail:
      ZipInTail(data, TailPlace(out_->format));
      return;
  }
}

std::string_view Reader::TailPlace(std::string_view format) {
  if (format == "gguf") return "(in the tensor data)";
  if (format == "safetensors") return "(in the tensor data)";
  if (format == "json" || format == "hf-index") return "(after the JSON)";
  if (format == "sentencepiece") return "(after the model)";
  if (format == "onnx") return "(after the model)";
  if (format == "npy") return "(after the array)";
  if (format == "png" || format == "jpeg" || format == "gif" || format == "webp") {
    return "(in the image)";
  }
  if (format == "zlib" || format == "gzip" || format == "bzip2" || format == "lzma" ||
      format == "xz" || format == "lz4") {
    return "(after the compressed stream)";
  }
  if (format == "pickle" || format == "joblib" || format == "torch-legacy" || format == "text" ||
      format == "unknown") {
    return "(after the pickle)";
  }
  return "(after the header)";
}

void Reader::PickleFile(std::string_view data) {
  // One reading of the stream serves both questions (a legacy file's first pickle is its
  // magic number): reading the first pickle on its own as well would hold two graphs of it
  // at once, twice the memory and time of a large pickle.
  torch::MemberFacts m;
  m.stream = vm_.ScanStream(data, 0);
  c_first_ = FirstPickle::Of(m.stream);
  if (!m.stream.pickles.empty() && torch::IsLegacyMagic(m.stream.pickles[0])) {
    m.stream = {};
    torch::ReadLegacy(data, vm_, out_);
  } else if (!CompletePickle(m.stream) && Text(data, &m)) {
    // strict UTF-8 text that is no whole pickle: Text kept the pickle reading as another
    // loader's.
  } else if (RejectedAtStart(m.stream)) {
    out_->format = "unknown";
    Error(v1::ERROR_CODE_UNSUPPORTED,
          absl::StrCat("not a format ckptscan verifies (it starts with \"",
                       base::AbslView(Leading(data)),
                       "\"): no checkpoint, data or archive reading applies, and the pickle "
                       "reading is rejected at its first byte"),
          "", 0);
  } else {
    out_->format = "pickle";
    if (NamesJoblibArrays(m.stream)) {
      // joblib.load reads array bytes inline where pickle.load reads them as opcodes; both
      // loaders open such a file (pickle.load, torch.load and numpy.load know nothing of
      // joblib), so both readings are judged: joblib's, and pickle.load's as an alternative.
      out_->format = "joblib";
      torch::MemberFacts plain{"(as pickle.load)", std::move(m.stream), /*alternative=*/true};
      pickle::Vm joblib(vm_.limits(), pickle::Loader::kJoblib);
      m.stream = joblib.ScanStream(data, 0, options_.trace);
      joblib_first_ = FirstPickle::Of(m.stream);
      JoblibCompanions("", m.stream);
      out_->members.push_back(std::move(m));
      out_->members.push_back(std::move(plain));
    } else {
      if (options_.trace != nullptr) {
        m.stream = vm_.ScanStream(data, 0, options_.trace);  // the listing of the same reading
      }
      out_->members.push_back(std::move(m));
    }
  }
}

void Reader::MemberFile(std::string_view bytes, const std::string& name, uint32_t depth,
                        bool keras_config) {
  torch::FileFacts sub;
  ReadOptions options = options_;
  options.trace = nullptr;
  options.keras_config = keras_config;
  const size_t slash = name.rfind('/');
  options.file_name = slash == std::string::npos ? name : name.substr(slash + 1);
  Reader(vm_, options, &sub, depth).File(bytes);
  out_->files_read += 1 + sub.files_read;
  const auto inner = [&](const std::string& member) {
    return member.empty() ? name : MemberName(name, member);
  };
  for (v1::ScanError& e : sub.errors) {
    e.mutable_location()->set_member(inner(e.location().member()));
    out_->errors.push_back(std::move(e));
  }
  for (torch::MemberFacts& m : sub.members) {
    m.member = inner(m.member);
    out_->members.push_back(std::move(m));
  }
  for (torch::ContainerAnomaly& a : sub.anomalies) {
    a.member = inner(a.member);
    out_->anomalies.push_back(std::move(a));
  }
}

void Reader::MergeAlternative(torch::FileFacts sub, std::string_view label) {
  const auto inner = [&](const std::string& member) {
    return member.empty() ? std::string(label) : MemberName(label, member);
  };
  for (v1::ScanError& e : sub.errors) {
    e.mutable_location()->set_member(inner(e.location().member()));
    out_->errors.push_back(std::move(e));
  }
  for (torch::MemberFacts& m : sub.members) {
    m.member = inner(m.member);
    m.alternative = true;
    out_->members.push_back(std::move(m));
  }
  for (torch::ContainerAnomaly& a : sub.anomalies) {
    a.member = inner(a.member);
    out_->anomalies.push_back(std::move(a));
  }
}

std::string Reader::MemberName(std::string_view outer, std::string_view name) const {
  if (outer.empty()) return std::string(name);
  return absl::StrCat(base::AbslView(outer), "!", base::AbslView(name));
}

void Reader::Error(v1::ErrorCode code, std::string message, std::string_view member,
                   uint64_t offset) {
  out_->errors.push_back(torch::ContainerError(code, std::move(message), member, offset));
}

void Reader::Error(const absl::Status& status, std::string message, std::string_view member,
                   uint64_t offset) {
  out_->errors.push_back(torch::StatusError(status, std::move(message), member, offset));
}

void Reader::Anomaly(std::string kind, std::string member, uint64_t offset, std::string message,
                     bool must_flag, std::string category) {
  out_->anomalies.push_back(torch::ContainerAnomaly{std::move(kind), std::move(member), offset,
                                                    std::move(message), must_flag,
                                                    std::move(category)});
}

}  // namespace ckptscan::formats
