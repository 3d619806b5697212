// `ckptscan disasm`: an annotated opcode listing of a raw pickle stream, for
// analysts.
//
// One line per executed opcode, printed as the VM runs it:
//       57  REDUCE           ; call posix.system('id')
//   offset, opcode name, argument, then what it produced; indented two spaces
//   per open MARK (capped, with the depth shown past the cap). A header line
//   starts each pickle; nested pickles (byte strings that are themselves
//   pickles) are labelled with their depth.
// Then: the pickles (offsets, protocol, opcodes, parent), trailing bytes, and
// the file's findings and errors exactly as `scan --format text` shows them.
//
// Output goes through `out` as it is produced: the listing of a large
// checkpoint is never held whole in memory. Strings from the file are made
// terminal-safe. Thread-compatible.
#ifndef CKPTSCAN_CLIENTS_DISASM_H_
#define CKPTSCAN_CLIENTS_DISASM_H_

#include <functional>
#include <string>
#include <string_view>

#include "ckptscan/v1/report.pb.h"
#include "rules/rule_set.h"
#include "sandbox/file_facts.h"

namespace ckptscan::clients {

using TextSink = std::function<void(std::string_view)>;

// The worker (jailed; with --no-sandbox, unjailed) ran the VM and returned `listing` (at most
// sandbox::kMaxTraceBytes; `truncated` if cut) with the facts; `report` is the
// trusted side's judgement of them. Writes the listing, re-escaped line by line
// (it comes from the jail and is not trusted), then the summary.
void WriteJailedDisassembly(std::string_view listing, bool truncated,
                            const sandbox::FileFacts& facts, const v1::FileReport& report,
                            const TextSink& out);

// The part after the listing: format, one line per pickle, trailing bytes, then
// the findings and errors as `scan --format text` shows them.
std::string DisasmSummary(const sandbox::FileFacts& facts, const v1::FileReport& report,
                          bool after_listing);

}  // namespace ckptscan::clients

#endif  // CKPTSCAN_CLIENTS_DISASM_H_
