// ckptscan-worker: one job in a fresh, self-jailed process (docs/sandbox.md).
//
//   ckptscan-worker --job=HEX      (started by sandbox/spawner.h; never by hand)
//   ckptscan-worker --fork-server=PID   (the same jobs, each in a child forked by a fork
//                                        server: sandbox/worker/fork_server.h)
//
// It reads its Job (sandbox/job.h), notes the input's size, enters the jail
// (sandbox/worker/jail.h), maps the input read-only, extracts facts
// (sandbox/worker/extract_facts.h; plus the opcode listing for a disasm job; for a convert job, the
// safetensors bytes on descriptor 3, see core/convert/convert.h), writes one result frame
// (sandbox/frame.h) to descriptor 1 and exits 0. Every other ending is an exit code of
// sandbox/protocol.h or a signal. It never sees the rules and decides no verdict.
#ifndef CKPTSCAN_SANDBOX_WORKER_WORKER_H_
#define CKPTSCAN_SANDBOX_WORKER_WORKER_H_

#include <cstdint>

#include "ckptscan/worker/v1/worker.pb.h"
#include "sandbox/worker/fork_server.h"
#include "sandbox/worker/jail.h"

namespace ckptscan::sandbox {

// The worker's main: returns the exit code (WorkerExit).
int WorkerMain(int argc, char** argv);

// One job: argv[1] is the job (--job=HEX); `enter` enters its jail (EnterJail in a per-job
// worker). A JobMain (sandbox/worker/fork_server.h).
int WorkerJob(int argc, char** argv, const JailEntry& enter);

// The part after the jail is up: map `input_size` bytes of kInputFd, run the job, write the
// frame. Returns the exit code. Shared with the test probe (sandbox/testcases/jail_probe.cc).
int RunJobInJail(const worker::v1::Job& job, const JailLayers& layers, uint64_t input_size);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_WORKER_WORKER_H_
