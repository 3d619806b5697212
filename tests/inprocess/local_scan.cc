#include "tests/inprocess/local_scan.h"

#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/mapped_file.h"
#include "base/pages.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "core/convert/convert.h"
#include "rules/rule_set.h"
#include "sandbox/worker/trace_listing.h"

namespace ckptscan::inprocess {

using app::ConvertRequest;
using app::ConvertResult;
using app::ConvertShardSet;
using app::JudgeFacts;
using app::OpenOutputDir;
using app::OutputDir;
using app::OutputFile;
using app::PlanCheck;
using app::SpecFor;
using app::ValidateAndPublish;
using base::BackgroundSha256;
using base::MappedFile;
using base::OpenRegularFile;
using base::Sha256Hex;
using sandbox::ExtractFacts;
using sandbox::FileFacts;
using sandbox::TraceListing;

absl::StatusOr<v1::FileReport> ScanFileInProcess(const std::string& path,
                                                 const rules::RuleSet& rules,
                                                 const pickle::Limits& limits, bool sha256_on) {
  CKPT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  std::string sha256;
  if (sha256_on) {
    CKPT_ASSIGN_OR_RETURN(sha256, Sha256Hex(file.bytes()));
  }
  // Worker half (the jail runs it in ckptscan-worker), then trusted half.
  const FileFacts facts = ExtractFacts(file.bytes(), limits);
  v1::FileReport report = JudgeFacts(facts, rules);
  report.set_path(path);
  report.set_sha256(std::move(sha256));
  report.set_size(file.bytes().size());
  return report;
}

namespace {

absl::Status WriteConversion(std::string_view input, const FileFacts& facts,
                             const ConvertRequest& request, const std::string& sha256,
                             const PlanCheck& check, ConvertResult* result) {
  CKPT_ASSIGN_OR_RETURN(convert::Plan plan, convert::PlanFromSpec(facts, SpecFor(request, sha256)));
  if (check) CKPT_RETURN_IF_ERROR(check(plan));
  CKPT_ASSIGN_OR_RETURN(OutputDir dir, OpenOutputDir(request));
  CKPT_ASSIGN_OR_RETURN(OutputFile out, OutputFile::CreateAt(dir.fd, dir.name, request.output));
  convert::FdSink sink(out.fd(), "write the output");
  // `input` is MappedFile's read-only mapping: what was copied leaves the resident set.
  CKPT_RETURN_IF_ERROR(
      convert::WriteSafetensors(input, facts, plan, sink, 1 << 20, base::DropMappedPages));
  CKPT_ASSIGN_OR_RETURN(*result->report.mutable_conversion(),
                        ValidateAndPublish(out, plan, request));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ConvertResult> ConvertFileInProcess(const ConvertRequest& request,
                                                   const rules::RuleSet& rules,
                                                   const pickle::Limits& limits,
                                                   const PlanCheck& check) {
  CKPT_ASSIGN_OR_RETURN(base::UniqueFd fd, OpenRegularFile(request.input));
  CKPT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Map(fd.get(), request.input));
  // Hashed by pread (not through the mapping, whose pages would stay resident) on another
  // thread while the facts are extracted.
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<BackgroundSha256> hash,
                        BackgroundSha256::Start(fd.get(), file.bytes().size()));
  const FileFacts facts = ExtractFacts(file.bytes(), limits);
  absl::StatusOr<std::string> digest = hash->Wait();
  if (!digest.ok()) return digest.status();
  const std::string sha256 = *std::move(digest);
  ConvertResult result;
  result.report = JudgeFacts(facts, rules);
  result.report.set_path(request.input);
  result.report.set_sha256(sha256);
  result.report.set_size(file.bytes().size());
  if (result.report.verdict() != v1::VERDICT_SAFE) {
    result.status =
        absl::FailedPreconditionError(absl::StrCat("not converted: the verdict is not SAFE"));
    return result;
  }
  if (facts.shard_index.present) {
    if (!request.allow_index) {
      result.status = absl::FailedPreconditionError("a shard is itself an index");
      return result;
    }
    ConvertShardSet(
        request, result.report, facts.shard_index,
        [&](const ConvertRequest& r, const PlanCheck& c) {
          return ConvertFileInProcess(r, rules, limits, c);
        },
        &result);
    return result;
  }
  result.status = WriteConversion(file.bytes(), facts, request, sha256, check, &result);
  return result;
}

FileFacts ExtractFactsWithListing(std::string_view bytes, const pickle::Limits& limits,
                                  const std::function<void(std::string_view)>& out, bool* listed) {
  TraceListing listing(out);
  const pickle::TraceSink trace = listing.AsSink();
  FileFacts facts = ExtractFacts(bytes, limits, &trace);
  *listed = listing.started();
  return facts;
}

}  // namespace ckptscan::inprocess
