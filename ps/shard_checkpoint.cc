// Shard checkpoint files: every table's rows plus the metadata that identifies the shard.
#include "ps/shard_checkpoint.h"

#include <charconv>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// (shard, num_shards) when `name` is a shard file's name ("ps-shard-00001-of-00004.safetensors").
bool parse_shard_name(std::string_view name, int& shard, int& num_shards) {
  constexpr std::string_view kPrefix = "ps-shard-", kOf = "-of-", kSuffix = ".safetensors";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix)) {
    return false;
  }
  name = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const std::size_t of = name.find(kOf);
  if (of == std::string_view::npos) return false;
  auto number = [](std::string_view text, int& out) {
    return !text.empty() && std::from_chars(text.data(), text.data() + text.size(), out).ptr == text.data() + text.size();
  };
  return number(name.substr(0, of), shard) && number(name.substr(of + kOf.size()), num_shards);
}

// "the files of 2 shards (ps-shard-*-of-00002)", or for an incomplete set "the files of shards
// 0, 2 of 3 (ps-shard-*-of-00003; incomplete)".
std::string describe_shard_files(int num_shards, const std::set<int>& shards) {
  const std::string pattern = fmt::format("ps-shard-*-of-{:05d}", num_shards);
  if (static_cast<int>(shards.size()) == num_shards) {
    return fmt::format("the files of {} shard{} ({})", num_shards, num_shards == 1 ? "" : "s", pattern);
  }
  return fmt::format("the files of shard{} {} of {} ({}; incomplete)", shards.size() == 1 ? "" : "s",
                     fmt::join(shards, ", "), num_shards, pattern);
}

}  // namespace

std::string find_shard_checkpoint(const std::string& path, int shard, int num_shards) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw ConfigError(fmt::format("{}: no such checkpoint file or folder{}", path,
                                  error && error != std::errc::no_such_file_or_directory
                                      ? fmt::format(" ({})", error.message()) : std::string()));
  }
  if (!fs::is_directory(status)) return path;
  const std::string name = shard_checkpoint_name(shard, num_shards);
  const fs::path file = fs::path(path) / name;
  if (fs::exists(file, error)) return file.string();
  // Which shard files the folder holds, by shard count.
  std::map<int, std::set<int>> held;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    int k = 0;
    int n = 0;
    if (parse_shard_name(entry.path().filename().string(), k, n) && n > 0 && k >= 0 && k < n) held[n].insert(k);
  }
  std::string message = fmt::format("{}: this folder has no {} (shard {} of {})", path, name, shard, num_shards);
  if (held.empty()) {
    throw ConfigError(message + ": it holds no parameter-server shard files (a checkpoint folder holds one "
                                "ps-shard-K-of-N.safetensors per shard)");
  }
  std::vector<std::string> groups;
  for (const auto& [n, shards] : held) groups.push_back(describe_shard_files(n, shards));
  message += fmt::format(": it holds {}", fmt::join(groups, " and "));
  if (held.count(num_shards) != 0) {
    message += fmt::format("; shard {}'s file is missing from the checkpoint", shard);
  } else if (held.size() == 1) {
    const int n = held.begin()->first;
    message += fmt::format(": start {} shard{} to load it, or give a checkpoint written by {} shard{}", n,
                           n == 1 ? "" : "s", num_shards, num_shards == 1 ? "" : "s");
  } else {
    message += fmt::format(": start as many shards as the checkpoint you mean was written by, or give one "
                           "written by {} shard{}", num_shards, num_shards == 1 ? "" : "s");
  }
  throw ConfigError(message);
}

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
  checkpoint.path = path;
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
