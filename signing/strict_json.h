// Strict, bounded JSON for untrusted signing documents (bundles, in-toto statements), and the
// string escaping our deterministic writers use.
//
// ParseStrictJson builds an nlohmann::json DOM through the SAX interface (nlohmann's parser is
// iterative), rejecting what lenient parsers disagree on: duplicate object keys at any depth,
// trailing bytes, invalid UTF-8. Depth and value count are bounded by Limits before anything is
// allocated for them. No exception leaves these functions.
//
// Thread-safe (no shared state).
#ifndef CKPTSCAN_SIGNING_STRICT_JSON_H_
#define CKPTSCAN_SIGNING_STRICT_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/json_text.h"
#include "nlohmann/json.hpp"
#include "signing/limits.h"

namespace ckptscan::signing {

using Json = nlohmann::json;

// `what` names the document in errors ("bundle", "DSSE payload"). Errors are InvalidArgument
// with the byte offset, or ResourceExhausted naming the Limits field.
absl::StatusOr<Json> ParseStrictJson(std::string_view text, std::string_view what,
                                     const Limits& limits);

// String literals and UTF-8 checks: base/json_text.h (shared with the safetensors writer).
using base::AppendJsonString;
using base::IsValidUtf8;
// `s` as a JSON string literal (AppendJsonString into a new string).
std::string Quoted(std::string_view s);

// The JSON type of `v` in words, for error messages ("a string", "an object", ...).
std::string JsonTypeName(const Json& v);

// Reading fields with errors that name the document and the field path:
//   "bundle: missing field dsseEnvelope.payload"
//   "bundle: dsseEnvelope.signatures must be an array, found a string"
// `obj` must be an object. Returns nullptr when the key is absent.
const Json* FindField(const Json& obj, std::string_view key);
absl::Status MissingField(std::string_view doc, std::string_view path);
absl::Status WrongType(std::string_view doc, std::string_view path, std::string_view expected,
                       const Json& found);
// The field as the given type; absent or mistyped fields are errors.
absl::StatusOr<const Json*> RequiredObject(const Json& obj, std::string_view key,
                                           std::string_view doc, std::string_view path);
absl::StatusOr<const Json*> RequiredArray(const Json& obj, std::string_view key,
                                          std::string_view doc, std::string_view path);
absl::StatusOr<const std::string*> RequiredString(const Json& obj, std::string_view key,
                                                  std::string_view doc, std::string_view path);

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_STRICT_JSON_H_
