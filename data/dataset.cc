// The dataset registry (a function-local static, so registration order does not matter).
#include "data/dataset.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <system_error>

#include "core/error.h"

namespace aiacc::data {
namespace {

std::map<std::string, detail::InputFileLister>& input_file_listers() {
  static std::map<std::string, detail::InputFileLister> listers;
  return listers;
}

// What is wrong with `path` for a restart never to help, or "".
std::string unusable_file_problem(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) return "no such file";
  if (ec) return "";  // cannot tell (no permission): the reader says what stops it
  if (std::filesystem::is_directory(status)) return "a folder, not a regular file";
  if (!std::filesystem::is_regular_file(status)) return "not a regular file";
  const auto bytes = std::filesystem::file_size(path, ec);
  return !ec && bytes == 0 ? "empty file" : "";
}

}  // namespace

DatasetRegistry& dataset_registry() {
  static DatasetRegistry registry("dataset type");
  return registry;
}

void check_split(const DatasetContext& context, const std::string& dataset) {
  if (context.split != "train" && context.split != "test") {
    throw ConfigError(fmt::format("dataset '{}': unknown split '{}'; expected train or test",
                                  dataset, context.split));
  }
}

void check_input_files(const std::vector<InputFile>& files) {
  for (const InputFile& file : files) {
    const std::string problem = unusable_file_problem(file.path);
    if (problem.empty()) continue;
    std::string hints;
    if (problem == "no such file") {
      // Relative paths are not read from the config's folder: say where they were looked for.
      if (std::filesystem::path(file.path).is_relative()) {
        std::error_code ec;
        hints = fmt::format("relative to the working directory {}", std::filesystem::current_path(ec).string());
      }
      if (!file.missing_hint.empty()) hints += (hints.empty() ? "" : "; ") + file.missing_hint;
    }
    throw ConfigError(fmt::format("{}: {}: {}{}", file.key, file.path, problem, hints.empty() ? "" : " (" + hints + ")"));
  }
}

std::vector<InputFile> input_files(const std::string& type, const config::Node& options,
                                   const DatasetContext& context) {
  const auto& listers = input_file_listers();
  const auto it = listers.find(type);
  return it == listers.end() ? std::vector<InputFile>{} : it->second(options, context);
}

namespace detail {
bool add_input_file_lister(const std::string& type, InputFileLister lister) {
  return input_file_listers().emplace(type, std::move(lister)).second;
}
}  // namespace detail

}  // namespace aiacc::data
