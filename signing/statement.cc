#include "signing/statement.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "signing/encoding.h"
#include "signing/strict_json.h"

namespace ckptscan::signing {
namespace {

using base::AbslView;

constexpr std::string_view kDoc = "statement";

std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

absl::Status Bad(std::string_view path, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s %s", AbslView(kDoc), AbslView(path), AbslView(why)));
}

std::string ShardAlgorithm(uint64_t shard_size) {
  return absl::StrCat("sha256-sharded-", shard_size);
}

absl::StatusOr<uint64_t> ShardSize(const Json& v) {
  constexpr std::string_view kPath = "predicate.serialization.shard_size";
  if (v.is_number_unsigned()) {
    const uint64_t n = v.get<uint64_t>();
    if (n == 0) return Bad(kPath, "must be positive");
    return n;
  }
  if (v.is_number_integer()) return Bad(kPath, "must be positive");
  if (v.is_number_float()) {
    // model_signing's protobuf Struct stores numbers as doubles: "1000000000.0".
    const double d = v.get<double>();
    if (!(d >= 1.0) || d > 9007199254740992.0 || std::floor(d) != d) {
      return Bad(kPath, absl::StrFormat("must be a positive integer, found %g", d));
    }
    return static_cast<uint64_t>(d);
  }
  return WrongType(kDoc, kPath, "a positive integer", v);
}

}  // namespace

absl::StatusOr<std::string> WriteStatement(const Manifest& m) {
  absl::StatusOr<Sha256Digest> root = RootDigest(m.resources);
  if (!root.ok()) return root.status();
  const Serialization& s = m.serialization;
  const bool shards = s.method == Method::kShards;
  const std::string algorithm = shards ? ShardAlgorithm(s.shard_size) : std::string("sha256");

  std::string o;
  o.reserve(512 + m.resources.size() * 200);
  absl::StrAppend(&o, "{\n  \"_type\": ", Quoted(kStatementType), ",\n");
  absl::StrAppend(&o, "  \"subject\": [\n    {\n      \"name\": ", Quoted(m.model_name), ",\n");
  absl::StrAppend(&o, "      \"digest\": {\n        \"sha256\": \"", HexEncode(*root),
                  "\"\n      }\n    }\n  ],\n");
  absl::StrAppend(&o, "  \"predicateType\": ", Quoted(kPredicateType), ",\n");
  absl::StrAppend(&o, "  \"predicate\": {\n    \"serialization\": {\n");
  absl::StrAppend(&o, "      \"method\": ", Quoted(MethodName(s.method)), ",\n");
  absl::StrAppend(&o, "      \"hash_type\": \"sha256\",\n");
  if (shards) absl::StrAppend(&o, "      \"shard_size\": ", s.shard_size, ",\n");
  absl::StrAppend(&o, "      \"allow_symlinks\": ", s.allow_symlinks ? "true" : "false");
  if (!s.ignore_paths.empty()) {
    absl::StrAppend(&o, ",\n      \"ignore_paths\": [\n");
    for (size_t i = 0; i < s.ignore_paths.size(); ++i) {
      absl::StrAppend(&o, "        ", Quoted(s.ignore_paths[i]),
                      i + 1 < s.ignore_paths.size() ? ",\n" : "\n");
    }
    absl::StrAppend(&o, "      ]");
  }
  absl::StrAppend(&o, "\n    },\n");
  if (m.resources.empty()) {
    absl::StrAppend(&o, "    \"resources\": []\n");
  } else {
    absl::StrAppend(&o, "    \"resources\": [\n");
    for (size_t i = 0; i < m.resources.size(); ++i) {
      const Resource& r = m.resources[i];
      absl::StrAppend(&o, "      {\n        \"algorithm\": ", Quoted(algorithm), ",\n");
      absl::StrAppend(&o, "        \"digest\": ", Quoted(r.digest), ",\n");
      absl::StrAppend(&o, "        \"name\": ", Quoted(r.name), "\n      }",
                      i + 1 < m.resources.size() ? ",\n" : "\n");
    }
    absl::StrAppend(&o, "    ]\n");
  }
  absl::StrAppend(&o, "  }\n}");
  return o;
}

absl::StatusOr<Manifest> ParseStatement(std::string_view payload, const Limits& limits) {
  absl::StatusOr<Json> doc = ParseStrictJson(payload, "DSSE payload (in-toto statement)", limits);
  if (!doc.ok()) return doc.status();
  const Json& st = *doc;
  if (!st.is_object()) return WrongType(kDoc, "the statement", "an object", st);

  absl::StatusOr<const std::string*> type = RequiredString(st, "_type", kDoc, "_type");
  if (!type.ok()) return type.status();
  if (**type != kStatementType) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: unsupported _type %s (expected %s)",
                                                      AbslView(kDoc), AbslView(Esc(Quoted(**type))),
                                                      AbslView(Quoted(kStatementType))));
  }
  absl::StatusOr<const std::string*> ptype =
      RequiredString(st, "predicateType", kDoc, "predicateType");
  if (!ptype.ok()) return ptype.status();
  if (**ptype == kPredicateTypeV01) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s: unsupported predicateType %s: the deprecated model_signing 0.2 format is not "
        "supported (re-sign with model_signing >= 1.0 or ckptscan)",
        AbslView(kDoc), AbslView(Quoted(kPredicateTypeV01))));
  }
  if (**ptype != kPredicateType) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unsupported predicateType %s (expected %s)", AbslView(kDoc),
                        AbslView(Esc(Quoted(**ptype))), AbslView(Quoted(kPredicateType))));
  }

  Manifest m;
  // subject: exactly one {name, digest{sha256}}.
  absl::StatusOr<const Json*> subjects = RequiredArray(st, "subject", kDoc, "subject");
  if (!subjects.ok()) return subjects.status();
  if ((*subjects)->size() != 1) {
    return Bad("subject",
               absl::StrFormat("must hold exactly one entry, found %d", (*subjects)->size()));
  }
  const Json& subject = (**subjects)[0];
  if (!subject.is_object()) return WrongType(kDoc, "subject[0]", "an object", subject);
  absl::StatusOr<const std::string*> name =
      RequiredString(subject, "name", kDoc, "subject[0].name");
  if (!name.ok()) return name.status();
  if ((*name)->empty() || (*name)->size() > limits.max_name_bytes) {
    return Bad("subject[0].name", "must be a non-empty string of at most Limits::max_name_bytes");
  }
  m.model_name = **name;
  absl::StatusOr<const Json*> sdigest =
      RequiredObject(subject, "digest", kDoc, "subject[0].digest");
  if (!sdigest.ok()) return sdigest.status();
  absl::StatusOr<const std::string*> root_hex =
      RequiredString(**sdigest, "sha256", kDoc, "subject[0].digest.sha256");
  if (!root_hex.ok()) return root_hex.status();
  if (!IsSha256Hex(**root_hex)) {
    return Bad("subject[0].digest.sha256", "is not 64 lowercase hex digits");
  }

  absl::StatusOr<const Json*> predicate = RequiredObject(st, "predicate", kDoc, "predicate");
  if (!predicate.ok()) return predicate.status();
  absl::StatusOr<const Json*> ser =
      RequiredObject(**predicate, "serialization", kDoc, "predicate.serialization");
  if (!ser.ok()) return ser.status();

  // serialization
  absl::StatusOr<const std::string*> method =
      RequiredString(**ser, "method", kDoc, "predicate.serialization.method");
  if (!method.ok()) return method.status();
  if (**method == "files") {
    m.serialization.method = Method::kFiles;
  } else if (**method == "shards") {
    m.serialization.method = Method::kShards;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: predicate.serialization.method %s is not supported (expected \"files\" or "
        "\"shards\")",
        AbslView(kDoc), AbslView(Esc(Quoted(**method)))));
  }
  absl::StatusOr<const std::string*> hash_type =
      RequiredString(**ser, "hash_type", kDoc, "predicate.serialization.hash_type");
  if (!hash_type.ok()) return hash_type.status();
  if (**hash_type != "sha256") {
    return absl::UnimplementedError(absl::StrFormat(
        "%s: predicate.serialization.hash_type %s is not supported (only \"sha256\")",
        AbslView(kDoc), AbslView(Esc(Quoted(**hash_type)))));
  }
  const Json* symlinks = FindField(**ser, "allow_symlinks");
  if (symlinks == nullptr) return MissingField(kDoc, "predicate.serialization.allow_symlinks");
  if (!symlinks->is_boolean()) {
    return WrongType(kDoc, "predicate.serialization.allow_symlinks", "a boolean", *symlinks);
  }
  m.serialization.allow_symlinks = symlinks->get<bool>();
  const Json* shard_size = FindField(**ser, "shard_size");
  if (m.serialization.method == Method::kShards) {
    if (shard_size == nullptr) return MissingField(kDoc, "predicate.serialization.shard_size");
    absl::StatusOr<uint64_t> n = ShardSize(*shard_size);
    if (!n.ok()) return n.status();
    m.serialization.shard_size = *n;
  } else if (shard_size != nullptr) {
    return Bad("predicate.serialization.shard_size", "must be absent for method \"files\"");
  }
  if (const Json* ignore = FindField(**ser, "ignore_paths"); ignore != nullptr) {
    if (!ignore->is_array()) {
      return WrongType(kDoc, "predicate.serialization.ignore_paths", "an array", *ignore);
    }
    if (ignore->size() > limits.max_ignore_paths) {
      return base::LimitError(
          absl::StrFormat("%s: predicate.serialization.ignore_paths has %d entries, over "
                          "Limits::max_ignore_paths (%d)",
                          AbslView(kDoc), ignore->size(), limits.max_ignore_paths),
          "max_ignore_paths", limits.max_ignore_paths);
    }
    for (size_t i = 0; i < ignore->size(); ++i) {
      const Json& p = (*ignore)[i];
      const std::string path = absl::StrFormat("predicate.serialization.ignore_paths[%d]", i);
      if (!p.is_string()) return WrongType(kDoc, path, "a string", p);
      const std::string& v = p.get_ref<const std::string&>();
      if (v == "." || v.empty()) return Bad(path, "would exclude the whole model");
      if (absl::Status s = CheckRelativePath(v, absl::StrCat(AbslView(kDoc), ": ", path), limits);
          !s.ok()) {
        return s;
      }
      m.serialization.ignore_paths.push_back(v);
    }
  }

  // resources
  absl::StatusOr<const Json*> resources =
      RequiredArray(**predicate, "resources", kDoc, "predicate.resources");
  if (!resources.ok()) return resources.status();
  if ((*resources)->size() > limits.max_resources) {
    return base::LimitError(
        absl::StrFormat("%s: predicate.resources has %d entries, over Limits::max_resources (%d)",
                        AbslView(kDoc), (*resources)->size(), limits.max_resources),
        "max_resources", limits.max_resources);
  }
  const bool shards = m.serialization.method == Method::kShards;
  const std::string shard_algorithm = ShardAlgorithm(m.serialization.shard_size);
  m.resources.reserve((*resources)->size());
  for (size_t i = 0; i < (*resources)->size(); ++i) {
    const Json& r = (**resources)[i];
    const std::string path = absl::StrFormat("predicate.resources[%d]", i);
    if (!r.is_object()) return WrongType(kDoc, path, "an object", r);
    absl::StatusOr<const std::string*> rname = RequiredString(r, "name", kDoc, path + ".name");
    if (!rname.ok()) return rname.status();
    absl::StatusOr<const std::string*> alg =
        RequiredString(r, "algorithm", kDoc, path + ".algorithm");
    if (!alg.ok()) return alg.status();
    absl::StatusOr<const std::string*> digest = RequiredString(r, "digest", kDoc, path + ".digest");
    if (!digest.ok()) return digest.status();
    if (**alg != "sha256" && !(shards && **alg == shard_algorithm)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s.algorithm %s does not match hash_type \"sha256\"%s", AbslView(kDoc), path,
          AbslView(Esc(Quoted(**alg))),
          shards ? absl::StrCat(" (or \"", shard_algorithm, "\")") : std::string()));
    }
    m.resources.push_back(Resource{**rname, **digest});
  }
  if (absl::Status s = ValidateManifest(m, limits); !s.ok()) {
    return base::Reworded(s, absl::StrCat(AbslView(kDoc), ": ", s.message()));
  }
  absl::StatusOr<Sha256Digest> root = RootDigest(m.resources);
  if (!root.ok()) return root.status();
  if (HexEncode(*root) != **root_hex) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: subject[0].digest.sha256 %s does not match the resources (they hash to %s): the "
        "statement is inconsistent",
        AbslView(kDoc), **root_hex, HexEncode(*root)));
  }
  return m;
}

}  // namespace ckptscan::signing
