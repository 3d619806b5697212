#include "core/torch/tar.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/torch/tensors.h"

namespace ckptscan::torch {
namespace {

using pickle::Kind;
using pickle::Node;
using pickle::PickleFacts;

constexpr uint64_t kBlock = 512;

// tarfile.nts: the bytes up to the first NUL.
std::string_view Nts(std::string_view field) {
  size_t nul = field.find('\0');
  return nul == std::string_view::npos ? field : field.substr(0, nul);
}

// Python's str.isspace() over ASCII (what str.strip() and int() strip).
bool IsPySpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

struct Number {
  bool valid = false;  // tarfile.nti accepts it
  bool fits = false;   // the value fits in int64
  int64_t value = 0;
};

// tarfile.nti: base-256 when the first byte is 0x80 or 0xff, else int(nts(s).strip() or "0", 8)
// over ASCII (a sign, a "0o" prefix and single '_' between digits are allowed).
Number Nti(std::string_view s) {
  Number n;
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  if (u[0] == 0x80 || u[0] == 0xff) {
    n.valid = true;
    absl::int128 v = 0;
    bool big = false;
    for (size_t i = 1; i < s.size(); ++i) {
      if (v > (absl::int128(1) << 100)) big = true;
      v = (v << 8) | u[i];
    }
    if (u[0] == 0xff) v -= absl::int128(1) << (8 * (s.size() - 1));
    n.fits = !big && v >= absl::int128(INT64_MIN) && v <= absl::int128(INT64_MAX);
    if (n.fits) n.value = static_cast<int64_t>(v);
    return n;
  }
  s = Nts(s);
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return n;  // not ASCII: UnicodeDecodeError
  }
  while (!s.empty() && IsPySpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsPySpace(s.back())) s.remove_suffix(1);
  if (s.empty()) return Number{true, true, 0};
  bool negative = false;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  bool prefixed = false;
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O')) {
    s.remove_prefix(2);
    prefixed = true;
  }
  // digits, with single underscores between them (and one right after a "0o" prefix).
  if (s.empty() || s.back() == '_' || (s.front() == '_' && !prefixed)) return n;
  absl::int128 v = 0;
  bool big = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i + 1 < s.size() && s[i + 1] == '_') return n;
      continue;
    }
    if (s[i] < '0' || s[i] > '7') return n;
    if (v > (absl::int128(1) << 100)) big = true;
    v = v * 8 + (s[i] - '0');
  }
  if (negative) v = -v;
  n.valid = true;
  n.fits = !big && v >= absl::int128(INT64_MIN) && v <= absl::int128(INT64_MAX);
  if (n.fits) n.value = static_cast<int64_t>(v);
  return n;
}

std::string Shown(std::string_view name) { return base::Escaped(name); }

bool HasContent(const pickle::StreamFacts& s) {
  for (const PickleFacts& p : s.pickles) {
    if (!p.graph.globals.empty()) return true;
  }
  return false;
}

const Node* Root(const PickleFacts& p) {
  if (p.error || p.root == pickle::kNoNode || p.root >= p.graph.nodes.size()) return nullptr;
  return &p.graph.nodes[p.root];
}

// An int (or bool) that fits int64: a key, a count, an offset.
bool AsInt(const pickle::Graph& g, pickle::NodeId id, int64_t* out) {
  if (id >= g.nodes.size()) return false;
  const Node& n = g.nodes[id];
  if (n.kind == Kind::kBool) {
    *out = n.b ? 1 : 0;
    return true;
  }
  if (n.kind != Kind::kInt || !n.fits || n.i < absl::int128(INT64_MIN) ||
      n.i > absl::int128(INT64_MAX)) {
    return false;
  }
  *out = static_cast<int64_t>(n.i);
  return true;
}

// The items of a tuple or list of exactly `n` items (Python's tuple unpacking), or nullptr.
const std::vector<pickle::NodeId>* Unpack(const pickle::Graph& g, const Node* n, size_t count) {
  if (n == nullptr || (n->kind != Kind::kTuple && n->kind != Kind::kList) ||
      n->items.size() != count) {
    return nullptr;
  }
  for (pickle::NodeId id : n->items) {
    if (id >= g.nodes.size()) return nullptr;
  }
  return &n->items;
}

// Reads the pickles and raw records of the `storages` and `tensors` members, in torch's order.
class TorchTar {
 public:
  TorchTar(std::string_view data, const pickle::Vm& vm, const TarLimits& limits, FileFacts* out)
      : data_(data), vm_(vm), limits_(limits), out_(out) {}

  // Both return false after recording an error where torch would fail.
  bool Storages(const TarMember& m) {
    MemberFacts facts{"storages", {}};
    bool ok = StoragesBody(m, &facts);
    vm_.ScanNested(data_, 0, &facts.stream);
    out_->members.push_back(std::move(facts));
    return ok;
  }

  bool Tensors(const TarMember& m) {
    MemberFacts facts{"tensors", {}};
    bool ok = TensorsBody(m, &facts);
    vm_.ScanNested(data_, 0, &facts.stream);
    out_->members.push_back(std::move(facts));
    return ok;
  }

  KeyedObjects& keyed() { return keyed_; }
  std::vector<StorageData>& storage_data() { return storage_data_; }

 private:
  void Error(std::string_view member, uint64_t offset, std::string message) {
    out_->errors.push_back(
        ContainerError(v1::ERROR_CODE_MALFORMED, std::move(message), member, offset));
  }
  void OverLimit(std::string_view member, uint64_t offset, std::string message,
                 std::string_view limit, uint64_t value) {
    const absl::Status s = base::LimitError(message, limit, value);
    out_->errors.push_back(StatusError(s, std::move(message), member, offset));
  }

  // Runs the next pickle of the member at reader `r`; its index in `facts`, or -1 on a VM
  // error (reported with the pickle) or when the member has no bytes left.
  int Run(base::ByteReader* r, std::string_view member, std::string_view what, MemberFacts* facts) {
    if (r->empty()) {
      Error(member, r->offset(),
            absl::StrFormat("%s ends before its %s pickle", base::AbslView(member),
                            base::AbslView(what)));
      return -1;
    }
    const uint64_t start = r->offset();
    facts->stream.pickles.push_back(vm_.RunOne(r->Peek(), start));
    const PickleFacts& p = facts->stream.pickles.back();
    if (p.error) return -1;
    (void)r->Skip(p.end - start);
    return static_cast<int>(facts->stream.pickles.size() - 1);
  }

  // The loop count of `range(count)`: an int (negative: no iteration).
  bool Count(const PickleFacts& p, std::string_view member, uint64_t* count) {
    int64_t n;
    const Node* root = Root(p);
    if (root == nullptr || !AsInt(p.graph, p.root, &n)) {
      Error(member, p.start,
            absl::StrFormat("%s: the record count is not an int", base::AbslView(member)));
      return false;
    }
    *count = n < 0 ? 0 : static_cast<uint64_t>(n);
    if (*count > limits_.max_records) {
      OverLimit(member, p.start,
                absl::StrFormat("%s: %d records exceed max_records (%d)", base::AbslView(member),
                                *count, limits_.max_records),
                "max_records", limits_.max_records);
      return false;
    }
    return true;
  }

  bool StoragesBody(const TarMember& m, MemberFacts* facts) {
    base::ByteReader r(data_.substr(m.data_offset, m.size), m.data_offset);
    int i = Run(&r, "storages", "count", facts);
    uint64_t count;
    if (i < 0 || !Count(facts->stream.pickles[static_cast<size_t>(i)], "storages", &count)) {
      return false;
    }
    for (uint64_t k = 0; k < count; ++k) {
      i = Run(&r, "storages", "storage record", facts);
      if (i < 0) return false;
      const PickleFacts& p = facts->stream.pickles[static_cast<size_t>(i)];
      const pickle::Graph& g = p.graph;
      const auto* items = Unpack(g, Root(p), 3);
      int64_t key;
      if (items == nullptr || !AsInt(g, (*items)[0], &key) ||
          g.nodes[(*items)[1]].kind != Kind::kStr) {
        Error("storages", p.start,
              "storages: a record is not (int key, str location, storage class)");
        return false;
      }
      const Node& type = g.nodes[(*items)[2]];
      const DTypeInfo* dtype = nullptr;
      if (type.kind == Kind::kGlobal && type.ref < g.globals.size()) {
        const pickle::GlobalRef& ref = g.globals[type.ref];
        if (ref.resolved_module == "torch" || ref.resolved_module == "torch.cuda") {
          dtype = DTypeFromStorageClass(ref.resolved_name);
        }
      }
      if (dtype == nullptr) {
        Error("storages", p.start, "storages: the storage type is not a torch storage class");
        return false;
      }
      // UntypedStorage._new_with_file: an int64 element count, then the bytes.
      const uint64_t at = r.offset();
      absl::StatusOr<uint64_t> raw = r.ReadU64LE();
      if (!raw.ok()) {
        Error("storages", at, absl::StrCat("storages: ", raw.status().message()));
        return false;
      }
      const int64_t numel = static_cast<int64_t>(*raw);
      uint64_t nbytes;
      if (numel < 0 ||
          !base::CheckedMul<uint64_t>(static_cast<uint64_t>(numel), dtype->size, &nbytes) ||
          nbytes > r.remaining()) {
        Error("storages", at,
              absl::StrFormat("storage %d needs %d elements of %d bytes; the member has %d left "
                              "(torch: unexpected EOF)",
                              key, numel, dtype->size, r.remaining()));
        return false;
      }
      StorageRef s;
      s.key = absl::StrCat(key);
      s.dtype = dtype;
      s.location = g.nodes[(*items)[1]].text;
      s.numel = static_cast<uint64_t>(numel);
      s.pid_offset = p.start;
      Add(key, std::move(s), StorageData{absl::StrCat(key), "storages", r.offset(), nbytes, true});
      (void)r.Skip(nbytes);
    }
    // The storage views: (target key, root key, offset, numel), slices of a loaded storage.
    i = Run(&r, "storages", "storage views", facts);
    if (i < 0) return false;
    const PickleFacts& p = facts->stream.pickles[static_cast<size_t>(i)];
    const Node* list = Root(p);
    if (list == nullptr || (list->kind != Kind::kList && list->kind != Kind::kTuple)) {
      Error("storages", p.start, "storages: the storage views are not a list");
      return false;
    }
    if (list->items.size() > limits_.max_records) {
      OverLimit("storages", p.start, "storages: more storage views than max_records", "max_records",
                limits_.max_records);
      return false;
    }
    for (pickle::NodeId id : list->items) {
      const auto* v = Unpack(p.graph, id < p.graph.nodes.size() ? &p.graph.nodes[id] : nullptr, 4);
      int64_t target, root, offset, numel;
      if (v == nullptr || !AsInt(p.graph, (*v)[0], &target) || !AsInt(p.graph, (*v)[1], &root) ||
          !AsInt(p.graph, (*v)[2], &offset) || !AsInt(p.graph, (*v)[3], &numel)) {
        Error("storages", p.start, "storages: a storage view is not four ints");
        return false;
      }
      auto it = keyed_.by_key.find(root);
      if (it == keyed_.by_key.end()) {
        Error("storages", p.start,
              absl::StrFormat("storage view %d: no storage %d (torch: KeyError)", target, root));
        return false;
      }
      const size_t ri = it->second.index;
      const StorageRef base_ref = keyed_.storages[ri];
      const StorageData base_data = storage_data_[ri];
      // torch slices the root's bytes, which Python would clamp; we accept only exact slices.
      if (offset < 0 || numel < 0 || static_cast<uint64_t>(offset) > base_ref.numel ||
          static_cast<uint64_t>(numel) > base_ref.numel - static_cast<uint64_t>(offset)) {
        Error("storages", p.start,
              absl::StrFormat("storage view %d: elements [%d, %d + %d) are not inside storage %d "
                              "of %d elements",
                              target, offset, offset, numel, root, base_ref.numel));
        return false;
      }
      StorageRef s = base_ref;
      s.key = absl::StrCat(target);
      s.numel = static_cast<uint64_t>(numel);
      s.pid_offset = p.start;
      const uint64_t es = base_ref.dtype->size;
      Add(target, std::move(s),
          StorageData{absl::StrCat(target), "storages",
                      base_data.offset + static_cast<uint64_t>(offset) * es,
                      static_cast<uint64_t>(numel) * es, true});
    }
    if (!r.empty()) {
      out_->anomalies.push_back(ContainerAnomaly{
          "trailing_data", "storages", r.offset(),
          absl::StrFormat("%d bytes after the storage views, which torch ignores", r.remaining())});
    }
    return true;
  }

  void Add(int64_t key, StorageRef s, StorageData d) {
    keyed_.by_key[key] = KeyedObjects::Entry{false, keyed_.storages.size()};
    keyed_.storages.push_back(std::move(s));
    storage_data_.push_back(std::move(d));
  }

  bool TensorsBody(const TarMember& m, MemberFacts* facts) {
    base::ByteReader r(data_.substr(m.data_offset, m.size), m.data_offset);
    int i = Run(&r, "tensors", "count", facts);
    uint64_t count;
    if (i < 0 || !Count(facts->stream.pickles[static_cast<size_t>(i)], "tensors", &count)) {
      return false;
    }
    for (uint64_t k = 0; k < count; ++k) {
      i = Run(&r, "tensors", "tensor record", facts);
      if (i < 0) return false;
      const PickleFacts& p = facts->stream.pickles[static_cast<size_t>(i)];
      const auto* items = Unpack(p.graph, Root(p), 3);
      int64_t key, storage_key;
      if (items == nullptr || !AsInt(p.graph, (*items)[0], &key) ||
          !AsInt(p.graph, (*items)[1], &storage_key)) {
        Error("tensors", p.start, "tensors: a record is not (int key, int storage key, type)");
        return false;
      }
      auto it = keyed_.by_key.find(storage_key);
      if (it == keyed_.by_key.end() || it->second.tensor) {
        Error("tensors", p.start,
              absl::StrFormat("tensor %d: no storage %d (torch: KeyError)", key, storage_key));
        return false;
      }
      TensorFact t;
      t.storage = static_cast<int32_t>(it->second.index);
      t.dtype = keyed_.storages[it->second.index].dtype;
      t.offset = p.start;
      absl::Status s = ReadGeometry(&r, key, &t);
      if (!s.ok()) {
        out_->errors.push_back(StatusError(s, std::string(s.message()), "tensors", r.offset()));
        return false;
      }
      t.name = absl::StrCat("tensors record ", key);
      absl::Status b = CheckStorageBounds(t, keyed_.storages);
      if (!b.ok()) {
        // torch grows a root storage to fit (uninitialised bytes) and fails on a view.
        Error("tensors", p.start, std::string(b.message()));
        return false;
      }
      t.name.clear();
      keyed_.by_key[key] = KeyedObjects::Entry{true, keyed_.tensors.size()};
      keyed_.tensors.push_back(std::move(t));
    }
    if (!r.empty()) {
      out_->anomalies.push_back(ContainerAnomaly{
          "trailing_data", "tensors", r.offset(),
          absl::StrFormat("%d bytes after the last tensor record, which torch ignores",
                          r.remaining())});
    }
    return true;
  }

  // int32 ndim, 4 padding bytes, ndim int64 sizes, ndim int64 strides, int64 storage offset.
  absl::Status ReadGeometry(base::ByteReader* r, int64_t key, TensorFact* t) {
    absl::StatusOr<uint32_t> raw = r->ReadU32LE();
    if (!raw.ok()) return raw.status();
    const int32_t ndim = static_cast<int32_t>(*raw);
    if (ndim < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %d: negative ndim %d (torch: struct.error)", key, ndim));
    }
    if (static_cast<uint32_t>(ndim) > limits_.max_dims) {
      return base::LimitError(absl::StrFormat("tensor %d: %d dimensions exceed max_dims (%d)", key,
                                              ndim, limits_.max_dims),
                              "max_dims", limits_.max_dims);
    }
    absl::Status skip = r->Skip(4);
    if (!skip.ok()) return skip;
    if (r->remaining() < 16 * static_cast<uint64_t>(ndim) + 8) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %d: %d dimensions need %d bytes; the member has %d left", key,
                          ndim, 16 * static_cast<uint64_t>(ndim) + 8, r->remaining()));
    }
    for (std::vector<int64_t>* v : {&t->shape, &t->stride}) {
      for (int32_t d = 0; d < ndim; ++d) {
        v->push_back(static_cast<int64_t>(*r->ReadU64LE()));
      }
    }
    const int64_t offset = static_cast<int64_t>(*r->ReadU64LE());
    if (offset < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %d: invalid storage offset %d (torch refuses it)", key, offset));
    }
    t->storage_offset = static_cast<uint64_t>(offset);
    return absl::OkStatus();
  }

  std::string_view data_;
  const pickle::Vm& vm_;
  const TarLimits& limits_;
  FileFacts* out_;
  KeyedObjects keyed_;
  std::vector<StorageData> storage_data_;  // parallel to keyed_.storages
};

}  // namespace

bool IsTarHeader(std::string_view block) {
  if (block.size() < kBlock) return false;
  block = block.substr(0, kBlock);
  const auto* u = reinterpret_cast<const unsigned char*>(block.data());
  bool all_nul = true;
  int64_t unsigned_sum = 8 * ' ';
  int64_t signed_sum = 8 * ' ';
  for (size_t i = 0; i < kBlock; ++i) {
    if (u[i] != 0) all_nul = false;
    if (i >= 148 && i < 156) continue;  // the checksum field counts as spaces
    unsigned_sum += u[i];
    signed_sum += static_cast<signed char>(u[i]);
  }
  if (all_nul) return false;
  Number sum = Nti(block.substr(148, 8));
  if (!sum.valid || !sum.fits || (sum.value != unsigned_sum && sum.value != signed_sum)) {
    return false;
  }
  // TarInfo.frombuf parses these with nti; any failure is an invalid header.
  constexpr std::pair<size_t, size_t> kFields[] = {{100, 8},  {108, 8}, {116, 8}, {124, 12},
                                                   {136, 12}, {329, 8}, {337, 8}};
  for (const auto& [at, len] : kFields) {
    if (!Nti(block.substr(at, len)).valid) return false;
  }
  return true;
}

const TarMember* TarArchive::Find(std::string_view name) const {
  for (size_t i = members.size(); i-- > 0;) {
    if (members[i].name == name) return &members[i];
  }
  return nullptr;
}

absl::StatusOr<TarArchive> ReadTar(std::string_view data, const TarLimits& limits) {
  TarArchive ar;
  uint64_t pos = 0;
  while (true) {
    const uint64_t left = data.size() - pos;
    if (left < kBlock) {
      if (pos == 0) return absl::InvalidArgumentError("tar: shorter than one header block");
      ar.anomalies.push_back(ContainerAnomaly{
          "tar_end", "", pos,
          left == 0 ? std::string("the archive has no end-of-archive blocks")
                    : absl::StrFormat("a truncated %d-byte block ends the archive", left),
          /*must_flag=*/false});
      break;
    }
    std::string_view block = data.substr(pos, kBlock);
    if (block.find_first_not_of('\0') == std::string_view::npos) {
      if (pos == 0) return absl::InvalidArgumentError("tar: the first block is all NUL");
      std::string_view rest = data.substr(pos);
      size_t junk = rest.find_first_not_of('\0');
      if (junk != std::string_view::npos) {
        ar.anomalies.push_back(
            ContainerAnomaly{"trailing_data", "", pos + junk,
                             "bytes after the end-of-archive block, which tarfile never reads"});
      }
      break;
    }
    if (!IsTarHeader(block)) {
      if (pos == 0) return absl::InvalidArgumentError("tar: the first header is invalid");
      ar.anomalies.push_back(ContainerAnomaly{
          "trailing_data", "", pos,
          "an invalid header ends the archive for tarfile; the bytes from here are not read"});
      break;
    }
    if (ar.members.size() >= limits.max_members) {
      return base::LimitError(absl::StrFormat("tar: more than max_members (%d) members (offset %d)",
                                              limits.max_members, pos),
                              "max_members", limits.max_members);
    }
    std::string name(Nts(block.substr(0, 100)));
    const char type = block[156];
    const bool regular = type == '0' || type == '7' || (type == '\0' && !name.ends_with("/"));
    if (!regular) {
      const bool extension =
          type == 'x' || type == 'g' || type == 'X' || type == 'L' || type == 'K' || type == 'S';
      return absl::UnimplementedError(absl::StrFormat(
          "tar: member '%s' at offset %d is %s (type '%s'); only regular files are read",
          Shown(name), pos,
          extension ? "a pax, GNU long-name or sparse header" : "not a regular file",
          Shown(std::string_view(&type, 1))));
    }
    std::string_view prefix = Nts(block.substr(345, 155));
    if (!prefix.empty()) name = absl::StrCat(base::AbslView(prefix), "/", name);
    const Number size = Nti(block.substr(124, 12));
    if (!size.fits || size.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tar: member '%s' at offset %d has an invalid size", Shown(name), pos));
    }
    const uint64_t n = static_cast<uint64_t>(size.value);
    const uint64_t data_offset = pos + kBlock;
    uint64_t padded;
    const bool fits = base::CheckedAdd<uint64_t>(n, kBlock - 1, &padded);
    padded &= ~(kBlock - 1);
    if (!fits || padded > data.size() - data_offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tar: member '%s' at offset %d needs %d bytes of data and padding; the file has %d "
          "left (tarfile: unexpected end of data)",
          Shown(name), pos, fits ? padded : n, data.size() - data_offset));
    }
    if (ar.Find(name) != nullptr) {
      ar.anomalies.push_back(
          ContainerAnomaly{"duplicate_member", Shown(name), pos,
                           "a member name used twice: tarfile, and so torch, reads the last one"});
    }
    ar.members.push_back(TarMember{std::move(name), pos, data_offset, n});
    pos = data_offset + padded;
  }
  return ar;
}

bool IsTorchTar(const TarArchive& ar) {
  return ar.Find("storages") != nullptr || ar.Find("tensors") != nullptr ||
         ar.Find("pickle") != nullptr;
}

void ReadTorchTar(std::string_view data, const TarArchive& ar, const pickle::Vm& vm,
                  const TarLimits& limits, const pickle::TraceSink* trace, FileFacts* out) {
  out->format = "torch-tar";
  for (const ContainerAnomaly& a : ar.anomalies) out->anomalies.push_back(a);
  const TarMember* sys_info = ar.Find("sys_info");
  const TarMember* storages = ar.Find("storages");
  const TarMember* tensors = ar.Find("tensors");
  const TarMember* object = ar.Find("pickle");
  auto bytes = [&](const TarMember& m) { return data.substr(m.data_offset, m.size); };

  // sys_info is written by torch.save but never read by torch.load: scanned all the same.
  if (sys_info != nullptr) {
    out->members.push_back(
        MemberFacts{"sys_info", vm.ScanStream(bytes(*sys_info), sys_info->data_offset)});
  }
  // torch's order: extract('storages'), extract('tensors'), extractfile('pickle'); the first
  // failure ends the load.
  TorchTar reader(data, vm, limits, out);
  bool ok = true;
  for (const auto& [m, name] : {std::pair{storages, "storages"}, std::pair{tensors, "tensors"},
                                std::pair{object, "pickle"}}) {
    if (m == nullptr && ok) {
      out->errors.push_back(ContainerError(
          v1::ERROR_CODE_MALFORMED,
          absl::StrFormat("torch tar checkpoint without a '%s' member (torch: KeyError)", name), "",
          0));
      ok = false;
    }
  }
  if (storages != nullptr) ok = reader.Storages(*storages) && ok;
  if (tensors != nullptr) {
    if (ok) {
      ok = reader.Tensors(*tensors);
    } else {  // torch would not get here; the pickles are scanned all the same
      out->members.push_back(
          MemberFacts{"tensors", vm.ScanStream(bytes(*tensors), tensors->data_offset)});
    }
  }
  if (object != nullptr) {
    MemberFacts m{"pickle", vm.ScanStream(bytes(*object), object->data_offset, trace)};
    if (ok && !m.stream.pickles.empty() && !m.stream.pickles[0].error) {
      TensorExtraction t = ExtractTensors(m.stream.pickles[0], &reader.keyed());
      for (const std::string& problem : t.problems) {
        out->errors.push_back(
            ContainerError(v1::ERROR_CODE_MALFORMED, problem, "pickle", m.stream.pickles[0].start));
      }
      out->tensors = std::move(t.tensors);
      out->other_values = std::move(t.other_values);
      out->storages = std::move(t.storages);
      out->storage_data = std::move(reader.storage_data());
    } else if (ok && m.stream.pickles.empty()) {
      out->errors.push_back(ContainerError(v1::ERROR_CODE_MALFORMED, "the 'pickle' member is empty",
                                           "pickle", object->data_offset));
    }
    out->members.push_back(std::move(m));
  }
  // Earlier copies of a duplicated name and members torch.save does not write: scanned, kept
  // when they name anything.
  for (const TarMember& m : ar.members) {
    if (&m == sys_info || &m == storages || &m == tensors || &m == object) continue;
    const bool known =
        m.name == "sys_info" || m.name == "storages" || m.name == "tensors" || m.name == "pickle";
    if (!known) {
      out->anomalies.push_back(ContainerAnomaly{"unexpected_member", Shown(m.name), m.header_offset,
                                                "a member torch.save does not write"});
    }
    pickle::StreamFacts s = vm.ScanStream(bytes(m), m.data_offset);
    if (HasContent(s)) out->members.push_back(MemberFacts{Shown(m.name), std::move(s)});
  }
}

}  // namespace ckptscan::torch
