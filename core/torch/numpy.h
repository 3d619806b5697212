// NumPy's .npy format, read as numpy.lib.format.read_array does: the magic "\x93NUMPY", a
// version, a header that is a Python dict literal {'descr', 'fortran_order', 'shape'}, then
// the data. Numeric arrays become tensors; a dtype holding an object anywhere makes the data a
// pickle (np.save with allow_pickle), which goes through the VM; other data dtypes (strings,
// structured records, long doubles, datetimes) are data listed without a tensor dtype. The
// header is parsed by a strict parser of the literal subset numpy's headers use (numpy itself
// uses ast.literal_eval); anything else is an error, never a guess.
#ifndef CKPTSCAN_CORE_TORCH_NUMPY_H_
#define CKPTSCAN_CORE_TORCH_NUMPY_H_

#include <cstdint>
#include <string_view>

#include "core/pickle/vm.h"
#include "core/torch/file_facts.h"

namespace ckptscan::torch {

bool IsNpy(std::string_view data);

// Reads one .npy (a file, or an .npz member named `member`, whose first byte is at absolute
// offset `base_offset`) and appends to `out`: the tensor (named `tensor_name`) with its data
// location, or the pickle of an object array, plus errors and anomalies.
// A header over `max_header_bytes` is a limit error (max_npy_header_bytes).
inline constexpr uint64_t kMaxNpyHeaderBytes = 1 << 20;  // numpy refuses over 10 KiB unless asked
void ReadNpy(std::string_view data, std::string_view member, std::string_view tensor_name,
             uint64_t base_offset, bool stored, const pickle::Vm& vm, FileFacts* out,
             uint64_t max_header_bytes = kMaxNpyHeaderBytes);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_NUMPY_H_
