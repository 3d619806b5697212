// Internal to ckpt_rules: the bytes of rules/default_rules.textproto, embedded at build time by
// rules/embed_file.cmake (a byte array, so any file content is safe to embed).
#ifndef CKPTSCAN_RULES_DEFAULT_RULES_DATA_H_
#define CKPTSCAN_RULES_DEFAULT_RULES_DATA_H_

#include <string_view>

namespace ckptscan::rules::internal {

// Static storage; valid for the life of the program.
std::string_view DefaultRulesText();

}  // namespace ckptscan::rules::internal

#endif  // CKPTSCAN_RULES_DEFAULT_RULES_DATA_H_
