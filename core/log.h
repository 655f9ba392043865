// Logging: one spdlog logger per subsystem ("trainer", "ring", "ps", "data", ...), each line
// prefixed with the process's role and rank, levels set per subsystem from the config.
// Thread-safe. Lines go to stderr (and to a file once log::add_file is called).
#pragma once

#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace aiacc::log {

// The subsystems whose levels log.levels may set: the framework's own (kept in step with its
// log::get calls by tests/core/check_test.cc) and those added by register_subsystem.
std::vector<std::string> subsystems();
// Declares a subsystem of user code (e.g. a registered model's own logger), so log.levels
// accepts it. Call before the config is read (at static initialisation, as models register).
void register_subsystem(const std::string& name);
// "" when every key of `levels` names a subsystem and every value a level; else what is wrong,
// with the closest subsystem name.
std::string check_levels(const std::map<std::string, std::string>& levels);

// The doc of log.levels, listing the framework's subsystems.
const char* levels_doc();

struct LogOptions {
  std::string level = "info";                  // default level for every subsystem
  std::map<std::string, std::string> levels;   // per-subsystem overrides, e.g. {ring: debug}

  template <class V>
  void visit(V& v) {
    v.field("level", level, "default log level: trace | debug | info | warn | error | off",
            level_check());
    v.field("levels", levels, levels_doc(), check_levels);
  }
  // Constraint for a level string ("" when valid).
  static std::string (*level_check())(const std::string&) {
    return [](const std::string& value) -> std::string {
      for (const char* ok : {"trace", "debug", "info", "warn", "error", "off"}) {
        if (value == ok) return {};
      }
      return "expected one of: trace, debug, info, warn, error, off";
    };
  }
};

// Sets the prefix shown on every line, e.g. "worker 3" or "launcher". Thread-safe.
void set_role(const std::string& role);

// Applies levels; throws ConfigError naming the bad level string or the unknown subsystem.
void configure(const LogOptions& options);

// Also writes every subsequent line to `path` (appending).
void add_file(const std::string& path);

// The logger for `subsystem`, created on first use with the configured level.
std::shared_ptr<spdlog::logger> get(const std::string& subsystem);

// Parses "trace|debug|info|warn|error|off"; throws ConfigError otherwise.
spdlog::level::level_enum parse_level(const std::string& text);

}  // namespace aiacc::log
