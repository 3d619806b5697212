#include "core/torch/file_facts.h"

#include <string>

namespace ckptscan::torch {

v1::ScanError ContainerError(std::string_view code, std::string message, std::string_view member,
                             uint64_t offset) {
  v1::ScanError e;
  e.set_code(std::string(code));
  e.set_message(std::move(message));
  e.mutable_location()->set_member(std::string(member));
  e.mutable_location()->set_offset(offset);
  return e;
}

}  // namespace ckptscan::torch
