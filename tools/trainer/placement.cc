#include "tools/trainer/placement.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cmath>

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

void check_ps_rules_have_servers(const ClusterOptions& cluster) {
  if (!cluster.distributed() || cluster.servers > 0) return;
  for (std::size_t i = 0; i < cluster.placement.size(); ++i) {
    const auto& rule = cluster.placement[i];
    if (rule.place != "ps") continue;
    throw ConfigError(fmt::format("cluster.placement[{}]: {{match: '{}', place: ps}} puts tables on the parameter "
                                  "servers, but cluster.servers is 0 (the job starts none); set cluster.servers to 1 "
                                  "or more, or place them on the ring (place: ring)",
                                  i, rule.match));
  }
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

// Saturation is believed only where the rows seen in one probe batch are at most this many
// times those seen in two. Chao's estimate below is close for a vocabulary the run exhausts but
// far too low for a heavy tail of rare ids, which keeps this ratio high. Simulated (20 draws,
// 4 to 32 probe batches of 256 ids), the ratio was at most 6.7 at 4 batches and 3.6 from 8 for
// the flights routes (3399 ids) and a Zipf vocabulary of 1000; 7.7 to 27 for Zipf(1.05) over
// 10^5 and 10^6 ids and the cross of two Zipf fields of 1000 ids (10^5 rows and more in a run),
// but from 6.3 for a steeper Zipf(1.2) over 10^5, which 4 probe batches can thus take for
// saturation: more probe batches separate the two better.
constexpr double kMaxOnceToTwice = 7;

// The rows `batches` more probe-sized batches find beyond the probe's, by saturation: Chao's
// estimate of the rows no probe batch touched (incidence form, Chao 1987), taken at its 95%
// upper confidence limit (a few hundred rows make a rough estimate), then the share of those
// the batches find (Chao et al. 2014, Ecological Monographs 84:45). Needs q2 > 0.
double unseen_rows_found(double batches, double probe_batches, double q1, double q2) {
  if (q1 == 0) return 0;  // every row came back: nothing left to find
  const double k = (probe_batches - 1) / probe_batches;
  const double f0 = k * q1 * q1 / (2 * q2);
  const double r = q1 / q2;
  const double variance = q2 * (k * r * r / 2 + k * k * r * r * r + k * k * r * r * r * r / 4);
  const double unseen = f0 * std::exp(1.96 * std::sqrt(std::log1p(variance / (f0 * f0))));
  // The chance that a batch touches a given unseen row, and how many of them `batches` find.
  const double p = q1 / (probe_batches * unseen + q1);
  return unseen * -std::expm1(batches * std::log1p(-p));
}
}  // namespace

double estimate_replica_rows(const TableProbe& probe, int workers) {
  const double seen = static_cast<double>(probe.rows_seen);
  double batches = static_cast<double>(probe.worker_batches) * std::max(workers, 1);
  if (probe.epoch_batches > 0) batches = std::min(batches, static_cast<double>(probe.epoch_batches));
  const double remaining = std::max(0.0, batches - static_cast<double>(probe.probe_batches));
  double rows = seen + static_cast<double>(probe.new_rows_last_batch) * remaining;
  const auto once = static_cast<double>(probe.rows_in_one_batch);
  const auto twice = static_cast<double>(probe.rows_in_two_batches);
  if (twice > 0 && once <= kMaxOnceToTwice * twice) {
    const auto probed = static_cast<double>(probe.probe_batches);
    rows = std::min(rows, seen + unseen_rows_found(remaining, probed, once, twice));
  }
  if (probe.max_rows > 0) rows = std::min(rows, static_cast<double>(probe.max_rows));
  return std::max(rows, seen);
}

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
  const double rows = estimate_replica_rows(probe, cluster.workers);
  const double replica = rows * 4.0 * static_cast<double>(probe.dim + probe.state_floats);
  d.bytes = replica < 0x1p62 ? static_cast<std::int64_t>(replica) : -1;  // -1: beyond any bound
  const double n = cluster.workers;
  const double ring_bytes = (n - 1) * probe.unique_rows_per_step * row_bytes;
  const double ps_bytes = 2 * probe.unique_rows_per_step * row_bytes;
  if (replica > static_cast<double>(cluster.replica_max_mib) * (1 << 20)) {
    d.choice = Placement::ps;
    d.reason = fmt::format("auto: a replica would reach ~{} ({:.0f} rows; > cluster.replica_max_mib {})",
                           mib(replica), rows, cluster.replica_max_mib);
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

std::string grown_replica_warning(const ClusterOptions& cluster, const PlacementDecision& decision, std::int64_t rows,
                                  double bytes) {
  const double bound = static_cast<double>(cluster.replica_max_mib) * (1 << 20);
  if (bytes <= bound) return "";
  std::string placed;
  std::string advice;
  if (decision.by_rule) {
    placed = "a cluster.placement rule put it on the ring";
    advice = cluster.servers > 0 ? "place it on the parameter servers (its rule: place: ps)"
                                 : "place it on parameter servers (cluster.servers and a rule {match: ..., place: ps})";
  } else if (cluster.servers == 0) {
    placed = "the job has no parameter servers";
    advice = "give the job parameter servers (cluster.servers), where auto placement shards a table this large";
  } else {
    // (An unbounded estimate never lands here: it goes to the servers.)
    placed = fmt::format("auto placement estimated ~{} at start", mib(static_cast<double>(decision.bytes)));
    advice = fmt::format("place it on the parameter servers (cluster.placement: [{{match: \"{}\", place: ps}}]), or "
                         "probe more batches (cluster.placement_probe_batches)", decision.name);
  }
  return fmt::format("table '{}' is replicated on every worker, and its replica has grown to {} ({} rows), above "
                     "cluster.replica_max_mib {} ({}); every worker holds all of it: {}",
                     decision.name, mib(bytes), rows, cluster.replica_max_mib, placed, advice);
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
