// Fuzz target: the job configuration loader (tools/trainer/job_options.h load_job: YAML text,
// then --set overrides, then the typed, validated read of every section).
//
// Input: YAML text. Lines starting with "#set " are YAML comments to the parser and --set
// assignments to this harness ("#set model.mlp.hidden=[8, 4]"), applied in order.
// Properties: a job that reads without error is written back (the resolved config the trainer
// logs and stores in checkpoint manifests); that text must read again to the same resolved
// config, and must be storable in JSON (a manifest's "state").
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/node.h"
#include "core/config/schema.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/trainer/job_options.h"

namespace {

std::vector<std::string> set_lines(std::string_view text) {
  std::vector<std::string> assignments;
  constexpr std::string_view kPrefix = "#set ";
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with(kPrefix)) assignments.emplace_back(line.substr(kPrefix.size()));
    at = end + 1;
  }
  return assignments;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace aiacc;
  fuzz::quiet_logs();
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_input_errors([&] {
    // What load_job() does, from a string instead of a file.
    config::Document document = config::Document::from_string(text, "fuzz.yaml");
    for (const auto& assignment : set_lines(text)) document.apply_override(assignment);
    const trainer::JobOptions job = config::read<trainer::JobOptions>(document.root());

    const std::string resolved = trainer::resolved_yaml(job);
    (void)nlohmann::json{{"config", resolved}}.dump();  // throws for text that is not UTF-8
    trainer::JobOptions again;
    try {
      again = config::read<trainer::JobOptions>(config::Document::from_string(resolved, "resolved").root());
    } catch (const Error& e) {
      throw fuzz::PropertyViolation("the resolved config does not read back: " + std::string(e.what()) +
                                    "\n--- resolved ---\n" + resolved);
    }
    if (trainer::resolved_yaml(again) != resolved) {
      throw fuzz::PropertyViolation("the resolved config changes when read back:\n" + resolved +
                                    "\n--- after ---\n" + trainer::resolved_yaml(again));
    }
  });
  return 0;
}
