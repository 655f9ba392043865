#include "tools/trainer/placement.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include "core/config/suggest.h"
#include "core/error.h"

namespace aiacc::trainer {

const char* placement_name(Placement placement) {
  return placement == Placement::ring ? "ring" : "ps";
}

std::string rule_for(const ClusterOptions& cluster, const std::string& name) {
  for (std::size_t i = 0; i < cluster.placement.size(); ++i) {
    const auto& rule = cluster.placement[i];
    const int matched = fnmatch(rule.match.c_str(), name.c_str(), 0);
    if (matched == 0) return rule.place;
    if (matched != FNM_NOMATCH) {
      throw ConfigError(fmt::format("cluster.placement[{}].match: '{}' is not a valid glob", i, rule.match));
    }
  }
  return "auto";
}

namespace {
// The first few of `names` for an error message: a ResNet has over a hundred parameters.
std::string some_names(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 12;
  if (names.size() <= kShown) return config::join_names(names);
  const std::vector<std::string> shown(names.begin(), names.begin() + kShown);
  return fmt::format("{} and {} more", config::join_names(shown), names.size() - kShown);
}
}  // namespace

void check_placement_rules(const ClusterOptions& cluster, const std::vector<std::string>& names,
                           const std::set<std::string>& sparse_names) {
  // first_rule[k]: the rule that places names[k] (the first that matches it), or -1.
  std::vector<std::ptrdiff_t> first_rule(names.size(), -1);
  for (std::size_t i = 0; i < cluster.placement.size(); ++i) {
    const auto& rule = cluster.placement[i];
    std::vector<std::string> matched, taken_by_earlier;  // the latter as "name (cluster.placement[j])"
    bool places_a_table = false;
    for (std::size_t k = 0; k < names.size(); ++k) {
      const int result = fnmatch(rule.match.c_str(), names[k].c_str(), 0);
      if (result != 0 && result != FNM_NOMATCH) {
        throw ConfigError(fmt::format("cluster.placement[{}].match: '{}' is not a valid glob", i, rule.match));
      }
      if (result != 0) continue;
      matched.push_back(names[k]);
      if (first_rule[k] < 0) {
        first_rule[k] = static_cast<std::ptrdiff_t>(i);
        places_a_table = places_a_table || sparse_names.count(names[k]) > 0;
      } else {
        taken_by_earlier.push_back(fmt::format("{} ([{}])", names[k], first_rule[k]));
      }
    }
    if (matched.empty()) {
      const std::string close = config::closest_name(rule.match, names);
      throw ConfigError(fmt::format("cluster.placement[{}].match: '{}' matches no parameter{}; the model's "
                                    "parameters are: {}",
                                    i, rule.match,
                                    close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close),
                                    some_names(names)));
    }
    if (taken_by_earlier.size() == matched.size()) {
      throw ConfigError(fmt::format("cluster.placement[{}].match: '{}' never applies: earlier rules place all it "
                                    "matches (the first matching rule wins): {}",
                                    i, rule.match, some_names(taken_by_earlier)));
    }
    if (rule.place == "ps" && !places_a_table) {
      throw ConfigError(fmt::format("cluster.placement[{}]: '{}' places only dense parameters on ps ({}), but "
                                    "dense tensors always go through the ring: ps takes sparse tables only",
                                    i, rule.match, some_names(matched)));
    }
  }
}

std::string checked_rule_for(const ClusterOptions& cluster, const std::string& name) {
  std::string rule = rule_for(cluster, name);
  if (rule == "ps" && cluster.servers == 0) {
    throw ConfigError(fmt::format("cluster.placement: table '{}' is placed on ps but cluster.servers is 0; add "
                                  "servers or place it on the ring", name));
  }
  return rule;
}

PlacementDecision place_dense(const ClusterOptions& cluster, const std::string& name,
                              const std::string& shape, std::int64_t bytes) {
  PlacementDecision d{name, shape, bytes, false, Placement::ring, false, "dense tensor: all-reduced"};
  if (rule_for(cluster, name) == "ps") d.reason = "dense tensor: all-reduced (ps applies to sparse tables only)";
  return d;
}

namespace {
std::string mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / (1 << 20)); }
std::string kib(double bytes) { return fmt::format("{:.1f} KiB", bytes / 1024); }
}  // namespace

PlacementDecision place_sparse(const ClusterOptions& cluster, const std::string& name,
                               const TableProbe& probe) {
  PlacementDecision d;
  d.name = name;
  d.sparse = true;
  d.shape = fmt::format("[ids, {}]", probe.dim);
  const std::string rule = checked_rule_for(cluster, name);
  d.by_rule = rule != "auto";
  if (rule == "ps") {
    d.choice = Placement::ps;
    d.reason = "placement rule";
    d.bytes = -1;
    return d;
  }
  if (rule == "ring") {
    d.choice = Placement::ring;
    d.reason = "placement rule";
    d.bytes = -1;
    return d;
  }
  if (cluster.servers == 0) {
    d.choice = Placement::ring;
    d.reason = "auto: no parameter servers";
    d.bytes = -1;
    return d;
  }
  const double row_bytes = 4.0 * static_cast<double>(probe.dim);
  const double remaining = static_cast<double>(std::max<std::int64_t>(0, probe.total_steps - probe.probe_batches));
  const double rows = static_cast<double>(probe.rows_seen) + static_cast<double>(probe.new_rows_last_batch) * remaining;
  const double replica = rows * 4.0 * static_cast<double>(probe.dim + probe.state_floats);
  d.bytes = replica < 0x1p62 ? static_cast<std::int64_t>(replica) : -1;  // -1: beyond any bound
  const double n = cluster.workers;
  const double ring_bytes = (n - 1) * probe.unique_rows_per_step * row_bytes;
  const double ps_bytes = 2 * probe.unique_rows_per_step * row_bytes;
  if (replica > static_cast<double>(cluster.replica_max_mib) * (1 << 20)) {
    d.choice = Placement::ps;
    d.reason = fmt::format("auto: a replica would reach ~{} (> cluster.replica_max_mib {})", mib(replica),
                           cluster.replica_max_mib);
  } else if (ring_bytes <= ps_bytes) {
    d.choice = Placement::ring;
    d.reason = fmt::format("auto: per step ring {} <= ps {} ({:.0f} unique rows)", kib(ring_bytes),
                           kib(ps_bytes), probe.unique_rows_per_step);
  } else {
    d.choice = Placement::ps;
    d.reason = fmt::format("auto: per step ps {} < ring {} ({:.0f} unique rows)", kib(ps_bytes),
                           kib(ring_bytes), probe.unique_rows_per_step);
  }
  return d;
}

bool needs_probe(const ClusterOptions& cluster, const std::vector<std::string>& sparse_names) {
  if (cluster.servers == 0) return false;
  for (const auto& name : sparse_names) {
    if (rule_for(cluster, name) == "auto") return true;
  }
  return false;
}

std::string idle_servers_warning(const ClusterOptions& cluster, const std::vector<PlacementDecision>& decisions,
                                 const std::string& model_type) {
  if (cluster.servers == 0) return "";
  int by_rule = 0, by_auto = 0;
  for (const auto& d : decisions) {
    if (!d.sparse) continue;
    if (d.choice == Placement::ps) return "";
    ++(d.by_rule ? by_rule : by_auto);
  }
  std::string why;
  if (by_rule + by_auto == 0) {
    why = fmt::format("model.type {} has no embedding tables, and only tables are placed on the servers (dense "
                      "tensors are all-reduced over the ring)", model_type);
  } else {
    std::vector<std::string> how;
    if (by_rule > 0) how.push_back(fmt::format("{} by cluster.placement rules", by_rule));
    if (by_auto > 0) how.push_back(fmt::format("{} by auto placement (see the placement above for why)", by_auto));
    why = fmt::format("all {} embedding tables are placed on the ring ({})", by_rule + by_auto,
                      config::join_names(how));
  }
  return fmt::format("cluster.servers: {} starts {} parameter-server shard(s) that hold nothing: {}; set "
                     "cluster.servers: 0 to start none{}",
                     cluster.servers, cluster.servers, why,
                     by_rule + by_auto > 0 ? ", or place tables on them (cluster.placement: {match: ..., place: ps})"
                                           : "");
}

std::string format_placement(const std::vector<PlacementDecision>& decisions) {
  std::string out = fmt::format("{:<28} {:>16} {:>12}  {:<5} {}\n", "tensor", "shape", "bytes", "place", "reason");
  for (const auto& d : decisions) {
    std::string bytes = "-";
    if (d.bytes >= 0) bytes = fmt::format("{}{}", d.sparse ? "~" : "", d.bytes);
    out += fmt::format("{:<28} {:>16} {:>12}  {:<5} {}\n", d.name, d.shape, bytes,
                       placement_name(d.choice), d.reason);
  }
  return out;
}

}  // namespace aiacc::trainer
