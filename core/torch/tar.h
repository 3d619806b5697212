// torch <= 0.3 tar checkpoints, read exactly as torch 1.13's _legacy_load reads them (its tar
// branch, which torch.load tries first on any file whose first block Python's tarfile takes
// for a header): a bounded ustar reader modelled on Python 3.11's tarfile, then the four
// members torch writes — `sys_info`, `pickle`, `tensors`, `storages` (docs/formats.md).
//
// The tar reader accepts only what it can read exactly as tarfile does: 512-byte headers with
// a valid checksum, regular-file members. pax, GNU long-name and sparse headers, links,
// directories and devices are refused (fail closed: they rename, resize or redirect members).
// Like tarfile, an all-NUL block, a short or an invalid header after the first ends the
// archive; bytes past that point are an anomaly.
//
// Thread-safe: pure functions of their arguments.
#ifndef CKPTSCAN_CORE_TORCH_TAR_H_
#define CKPTSCAN_CORE_TORCH_TAR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/pickle/vm.h"
#include "core/torch/file_facts.h"

namespace ckptscan::torch {

struct TarLimits {
  uint32_t max_members = 10'000;     // members in one archive
  uint64_t max_records = 1'000'000;  // storage, view or tensor records in a torch tar
  uint32_t max_dims = 1'024;         // dimensions of one tensor record
};

struct TarMember {
  std::string name;  // prefix + "/" + name when the ustar prefix is set
  uint64_t header_offset = 0;
  uint64_t data_offset = 0;  // absolute
  uint64_t size = 0;
};

struct TarArchive {
  std::vector<TarMember> members;  // in archive order; duplicates kept
  std::vector<ContainerAnomaly> anomalies;

  // The member tarfile.getmember(name) returns: the last one of that name, or nullptr.
  const TarMember* Find(std::string_view name) const;
};

// True when tarfile.TarInfo.frombuf accepts `block` (512 bytes) as a header: not all NUL, a
// matching checksum (unsigned or signed sum) and every numeric field parseable by tarfile.nti.
bool IsTarHeader(std::string_view block);

// Reads the member list. InvalidArgument (malformed), Unimplemented (a header kind we do not
// read) or ResourceExhausted (a limit), each naming the byte offset.
absl::StatusOr<TarArchive> ReadTar(std::string_view data, const TarLimits& limits = {});

// True when the archive has a member torch's tar loader reads (`storages`, `tensors`,
// `pickle`): it is a torch checkpoint rather than some other tar.
bool IsTorchTar(const TarArchive& ar);

// Reads a torch tar checkpoint into `out` (format "torch-tar"): every member's pickles
// (members `sys_info`, `storages`, `tensors`, `pickle` and any other member), the tensors named
// by their path in the object pickle, and each storage's bytes as absolute file offsets.
// Wherever torch would fail to load the file, an error.
void ReadTorchTar(std::string_view data, const TarArchive& ar, const pickle::Vm& vm,
                  const TarLimits& limits, const pickle::TraceSink* trace, FileFacts* out);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_TAR_H_
