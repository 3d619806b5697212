#include "sandbox/job.h"

#include <cstddef>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckptscan::sandbox {
namespace {

// A job is a few hundred bytes; anything much larger is not one of ours.
constexpr size_t kMaxJobArgBytes = 64 << 10;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string EncodeJobArg(const worker::v1::Job& job) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string bytes = job.SerializeAsString();
  std::string arg(kJobFlag);
  arg.reserve(arg.size() + 2 * bytes.size());
  for (unsigned char b : bytes) {
    arg.push_back(kHex[b >> 4]);
    arg.push_back(kHex[b & 15]);
  }
  return arg;
}

absl::StatusOr<worker::v1::Job> DecodeJobArg(std::string_view arg) {
  if (arg.substr(0, kJobFlag.size()) != kJobFlag || arg.size() > kMaxJobArgBytes) {
    return absl::InvalidArgumentError("expected --job=HEX");
  }
  arg.remove_prefix(kJobFlag.size());
  if (arg.size() % 2 != 0) return absl::InvalidArgumentError("--job: odd number of hex digits");
  std::string bytes;
  bytes.reserve(arg.size() / 2);
  for (size_t i = 0; i < arg.size(); i += 2) {
    const int hi = HexValue(arg[i]);
    const int lo = HexValue(arg[i + 1]);
    if (hi < 0 || lo < 0) return absl::InvalidArgumentError("--job: not lowercase hex");
    bytes.push_back(static_cast<char>(hi << 4 | lo));
  }
  worker::v1::Job job;
  if (!job.ParseFromString(bytes)) return absl::InvalidArgumentError("--job: not a Job");
  if (job.mode() != worker::v1::Job::MODE_SCAN && job.mode() != worker::v1::Job::MODE_DISASM &&
      job.mode() != worker::v1::Job::MODE_CONVERT) {
    return absl::InvalidArgumentError("--job: unknown mode");
  }
  // An output descriptor is handed for a conversion, and only then.
  if ((job.mode() == worker::v1::Job::MODE_CONVERT) != job.jail().output()) {
    return absl::InvalidArgumentError("--job: an output descriptor goes with MODE_CONVERT only");
  }
  return job;
}

void LimitsToProto(const pickle::Limits& l, worker::v1::VmLimits* out) {
  out->set_max_opcodes(l.max_opcodes);
  out->set_max_stack_depth(l.max_stack_depth);
  out->set_max_mark_depth(l.max_mark_depth);
  out->set_max_memo_entries(l.max_memo_entries);
  out->set_max_memo_index(l.max_memo_index);
  out->set_max_nodes(l.max_nodes);
  out->set_max_expanded_values(l.max_expanded_values);
  out->set_max_string_bytes(l.max_string_bytes);
  out->set_max_line_bytes(l.max_line_bytes);
  out->set_max_total_bytes(l.max_total_bytes);
  out->set_max_kept_string(l.max_kept_string);
  out->set_max_pickles(l.max_pickles);
  out->set_max_nested_depth(l.max_nested_depth);
  out->set_max_nested_bytes(l.max_nested_bytes);
  out->set_max_value_depth(l.max_value_depth);
}

pickle::Limits LimitsFromProto(const worker::v1::VmLimits& in) {
  pickle::Limits l;
  l.max_opcodes = in.max_opcodes();
  l.max_stack_depth = in.max_stack_depth();
  l.max_mark_depth = in.max_mark_depth();
  l.max_memo_entries = in.max_memo_entries();
  l.max_memo_index = in.max_memo_index();
  l.max_nodes = in.max_nodes();
  l.max_expanded_values = in.max_expanded_values();
  l.max_string_bytes = in.max_string_bytes();
  l.max_line_bytes = in.max_line_bytes();
  l.max_total_bytes = in.max_total_bytes();
  l.max_kept_string = in.max_kept_string();
  l.max_pickles = in.max_pickles();
  l.max_nested_depth = in.max_nested_depth();
  l.max_nested_bytes = in.max_nested_bytes();
  l.max_value_depth = in.max_value_depth();
  return l;
}

void FormatLimitsToProto(const formats::FormatLimitSettings& settings, worker::v1::Job* job) {
  for (const formats::FormatLimitSetting& s : settings) {
    worker::v1::FormatLimit* p = job->add_format_limits();
    p->set_name(std::string(formats::FormatLimits()[static_cast<size_t>(s.limit)].name));
    p->set_value(s.value);
  }
}

JailConfig JailConfigFromJob(const worker::v1::Job& job) {
  JailConfig c;
  c.address_space_bytes = job.jail().address_space_bytes();
  c.cpu_seconds = job.jail().cpu_seconds();
  c.parent_pid = job.jail().parent_pid();
  c.output = job.jail().output();
  c.output_bytes = c.output ? job.jail().output_bytes() : 0;
  c.unjailed = job.jail().unjailed();
  return c;
}

worker::v1::JailLayers LayersToProto(const JailLayers& l) {
  worker::v1::JailLayers p;
  p.set_closed_fds(l.closed_fds);
  p.set_die_with_parent(l.die_with_parent);
  p.set_non_dumpable(l.non_dumpable);
  p.set_no_new_privs(l.no_new_privs);
  p.set_user_ns(l.user_ns);
  p.set_net_ns(l.net_ns);
  p.set_ipc_ns(l.ipc_ns);
  p.set_uts_ns(l.uts_ns);
  p.set_mount_ns(l.mount_ns);
  p.set_pid_ns(l.pid_ns);
  p.set_rlimits(l.rlimits);
  p.set_seccomp(l.seccomp);
  return p;
}

std::string DescribeLayers(const worker::v1::JailLayers& l) {
  std::vector<const char*> on;
  if (l.seccomp()) on.push_back("seccomp");
  if (l.rlimits()) on.push_back("rlimits");
  if (l.no_new_privs()) on.push_back("no_new_privs");
  if (l.non_dumpable()) on.push_back("non-dumpable");
  if (l.die_with_parent()) on.push_back("die-with-parent");
  if (l.closed_fds()) on.push_back("closed fds");
  std::vector<const char*> ns;
  if (l.user_ns()) ns.push_back("user");
  if (l.net_ns()) ns.push_back("net");
  if (l.ipc_ns()) ns.push_back("ipc");
  if (l.uts_ns()) ns.push_back("uts");
  if (l.mount_ns()) ns.push_back("mount");
  if (l.pid_ns()) ns.push_back("pid");
  return absl::StrCat(absl::StrJoin(on, ", "),
                      "; namespaces: ", ns.empty() ? std::string("none") : absl::StrJoin(ns, " "));
}

}  // namespace ckptscan::sandbox
