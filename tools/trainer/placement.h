// Per-parameter placement (shared/DESIGN.md §3): which synchronisation each parameter uses.
//   dense tensors        always the ring (all-reduced gradients, fused in buckets)
//   sparse tables, ring  replicated on every worker; each step the workers' row gradients are
//                        all-gathered and every replica applies the same averaged update
//   sparse tables, ps    sharded over the parameter servers; rows pulled, gradients pushed
// `auto` weighs the bytes each moves per step per worker, measured over the first batches:
// ring (n - 1) x unique rows x row bytes (the all-gather), ps 2 x unique rows x row bytes
// (pull + push), under a memory bound: a replica must fit cluster.replica_max_mib. A replica
// holds every row the run touches; estimate_replica_rows says how that is judged from the probe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tools/trainer/cluster_options.h"

namespace aiacc::trainer {

enum class Placement { ring, ps };
const char* placement_name(Placement placement);

// What the probe batches showed about one sparse table.
struct TableProbe {
  std::int64_t dim = 0;
  std::int64_t state_floats = 0;      // optimiser state per row
  double unique_rows_per_step = 0;    // mean over the probe batches
  std::int64_t rows_seen = 0;         // distinct rows over all probe batches
  std::int64_t new_rows_last_batch = 0;
  std::int64_t rows_in_one_batch = 0;   // rows exactly one probe batch touched
  std::int64_t rows_in_two_batches = 0; // rows exactly two probe batches touched
  std::int64_t probe_batches = 0;
  std::int64_t worker_batches = 0;    // probe-sized batches per worker in the job: its steps x
                                      // gradient_accumulation_steps (to extrapolate growth)
  std::int64_t epoch_batches = 0;     // probe-sized batches in one epoch; 0: unknown
  std::int64_t max_rows = 0;          // the model's bound on the table's rows; 0: none
};

// The rows a replica of the table holds at the end of the run, judged from the probe. A replica
// gets the rows of all workers' batches (cluster.workers x worker_batches probe-sized batches), up
// to one epoch's (later epochs read the same examples again). New rows only get rarer, so the
// probe's last batch's new rows per batch bound the growth from above. Rows the probe saw again
// show saturation: the rows no probe batch touched are estimated from those one and two probe
// batches touched (Chao's estimator, at its 95% upper confidence limit) and the share of them
// the remaining batches find extrapolated (Chao et al. 2014). That is believed only where rows
// seen once are at most 7 times those seen twice: a heavy tail of rare ids keeps the ratio
// higher, and Chao's estimate far too low. Never above max_rows, never below the rows seen.
double estimate_replica_rows(const TableProbe& probe, int workers);

struct PlacementDecision {
  std::string name;
  std::string shape;
  std::int64_t bytes = 0;        // dense: tensor bytes; sparse: estimated replica bytes (-1: unbounded)
  bool sparse = false;
  Placement choice = Placement::ring;
  bool by_rule = false;  // a cluster.placement rule chose it (not auto)
  std::string reason;
};

// The first rule matching `name`, or "auto". ConfigError if a rule's glob is malformed.
std::string rule_for(const ClusterOptions& cluster, const std::string& name);
// rule_for(), checked against the cluster: ConfigError naming the table when a rule puts it on
// ps in a job without servers.
std::string checked_rule_for(const ClusterOptions& cluster, const std::string& name);
// ConfigError naming the first cluster.placement rule that places on ps in a distributed job
// whose cluster.servers is 0, and how to fix it. The config alone decides it, whatever the model
// (a ps rule that places no table is refused by check_placement_rules), so the local launcher
// checks it before any process starts. One process uses no rules: nothing to refuse.
void check_ps_rules_have_servers(const ClusterOptions& cluster);

PlacementDecision place_dense(const ClusterOptions& cluster, const std::string& name,
                              const std::string& shape, std::int64_t bytes);
// ConfigError when the rule asks for ps and the job has no servers (naming the rule).
PlacementDecision place_sparse(const ClusterOptions& cluster, const std::string& name,
                               const TableProbe& probe);
// ConfigError naming the rule when a placement rule applies to none of the model's parameters
// (`names`): it matches none (a misspelt name would otherwise leave its table on auto), every
// name it matches is placed by an earlier rule (the first match wins), or it puts on ps only
// dense parameters (not in `sparse_names`), which always go through the ring.
void check_placement_rules(const ClusterOptions& cluster, const std::vector<std::string>& names,
                           const std::set<std::string>& sparse_names);

// Whether any sparse table's rule is auto with servers present (only then is a probe needed).
bool needs_probe(const ClusterOptions& cluster, const std::vector<std::string>& sparse_names);

// The start-up warning for parameter servers that hold nothing (the model has no embedding
// tables, or every table went to the ring by rule or by auto), naming cluster.servers and why;
// "" when the job has no servers or some table is placed on them.
std::string idle_servers_warning(const ClusterOptions& cluster, const std::vector<PlacementDecision>& decisions,
                                 const std::string& model_type);

// The warning for a table replicated on every worker (placed on the ring) whose replica holds
// `rows` rows of `bytes` (rows x (dim + optimiser state) x 4), once that passes
// cluster.replica_max_mib: auto placement judged its size from the probe batches, or a rule or
// a job without servers put it there, and a vocabulary may outgrow either. Names the table,
// the bound, what placement estimated, and what to set. "" while it fits.
std::string grown_replica_warning(const ClusterOptions& cluster, const PlacementDecision& decision, std::int64_t rows,
                                  double bytes);

// The start-up table: tensor, shape, bytes, choice, reason.
std::string format_placement(const std::vector<PlacementDecision>& decisions);

}  // namespace aiacc::trainer
