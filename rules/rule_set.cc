// RuleSet's public factories: read a rules file, parse text or binary proto (with their size
// limits and the UTF-8 check of text), and the rules built into the binary; then Compile
// (rule_compile.cc). Evaluation is rule_evaluate.cc's.
#include "rules/rule_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "rules/default_rules_data.h"
#include "rules/rule_set_internal.h"

namespace ckptscan::rules {
namespace {

using base::AbslView;
using internal::FirstNonUtf8Field;
using internal::Invalid;

class CollectErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (errors_.size() < kMaxReported) {
      errors_.push_back(absl::StrCat(line + 1, ":", column + 1, ": ", message));
    }
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  static constexpr size_t kMaxReported = 5;
  std::vector<std::string> errors_;
};

}  // namespace

RuleSet::RuleSet(Passkey, std::unique_ptr<const Impl> impl) : impl_(std::move(impl)) {}
RuleSet::~RuleSet() = default;

const std::string& RuleSet::version() const { return impl_->proto.version(); }
const v1::RuleSet& RuleSet::proto() const { return impl_->proto; }

namespace {

// Text-format parsing shared by rule sets and overlays: the size limit, the parse (errors with
// line:column), and the UTF-8 check that the binary parser applies.
absl::Status ParseText(std::string_view text, std::string_view origin, v1::RuleSet* out) {
  if (text.size() > RuleSet::kMaxRulesBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rules ", AbslView(origin), ": ", text.size(),
                                                     " bytes exceeds the limit of ",
                                                     RuleSet::kMaxRulesBytes));
  }
  {
    google::protobuf::TextFormat::Parser parser;
    CollectErrors errors;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(std::string(text), out)) {
      return Invalid(origin, absl::StrCat("syntax error at ", errors.Joined()));
    }
  }
  // Text that the binary factory would refuse is refused here too, so that both accept the same
  // rule sets (found by tests/fuzz/rules_fuzz.cc: a name with a non-UTF-8 byte loaded from text,
  // and its proto could not be sent or re-read).
  if (std::optional<std::string> field = FirstNonUtf8Field(*out)) {
    return Invalid(origin, absl::StrCat(*field, " is not valid UTF-8"));
  }
  return absl::OkStatus();
}

// A regular file's text, at most kMaxRulesBytes. `what` names it in errors ("rules file").
absl::StatusOr<std::string> ReadRulesText(const std::string& path, std::string_view what) {
  // O_NONBLOCK: a FIFO put at the path (between two reloads of the daemon) would block open()
  // until a writer came; it is refused below as not a regular file. Regular files ignore it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat(AbslView(what), " ", path));
  absl::Cleanup closer = [fd] { ::close(fd); };
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(AbslView(what), " ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(what), " ", path, ": not a regular file"));
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat(AbslView(what), " ", path));
    }
    if (n == 0) break;
    if (static_cast<size_t>(n) > RuleSet::kMaxRulesBytes - text.size()) {
      return absl::ResourceExhaustedError(absl::StrCat(AbslView(what), " ", path,
                                                       ": larger than the limit of ",
                                                       RuleSet::kMaxRulesBytes, " bytes"));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::FromTextProto(std::string_view text,
                                                                      std::string_view origin) {
  auto impl = std::make_unique<Impl>();
  CKPT_RETURN_IF_ERROR(ParseText(text, origin, &impl->proto));
  return Compile(std::move(impl), origin);
}

absl::StatusOr<v1::RuleSet> RuleSet::ParseOverlayText(std::string_view text,
                                                      std::string_view origin) {
  v1::RuleSet overlay;
  CKPT_RETURN_IF_ERROR(ParseText(text, origin, &overlay));
  // A bare allow entry (a name, nothing else) means what `--allow NAME` means; an entry with
  // any shape, target flag or build state keeps exactly what it pins.
  for (v1::AllowedGlobal& a : *overlay.mutable_allow()) {
    if (!internal::IsBareAllowEntry(a)) continue;
    internal::TrustAsAddSafeGlobals(&a);
    if (a.note().empty()) {
      a.set_note(
          "Allowed by the user (an overlay entry naming only the global): trusted as torch's "
          "add_safe_globals trusts a name.");
    }
  }
  return overlay;
}

absl::StatusOr<v1::RuleSet> RuleSet::ReadOverlayFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRulesText(path, "rules overlay");
  if (!text.ok()) return text.status();
  return ParseOverlayText(*text, path);
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::FromBinaryProto(std::string_view bytes,
                                                                        std::string_view origin) {
  if (bytes.size() > kMaxRulesBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rules ", AbslView(origin), ": ", bytes.size(),
                                                     " bytes exceeds the limit of ",
                                                     kMaxRulesBytes));
  }
  auto impl = std::make_unique<Impl>();
  if (!impl->proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Invalid(origin, "not a binary ckptscan.v1.RuleSet");
  }
  return Compile(std::move(impl), origin);
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRulesText(path, "rules file");
  if (!text.ok()) return text.status();
  return FromTextProto(*text, path);
}

std::shared_ptr<const RuleSet> RuleSet::Default() {
  static const std::shared_ptr<const RuleSet> rules = [] {
    absl::StatusOr<std::shared_ptr<const RuleSet>> parsed =
        FromBinaryProto(internal::DefaultRulesBinary(), "default_rules.textproto (built in)");
    if (parsed.ok()) return *std::move(parsed);
    // A broken build: fail closed. With no allow entries nothing is SAFE, and the version
    // (printed in every report) says why.
    auto impl = std::make_unique<Impl>();
    impl->proto.set_version(
        absl::StrCat("INVALID (built-in rules failed to load: ", parsed.status().message(), ")"));
    return std::make_shared<const RuleSet>(Passkey(), std::move(impl));
  }();
  return rules;
}

}  // namespace ckptscan::rules
