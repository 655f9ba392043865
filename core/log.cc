// Subsystem loggers sharing one set of sinks, so the role prefix and file output apply to all.
#include "core/log.h"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <iterator>
#include <mutex>
#include <vector>

#include "core/config/suggest.h"
#include "core/error.h"

namespace aiacc::log {
namespace {

// The framework's subsystems: every name its log::get calls use (tests/core/check_test.cc checks).
const char* const kBuiltinSubsystems[] = {"checkpoint", "cluster", "cuda", "data",  "io",    "launcher", "memory",
                                          "model",      "net",     "ps",   "ring", "trace", "trainer"};

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<std::string>& registered_subsystems() {
  static std::vector<std::string> names;
  return names;
}

struct LogState {
  std::mutex mutex;
  std::string role = "main";
  LogOptions options;
  std::vector<spdlog::sink_ptr> sinks{std::make_shared<spdlog::sinks::stderr_sink_mt>()};
  std::map<std::string, std::shared_ptr<spdlog::logger>> loggers;
};

LogState& state() {
  static LogState instance;
  return instance;
}

std::string pattern_for(const std::string& role) {
  return "%Y-%m-%d %H:%M:%S.%e %L [" + role + "] [%n] %v";
}

spdlog::level::level_enum level_for(const LogState& s, const std::string& subsystem) {
  auto it = s.options.levels.find(subsystem);
  return parse_level(it != s.options.levels.end() ? it->second : s.options.level);
}

void refresh_locked(LogState& s) {
  for (auto& [name, logger] : s.loggers) {
    logger->sinks() = s.sinks;
    logger->set_pattern(pattern_for(s.role));
    logger->set_level(level_for(s, name));
    logger->flush_on(spdlog::level::warn);
  }
}

}  // namespace

std::vector<std::string> subsystems() {
  std::vector<std::string> names(std::begin(kBuiltinSubsystems), std::end(kBuiltinSubsystems));
  std::lock_guard lock(registry_mutex());
  for (const auto& name : registered_subsystems()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

const char* levels_doc() {
  static const std::string doc =
      fmt::format("per-subsystem levels, e.g. {{ring: debug, data: warn}}; subsystems: {}",
                  config::join_names(std::vector<std::string>(std::begin(kBuiltinSubsystems), std::end(kBuiltinSubsystems))));
  return doc.c_str();
}

void register_subsystem(const std::string& name) {
  std::lock_guard lock(registry_mutex());
  registered_subsystems().push_back(name);
}

std::string check_levels(const std::map<std::string, std::string>& levels) {
  const std::vector<std::string> known = subsystems();
  for (const auto& [name, value] : levels) {
    // A misspelt subsystem would leave the one meant at the default level without a word.
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      const std::string close = config::closest_name(name, known);
      return fmt::format("no subsystem '{}'{} (subsystems: {}; user code adds its own with "
                         "log::register_subsystem)",
                         name, close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close),
                         config::join_names(known));
    }
    if (const std::string problem = LogOptions::level_check()(value); !problem.empty()) {
      return "level of '" + name + "': " + problem;
    }
  }
  return {};
}

spdlog::level::level_enum parse_level(const std::string& text) {
  static const std::map<std::string, spdlog::level::level_enum> kLevels = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  auto it = kLevels.find(text);
  if (it == kLevels.end()) {
    throw ConfigError("unknown log level '" + text +
                      "' (expected one of: trace, debug, info, warn, error, off)");
  }
  return it->second;
}

void set_role(const std::string& role) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.role = role;
  refresh_locked(s);
}

void configure(const LogOptions& options) {
  parse_level(options.level);
  if (const std::string problem = check_levels(options.levels); !problem.empty()) {
    throw ConfigError("log.levels: " + problem);
  }
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.options = options;
  refresh_locked(s);
}

void add_file(const std::string& path) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path));
  refresh_locked(s);
}

std::shared_ptr<spdlog::logger> get(const std::string& subsystem) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.loggers.find(subsystem);
  if (it != s.loggers.end()) return it->second;
  auto logger = std::make_shared<spdlog::logger>(subsystem, s.sinks.begin(), s.sinks.end());
  logger->set_pattern(pattern_for(s.role));
  logger->set_level(level_for(s, subsystem));
  logger->flush_on(spdlog::level::warn);
  s.loggers.emplace(subsystem, logger);
  return logger;
}

}  // namespace aiacc::log
