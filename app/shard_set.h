// Sharded checkpoints converted as a set: `pytorch_model.bin.index.json` and its shards become
// `model-0000N-of-0000M.safetensors` plus `model.safetensors.index.json`, all or nothing.
//
// The index was read in a worker (core/torch/hf_index.h) and its facts decoded and checked; no
// byte of it is parsed here. Shards are the index's distinct file names in byte order, each
// opened in the index's own directory (names are plain, CheckShardFileName) and converted by
// `convert_one` (a jailed worker per shard: app::ConvertFile). Before a shard's output is published,
// the names it stores (tensors and aliases) must be exactly the names the index maps to it: a
// tensor the index does not list, or a listed one the shard lacks, fails the set.
//
// Nothing partial is ever visible under OUT: outputs are written into a hidden staging
// directory beside OUT (".OUT.ckptscan-XXXXXXXX", mode 0700 until published), the new index is
// written last, and the directory is renamed to OUT in one step. OUT must not exist or be an
// empty directory (a set never replaces or mixes with existing files, --force or not). On any
// failure what this job created in the staging directory, and then the directory, are removed;
// only a crash can leave it behind (hidden).
//
// Someone who can write OUT's directory must not be able to redirect any of this (the daemon
// writes beneath roots its callers may share). So OUT's directory is used through one
// descriptor (request.output_dir_fd, or opened once here); the staging directory is made with
// mkdirat(2), opened O_NOFOLLOW and checked (a directory, ours, mode 0700, empty), and from then
// on used only through its own descriptor: each shard created with O_TMPFILE in it and linked
// (OutputFile::CreateAt), the index and signature created openat(O_CREAT|O_EXCL|O_NOFOLLOW),
// the signature hashing files opened beneath it (SignDirectoryModel, signing::HashModelAt), and
// the cleanup unlinkat(2) of names recorded only after they were created. The name is resolved
// again only to publish: it must still refer to the directory made (dev, inode), then
// renameat2(RENAME_NOREPLACE) makes it OUT; an existing empty OUT, held open since it was
// checked, is swapped out with RENAME_EXCHANGE and must be that directory before it is removed
// (unlinkat AT_REMOVEDIR, which removes only an empty one). OUT is checked to be the staging
// directory afterwards. Any mismatch fails the conversion with an error naming the swap, the
// rename undone: nothing published, and nothing created or removed in the swapped-in directory
// or where a swapped-in symbolic link points. A staging directory renamed away stays where it
// was moved, emptied (it cannot be reached by name).
//
// The new index maps every name, aliases included, to the file that holds it (as Hugging
// Face's converter does); metadata.total_size is the sum of the stored tensors' bytes. With a
// signing key, the whole directory is signed in staging (model.sig, app/publish.h).
//
// Thread-compatible.
#ifndef CKPTSCAN_APP_SHARD_SET_H_
#define CKPTSCAN_APP_SHARD_SET_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "app/output_file.h"
#include "core/convert/convert.h"
#include "core/torch/file_facts.h"

namespace ckptscan::app {

inline constexpr char kOutputIndexName[] = "model.safetensors.index.json";
inline constexpr char kSignatureName[] = "model.sig";  // convert --key: the set's OMS bundle
inline constexpr uint64_t kMaxShards = 99999;          // the five digits of model-NNNNN-of-NNNNN

// Runs before an output is published; an error fails that file's conversion.
using PlanCheck = std::function<absl::Status(const convert::Plan&)>;

// Converts one file (request.input -> request.output), calling `check` on the trusted side's
// plan before publishing. A non-OK status means the input could not be read at all.
using ConvertOneFn =
    std::function<absl::StatusOr<ConvertResult>(const ConvertRequest&, const PlanCheck&)>;

// `index_report` is the index file's own report (SAFE); on return `result` holds it (with a
// conversion entry for the new index when the set was published) and every shard's report.
void ConvertShardSet(const ConvertRequest& request, const v1::FileReport& index_report,
                     const torch::ShardIndex& index, const ConvertOneFn& convert_one,
                     ConvertResult* result);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_SHARD_SET_H_
