// CheckpointManager: save into a .tmp directory, manifest last, rename; load with size and
// CRC-32 verification; pick the newest complete checkpoint; prune old ones.
#include "tools/trainer/checkpoint.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <system_error>

#include "core/check.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/log.h"

namespace aiacc::trainer {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr const char* kFormatName = "aiacc-checkpoint";
constexpr std::string_view kPrefix = "step-";
constexpr std::string_view kTmpSuffix = ".tmp";
constexpr int kMaxManifestDepth = 64;

std::shared_ptr<spdlog::logger> logger() { return log::get("checkpoint"); }

bool valid_key(const std::string& key) {
  if (key.empty() || key[0] == '.' || key.size() > 200) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

// "step-000000001000" -> 1000; nullopt for any other name (including the .tmp ones).
std::optional<std::int64_t> parse_step_name(const std::string& name) {
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size();
  std::int64_t step = 0;
  auto [stop, error] = std::from_chars(begin, end, step);
  if (error != std::errc() || stop != end || step < 0) return std::nullopt;
  return step;
}

bool is_tmp_name(const std::string& name) {
  return name.size() > kTmpSuffix.size() && name.compare(0, kPrefix.size(), kPrefix) == 0 &&
         name.compare(name.size() - kTmpSuffix.size(), kTmpSuffix.size(), kTmpSuffix) == 0;
}

// std::filesystem errors carry the path already; rewrap them in our IoError type.
template <class F>
auto fs_call(const char* what, const fs::path& path, F&& call) {
  try {
    return call();
  } catch (const fs::filesystem_error& e) {
    throw IoError(
        fmt::format("checkpoint: cannot {} {}: {}", what, path.string(), e.code().message()));
  }
}

void remove_tree(const fs::path& path) {
  fs_call("remove", path, [&] { return fs::remove_all(path); });
}

// The member `key` of a JSON object, or nullptr (also when `object` is not an object).
const nlohmann::json* field(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Reads manifest.json; DataError naming the directory for anything malformed.
nlohmann::json read_manifest(const fs::path& directory) {
  check_checkpoint_folder(directory);
  const fs::path path = directory / kManifestName;
  auto bytes = fs_call("read", path, [&] { return fs::file_size(path); });
  if (bytes > (std::uintmax_t{64} << 20)) {
    throw DataError(fmt::format("checkpoint {}: {} is implausibly large ({} bytes)",
                                directory.string(), kManifestName, bytes));
  }
  std::string text(bytes, '\0');
  io::FileDescriptor fd = io::open_for_reading(path);
  io::read_exact(fd, path, 0, text.data(), text.size());
  try {
    // Copying and comparing JSON values recurses once per level: a manifest nested ~100k
    // levels deep (200 KB of '[') overflowed the stack in load(). Ours nest a few levels.
    return nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > kMaxManifestDepth) {
        throw DataError(fmt::format("checkpoint {}: {} nests deeper than {} levels", directory.string(),
                                    kManifestName, kMaxManifestDepth));
      }
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("checkpoint {}: {} is not valid JSON: {}", directory.string(),
                                kManifestName, e.what()));
  }
}

// Writes every file and then the manifest into `directory`.
// A plain file name (no separators, not hidden) ending in .safetensors.
bool valid_external_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos &&
         name.size() > 12 && name.ends_with(".safetensors");
}

// Size and zlib CRC-32 of a file, read in blocks (external files can be large).
std::pair<std::uint64_t, std::uint64_t> file_size_and_crc(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("cannot read {}", path.string()));
  std::vector<char> block(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  std::uint64_t bytes = 0;
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const auto got = in.gcount();
    if (got <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(block.data()), static_cast<uInt>(got));
    bytes += static_cast<std::uint64_t>(got);
  }
  if (in.bad()) throw IoError(fmt::format("error reading {}", path.string()));
  return {bytes, static_cast<std::uint64_t>(crc)};
}

void write_contents(const Checkpoint& checkpoint, const fs::path& directory) {
  nlohmann::json files = nlohmann::json::object();
  const io::Metadata metadata{{"format", "pt"}, {"aiacc.step", std::to_string(checkpoint.step)}};
  for (const auto& [key, tensors] : checkpoint.files) {
    const std::string file_name = key + ".safetensors";
    io::SafetensorsWriteResult written =
        io::write_safetensors((directory / file_name).string(), tensors, metadata);
    files[key] = {{"file", file_name},
                  {"bytes", written.num_bytes},
                  {"crc32", written.crc32},
                  {"tensors", tensors.size()}};
  }
  nlohmann::json external = nlohmann::json::object();
  if (checkpoint.write_external) {
    for (const std::string& written : checkpoint.write_external(directory)) {
      const fs::path path(written);
      if (path.parent_path() != directory || !valid_external_name(path.filename().string())) {
        throw InternalError(fmt::format("checkpoint: an external file must be written into {}, got {}",
                                        directory.string(), written));
      }
      const auto [bytes, crc] = file_size_and_crc(path);
      external[path.filename().string()] = {{"bytes", bytes}, {"crc32", crc}};
    }
  }
  nlohmann::json manifest = {{"format", kFormatName},
                             {"version", CheckpointManager::kFormatVersion},
                             {"step", checkpoint.step},
                             {"files", files},
                             {"state", checkpoint.state}};
  if (!external.empty()) manifest["external"] = external;
  // Written last: a directory whose manifest exists has all its files (each fsync'd already).
  io::write_file_atomically(directory / kManifestName, manifest.dump(2) + "\n");
}

}  // namespace

void check_checkpoint_folder(const fs::path& directory) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    throw DataError(fmt::format("checkpoint {}: {}", directory.string(),
                                fs::exists(directory, error) ? "not a folder" : "no such folder"));
  }
  if (!fs::is_regular_file(directory / kManifestName, error)) {
    if (fs::is_directory(directory / "checkpoints", error)) {
      throw DataError(fmt::format("checkpoint {}: a run folder, not a checkpoint: name one of its "
                                  "checkpoints/step-N folders", directory.string()));
    }
    throw DataError(fmt::format("checkpoint {}: {} is missing (not a checkpoint folder, or its save did not "
                                "complete)", directory.string(), kManifestName));
  }
}

CheckpointManager::CheckpointManager(fs::path run_path, int keep_last)
    : directory_(std::move(run_path) / "checkpoints"), keep_last_(keep_last) {
  AIACC_CHECK_GE(keep_last, 0, "checkpoint keep_last");
}

fs::path CheckpointManager::path_for(std::int64_t step) const {
  return directory_ / fmt::format("{}{:012d}", kPrefix, step);
}

fs::path CheckpointManager::save(const Checkpoint& checkpoint) const {
  AIACC_CHECK_GE(checkpoint.step, 0, "checkpoint step");
  for (const auto& [key, tensors] : checkpoint.files) {
    AIACC_CHECK(valid_key(key), "checkpoint file key '{}' is not a plain file-name stem", key);
  }
  const fs::path final_path = path_for(checkpoint.step);
  const fs::path tmp_path = final_path.string() + std::string(kTmpSuffix);
  fs_call("create", directory_, [&] { return fs::create_directories(directory_); });
  remove_tree(tmp_path);  // left by a crash during an earlier save of this step
  fs_call("create", tmp_path, [&] { return fs::create_directory(tmp_path); });
  try {
    write_contents(checkpoint, tmp_path);
  } catch (...) {
    std::error_code ignored;  // best effort: the original error is the one to report
    fs::remove_all(tmp_path, ignored);
    throw;
  }

  // Replacing a checkpoint of the same step: between the removal and the rename only the .tmp
  // copy exists, which load_latest ignores, so a crash there falls back to the previous step.
  remove_tree(final_path);
  fs_call("rename", tmp_path, [&] {
    fs::rename(tmp_path, final_path);
    return 0;
  });
  io::fsync_directory(directory_);
  // Counted on disk: the shards' files and the manifest are in it too.
  std::size_t written = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(final_path, error)) written += entry.is_regular_file() ? 1 : 0;
  logger()->info("saved checkpoint {} ({} files)", final_path.string(), written);
  prune(checkpoint.step);
  return final_path;
}

namespace {

// Why `directory` is not a complete checkpoint by what is cheap to see (its manifest parses and
// every file it lists is there with the recorded size), or "" when it looks complete. Unlike
// load() it reads no tensors and no CRCs: prune() runs after every save.
std::string incompleteness(const fs::path& directory) {
  nlohmann::json manifest;
  try {
    manifest = read_manifest(directory);
  } catch (const Error& e) {
    return e.what();
  }
  for (const char* section : {"files", "external"}) {
    const nlohmann::json* entries = field(manifest, section);
    if (entries == nullptr && std::string_view(section) == "external") continue;
    if (entries == nullptr || !entries->is_object()) return fmt::format("the manifest has no {}", section);
    for (const auto& [key, info] : entries->items()) {
      const nlohmann::json* recorded = field(info, "bytes");
      const fs::path path = directory / (std::string_view(section) == "files" ? key + ".safetensors" : key);
      std::error_code error;
      const std::uintmax_t bytes = fs::file_size(path, error);
      if (error || recorded == nullptr || !recorded->is_number_unsigned() ||
          bytes != recorded->get<std::uint64_t>()) {
        return fmt::format("{} is missing or not of the recorded size", path.filename().string());
      }
    }
  }
  return {};
}

}  // namespace

void CheckpointManager::prune(std::int64_t saved_step) const {
  // The save has succeeded by now; failing to tidy up must not make it look failed.
  try {
    std::vector<fs::path> stale;
    std::vector<std::pair<std::int64_t, fs::path>> older;
    for (const auto& entry :
         fs_call("list", directory_, [&] { return fs::directory_iterator(directory_); })) {
      const std::string name = entry.path().filename().string();
      if (is_tmp_name(name)) {
        stale.push_back(entry.path());
      } else if (auto step = parse_step_name(name); step && *step < saved_step && step != kept_step_) {
        older.emplace_back(*step, entry.path());
      }
    }
    // Removed after the listing: deleting entries while iterating a directory is unspecified.
    for (const fs::path& path : stale) {
      logger()->warn("removing incomplete checkpoint {}", path.string());
      remove_tree(path);
    }
    if (keep_last_ == 0) return;
    // Newest first, the keep_last - 1 complete ones kept. An incomplete one does not count (it
    // could not be resumed from): it would otherwise take the place of a good one. It is kept
    // (to be looked at) while newer than the oldest kept checkpoint, removed once older.
    std::sort(older.rbegin(), older.rend());
    std::size_t kept = 0;
    const auto keep_older = static_cast<std::size_t>(keep_last_ - 1);
    for (const auto& [step, path] : older) {
      if (kept < keep_older) {
        if (const std::string why = incompleteness(path); !why.empty()) {
          logger()->warn("checkpoint {} is incomplete ({}): not counted in keep_last", path.string(), why);
        } else {
          ++kept;
        }
        continue;
      }
      logger()->info("removing old checkpoint {}", path.string());
      remove_tree(path);
    }
  } catch (const IoError& e) {
    logger()->warn("could not remove old checkpoints: {}", e.what());
  } catch (const fs::filesystem_error& e) {
    logger()->warn("could not remove old checkpoints: {}", e.what());
  }
}

std::vector<fs::path> CheckpointManager::list() const {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code error;
  if (!fs::is_directory(directory_, error)) return {};
  for (const auto& entry :
       fs_call("list", directory_, [&] { return fs::directory_iterator(directory_); })) {
    if (auto step = parse_step_name(entry.path().filename().string())) {
      found.emplace_back(*step, entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

Checkpoint CheckpointManager::load(const fs::path& directory) const {
  const std::string where = directory.string();
  auto fail = [&](const std::string& problem) {
    throw DataError(fmt::format("checkpoint {}: {}", where, problem));
  };
  const nlohmann::json manifest = read_manifest(directory);
  if (!manifest.is_object() || field(manifest, "format") == nullptr ||
      *field(manifest, "format") != kFormatName) {
    fail(fmt::format("{} is not an aiacc checkpoint manifest", kManifestName));
  }
  const nlohmann::json* version = field(manifest, "version");
  if (!version || !version->is_number_integer() || version->get<std::int64_t>() < 1) {
    fail("the manifest has no valid version");
  }
  if (version->get<std::int64_t>() > kFormatVersion) {
    fail(fmt::format("format version {} is newer than this program's {}",
                     version->get<std::int64_t>(), kFormatVersion));
  }
  const nlohmann::json* step = field(manifest, "step");
  const nlohmann::json* files = field(manifest, "files");
  const nlohmann::json* state = field(manifest, "state");
  if (!step || !step->is_number_integer() || !files || !files->is_object() || !state) {
    fail("the manifest lacks step, files or state");
  }
  // The training state the trainer resumes from: the data position (and the config it ran).
  const nlohmann::json* epoch = state->is_object() ? field(*state, "epoch") : nullptr;
  const nlohmann::json* batch = state->is_object() ? field(*state, "batch") : nullptr;
  const nlohmann::json* config = state->is_object() ? field(*state, "config") : nullptr;
  if (!epoch || !epoch->is_number_integer() || epoch->get<std::int64_t>() < 0 || !batch ||
      !batch->is_number_integer() || batch->get<std::int64_t>() < 0 ||
      (config && !config->is_string())) {
    fail("the manifest's state lacks a non-negative integer epoch and batch (or its config is "
         "not text)");
  }
  Checkpoint checkpoint;
  checkpoint.step = step->get<std::int64_t>();
  checkpoint.state = *state;
  if (auto named = parse_step_name(directory.filename().string());
      named && *named != checkpoint.step) {
    fail(fmt::format("the manifest says step {}, the directory name says {}", checkpoint.step,
                     *named));
  }
  for (const auto& [key, info] : files->items()) {
    // The file name must be what save() writes: a manifest must not point outside its directory.
    const nlohmann::json* file_name = field(info, "file");
    const nlohmann::json* recorded_bytes = field(info, "bytes");
    const nlohmann::json* recorded_crc = field(info, "crc32");
    if (!valid_key(key) || !file_name || *file_name != key + ".safetensors" || !recorded_bytes ||
        !recorded_bytes->is_number_unsigned() || !recorded_crc ||
        !recorded_crc->is_number_unsigned()) {
      fail(fmt::format("malformed manifest entry for '{}'", key));
    }
    const fs::path path = directory / (key + ".safetensors");
    const std::uint64_t bytes = recorded_bytes->get<std::uint64_t>();
    std::error_code error;
    if (!fs::is_regular_file(path, error))
      fail(fmt::format("{} is missing", path.filename().string()));
    const std::uintmax_t actual = fs::file_size(path, error);
    if (error || actual != bytes) {
      fail(fmt::format("{} has {} bytes, the manifest says {}", path.filename().string(), actual,
                       bytes));
    }
    io::SafetensorsFile file;
    try {
      file = io::read_safetensors(path.string());
    } catch (const DataError& e) {
      fail(e.what());
    }
    if (file.crc32 != recorded_crc->get<std::uint64_t>()) {
      fail(fmt::format("{} is corrupt: CRC-32 {:#010x}, the manifest says {:#010x}",
                       path.filename().string(), file.crc32, recorded_crc->get<std::uint64_t>()));
    }
    checkpoint.files[key] = std::move(file.tensors);
  }
  if (const nlohmann::json* external = field(manifest, "external")) {
    if (!external->is_object()) fail("malformed external files");
    for (const auto& [name, info] : external->items()) {
      const nlohmann::json* recorded_bytes = field(info, "bytes");
      const nlohmann::json* recorded_crc = field(info, "crc32");
      if (!valid_external_name(name) || !recorded_bytes || !recorded_bytes->is_number_unsigned() ||
          !recorded_crc || !recorded_crc->is_number_unsigned()) {
        fail(fmt::format("malformed manifest entry for external file '{}'", name));
      }
      const fs::path path = directory / name;
      std::error_code error;
      if (!fs::is_regular_file(path, error)) fail(fmt::format("{} is missing", name));
      const auto [bytes, crc] = file_size_and_crc(path);
      if (bytes != recorded_bytes->get<std::uint64_t>() || crc != recorded_crc->get<std::uint64_t>()) {
        fail(fmt::format("{} is corrupt or truncated: {} bytes, CRC-32 {:#010x}; the manifest says {} "
                         "bytes, {:#010x}", name, bytes, crc, recorded_bytes->get<std::uint64_t>(),
                         recorded_crc->get<std::uint64_t>()));
      }
      checkpoint.external[name] = path;
    }
  }
  return checkpoint;
}

std::optional<Checkpoint> CheckpointManager::load_latest() const {
  std::error_code error;
  if (!fs::is_directory(directory_, error)) return std::nullopt;
  for (const auto& entry :
       fs_call("list", directory_, [&] { return fs::directory_iterator(directory_); })) {
    if (is_tmp_name(entry.path().filename().string())) {
      logger()->warn("ignoring incomplete checkpoint {} (a save was interrupted)",
                     entry.path().string());
    }
  }
  std::vector<fs::path> candidates = list();
  std::vector<std::string> reasons;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    try {
      Checkpoint checkpoint = load(*it);
      logger()->info("found checkpoint {} (step {})", it->string(), checkpoint.step);
      return checkpoint;
    } catch (const DataError& e) {  // the message names the directory already
      logger()->warn("skipping invalid {}", e.what());
      reasons.push_back(e.what());
    } catch (const IoError& e) {
      logger()->warn("skipping unreadable checkpoint {}: {}", it->string(), e.what());
      reasons.push_back(fmt::format("{}: {}", it->string(), e.what()));
    }
  }
  if (!candidates.empty()) {
    // Starting afresh here would train from step 0 and save over the damaged steps' folders:
    // what a transient read error or one lost shard file should never cost.
    throw DataError(fmt::format("{} holds {} checkpoint(s) and none can be loaded ({}); repair them, or move "
                                "them away to train from the start",
                                directory_.string(), candidates.size(), fmt::join(reasons, "; ")));
  }
  return std::nullopt;
}

std::map<std::string, NamedTensors> group_by_table(const NamedTensors& rows) {
  std::map<std::string, NamedTensors> tables;
  for (const auto& [name, tensor] : rows) {
    auto dot = name.rfind('.');
    tables[dot == std::string::npos ? name : name.substr(0, dot)].emplace_back(name, tensor);
  }
  return tables;
}

NamedTensors concat_shard_rows(const std::vector<NamedTensors>& shards) {
  struct Piece {
    const Tensor* tensor;
    std::size_t shard;
  };
  std::map<std::string, std::vector<Piece>> parts;
  std::vector<std::string> order;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    for (const auto& [name, tensor] : shards[k]) {
      if (!parts.count(name)) order.push_back(name);
      parts[name].push_back({&tensor, k});
    }
  }
  NamedTensors out;
  for (const auto& name : order) {
    const auto& pieces = parts[name];
    const Tensor& first = *pieces.front().tensor;
    // The files come from disk: every piece must have the first's type and row shape, or the
    // copies below would run past the joined tensor.
    for (const Piece& piece : pieces) {
      const Tensor& t = *piece.tensor;
      bool same = t.rank() == first.rank() && t.rank() > 0 && t.dtype() == first.dtype();
      for (int axis = 1; same && axis < t.rank(); ++axis) same = t.dim(axis) == first.dim(axis);
      if (!same) {
        throw DataError(fmt::format("parameter-server shard files: tensor '{}' is {} {} in shard {} but {} {} in "
                                    "shard {}: they cannot be joined",
                                    name, dtype_name(t.dtype()), t.shape().str(), piece.shard,
                                    dtype_name(first.dtype()), first.shape().str(), pieces.front().shard));
      }
    }
    std::int64_t rows = 0;
    for (const Piece& piece : pieces) rows += piece.tensor->dim(0);
    std::vector<std::int64_t> dims(static_cast<std::size_t>(first.rank()), rows);
    for (int axis = 1; axis < first.rank(); ++axis) dims[static_cast<std::size_t>(axis)] = first.dim(axis);
    Tensor all = Tensor::empty(Shape(dims), first.dtype());
    std::size_t offset = 0;
    for (const Piece& piece : pieces) {
      const std::size_t bytes = static_cast<std::size_t>(piece.tensor->numel()) * dtype_size(piece.tensor->dtype());
      std::memcpy(static_cast<std::byte*>(all.raw_data()) + offset, piece.tensor->raw_data(), bytes);
      offset += bytes;
    }
    out.emplace_back(name, std::move(all));
  }
  return out;
}

}  // namespace aiacc::trainer
