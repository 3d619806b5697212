#include "sandbox/worker/worker.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/pages.h"
#include "base/strings.h"
#include "core/convert/convert.h"
#include "core/formats/read_options_limits.h"
#include "sandbox/frame.h"
#include "sandbox/job.h"
#include "sandbox/protocol.h"
#include "sandbox/worker/extract_facts.h"
#include "sandbox/worker/facts_encoder.h"
#include "sandbox/worker/trace_listing.h"

namespace ckptscan::sandbox {
namespace {

// MODE_CONVERT: plans and writes the safetensors bytes to descriptor 3. The trusted side
// decides whether they are kept (the verdict) and re-validates them; an error is returned
// for the result frame.
absl::Status Convert(std::string_view input, const FileFacts& facts,
                     const worker::v1::ConvertSpec& spec, uint64_t output_bytes) {
  if (facts.shard_index.present) {
    return absl::FailedPreconditionError("a sharded checkpoint's index: its shards convert");
  }
  absl::StatusOr<convert::Plan> plan = convert::PlanFromSpec(facts, spec);
  if (!plan.ok()) return plan.status();
  // The job's allowance (its RLIMIT_FSIZE): a plan over it writes nothing rather than die of
  // SIGXFSZ half-way (a few bytes of input can describe a tensor of gigabytes: a stride-0 view).
  if (plan->header.file_size > output_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("the output would be ",
                                                     plan->header.file_size, " bytes, over the ",
                                                     output_bytes, " this job may write"));
  }
  convert::FdSink sink(kOutputFd, "write to the output descriptor");
  // `input` is the read-only mapping of descriptor 0: what was copied leaves the resident set.
  return convert::WriteSafetensors(input, facts, *plan, sink, 1 << 20, base::DropMappedPages);
}

// Nothing in the jail may write to stderr (descriptor 2 is not handed; write(2) is a
// violation), so the default terminate handler, which prints, is replaced.
[[noreturn]] void Terminate() { ::_exit(kExitInternal); }

int RunJob(const worker::v1::Job& job, const JailLayers& layers, uint64_t input_size) {
  std::string_view input;
  if (input_size > 0) {
    void* addr = ::mmap(nullptr, input_size, PROT_READ, MAP_PRIVATE, kInputFd, 0);
    if (addr == MAP_FAILED) return errno == ENOMEM ? kExitOutOfMemory : kExitInput;
    input = std::string_view(static_cast<const char*>(addr), input_size);
  }
  worker::v1::Result result;
  const pickle::Limits limits = LimitsFromProto(job.vm_limits());
  formats::ReadOptions options;
  for (const worker::v1::FormatLimit& l : job.format_limits()) {
    if (!formats::SetFormatLimit(l.name(), l.value(), &options).ok()) return kExitUsage;
  }
  FileFacts facts;
  if (job.mode() == worker::v1::Job::MODE_DISASM) {
    std::string* trace = result.mutable_trace();
    bool truncated = false;
    TraceListing listing([&](std::string_view text) {
      if (truncated) return;
      if (text.size() > kMaxTraceBytes - trace->size()) {
        truncated = true;
        return;
      }
      trace->append(text.data(), text.size());
    });
    const pickle::TraceSink sink = listing.AsSink();
    facts = ExtractFacts(input, limits, options, &sink, job.file_name());
    result.set_trace_truncated(truncated);
  } else {
    facts = ExtractFacts(input, limits, options, nullptr, job.file_name());
  }
  if (job.mode() == worker::v1::Job::MODE_CONVERT) {
    if (!job.jail().output()) return kExitUsage;
    if (absl::Status s = Convert(input, facts, job.convert(), job.jail().output_bytes());
        !s.ok()) {
      result.set_convert_error(std::string(s.message()));
    }
  }
  if (CountFrameValues(facts) > kMaxFrameValues) return kExitFrameTooLarge;
  EncodeFacts(facts, result.mutable_facts());
  *result.mutable_layers() = LayersToProto(layers);
  // Checked before serializing: protobuf refuses (and logs) messages over 2 GiB.
  if (result.ByteSizeLong() > kMaxFrameBytes) return kExitFrameTooLarge;
  const std::string payload = result.SerializeAsString();
  if (!WriteFrame(kResultFd, payload).ok()) return kExitInternal;
  return kExitOk;
}

}  // namespace

int RunJobInJail(const worker::v1::Job& job, const JailLayers& layers, uint64_t input_size) {
  try {
    return RunJob(job, layers, input_size);
  } catch (const std::bad_alloc&) {
    return kExitOutOfMemory;  // RLIMIT_AS: fail cleanly, as a limit
  }
}

int WorkerJob(int argc, char** argv, const JailEntry& enter) {
  if (argc != 2) return kExitUsage;
  absl::StatusOr<worker::v1::Job> job = DecodeJobArg(argv[1]);
  if (!job.ok()) return kExitUsage;
  // The input's size, before the jail (fstat is not on the allowlist: newfstatat could name
  // any path). Metadata only: no byte of input is read before the jail is up.
  struct stat st;
  if (::fstat(kInputFd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) return kExitInput;
  const JailConfig config = JailConfigFromJob(*job);
  // --no-sandbox (debugging only, set by the CLI's user): no layer, and none reported.
  if (config.unjailed) return RunJobInJail(*job, JailLayers{}, static_cast<uint64_t>(st.st_size));
  absl::StatusOr<JailLayers> layers = enter(config);
  if (!layers.ok()) {
    return absl::IsUnavailable(layers.status()) ? kExitParentGone : kExitJailSetup;
  }
  return RunJobInJail(*job, *layers, static_cast<uint64_t>(st.st_size));
}

int WorkerMain(int argc, char** argv) {
  std::set_terminate(Terminate);
  if (argc >= 2 && std::string_view(argv[1]).starts_with(kForkServerFlag)) {
    return ForkServer::Serve(argc, argv, WorkerJob);
  }
  return WorkerJob(argc, argv, EnterJail);
}

}  // namespace ckptscan::sandbox
