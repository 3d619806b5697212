#include "core/torch/legacy.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/strings.h"
#include "core/torch/tensors.h"

namespace ckptscan::torch {
namespace {

using pickle::Kind;
using pickle::Node;
using pickle::PickleFacts;

// torch.serialization.MAGIC_NUMBER and PROTOCOL_VERSION.
const absl::int128 kMagic = absl::MakeInt128(0x1950, 0xa86a20f9469cfc6cull);
constexpr int64_t kProtocolVersion = 1001;

const char* const kPickleNames[] = {"magic number", "protocol version", "sys_info", "object",
                                    "storage keys"};

const Node* Root(const PickleFacts& p) {
  if (p.error || p.root == pickle::kNoNode || p.root >= p.graph.nodes.size()) return nullptr;
  return &p.graph.nodes[p.root];
}

bool IsPlainInt(const PickleFacts& p, absl::int128 value) {
  const Node* r = Root(p);
  return r != nullptr && p.graph.globals.empty() && p.graph.calls.empty() &&
         r->kind == Kind::kInt && r->fits && r->i == value;
}

}  // namespace

bool IsLegacyMagic(const PickleFacts& first) { return IsPlainInt(first, kMagic); }

void ReadLegacy(std::string_view data, const pickle::Vm& vm, FileFacts* out) {
  out->format = "torch-legacy";
  MemberFacts m;
  uint64_t pos = 0;
  for (int i = 0; i < 5; ++i) {
    m.stream.pickles.push_back(vm.RunOne(data.substr(pos), pos));
    PickleFacts& p = m.stream.pickles.back();
    if (p.error) break;  // the VM error is reported with the pickle
    pos = p.end;
    if (i == 1 && !IsPlainInt(p, kProtocolVersion)) {
      out->errors.push_back(ContainerError(v1::ERROR_CODE_UNSUPPORTED,
                                           "legacy checkpoint: the protocol version is not 1001",
                                           "", p.start));
      break;
    }
    if (i == 2 && (Root(p) == nullptr || Root(p)->kind != Kind::kDict)) {
      out->errors.push_back(ContainerError(
          v1::ERROR_CODE_MALFORMED, "legacy checkpoint: sys_info is not a dict", "", p.start));
      break;
    }
  }
  vm.ScanNested(data, 0, &m.stream);
  const bool complete = m.stream.pickles.size() >= 5 && !m.stream.pickles[4].error;
  if (m.stream.pickles.size() >= 4 && !m.stream.pickles[3].error) {
    TensorExtraction t = ExtractTensors(m.stream.pickles[3], nullptr, PersistentIds::kLegacy);
    for (const std::string& problem : t.problems) {
      out->errors.push_back(
          ContainerError(v1::ERROR_CODE_MALFORMED, problem, "", m.stream.pickles[3].start));
    }
    out->tensors = std::move(t.tensors);
    out->other_values = std::move(t.other_values);
    out->storages = std::move(t.storages);
  }
  out->storage_data.assign(out->storages.size(), StorageData{});
  if (!complete) {
    if (m.stream.pickles.size() < 5 && !m.stream.pickles.back().error && out->errors.empty()) {
      out->errors.push_back(
          ContainerError(v1::ERROR_CODE_MALFORMED,
                         absl::StrFormat("legacy checkpoint ends before its %s pickle",
                                         kPickleNames[m.stream.pickles.size()]),
                         "", pos));
    }
    out->members.push_back(std::move(m));
    return;
  }

  // The storage key list, then each storage's bytes in that order.
  const PickleFacts& keys = m.stream.pickles[4];
  const Node* list = Root(keys);
  std::vector<std::string> order;
  bool keys_ok = list != nullptr && list->kind == Kind::kList;
  if (keys_ok) {
    for (pickle::NodeId id : list->items) {
      const Node& k = keys.graph.nodes[id];
      if (k.kind != Kind::kStr || k.truncated) {
        keys_ok = false;
        break;
      }
      order.push_back(k.text);
    }
  }
  if (!keys_ok) {
    out->errors.push_back(ContainerError(
        v1::ERROR_CODE_MALFORMED, "legacy checkpoint: the storage key list is not a list of str",
        "", keys.start));
    out->members.push_back(std::move(m));
    return;
  }
  base::ByteReader r(data.substr(pos), pos);
  std::vector<bool> filled(out->storages.size(), false);
  for (const std::string& key : order) {
    size_t index = out->storages.size();
    for (size_t s = 0; s < out->storages.size(); ++s) {
      if (out->storages[s].key == key) index = s;
    }
    const uint64_t at = r.offset();
    if (index == out->storages.size()) {
      out->errors.push_back(
          ContainerError(v1::ERROR_CODE_MALFORMED,
                         absl::StrFormat("storage key '%s' is listed but no tensor refers to it",
                                         base::AbslView(key)),
                         "", at));
      break;
    }
    if (filled[index]) {
      out->errors.push_back(ContainerError(
          v1::ERROR_CODE_MALFORMED,
          absl::StrFormat("storage key '%s' is listed twice", base::AbslView(key)), "", at));
      break;
    }
    const StorageRef& s = out->storages[index];
    absl::StatusOr<uint64_t> numel = r.ReadU64LE();
    if (!numel.ok()) {
      out->errors.push_back(ContainerError(
          v1::ERROR_CODE_MALFORMED,
          absl::StrFormat("storage '%s': %s", base::AbslView(key), numel.status().message()), "",
          at));
      break;
    }
    if (*numel != s.numel) {
      out->errors.push_back(ContainerError(
          v1::ERROR_CODE_MALFORMED,
          absl::StrFormat("storage '%s' has wrong size: %d elements recorded, %d expected",
                          base::AbslView(key), *numel, s.numel),
          "", at));
      break;
    }
    uint64_t nbytes;
    const uint64_t element = s.untyped ? 1 : s.dtype->size;
    if (!base::CheckedMul(*numel, element, &nbytes) || nbytes > r.remaining()) {
      out->errors.push_back(ContainerError(
          v1::ERROR_CODE_MALFORMED,
          absl::StrFormat("storage '%s' needs %d elements of %d bytes; the file has %d left",
                          base::AbslView(key), *numel, element, r.remaining()),
          "", at));
      break;
    }
    out->storage_data[index] = StorageData{key, "", r.offset(), nbytes, true};
    filled[index] = true;
    (void)r.Skip(nbytes);
  }
  for (size_t s = 0; s < out->storages.size(); ++s) {
    if (!filled[s] && out->errors.empty()) {
      out->errors.push_back(ContainerError(v1::ERROR_CODE_MALFORMED,
                                           absl::StrFormat("storage '%s' has no data in the file",
                                                           base::AbslView(out->storages[s].key)),
                                           "", out->storages[s].pid_offset));
    }
  }
  for (const TensorFact& t : out->tensors) {
    absl::Status b = CheckStorageBounds(t, out->storages);
    if (!b.ok()) {
      out->errors.push_back(
          ContainerError(v1::ERROR_CODE_MALFORMED, std::string(b.message()), "", t.offset));
    }
  }
  if (out->errors.empty() && r.remaining() > 0) {
    out->anomalies.push_back(ContainerAnomaly{
        "trailing_data", "", r.offset(),
        absl::StrFormat("%d bytes after the last storage, which torch.load ignores",
                        r.remaining())});
  }
  out->members.push_back(std::move(m));
}

}  // namespace ckptscan::torch
