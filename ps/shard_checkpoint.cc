// Shard checkpoint files: every table's rows plus the metadata that identifies the shard.
#include "ps/shard_checkpoint.h"

#include <charconv>

#include <fmt/format.h>

#include "core/error.h"
#include "ps/server_table.h"

namespace aiacc::ps {
namespace {

constexpr const char* kFormat = "ps-shard-v1";
constexpr std::string_view kTablePrefix = "aiacc.ps.table.";

int parse_int(const io::Metadata& metadata, const std::string& key, const std::string& path) {
  auto it = metadata.find(key);
  int value = 0;
  if (it == metadata.end() ||
      std::from_chars(it->second.data(), it->second.data() + it->second.size(), value).ec != std::errc()) {
    throw DataError(fmt::format("{}: parameter-server checkpoint without a valid '{}'", path, key));
  }
  return value;
}

}  // namespace

std::string shard_checkpoint_name(int shard, int num_shards) {
  return fmt::format("ps-shard-{:05d}-of-{:05d}.safetensors", shard, num_shards);
}

void write_shard_checkpoint(const std::string& path, int shard, int num_shards,
                            const std::vector<const ServerTable*>& tables) {
  io::NamedTensors tensors;
  io::Metadata metadata{{"aiacc.ps.format", kFormat},
                        {"aiacc.ps.shard", std::to_string(shard)},
                        {"aiacc.ps.num_shards", std::to_string(num_shards)}};
  for (const ServerTable* table : tables) {
    metadata[std::string(kTablePrefix) + table->name()] = table->config_yaml();
    for (auto& named : table->save_rows()) tensors.push_back(std::move(named));
  }
  io::write_safetensors(path, tensors, metadata);
}

ShardCheckpoint read_shard_checkpoint(const std::string& path) {
  io::SafetensorsFile file = io::read_safetensors(path);
  auto format = file.metadata.find("aiacc.ps.format");
  if (format == file.metadata.end() || format->second != kFormat) {
    throw DataError(fmt::format("{}: not a parameter-server shard checkpoint (aiacc.ps.format is "
                                "'{}', expected '{}')",
                                path, format == file.metadata.end() ? "" : format->second, kFormat));
  }
  ShardCheckpoint checkpoint;
  checkpoint.shard = parse_int(file.metadata, "aiacc.ps.shard", path);
  checkpoint.num_shards = parse_int(file.metadata, "aiacc.ps.num_shards", path);
  for (const auto& [key, value] : file.metadata) {
    if (key.rfind(kTablePrefix, 0) != 0) continue;
    checkpoint.tables.push_back(decode_table_config(value, fmt::format("{} ({})", path, key)));
  }
  checkpoint.tensors = std::move(file.tensors);
  return checkpoint;
}

}  // namespace aiacc::ps
