// libFuzzer target: the whole worker-side path of a scan — format detection by content and
// every format reader (core/formats/read_file.h; sandbox::ExtractFacts is exactly formats::ReadFile
// with default ReadOptions, called here with small limits and with the disassembler's trace
// sink) — then the jail crossing (EncodeFacts -> DecodeFacts) and the trusted side's verdict
// (JudgeFacts with the default rules).
//
// Invariants: the facts are consistent (facts_check.h); whatever an honest worker extracts,
// the trusted side's decoder accepts, unchanged (re-encoding gives the same bytes); and the
// fail-closed rule: nothing is SAFE with an error, a pickle that did not parse whole, a
// must-flag container anomaly or a non-SAFE finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "app/judge.h"
#include "core/formats/read_file.h"
#include "core/pickle/vm.h"
#include "rules/rule_set.h"
#include "sandbox/facts_decoder.h"
#include "sandbox/worker/facts_encoder.h"
#include "tests/fuzz/facts_check.h"

namespace {

// Containers need room for a directory and a few members; the fixtures are at most ~20 KiB
// (the 54 KiB expectations files are JSON, read as a "json"/"hf-index" format).
constexpr size_t kMaxInputBytes = 256 << 10;

ckptscan::formats::ReadOptions SmallOptions() {
  ckptscan::formats::ReadOptions o;
  o.zip.max_entries = 1024;
  o.zip.max_central_directory_bytes = 256 << 10;
  o.zip.max_member_bytes = 4 << 20;
  o.zip.max_total_uncompressed = 64 << 20;
  o.zip.max_anomalies_per_kind = 8;
  o.tar.max_members = 1024;
  o.tar.max_records = 10'000;
  o.tar.max_dims = 64;
  o.index.max_bytes = kMaxInputBytes;
  o.index.max_entries = 10'000;
  o.index.max_depth = 32;
  o.max_container_depth = 2;
  return o;
}

std::string Serialized(const ckptscan::torch::FileFacts& facts) {
  ckptscan::worker::v1::FileFacts msg;
  ckptscan::sandbox::EncodeFacts(facts, &msg);
  std::string out;
  CKPT_FUZZ_CHECK(msg.SerializeToString(&out), "cannot serialize");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const pickle::Limits limits = fuzz::SmallPickleLimits();
  static const pickle::Vm vm(limits);
  static const std::shared_ptr<const rules::RuleSet> rule_set = rules::RuleSet::Default();

  formats::ReadOptions options = SmallOptions();
  uint64_t traced = 0;
  const pickle::TraceSink trace = [&traced](const pickle::TraceEvent& e) {
    traced += 1 + e.arg.size() + e.note.size();
  };
  options.trace = &trace;
  const torch::FileFacts facts = formats::ReadFile(bytes, vm, options);
  fuzz::CheckFileFacts(facts, size, limits);

  // Across the jail: the decoder accepts every honest worker's facts, and nothing changes.
  worker::v1::FileFacts encoded;
  sandbox::EncodeFacts(facts, &encoded);
  absl::StatusOr<torch::FileFacts> decoded = sandbox::DecodeFacts(encoded);
  CKPT_FUZZ_CHECK(decoded.ok(), "the decoder refuses honest facts: %s",
                  decoded.status().ToString().c_str());
  CKPT_FUZZ_CHECK(Serialized(*decoded) == Serialized(facts), "facts change across the jail");

  // The trusted side's verdict: fail closed.
  const v1::FileReport report = app::JudgeFacts(*decoded, *rule_set);
  CKPT_FUZZ_CHECK(report.verdict() != v1::VERDICT_UNSPECIFIED, "no verdict");
  if (report.verdict() == v1::VERDICT_SAFE) {
    CKPT_FUZZ_CHECK(report.errors_size() == 0 && facts.errors.empty(), "SAFE with errors");
    for (const torch::MemberFacts& m : facts.members) {
      CKPT_FUZZ_CHECK(!m.stream.stream_error.has_value(), "SAFE with a stream error");
      for (size_t i = 0; i < m.stream.pickles.size(); ++i) {
        const pickle::PickleFacts& p = m.stream.pickles[i];
        // Another loader's reading may end where that loader ends (judge_facts.cc).
        if (m.alternative && pickle::AlternativeStopIsClean(m.stream, i)) continue;
        CKPT_FUZZ_CHECK(!p.error.has_value(), "SAFE, but a pickle in %s stopped at %llu: %s",
                        m.member.c_str(), (unsigned long long)p.error->offset,
                        p.error->message.c_str());
      }
    }
    for (const torch::ContainerAnomaly& a : facts.anomalies) {
      CKPT_FUZZ_CHECK(!a.must_flag, "SAFE with a must-flag anomaly %s", a.kind.c_str());
    }
    for (const v1::Finding& f : report.findings()) {
      CKPT_FUZZ_CHECK(f.verdict() == v1::VERDICT_SAFE, "SAFE with a %s finding",
                      f.rule_id().c_str());
    }
  }
  return 0;
}
