// libFuzzer target: torch's legacy format reader (core/torch/legacy.h): five pickles, then the
// storages' bytes, read as torch.serialization._legacy_load reads them.
//
// Invariants (facts_check.h): the facts of every pickle are consistent; one member at most;
// storages and their data are parallel and every stored storage lies inside the file; a
// read without any error lists all five pickles.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/pickle/vm.h"
#include "core/torch/legacy.h"
#include "tests/fuzz/facts_check.h"

namespace {

// A legacy header is a few hundred bytes; the storages after it are raw. The fixtures are at
// most ~2 KiB.
constexpr size_t kMaxInputBytes = 64 << 10;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const pickle::Limits limits = fuzz::SmallPickleLimits();
  static const pickle::Vm vm(limits);

  // What detect.cc asks first; exercised on whatever the first pickle is.
  const pickle::PickleFacts first = vm.RunOne(bytes);
  (void)torch::IsLegacyMagic(first);

  torch::FileFacts facts;
  torch::ReadLegacy(bytes, vm, &facts);
  CKPT_FUZZ_CHECK(facts.format == "torch-legacy", "format %s", facts.format.c_str());
  CKPT_FUZZ_CHECK(facts.members.size() <= 1, "%zu members", facts.members.size());
  fuzz::CheckFileFacts(facts, size, limits);
  if (!facts.members.empty()) {
    fuzz::CheckStreamFacts(facts.members[0].stream, 0, size, limits);
    // A VM error stays with its pickle; anything else torch would refuse is a file error. With
    // neither, the read was complete: all five pickles.
    size_t top = 0;
    bool vm_error = false;
    for (const pickle::PickleFacts& p : facts.members[0].stream.pickles) {
      vm_error |= p.error.has_value();
      top += p.depth == 0;
    }
    if (facts.errors.empty() && !vm_error) {
      CKPT_FUZZ_CHECK(top == 5, "no error, but %zu top-level pickles", top);
    }
  }
  return 0;
}
