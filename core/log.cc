// Subsystem loggers sharing one set of sinks, so the role prefix and file output apply to all.
#include "core/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <mutex>
#include <vector>

#include "core/error.h"

namespace aiacc::log {
namespace {

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
  for (const auto& [name, level] : options.levels) parse_level(level);
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
