// The named limits of the Jinja reader (lexer, parser, abstract evaluation). Every count an
// untrusted template controls is bounded by one of these; past one, the reading stops with
// ResourceExhausted naming the field (base::LimitError), and the caller reports an error, so
// that a template is never SAFE by being too large to read. Defaults are far above what chat
// templates in the wild need (the largest ones are about 40 KiB, 20,000 tokens, a few thousand
// evaluation steps per message turn).
//
// Plain values: included by headers of both sides of the jail without pulling in the parser.
#ifndef CKPTSCAN_CORE_JINJA_LIMITS_H_
#define CKPTSCAN_CORE_JINJA_LIMITS_H_

#include <cstdint>

namespace ckptscan::jinja {

struct Limits {
  uint64_t max_template_bytes = 4ull << 20;  // one template's text
  uint64_t max_tokens = 1ull << 20;          // tokens the lexer yields
  uint64_t max_nodes = 1ull << 19;           // nodes of the syntax tree
  uint64_t max_nesting = 256;                // open brackets, statement blocks and parser frames
  uint64_t max_string_bytes = 1ull << 16;    // one folded string constant (longer: not folded)
  uint64_t max_loop_unroll = 4096;           // iterations of constant loops evaluated one by one
  uint64_t max_eval_steps = 1ull << 22;      // steps of the abstract evaluation
  uint64_t max_call_depth = 64;              // macro and caller evaluations open at once
};

}  // namespace ckptscan::jinja

#endif  // CKPTSCAN_CORE_JINJA_LIMITS_H_
