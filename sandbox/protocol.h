// The contract between the trusted side and ckptscan-worker: descriptor numbers, exit codes,
// the result frame and its limits. docs/sandbox.md explains each entry.
//
// Descriptors the worker is handed (posix_spawn_file_actions_adddup2 in sandbox/spawner.cc);
// it has no other (the spawner closes the rest, the worker closes them again):
//   0  kInputFd   the job's input, read-only (a regular file or a sealed memfd)
//   1  kResultFd  the write end of the result pipe: exactly one frame, then EOF
//   3  kOutputFd  the output file when converting (MODE_CONVERT; an unlinked file)
// Descriptor 2 is deliberately not handed: nothing in the jail may log.
//
// Frame: 8-byte little-endian payload length, then the payload (a serialized
// ckptscan.worker.v1.Result). The length is at most kMaxFrameBytes.
#ifndef CKPTSCAN_SANDBOX_PROTOCOL_H_
#define CKPTSCAN_SANDBOX_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ckptscan::sandbox {

inline constexpr int kInputFd = 0;
inline constexpr int kResultFd = 1;
inline constexpr int kOutputFd = 3;

inline constexpr size_t kFrameHeaderBytes = 8;
// Largest frame payload the trusted side accepts. Facts of real checkpoints are far smaller
// (tens of bytes per value); the cap bounds what a compromised worker can make the trusted
// side parse and hold (see docs/sandbox.md, "Frame").
inline constexpr uint64_t kMaxFrameBytes = 64ull << 20;
// Most values (errors, members, pickles, graph nodes, globals, call sites) one frame may hold.
// Each costs the trusted side ~350 bytes while decoding but can take 2 bytes on the wire, so
// this, not kMaxFrameBytes, bounds the decoder's memory (~3 GB at worst). Facts of real
// checkpoints hold thousands to hundreds of thousands.
inline constexpr uint64_t kMaxFrameValues = 8'000'000;
// Largest opcode listing a disasm job returns (cut with a note past it).
inline constexpr size_t kMaxTraceBytes = 16u << 20;

// The fork server (sandbox/worker/fork_server.h, sandbox/fork_client.h ForkClient):
// `ckptscan-worker
// --fork-server=PID` is handed one end of a socketpair(AF_UNIX, SOCK_SEQPACKET) as kForkServerFd
// and no other descriptor. A request is one message: the job's arguments (argv[1..] of a
// per-job worker), each ended by a NUL, at most kMaxForkRequestBytes, with SCM_RIGHTS
// descriptors in this order: input, result pipe write end, status pipe write end, and the output
// when the job converts. The reply is one message: a ForkReply, and when `error` is 0, the
// child's pidfd (SCM_RIGHTS). The server writes the child's wait status (4 bytes, native
// endianness) to the status pipe once it has reaped the child, then closes it.
inline constexpr std::string_view kForkServerFlag = "--fork-server=";
inline constexpr int kForkServerFd = 3;
inline constexpr size_t kMaxForkRequestBytes = 64u << 10;
inline constexpr int kForkRequestFds = 3;  // + 1 with an output
struct ForkReply {
  int32_t error = 0;  // 0, or the errno of what failed (EINVAL: a malformed request)
};
inline constexpr size_t kWaitStatusBytes = sizeof(int32_t);
// Under a root daemon each forked job runs under a uid (and gid) of its own:
// kJobUidBase + range * kJobUidsPerHelper + slot. A helper takes its range from its pid (outside
// its pid namespace) modulo kJobUids / kJobUidsPerHelper, and gives each job it runs a slot no
// other running job of it holds (at most kJobUidsPerHelper jobs at once; one more is refused,
// EAGAIN). No file, process or user of the host is expected to hold these ids (above 2^31 -
// 2^24: what systemd and distributions never allocate), so a job can signal, ptrace or open
// nothing of root's, of its helper's, or of another job's.
inline constexpr uint32_t kJobUidBase = 0x7f000000u;
inline constexpr uint32_t kJobUids = 1u << 16;
inline constexpr uint32_t kJobUidsPerHelper = 256;
// The name (PR_SET_NAME, /proc/PID/comm) of a fork server's job process, so that ps and tests
// tell jobs from the server (whose argv they share).
inline constexpr char kForkedJobName[] = "ckptscan-job";

// How a worker ends when it writes no frame. Anything else that is not 0 is a failure too.
enum WorkerExit : int {
  kExitOk = 0,               // one whole frame written
  kExitUsage = 100,          // bad arguments (a bug in the spawner, never the file)
  kExitJailSetup = 101,      // a jail layer that must hold could not be set up
  kExitParentGone = 102,     // the spawner died before die-with-parent was armed
  kExitOutOfMemory = 103,    // an allocation failed under RLIMIT_AS
  kExitFrameTooLarge = 104,  // the facts do not fit in kMaxFrameBytes / kMaxFrameValues
  kExitInput = 105,          // the input descriptor could not be mapped
  kExitInternal = 106,       // std::terminate (an escaped exception)
};

// List items (repeated scalars) charged as one value (~400 decoded bytes, kDecodedBytesPerValue
// in sandbox/facts_budget.h): 25 bytes an item; an int64 element (a tensor's shape / stride)
// counts as two items. Measured (glibc 2.36, protobuf 3.21):
// - decode alone: FactsCodecTest.DecodedListItemsCostWhatTheyAreCharged decodes one node with
//   8M one-byte packed items (8 MB on the wire): peak RSS +63,824 kB besides the frame, 8.2
//   bytes an item (the parsed RepeatedField<uint32>, 4 bytes, and pickle::Node's copy, 4).
// - the whole job in ckptscand (frame, decode, judge): tests/attacks/daemon_resources_test.py
//   A2 on today's main, 23.4M items a job, two at once: VmHWM 637 MiB from 21, ~13 bytes an item.
// 25 leaves about twice the job's measured cost.
inline constexpr uint64_t kListItemsPerValue = 16;
inline constexpr uint64_t ListItemValues(uint64_t items) {
  return items / kListItemsPerValue + (items % kListItemsPerValue != 0 ? 1 : 0);
}

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_PROTOCOL_H_
