# Writes a C++ source that embeds a file as a byte array (any content: NULs, quotes, non-UTF-8).
#
#   cmake -DINPUT=<file> -DOUTPUT=<file.cc> -DHEADER=<include path> -DNAMESPACE=<ns>
#         -DFUNCTION=<name> -P embed_file.cmake
#
# The generated source defines `std::string_view NAMESPACE::FUNCTION()` returning the bytes.
foreach(var INPUT OUTPUT HEADER NAMESPACE FUNCTION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_file.cmake: -D${var}=... is required")
  endif()
endforeach()

file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
# "0a1b..." -> "0x0a,0x1b,...", 16 bytes a line. (CMake regexes allow few groups and no {n}.)
string(REPEAT "[0-9a-f]" 32 line_re)
string(REGEX REPLACE "(${line_re})" "\\1\n    " hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")

get_filename_component(input_name "${INPUT}" NAME)
set(content "// Generated from ${input_name} by embed_file.cmake. Do not edit.
#include \"${HEADER}\"

#include <cstddef>

namespace ${NAMESPACE} {
namespace {

// One trailing NUL so the array is never empty; it is not part of the text.
constexpr unsigned char kBytes[] = {
    ${bytes}0x00};
constexpr std::size_t kSize = ${size};

}  // namespace

std::string_view ${FUNCTION}() {
  return std::string_view(reinterpret_cast<const char*>(kBytes), kSize);
}

}  // namespace ${NAMESPACE}
")

# Rewrite only on change, so dependents are not rebuilt needlessly.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${content}")
