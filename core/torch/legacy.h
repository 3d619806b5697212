// torch's legacy serialization (before 1.6, and `_use_new_zipfile_serialization=False`), read
// exactly as torch.serialization._legacy_load does: five pickles — the magic number, the
// protocol version, sys_info, the object, the list of storage keys — then, for each listed key
// in order, an int64 little-endian element count and the storage's raw bytes
// (torch/serialization.py _legacy_save). Extra bytes after the last storage are reported, never ignored.
#ifndef CKPTSCAN_CORE_TORCH_LEGACY_H_
#define CKPTSCAN_CORE_TORCH_LEGACY_H_

#include <string_view>

#include "core/pickle/facts.h"
#include "core/pickle/vm.h"
#include "core/torch/file_facts.h"

namespace ckptscan::torch {

// True when `first` (the stream's first pickle) is torch's legacy magic number written as a
// single integer literal — the only form torch.save writes. A magic computed by calls (the
// GHSA-97f8-7cmv-76j2 trick) is not it: such a file is scanned as a plain pickle stream, where
// the calls are findings.
bool IsLegacyMagic(const pickle::PickleFacts& first);

// Reads a legacy checkpoint into `out` (format "torch-legacy"): the five pickles as one member
// "" (nested pickles included), the tensors of the object pickle, and where each storage's
// bytes are. Whatever torch would refuse (a missing or wrongly sized storage, a key listed but
// never referenced, a truncated file) is an error; trailing bytes are an anomaly.
void ReadLegacy(std::string_view data, const pickle::Vm& vm, FileFacts* out);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_LEGACY_H_
