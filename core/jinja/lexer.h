// Jinja's lexer (jinja2/lexer.py, 3.1), for the environments that render chat templates: the
// default delimiters ({{ }}, {% %}, {# #}), no line statements or line comments (none of
// transformers, llama-cpp-python or a default Environment enables them), newlines normalised
// to "\n" and one trailing newline dropped (keep_trailing_newline=False).
//
// Whitespace control is read as Jinja reads it: "{%-", "-%}", "{{-", "-}}", "{#-", "-#}" strip
// white space; "{%+" and "+%}" turn lstrip_blocks and trim_blocks off for one tag. Template
// data is kept twice: as a default Environment renders it (trim_blocks and lstrip_blocks off)
// and as transformers and llama-cpp-python render it (both on), because a block set's or a
// macro's text is a string a template can use as a name.
//
// String literals are decoded as Jinja decodes them (non-ASCII characters backslash-replaced,
// then Python's "unicode-escape" codec); integers and floats follow Jinja's regular
// expressions, including "_" separators and its refusal of a float right after a ".".
//
// What is not modelled is reported, not guessed: a non-ASCII character outside string literals
// and data (Jinja's names are Unicode identifiers) and a \N{...} escape naming a character
// outside ASCII end the reading with `unsupported` set.
//
// A parser of untrusted bytes: worker side only. One pass, no recursion. Thread-safe.
#ifndef CKPTSCAN_CORE_JINJA_LEXER_H_
#define CKPTSCAN_CORE_JINJA_LEXER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/jinja/limits.h"

namespace ckptscan::jinja {

enum class Tok : uint8_t {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  // operators
  kAdd,        // +
  kSub,        // -
  kDiv,        // /
  kFloorDiv,   // //
  kMul,        // *
  kMod,        // %
  kPow,        // **
  kTilde,      // ~
  kLBracket,   // [
  kRBracket,   // ]
  kLParen,     // (
  kRParen,     // )
  kLBrace,     // {
  kRBrace,     // }
  kEq,         // ==
  kNe,         // !=
  kGt,         // >
  kGtEq,       // >=
  kLt,         // <
  kLtEq,       // <=
  kAssign,     // =
  kDot,        // .
  kColon,      // :
  kPipe,       // |
  kComma,      // ,
  kSemicolon,  // ;
  kEof,
};

// Jinja's name for a token type in messages ("end of statement block", "'('").
std::string_view TokName(Tok t);

struct Token {
  Tok type = Tok::kEof;
  uint32_t offset = 0;  // byte offset in the original text
  uint32_t end = 0;     // one past its last byte
  // A name, a decoded string, the data as a default Environment renders it, an operator.
  std::string text;
  // kData: the data as transformers / llama-cpp-python render it (trim_blocks, lstrip_blocks).
  std::string trimmed;
  // kInteger: the value when it fits; nullopt for larger ones (Python's ints are unbounded).
  std::optional<int64_t> integer;
};

// Why a template is not read: Jinja refuses it (a TemplateSyntaxError), or it uses what this
// reader does not model (`unsupported`: not a verdict on the template).
struct Problem {
  uint32_t offset = 0;
  std::string message;
  bool unsupported = false;
};

struct Lexed {
  std::vector<Token> tokens;      // ends with kEof (at the text's end) when `problem` is unset
  std::optional<Problem> problem;
};

// Non-OK only past a limit (max_template_bytes, max_tokens, max_nesting for open brackets).
absl::StatusOr<Lexed> Lex(std::string_view text, const Limits& limits);

}  // namespace ckptscan::jinja

#endif  // CKPTSCAN_CORE_JINJA_LEXER_H_
