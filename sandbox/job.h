// The job a worker is started with, and the small conversions both sides share.
//
// The trusted side serializes a ckptscan.worker.v1.Job and passes it hex-encoded as the
// worker's only argument ("--job=HEX"); the worker decodes it before it enters the jail. The
// job holds no secret (argv is visible in /proc) and nothing from the scanned file.
// Thread-safe: pure functions.
#ifndef CKPTSCAN_SANDBOX_JOB_H_
#define CKPTSCAN_SANDBOX_JOB_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckptscan/worker/v1/worker.pb.h"
#include "core/formats/format_limits.h"
#include "core/pickle/limits.h"
#include "sandbox/jail_types.h"

namespace ckptscan::sandbox {

inline constexpr std::string_view kJobFlag = "--job=";

// "--job=" followed by the job's serialization in lowercase hex.
std::string EncodeJobArg(const worker::v1::Job& job);
// InvalidArgument unless `arg` is exactly what EncodeJobArg makes of a Job with a mode.
absl::StatusOr<worker::v1::Job> DecodeJobArg(std::string_view arg);

void LimitsToProto(const pickle::Limits& limits, worker::v1::VmLimits* out);
pickle::Limits LimitsFromProto(const worker::v1::VmLimits& in);

// The settings as the job carries them (by name), and back onto `options`: InvalidArgument for
// an unknown name or a value out of range.
void FormatLimitsToProto(const formats::FormatLimitSettings& settings, worker::v1::Job* job);

JailConfig JailConfigFromJob(const worker::v1::Job& job);
worker::v1::JailLayers LayersToProto(const JailLayers& layers);
// "seccomp, rlimits, no_new_privs, non-dumpable, die-with-parent, closed fds; namespaces:
// user net ipc uts mount pid" (or "namespaces: none").
std::string DescribeLayers(const worker::v1::JailLayers& layers);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_JOB_H_
