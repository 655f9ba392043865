// Checkpoints: a training run's tensors in safetensors files plus a manifest, written so that a
// crash at any moment leaves the previous checkpoints loadable, and found again by
// `resume: auto` (shared/DESIGN.md §7).
//
// On-disk layout (one directory per checkpoint; the 12-digit zero-padded step sorts by name):
//   <run_path>/checkpoints/
//     step-000000001000/
//       model.safetensors         one file per Checkpoint::files entry, "<key>.safetensors";
//       optimizer.safetensors     tensor names as given (PyTorch names for the dense model, so
//       embeddings.safetensors    model.safetensors loads with safetensors.torch.load_file)
//       manifest.json             written LAST; its presence marks the checkpoint complete
//     step-000000002000.tmp/      a save in progress, or one a crash interrupted: never loaded,
//                                 removed by the next save
// Every safetensors file carries metadata {"format": "pt", "aiacc.step": "<step>"}.
// manifest.json:
//   {"format": "aiacc-checkpoint", "version": 1, "step": 1000,
//    "files": {"model": {"file": "model.safetensors", "bytes": 4242, "crc32": 305419896,
//                        "tensors": 12}, ...},
//    "state": {...}}                       the caller's JSON (epoch, data position, rng, hash)
// A save writes everything into step-<N>.tmp/ (each file atomically, fsync'd), the manifest
// last, then renames the directory to step-<N>/ and fsyncs checkpoints/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace aiacc::trainer {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct Checkpoint {
  std::int64_t step = 0;
  // File key -> tensors, e.g. "model" (parameters and buffers under PyTorch names),
  // "optimizer" (Optimizer::state()), "embeddings" or one key per table / PS shard. Keys are
  // file-name stems: letters, digits, '_', '-' and '.', not starting with '.'.
  std::map<std::string, NamedTensors> files;
  // Everything else needed to continue bit for bit: epoch, batch position, rng counters, config
  // hash, ... Stored verbatim in the manifest.
  nlohmann::json state = nlohmann::json::object();
  // Saving: files other processes write into the checkpoint folder (parameter-server shards
  // writing their own rows, so no worker ever holds a huge table): called with the folder
  // before the manifest, returns the paths written there; the manifest records each one's size
  // and CRC-32 under "external" and load() verifies them.
  std::function<std::vector<std::string>(const std::filesystem::path& directory)> write_external;
  // Loading: the verified external files, by file name, as paths.
  std::map<std::string, std::filesystem::path> external;
};

// Whether `directory` looks like one checkpoint (a folder holding a manifest), without reading it:
// DataError naming the directory otherwise (no such folder, a run folder instead of one of its
// checkpoints/step-N, no manifest). load() checks this first.
void check_checkpoint_folder(const std::filesystem::path& directory);

class CheckpointManager {
 public:
  static constexpr int kFormatVersion = 1;

  // Manages <run_path>/checkpoints (created on the first save). keep_last: how many complete
  // checkpoints to keep after a save, the new one included; 0 keeps all. Negative keep_last is
  // an InternalError (the config layer validates it).
  CheckpointManager(std::filesystem::path run_path, int keep_last);

  // Writes `checkpoint` as checkpoints/step-<12-digit step>/ and returns that directory. A
  // checkpoint of the same step already there is replaced. After a successful save, stale
  // .tmp directories are removed and, of the checkpoints with a lower step, only the newest
  // keep_last - 1 complete ones are kept (checkpoints with a higher step, from an abandoned
  // longer run, are left alone; one whose manifest is missing or a file of the wrong size does
  // not count, and is removed once older than those kept); failures while removing them are
  // logged, not thrown. Blocks until everything
  // is durable (fsync). Not thread-safe: one manager per run directory. Tensors must be on the
  // CPU. Throws IoError on filesystem failures (the previous checkpoints are intact then, and
  // the partial .tmp directory is removed), InternalError on a bad key or negative step.
  std::filesystem::path save(const Checkpoint& checkpoint) const;

  // The newest complete checkpoint, or nullopt when there is none. Candidates are the step-<N>
  // directories, newest first; one that fails load() (and every .tmp directory) is skipped with
  // a warning naming it and the reason.
  std::optional<Checkpoint> load_latest() const;

  // Loads and verifies one checkpoint directory: manifest present and well-formed, every file it
  // lists present with the recorded size and CRC-32, and each a valid safetensors file. Throws
  // DataError naming the directory (and file) otherwise, IoError when a file cannot be read.
  Checkpoint load(const std::filesystem::path& directory) const;

  // checkpoints/step-<N> directories that look complete by name (no .tmp), oldest first. They
  // are not verified.
  std::vector<std::filesystem::path> list() const;

  // A step whose checkpoint pruning leaves alone, outside the keep_last count
  // (train.checkpoint.keep_best: the best evaluation's); nullopt for none.
  void set_kept_step(std::optional<std::int64_t> step) { kept_step_ = step; }

  const std::filesystem::path& directory() const { return directory_; }
  // checkpoints/step-<12-digit step> (whether or not it exists).
  std::filesystem::path path_for(std::int64_t step) const;

 private:
  void prune(std::int64_t saved_step) const;

  std::filesystem::path directory_;  // <run_path>/checkpoints
  int keep_last_;
  std::optional<std::int64_t> kept_step_;
};

// Embedding rows named "<table>.ids" / ".values" / ".state", grouped by table.
std::map<std::string, NamedTensors> group_by_table(const NamedTensors& rows);

// Tensors of the same name from several parameter-server shard files, concatenated along rows
// in file order (each shard holds its own ids). Throws DataError naming the tensor and both
// shards when two pieces differ in type, rank or row shape.
NamedTensors concat_shard_rows(const std::vector<NamedTensors>& shards);

}  // namespace aiacc::trainer
