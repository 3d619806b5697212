// Internal to ckpt_rules: rules/default_rules.textproto encoded as a binary ckptscan.v1.RuleSet
// by protoc at build time (rules/encode_rules.cmake), embedded as a byte array
// (rules/embed_file.cmake). Binary, because text-format parsing cost every run milliseconds.
#ifndef CKPTSCAN_RULES_DEFAULT_RULES_DATA_H_
#define CKPTSCAN_RULES_DEFAULT_RULES_DATA_H_

#include <string_view>

namespace ckptscan::rules::internal {

// Static storage; valid for the life of the program.
std::string_view DefaultRulesBinary();

}  // namespace ckptscan::rules::internal

#endif  // CKPTSCAN_RULES_DEFAULT_RULES_DATA_H_
