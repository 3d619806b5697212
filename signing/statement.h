// The in-toto Statement v1 that an OMS bundle signs (the DSSE payload), written and read.
//
// WriteStatement produces model_signing's layout byte for byte: protobuf-JSON style with a
// two-space indent, fields in the order model_signing 1.0 emits them (_type, subject,
// predicateType, predicate{serialization{method, hash_type, [shard_size,] allow_symlinks,
// [ignore_paths]}, resources[{algorithm, digest, name}]}), no trailing newline. Shard
// resources carry algorithm "sha256-sharded-<shard_size>" as model_signing writes them.
//
// ParseStatement reads any key order (payload bytes are opaque to the signature) and checks
// everything OMS defines; see docs/signing.md for the list. Thread-safe (no shared state).
#ifndef CKPTSCAN_SIGNING_STATEMENT_H_
#define CKPTSCAN_SIGNING_STATEMENT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "signing/limits.h"
#include "signing/manifest.h"

namespace ckptscan::signing {

inline constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
inline constexpr std::string_view kPredicateType = "https://model_signing/signature/v1.0";
// model_signing 0.2's predicate: verify-only upstream; not supported here.
inline constexpr std::string_view kPredicateTypeV01 = "https://model_signing/Digests/v0.1";

// `manifest` must pass ValidateManifest and be in SortResources order (Sign ensures both).
absl::StatusOr<std::string> WriteStatement(const Manifest& manifest);

// Parses and validates a statement; returns the signed manifest (resources in the listed
// order). Checks the subject digest against the resources.
absl::StatusOr<Manifest> ParseStatement(std::string_view payload, const Limits& limits);

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_STATEMENT_H_
