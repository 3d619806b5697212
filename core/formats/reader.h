// The reader behind formats::ReadFile (read_file.h): one class whose methods are the
// readings, each defined in the file of its format (read_file.cc: the dispatch; zip_reading.cc,
// pickle_reading.cc, data_reading.cc, gguf_reading.cc, onnx_reading.cc, safetensors_reading.cc,
// tar_reading.cc). Internal to core/formats: nothing outside includes it.
//
// Thread-compatible: one Reader per file (a member file gets a Reader of its own).
#ifndef CKPTSCAN_CORE_FORMATS_READER_H_
#define CKPTSCAN_CORE_FORMATS_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ckptscan/v1/report.pb.h"
#include "core/compress/decompress.h"
#include "core/content/content.h"
#include "core/formats/read_file.h"
#include "core/gguf/gguf.h"
#include "core/pickle/vm.h"
#include "core/safetensors/validator.h"
#include "core/torch/file_facts.h"
#include "core/torch/repo_json.h"
#include "core/torch/tensors.h"
#include "core/zip/zip_reader.h"
#include "core/zip/zipfile_view.h"

namespace ckptscan::formats {

// The report's format of a compressed joblib file ("bzip2", as the format was named before
// joblib's files were read, for joblib's "bz2").
std::string_view CompressedFormat(compress::Codec codec);

// The local file header signature every zip starts with.
inline constexpr std::string_view kZipMagic = {"PK\x03\x04", 4};

// A safetensors file: an 8-byte little-endian header length N, then the JSON header's '{'.
// N's four high bytes must be zero (any N the validator accepts is below 2^32): a pickle that
// happens to hold '{' at byte 8 (a protocol 0 text argument) is not taken for one.
bool IsSafetensors(std::string_view b);

// A reading worth reporting names a global (persistent ids alone are what any bytes starting
// with "P" give).
bool HasContent(const pickle::StreamFacts& s);

// Whether another loader's reading of some bytes must be kept: it names a global, or it
// stopped where the real loader would read on (a limit, a stricter rule of ours). Dropping the
// second kind would judge the file by a prefix of what that loader reads.
bool MustKeep(const pickle::StreamFacts& s);

// A joblib.dump pickle: NumpyArrayWrapper (joblib >= 0.10) or NDArrayWrapper (older).
bool NamesJoblibArrays(const pickle::StreamFacts& s);

// Records that torch.save writes beside data.pkl and the storages (torch/serialization.py
// _save, torch 1.13 to 2.x).
bool IsKnownRecord(std::string_view record);

// A stream whose first opcode CPython itself rejects (an unknown opcode, or one that fails
// before anything is read): no pickle loader reads anything from these bytes.
bool RejectedAtStart(const pickle::StreamFacts& s);

// A complete first pickle: the bytes are a pickle whatever else they may be.
bool CompletePickle(const pickle::StreamFacts& s);

// Text that opens with a Jinja block ("{{", "{%", "{#", after white space): a template, and no
// JSON (an object's first token is a string or "}").
bool StartsLikeJinja(std::string_view data);

bool EndsWith(std::string_view s, std::string_view suffix);

// A name loaders read weights or other model data from (pytorch_model.bin, model.safetensors,
// x.gguf, tokenizer.model, ...), by its extension, ASCII case-insensitive.
bool IsWeightsName(std::string_view file_name);

// A Git LFS pointer (git-lfs's docs/spec.md): what a checkout made without LFS holds in place
// of the content. Read as git-lfs reads one: the first 1,024 bytes, leading white space
// (Unicode's, as Go trims it) dropped, whose first line is "version URL" with one of the spec
// URLs git-lfs takes (its own, hawser's, git-media's); oid and size, when the lines are
// there, escaped for a message.
struct LfsPointer {
  std::string oid;   // "oid sha256:..." or "no oid line"
  std::string size;  // "size N" or "no size line"
};
std::optional<LfsPointer> ReadLfsPointer(std::string_view data);

std::string Esc(std::string_view s);

// The first bytes of a file, escaped, for a message.
std::string Leading(std::string_view data);

// The readings a file can get. Each loader that opens files by path picks one by its own
// dispatch on the first bytes (read_file.cc, kLoaders); the file's format names one of them
// (its own reading), and every other one picked runs as an alternative reading, once however
// many loaders share it.
enum class Reading : uint8_t {
  kZip,               // torch's reader (torch.load), zipfile's (numpy.load's .npz, tools)
  kNpy,               // numpy.load's format.read_array
  kJoblibCompat,      // joblib < 0.10's "ZF": its zlib stream, then its unpickler
  kGguf,              // the strict GGUF reader
  kUnsupported,       // 7z, rar, zstd, HDF5: recognised, not read
  kJoblibCompressed,  // joblib.load's decompressor, then its unpickler
  kTar,               // torch.load's tar branch (tarfile, then torch's members)
  kSafetensors,       // the strict validator
  kImage,             // PNG, JPEG, GIF, WebP, validated whole
  kJson,              // a sharded index or other JSON (auto_map, chat templates)
  kSentencePiece,     // a SentencePiece model
  kOnnx,              // an ONNX model
  kPickle,            // the C unpickler from offset 0 (pickle.load; torch.load's legacy path;
                      // numpy.load's fallback): torch legacy, joblib, pickle, text or unknown
  kPurePython,        // joblib.load's pure-Python unpickler from offset 0
  kZipInTail,         // zipfile's end record in the last 64 KiB of a file that is no zip
};

// What the loaders' own checks find at the start of a file's bytes, computed once.
struct Sniff {
  Sniff(std::string_view data, const content::Limits& content);
  bool zip = false;            // "PK\3\4" (torch's _is_zipfile, numpy.load)
  bool npy = false;            // "\x93NUMPY"
  bool joblib_compat = false;  // "ZF"
  bool gguf = false;
  std::string_view unsupported_format;  // 7z, rar, zstd, hdf5: its name, else empty
  std::string_view unsupported_message;
  std::optional<compress::Codec> codec;  // joblib's compressor prefixes
  bool tar = false;  // the first block is a header tarfile.open accepts
  bool safetensors = false;
  std::optional<content::Image> image;
  bool json = false;
  content::Check sentencepiece;  // kNotClass unless the file starts with 0x0a
  bool onnx = false;
};

// The first pickle of a reading, as a key: two readings of the same bytes whose first pickles
// have the same key (span, globals with their offsets, error and where) found the same things.
std::string FirstPickleKey(const pickle::StreamFacts& s);

// What one reading found in the first pickle, kept to judge another unpickler's reading of the
// same bytes against it.
struct FirstPickle {
  static FirstPickle Of(const pickle::StreamFacts& s);
  // Whether `other` (another unpickler's reading from the same offset) adds nothing: the same
  // first pickle (FirstPickleKey), or one that raised no further in than this one got, having
  // imported a prefix of this one's globals at the same offsets.
  bool Covers(const pickle::StreamFacts& other) const;

  std::string key;      // FirstPickleKey
  bool present = false;  // a first pickle was read
  std::string globals;  // its globals (offset, how, module, name), in order
  uint64_t end = 0;     // where it ended or stopped
};

class Reader final {
 public:
  // `depth`: how deep in archives the bytes are (0: the file itself).
  Reader(const pickle::Vm& vm, const ReadOptions& options, torch::FileFacts* out,
         uint32_t depth = 0)
      : vm_(vm), options_(options), out_(out), depth_(depth) {}

  // Every reading that applies to the bytes (see Reading): the file's own first, then the
  // other loaders'.
  void File(std::string_view data);

 private:
  void Run(Reading r, std::string_view data, const Sniff& b, bool own);

  // Where a zip in the tail sits, for the anomaly's message, by the file's format.
  static std::string_view TailPlace(std::string_view format);

  // The C unpickler's reading as the file's own: torch's legacy format, a joblib pickle (with
  // pickle.load's reading as an alternative one), a pickle, text (the pickle reading kept as an
  // alternative one) or unknown.
  void PickleFile(std::string_view data);

  // joblib.load's reading of a file it does not decompress: its NumpyUnpickler (a
  // pickle._Unpickler, Loader::kJoblib) over the first pickle from offset 0, kept as an
  // alternative reading when it differs from the C unpickler's (FirstPickleKey) and must be
  // kept (MustKeep). When it reads an array placeholder's bytes as data, pickle._Unpickler's
  // own reading (Loader::kPython, which reads them as opcodes) is judged too.
  void PurePythonReading(std::string_view data);

  // torch.load's tar branch on a file whose format is another one (an .npy or GGUF file whose
  // first block is also a tar header): a torch tar's pickles are judged as an alternative
  // reading; a tar our reader cannot read is an error of the file.
  void TarAlternative(std::string_view data);

  // Another loader's reading of the whole file, read into `sub`: its members (alternative
  // readings), errors and anomalies join the file's under `label`; its tensors do not.
  void MergeAlternative(torch::FileFacts sub, std::string_view label);
  // A member of a zip that is neither a torch archive nor an .npz: a file of its own (people
  // unzip such archives and load what is inside), read by a Reader one level deeper. Its facts
  // join the file's under the member's name; offsets stay the member's own.
  void MemberFile(std::string_view bytes, const std::string& name, uint32_t depth,
                  bool keras_config = false);

  std::string MemberName(std::string_view outer, std::string_view name) const;

  // Strict UTF-8 text (content::CheckText): format "text", with `m` (the pickle reading of the
  // same bytes, which is no complete pickle) kept as another loader's reading when it names
  // anything or stopped where pickle.load would read on. False when the bytes are no text.
  bool Text(std::string_view data, torch::MemberFacts* m);

  // An image, validated whole (content::CheckImage). The pickle reading of the same bytes, and
  // a zip in its tail, are scanned as for any file.
  void Image(std::string_view data, content::Image image);

  // A JSON document (no sharded index): what its auto_map, custom_pipelines, `_target_`
  // values, base model reference (adapter_config.json) and chat templates make loaders run
  // (core/torch/repo_json.h).
  void JsonDocument(std::string_view data);

  // A YAML file (*.yaml, *.yml; core/torch/repo_yaml.h): its python/ and other non-standard
  // tags, and its `_target_` values.
  void YamlDocument(std::string_view data);

  // One finding (repo.remote_code) for the class references a JSON key names (auto_map,
  // custom_pipelines): (key, reference) pairs, of `total`, at `offset`. `runner` says who
  // imports them.
  void SentenceTransformerModules(const torch::RepoJson& repo);
  void RemoteCode(std::string_view what, std::string_view runner,
                  const std::vector<std::pair<std::string, std::string>>& refs, uint64_t total,
                  uint64_t offset);

  // A Hydra `_target_` at `offset` (`where`: its place, for the message): repo.config_code
  // when torch::TargetRunsCode, else repo.config_target.
  void ConfigTarget(std::string_view target, std::string_view where, uint64_t offset);
  // `more` `_target_` values past the `kept` reported (`more_code` of them run code).
  void MoreTargets(uint64_t more, uint64_t more_code, uint64_t kept, std::string_view limit);

  // A chat template (core/content/template_check.h): each construct found is a finding
  // (category "template"), at `offset` (the JSON string's start) for a template inside a JSON
  // document (the message gives the byte in the template), at `offset` plus its byte offset in
  // the template otherwise (a template file: `offset` 0; a GGUF value: the value's offset).
  void Template(std::string_view text, std::string_view member, std::string_view what,
                uint64_t offset, bool in_json);

  // A GGUF file (core/gguf/gguf.h), read whole by the strict reader: its tensors (for the
  // report and a conversion), its chat templates through the template checker, its anomalies.
  // pickle.load on the same bytes ("GGUF" starts with BINFLOAT, whose operand ends inside the
  // header: what follows is read as opcodes), and a zip in its tail, are scanned as for any
  // polyglot.
  void Gguf(std::string_view data);

  // GGUF tensors as facts: ggml's dimensions reversed (ne[0] varies fastest, so the row-major
  // shape ends with it), each tensor its own storage. A plain type maps to its torch dtype; a
  // quantized one (blocks of elements with their scales) is an untyped storage of its bytes and
  // a tensor with a problem, so that a conversion refuses it by name.
  void GgufTensors(const gguf::File& file);

  // The torch dtype of a ggml type that stores one element per block, or nullptr.
  static const torch::DTypeInfo* GgmlDtype(std::string_view ggml);

  // An ONNX model (core/onnx/onnx_check.h): decoded with protobuf, its graphs walked for
  // external data paths and operator domains. The same bytes as pickle.load reads them, and a
  // zip in its tail (a length-delimited unknown field can carry any bytes), are read as for
  // any file.
  void Onnx(std::string_view data);

  // A safetensors file, validated strictly (core/safetensors/validator.h): only the header is
  // read, tensor bytes never. torch.load on the same bytes (it is no zip nor tar) would fall
  // back to pickle.load from offset 0, and zipfile-based tools would find a zip in the tail:
  // both readings are scanned, as for any polyglot.
  void Safetensors(std::string_view data);

  // The tensors of a validated safetensors file, as a conversion needs them: each one its own
  // storage (the validator proved the extents lie in the data buffer, do not overlap and match
  // dtype x shape), row-major. A dtype we have no torch dtype for is a tensor with a problem,
  // so a conversion refuses it by name instead of leaving it out.
  void SafetensorsTensors(const safetensors::Layout& layout);

  // A tar archive: torch's tar checkpoint format when it has torch's members, else refused.
  void Tar(std::string_view data);

  // The same bytes as pickle.load reads them: kept if that reading names anything, or if it
  // stopped where pickle.load would read on (MustKeep).
  void PickleReading(std::string_view data, std::string_view label, bool anomaly);

  // joblib.load of a compressed file (core/compress/decompress.h): the decompressed bytes are
  // read by joblib's NumpyUnpickler (pickle::Loader::kJoblib), whether or not they name its
  // array placeholder. `own`: the file is no other format, so this is its format's reading;
  // otherwise (a tar or safetensors file that starts with a joblib prefix) it is an
  // alternative reading, dropped only when joblib.load fails before it decompresses a byte.
  // A stop (truncated, corrupt, a limit) is an error of the file: ERROR at best, findings in
  // what was decompressed before it kept. Returns false when joblib.load fails before it
  // decompresses a byte (a text file starting with 'x' is no zlib stream): nothing is read for
  // joblib, and an own reading leaves the file to the next reading its bytes take (File).
  bool ReadJoblibCompressed(std::string_view data, compress::Codec codec, bool own);

  // joblib < 0.10's "ZF" file (joblib/numpy_pickle_compat.py read_zfile): a hex length, one
  // zlib stream holding the pickle, read by the compatibility loader's ZipNumpyUnpickler (a
  // pickle._Unpickler whose only placeholders are the companion wrappers, which read nothing
  // from the stream: Loader::kPython reads it alike).
  void ReadJoblibCompat(std::string_view data);

  // The files joblib.load reads beside the pickle for the first pickle of a joblib reading
  // (core/pickle/joblib_companions.h): one anomaly each (category "joblib"), companion_path
  // for a name that leaves the pickle's folder, else companion_pickle (NDArrayWrapper,
  // unpickled by numpy.load) or companion_data (ZNDArrayWrapper, informational); at most
  // zip.max_anomalies_per_kind of each kind, then one summary.
  void JoblibCompanions(std::string_view member, const pickle::StreamFacts& s);

  // zipfile.is_zipfile finds an end record anywhere: a zip after the content is what
  // zipfile-based tools (and picklescan) would read instead.
  // zipfile (like miniz) looks for the end record only in the last 64 KiB + 22 bytes, so
  // only that tail is searched: scan time must not grow with the tensor bytes before it.
  void ZipInTail(std::string_view data, std::string_view where);

  // Reads a zip archive (the file, or a member `outer` at depth `depth`). `classify`: when it
  // is no torch archive nor an .npz, every member is read as a file of its own (MemberFile);
  // otherwise members are trial-parsed as pickles.
  void Zip(std::string_view data, std::string_view outer, uint64_t base, uint32_t depth, bool top,
           bool classify);

  // Zip's passes. What an opened archive is: its data.pkl and constants.pkl records (torch's
  // view only), a TorchScript marker, and the format ("torch-zip", "torchscript", "npz", "zip").
  struct ZipKind {
    const zip::Entry* data_pkl = nullptr;
    const zip::Entry* constants = nullptr;
    const zip::Anomaly* marker = nullptr;
    std::string format;
  };
  ZipKind ClassifyZip(const zip::Archive& ar, bool torch_view) const;
  // A TorchScript archive's anomalies and, for the file itself, its code files with contents.
  void TorchScriptCode(const zip::Archive& ar, const ZipKind& kind, std::string_view outer,
                       uint64_t base, bool top);
  // A torch archive's version and byteorder records.
  void TorchRecords(const zip::Archive& ar, std::string_view outer, uint64_t base);
  // A zip of files that Keras reads as a .keras archive (root config.json, and its weights or
  // metadata).
  static bool IsKerasArchive(const zip::Archive& ar);
  // The archive's own anomalies (a zip of files: only those any of its readers would mind).
  void ArchiveAnomalies(std::string_view data, const zip::Archive& ar, std::string_view outer,
                        uint64_t base, bool members_are_files);
  // data.pkl read and, for the file itself, its tensors and their storages: the storage
  // records' names.
  std::vector<std::string> DataPkl(const zip::Archive& ar, const zip::Entry* data_pkl,
                                   uint64_t archive_size, std::string_view outer, uint64_t base,
                                   bool top);
  // One member other than data.pkl: a known record or storage (left alone), a nested archive,
  // a file of a zip of files, an .npz array, or anything else trial-parsed as a pickle.
  void ZipMember(const zip::Archive& ar, const zip::Entry& e, const ZipKind& kind,
                 const std::vector<std::string>& storage_records, std::string_view outer,
                 uint64_t base, uint32_t depth, bool members_are_files);

  // numpy.load opens an .npz with Python's zipfile, as zipfile-based tools open any zip, and
  // zipfile can list other members than miniz (zip/zipfile_view.h). zipfile is versioned in the
  // wild and its releases disagree, so this is the union: every member that ANY release
  // would open whose bytes were not read above (by `ar`, null when miniz opened nothing) is
  // read and scanned as well, and flagged. A release that refuses the archive hides nothing.
  void ZipfileView(const zip::Archive* ar, std::string_view data, std::string_view outer,
                   uint64_t base, bool npz, uint32_t depth, bool classify);
  // numpy.load's reading of a torch archive (the file itself): every member, in miniz's view
  // and in each release of zipfile's, that starts with numpy's magic is read as an .npy, an
  // alternative reading (its tensors are not the file's), with a "polyglot" anomaly (flagged
  // when its object array names anything).
  void NumpyView(const zip::Archive* ar, std::string_view data, std::string_view outer,
                 uint64_t base);
  // One member as zipfile `release` reads it: scanned like a member of the archive.
  void ZipfileMember(std::string_view data, const zip::Entry& z, zip::ZipfileRelease release,
                     std::string_view outer, uint64_t base, bool npz, uint32_t depth,
                     bool classify);

  // Every storage data.pkl refers to must be a record of exactly its size.
  void Storages(const zip::Archive& ar, uint64_t archive_size, const torch::TensorExtraction& t,
                std::string_view outer, uint64_t base, std::vector<std::string>* records);

  void AddMemberAnomalies(const zip::Member& m, std::string_view outer, uint64_t base);

  void ZipAnomaly(const zip::Anomaly& a, std::string_view outer, uint64_t base);

  // zip::AnomalyKindName's "kPrependedData" as the rule id's "prepended_data".
  static std::string KindId(zip::AnomalyKind kind);

  // Whether every end-record signature from `first` on but the last (the archive's own end
  // record) lies inside a member's stored bytes: an archive kept in the archive, which no
  // reader that searches backwards from the end (miniz, zipfile, unzip) can take for the end.
  static bool EndSignaturesInMembers(std::string_view data, const zip::Archive& ar, uint64_t first);

  // A report error or anomaly of the file (`member` "" for the file itself).
  void Error(v1::ErrorCode code, std::string message, std::string_view member, uint64_t offset);
  void Error(const absl::Status& status, std::string message, std::string_view member,
             uint64_t offset);
  void Anomaly(std::string kind, std::string member, uint64_t offset, std::string message,
               bool must_flag = true, std::string category = "container");

  const pickle::Vm& vm_;
  const ReadOptions& options_;
  torch::FileFacts* out_;
  uint32_t depth_;
  uint64_t code_bytes_ = 0;  // TorchScript code bytes carried in out_->code_files (kMaxCodeBytes)
  // The C unpickler's reading from offset 0, and joblib's own reading of a joblib pickle: the
  // pure-Python reading adds nothing where one of them covers it.
  FirstPickle c_first_;
  FirstPickle joblib_first_;
};

}  // namespace ckptscan::formats

#endif  // CKPTSCAN_CORE_FORMATS_READER_H_
