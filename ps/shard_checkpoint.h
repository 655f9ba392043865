// A parameter-server shard's checkpoint file (safetensors, written atomically; see
// core/io/safetensors.h). Tensors per table: "<table>.ids" i64 [R] sorted, "<table>.values"
// f32 [R, D], "<table>.state" f32 [R, S] (the optimiser's per-row state). Metadata:
//   aiacc.ps.format      "ps-shard-v1"
//   aiacc.ps.shard       k          aiacc.ps.num_shards   n
//   aiacc.ps.table.<t>   the table's config as YAML (spec, optimiser, consistency)
#pragma once

#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "ps/protocol.h"

namespace aiacc::ps {

class ServerTable;

// "ps-shard-00001-of-00004.safetensors": the file name of shard k of n in a checkpoint folder.
std::string shard_checkpoint_name(int shard, int num_shards);

// The checkpoint file of shard k of n that `path` names: `path` itself when it is a file, else
// that shard's file in the folder `path`. Throws ConfigError, its message starting with `path`,
// when there is none: `path` does not exist, or the folder lacks this shard's file (the message
// then says which shard files it holds: another shard count's, an incomplete set, or none).
std::string find_shard_checkpoint(const std::string& path, int shard, int num_shards);

// Writes `tables` (in the given order) as shard `shard` of `num_shards`. IoError on failure;
// the previous file at `path` survives any failure.
void write_shard_checkpoint(const std::string& path, int shard, int num_shards,
                            const std::vector<const ServerTable*>& tables);

struct ShardCheckpoint {
  std::string path;  // the file it was read from (for messages)
  int shard = 0;
  int num_shards = 1;
  std::vector<TableConfig> tables;
  io::NamedTensors tensors;
};
// Reads and checks a file written by write_shard_checkpoint. DataError naming the file when it
// is not one (format, missing or malformed metadata); IoError when it cannot be read.
ShardCheckpoint read_shard_checkpoint(const std::string& path);

}  // namespace aiacc::ps
