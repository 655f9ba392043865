// aiacc-train CONFIG.yaml [--set key=value]... [--dry-run]
// Exit status: 0 success; 2 bad config or usage; 1 failure at run time. Every failure prints one
// message on stderr naming its context (file:line: key, data file, peer rank).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "core/log.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

int run(int argc, char** argv) {
  CLI::App app{"aiacc-train: distributed deep-learning training from a YAML job config"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool dry_run = false;
  bool print_reference = false;
  app.add_option("config", config_path, "job config (YAML); see configs/reference.yaml");
  app.add_option("--set", overrides, "override a config key: --set optimizer.lr=0.05 (repeatable)")
      ->type_name("KEY=VALUE");
  app.add_flag("--dry-run", dry_run, "print the resolved config and the plan, then exit");
  app.add_flag("--print-reference", print_reference,
               "print every config key with its default and doc (configs/reference.yaml)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "aiacc-train: %s\nRun 'aiacc-train --help' for usage.\n", e.what());
    return kExitUsage;
  }
  if (print_reference) {
    std::cout << aiacc::trainer::reference_yaml();
    return 0;
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "aiacc-train: a job config is required: aiacc-train CONFIG.yaml\n");
    return kExitUsage;
  }

  aiacc::trainer::JobOptions job = aiacc::trainer::load_job(config_path, overrides);
  aiacc::log::configure(job.log);
  aiacc::log::set_role("worker 0");
  if (dry_run) {
    std::cout << "# resolved configuration\n" << aiacc::trainer::resolved_yaml(job) << "\n# plan\n";
    aiacc::trainer::Trainer trainer(job);
    trainer.describe(std::cout);
    return 0;
  }
  aiacc::log::get("trainer")->info("resolved configuration:\n{}", aiacc::trainer::resolved_yaml(job));
  aiacc::trainer::Trainer trainer(job);
  trainer.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const aiacc::ConfigError& e) {
    std::fprintf(stderr, "aiacc-train: config error: %s\n", e.what());
    return kExitUsage;
  } catch (const aiacc::Error& e) {
    std::fprintf(stderr, "aiacc-train: error: %s\n", e.what());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aiacc-train: unexpected error: %s\n", e.what());
    return kExitRuntime;
  }
}
