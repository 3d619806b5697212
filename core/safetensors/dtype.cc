#include "core/safetensors/dtype.h"

#include <array>

namespace ckptscan::safetensors {
namespace {

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  uint32_t bits;
};

// Indexed by the enum value.
constexpr std::array<DtypeInfo, 22> kDtypes = {{
    {Dtype::kBool, "BOOL", 8},
    {Dtype::kF4, "F4", 4},
    {Dtype::kF6E2M3, "F6_E2M3", 6},
    {Dtype::kF6E3M2, "F6_E3M2", 6},
    {Dtype::kU8, "U8", 8},
    {Dtype::kI8, "I8", 8},
    {Dtype::kF8E5M2, "F8_E5M2", 8},
    {Dtype::kF8E4M3, "F8_E4M3", 8},
    {Dtype::kF8E8M0, "F8_E8M0", 8},
    {Dtype::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    {Dtype::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8},
    {Dtype::kI16, "I16", 16},
    {Dtype::kU16, "U16", 16},
    {Dtype::kF16, "F16", 16},
    {Dtype::kBF16, "BF16", 16},
    {Dtype::kI32, "I32", 32},
    {Dtype::kU32, "U32", 32},
    {Dtype::kF32, "F32", 32},
    {Dtype::kC64, "C64", 64},
    {Dtype::kF64, "F64", 64},
    {Dtype::kI64, "I64", 64},
    {Dtype::kU64, "U64", 64},
}};

constexpr bool TableMatchesEnum() {
  for (size_t i = 0; i < kDtypes.size(); ++i) {
    if (static_cast<size_t>(kDtypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableMatchesEnum(), "kDtypes must be indexed by Dtype");

constexpr std::array<Dtype, kDtypes.size()> MakeAll() {
  std::array<Dtype, kDtypes.size()> all{};
  for (size_t i = 0; i < kDtypes.size(); ++i) all[i] = kDtypes[i].dtype;
  return all;
}
constexpr std::array<Dtype, kDtypes.size()> kAll = MakeAll();

}  // namespace

std::span<const Dtype> AllDtypes() { return kAll; }

std::string_view DtypeName(Dtype d) { return kDtypes[static_cast<size_t>(d)].name; }

uint32_t DtypeBits(Dtype d) { return kDtypes[static_cast<size_t>(d)].bits; }

std::optional<Dtype> ParseDtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace ckptscan::safetensors
