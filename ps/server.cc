// PsServer: the request loop, per-table consistency and the replies it releases.
#include "ps/server.h"

#include <omp.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/config/diff.h"
#include "core/config/suggest.h"
#include "core/error.h"
#include "core/log.h"
#include "core/optim/sparse_row_optimizer.h"
#include "core/net/connection_events.h"
#include "core/net/socket.h"
#include "core/util/cpus.h"
#include "ps/consistency.h"
#include "ps/detail/frames.h"
#include "ps/request_log.h"
#include "ps/shard_checkpoint.h"

namespace aiacc::ps {
namespace {

// Tables named in a line about many (the rest counted): the per-table lines are at debug level.
constexpr std::size_t kNamedTables = 8;

// A received request: its frames, and the typed views of its bulk frames (in place when
// aligned, else copies). Shared, so a held request (sync, staleness) keeps its buffers.
struct Received {
  std::vector<net::Message> parts;  // [routing id][header][payload...]
  RequestHeader header;
  std::string routing;
  std::vector<std::int64_t> id_copy;
  std::vector<float> grad_copy;
  std::span<const std::int64_t> ids;
  const float* grads = nullptr;
};

struct Deferred {
  std::shared_ptr<Received> request;
  net::Clock::time_point since;
  bool repeat = false;  // a retry of a pull already served once
};

struct TableState {
  TableState(TableConfig config, int partitions) : table(std::move(config), partitions) {
    const TableOptions& o = table.config().options;
    if (o.consistency == "sync") sync.emplace(o.num_workers, o.sync_average, table.dim());
    if (o.consistency == "bounded") clock.emplace(o.num_workers, o.staleness);
  }
  ServerTable table;
  std::optional<SyncAggregator> sync;
  std::optional<StalenessClock> clock;
  std::deque<Deferred> deferred;  // bounded: pulls waiting for the slowest worker
  // Created from a checkpoint file before any worker registered it (aiacc-ps-server --load).
  bool from_file = false;
};

}  // namespace

class PsServer::Impl {
 public:
  Impl(const ServerOptions& options, std::shared_ptr<net::Context> context, const ShardCheckpoint* initial)
      : options_(options), log_(log::get("ps")) {
    if (options_.num_shards < 1 || options_.shard < 0 || options_.shard >= options_.num_shards) {
      throw ConfigError(fmt::format("ps server: shard {} of {} (expected 0 <= shard < num_shards)",
                                    options_.shard, options_.num_shards));
    }
    if (initial != nullptr) check_shard_of(*initial, initial->path);
    if (!context) context = net::Context::create(1);
    socket_ = net::Socket(std::move(context), ZMQ_ROUTER, 1000);
    socket_.set_int(ZMQ_SNDHWM, 0, "ZMQ_SNDHWM");
    socket_.set_int(ZMQ_RCVHWM, 0, "ZMQ_RCVHWM");
    socket_.set_int64(ZMQ_MAXMSGSIZE, -1, "ZMQ_MAXMSGSIZE");
    endpoint_ = socket_.bind(options_.bind);
    // Replaces the context's handshake watcher on this socket (and reports refusals to it).
    monitor_ = socket_.open_monitor(net::ConnectionEvents::events());
    label_ = fmt::format("ps shard {} of {} ({})", options_.shard, options_.num_shards, endpoint_);
    if (initial != nullptr) restore(*initial, initial->path);  // no request thread yet: no lock needed
    incarnation_ = random_process_id();
    // 0 threads: OMP_NUM_THREADS where set, else the CPUs this process can keep busy. OpenMP's
    // own default takes every allowed core, however little time a container's limit leaves them.
    request_threads_ = options_.num_threads;
    const char* omp_threads = std::getenv("OMP_NUM_THREADS");
    if (request_threads_ == 0 && (omp_threads == nullptr || *omp_threads == '\0')) {
      request_threads_ = static_cast<int>(std::max<std::size_t>(1, util::usable_cpus()));
    }
    log_->info("{}: serving (incarnation {:016x}, {})", label_, incarnation_,
               request_threads_ > 0 ? fmt::format("{} thread{} a request", request_threads_, request_threads_ == 1 ? "" : "s")
                                    : std::string("OMP_NUM_THREADS threads a request"));
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() {
    stop();
    if (thread_.joinable()) thread_.join();
  }

  void stop() {
    stop_.store(true);
    std::lock_guard lock(stopped_mutex_);
    stopped_cv_.notify_all();
  }

  bool wait_stopped(net::Deadline deadline) {
    std::unique_lock lock(stopped_mutex_);
    return stopped_cv_.wait_until(lock, deadline, [&] { return stop_.load(); });
  }

  void check() const {
    if (failed_.load()) std::rethrow_exception(error_);
  }

  void abort(const std::string& reason) {
    std::lock_guard lock(abort_mutex_);
    abort_reason_ = reason;
  }

  Connections connections() const {
    std::lock_guard lock(connections_mutex_);
    Connections out = connections_;
    out.missing_s = below_expected_since_ ? net::seconds_since(*below_expected_since_) : 0.0;
    return out;
  }

  std::vector<TableStats> stats() const {
    std::lock_guard lock(mutex_);
    std::vector<TableStats> out;
    for (const auto& [key, state] : tables_) out.push_back(state->table.stats());
    return out;
  }

  std::size_t tracked_requests() const {
    std::lock_guard lock(mutex_);
    return log_requests_.tracked();
  }

  void save_checkpoint(const std::string& path) const {
    std::lock_guard lock(mutex_);
    std::vector<const ServerTable*> tables;
    for (const auto& [key, state] : tables_) tables.push_back(&state->table);
    write_shard_checkpoint(path, options_.shard, options_.num_shards, tables);
    log_checkpoint_written(path, tables);
  }

  // One line per checkpoint (each table's at debug level).
  void log_checkpoint_written(const std::string& path, const std::vector<const ServerTable*>& tables) const {
    std::int64_t rows = 0;
    for (const ServerTable* t : tables) {
      const TableStats s = t->stats();
      log_->debug("{}: checkpoint {}: table {} {} rows", label_, path, s.name, s.rows);
      rows += s.rows;
    }
    log_->info("{}: wrote checkpoint {}: {} table{}, {} rows", label_, path, tables.size(),
               tables.size() == 1 ? "" : "s", rows);
  }

  void load_checkpoint(const std::string& path) {
    ShardCheckpoint checkpoint = read_shard_checkpoint(path);
    std::lock_guard lock(mutex_);
    restore(checkpoint, path);
  }

  const std::string& endpoint() const { return endpoint_; }
  int shard() const { return options_.shard; }
  int num_shards() const { return options_.num_shards; }

 private:
  void run() {
    // Parallel regions this thread starts (the store's partition loops) use this many threads.
    if (request_threads_ > 0) omp_set_num_threads(request_threads_);
    try {
      auto last_log = net::Clock::now();
      std::vector<net::Message> parts;
      zmq_pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                 {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
      while (!stop_.load()) {
        if (zmq_poll(items, 2, 50) < 0 && zmq_errno() != EINTR) socket_.fail("zmq_poll");
        read_connection_events();
        if (std::string reason = take_abort_reason(); !reason.empty()) {
          std::lock_guard lock(mutex_);
          answer_waiting_with(reason);
          break;
        }
        // Bounded batches, so the stop flag and held pulls are checked regularly.
        for (int i = 0; i < 256 && !stop_.load(); ++i) {
          if (!detail::try_recv_parts(socket_.handle(), parts, label_)) break;
          std::lock_guard lock(mutex_);
          handle(std::move(parts));
          parts.clear();
        }
        std::lock_guard lock(mutex_);
        expire_deferred();
        if (options_.log_interval_s > 0 &&
            net::seconds_since(last_log) >= options_.log_interval_s) {
          log_tables();
          last_log = net::Clock::now();
        }
      }
    } catch (...) {
      error_ = std::current_exception();
      failed_.store(true);
      log_->error("{}: request loop stopped by an error", label_);
    }
    {
      std::lock_guard lock(mutex_);
      log_tables();
    }
    stop();
  }

  std::string take_abort_reason() {
    std::lock_guard lock(abort_mutex_);
    return std::exchange(abort_reason_, std::string());
  }

  // Request thread, under mutex_.
  void answer_waiting_with(const std::string& reason) {
    for (auto& [key, state] : tables_) {
      if (state->sync) {
        const std::string waiting = state->sync->describe_waiting();
        for (const Contribution& c : state->sync->take_waiting()) {
          reply_error(*std::static_pointer_cast<const Received>(c.owner),
                      fmt::format("{}; table '{}' {}", reason, state->table.name(), waiting));
        }
        if (!waiting.empty()) log_->error("{}: {}; table '{}' {}", label_, reason, state->table.name(), waiting);
      }
      for (const Deferred& d : state->deferred) {
        reply_error(*d.request, fmt::format("{}; table '{}': pull held for bounded staleness",
                                            reason, state->table.name()));
      }
      state->deferred.clear();
    }
  }

  void read_connection_events() {
    while (const auto event = net::try_recv_monitor_event(monitor_.handle())) {
      switch (connection_events_.interpret(*event)) {
        case net::ConnectionEvents::Meaning::refused:
          socket_.context()->report_failed_handshake(endpoint_, true, event->event, event->value);
          break;
        case net::ConnectionEvents::Meaning::up: {
          std::lock_guard lock(connections_mutex_);
          ++connections_.open;
          connections_.peak = std::max(connections_.peak, connections_.open);
          if (connections_.open >= options_.expected_clients) below_expected_since_.reset();
          break;
        }
        case net::ConnectionEvents::Meaning::down: {
          std::lock_guard lock(connections_mutex_);
          connections_.open = std::max(0, connections_.open - 1);
          // Only once every expected client has connected: before, fewer is the normal start.
          if (options_.expected_clients > 0 && connections_.peak >= options_.expected_clients &&
              connections_.open < options_.expected_clients && !below_expected_since_) {
            below_expected_since_ = net::Clock::now();
          }
          log_->info("{}: a client's connection closed ({} open)", label_, connections_.open);
          break;
        }
        default:
          break;
      }
    }
  }

  // One line for the shard (the per-table lines are at debug level: a model with hundreds of
  // tables would print hundreds of lines per shard every log interval).
  void log_tables() {
    announce_registrations();
    if (tables_.empty()) return;
    TableStats all;
    const TableStats* largest = nullptr;
    std::vector<TableStats> stats;
    stats.reserve(tables_.size());
    for (const auto& [key, state] : tables_) stats.push_back(state->table.stats());
    for (const TableStats& s : stats) {
      log_->debug("{}: table {}: {}", label_, s.name, describe_rows(s));
      all.rows += s.rows;
      all.memory_bytes += s.memory_bytes;
      all.row_bytes += s.row_bytes;
      all.pulled_rows += s.pulled_rows;
      all.pushed_rows += s.pushed_rows;
      all.evicted_rows += s.evicted_rows;
      if (largest == nullptr || s.rows > largest->rows) largest = &s;
    }
    if (stats.size() == 1) {
      log_->info("{}: table {}: {}", label_, largest->name, describe_rows(all));
    } else {
      log_->info("{}: {} tables: {}; the largest {} ({} rows)", label_, stats.size(), describe_rows(all),
                 largest->name, largest->rows);
    }
  }

  static std::string describe_rows(const TableStats& s) {
    return fmt::format("{} rows, {:.1f} MiB ({:.1f} B/row, {:.2f}x the raw {:.1f} B/row), {} rows pulled, {} "
                       "pushed{}",
                       s.rows, s.memory_bytes / 1048576.0, s.rows ? double(s.memory_bytes) / double(s.rows) : 0.0,
                       s.row_bytes ? double(s.memory_bytes) / double(s.row_bytes) : 0.0,
                       s.rows ? double(s.row_bytes) / double(s.rows) : 0.0, s.pulled_rows, s.pushed_rows,
                       s.evicted_rows > 0 ? fmt::format(", {} evicted", s.evicted_rows) : std::string());
  }

  // The tables registered since the last announcement, one line per kind (width, optimiser,
  // consistency): workers register all their tables before their first pull, which is when this
  // runs (and at the end).
  void announce_registrations() {
    while (!unannounced_.empty()) {
      const std::string what = unannounced_.front().what;
      std::vector<std::string> names, sources;
      std::erase_if(unannounced_, [&](const Registration& r) {
        if (r.what != what) return false;
        names.push_back(r.name);
        if (std::find(sources.begin(), sources.end(), r.source) == sources.end()) sources.push_back(r.source);
        return true;
      });
      if (names.size() == 1) {
        log_->info("{}: table {} ({}) registered by {}", label_, names.front(), what, sources.front());
      } else {
        log_->info("{}: {} tables ({}) registered by {}: {}", label_, names.size(), what,
                   config::join_names(sources, kNamedTables), config::join_names(names, kNamedTables));
      }
    }
  }

  void check_shard_of(const ShardCheckpoint& checkpoint, const std::string& path) const {
    if (checkpoint.shard != options_.shard || checkpoint.num_shards != options_.num_shards) {
      throw DataError(fmt::format("{}: checkpoint of shard {} of {}, but this is shard {} of {}",
                                  path, checkpoint.shard, checkpoint.num_shards, options_.shard,
                                  options_.num_shards));
    }
  }

  // Requires mutex_.
  void restore(const ShardCheckpoint& checkpoint, const std::string& path) {
    check_shard_of(checkpoint, path);
    // Every table is checked before any table changes: a mismatch found at the second table
    // used to leave the first one restored and the shard half loaded. A table the workers have
    // registered keeps their settings (learning rate, consistency, worker count, admission,
    // eviction may all change between runs); its rows only need the same width and optimiser
    // state layout.
    for (const TableConfig& config : checkpoint.tables) {
      auto it = tables_.find(table_key(config.spec.name));
      if (it == tables_.end()) continue;
      if (const std::string misfit = rows_misfit(config, *it->second); !misfit.empty()) {
        throw DataError(fmt::format("{}: table '{}' in the checkpoint does not fit the one registered (nothing was "
                                    "loaded): {}",
                                    path, config.spec.name, misfit));
      }
    }
    std::vector<std::string> names;
    std::int64_t rows = 0;
    for (const TableConfig& config : checkpoint.tables) {
      auto it = tables_.find(table_key(config.spec.name));
      TableState* state = it != tables_.end() ? it->second.get() : nullptr;
      if (state == nullptr) {
        // Nobody registered it yet (aiacc-ps-server --load): the first create_table may still
        // give it that job's settings.
        state = &register_table(config, path);
        state->from_file = true;
      }
      state->table.load_rows(checkpoint.tensors);
      log_->debug("{}: restored table {} from {}: {} rows", label_, config.spec.name, path,
                  state->table.store().num_rows());
      names.push_back(config.spec.name);
      rows += state->table.store().num_rows();
    }
    if (names.empty()) {
      log_->info("{}: {} holds no tables", label_, path);
    } else if (names.size() == 1) {
      log_->info("{}: restored table {} from {}: {} rows", label_, names.front(), path, rows);
    } else {
      log_->info("{}: restored {} tables from {} ({} rows): {}", label_, names.size(), path, rows,
                 config::join_names(names, kNamedTables));
    }
  }

  // "" where rows saved under `saved` fit the table `registered` (the same width, optimiser and
  // optimiser state layout: the other settings may differ), else what does not fit.
  static std::string rows_misfit(const TableConfig& saved, const TableState& registered) {
    const TableConfig& now = registered.table.config();
    const int saved_state = optim::SparseRowOptimizer(saved.optimizer).state_floats(static_cast<int>(saved.spec.dim));
    const int state = registered.table.store().state_floats();
    if (now.spec.dim == saved.spec.dim && now.optimizer.type == saved.optimizer.type && state == saved_state) return {};
    return fmt::format("dim {} and {} optimiser with {} state floats a row there, dim {} and {} with {} here; "
                       "differences: {}",
                       saved.spec.dim, saved.optimizer.type, saved_state, now.spec.dim, now.optimizer.type, state,
                       config::format_differences(
                           config::yaml_differences(encode_table_config(saved), registered.table.config_yaml())));
  }

  TableState& register_table(const TableConfig& config, const std::string& source) {
    const std::uint64_t key = table_key(config.spec.name);
    auto it = tables_.find(key);
    if (it == tables_.end()) {
      auto state = std::make_unique<TableState>(config, options_.num_partitions);
      const std::string what = fmt::format("dim {}, {} optimiser, {} consistency", config.spec.dim,
                                           config.optimizer.type, config.options.consistency);
      log_->debug("{}: table {} ({}) registered by {}", label_, config.spec.name, what, source);
      unannounced_.push_back({config.spec.name, what, source});
      return *tables_.emplace(key, std::move(state)).first->second;
    }
    TableState& existing = *it->second;
    const std::string yaml = encode_table_config(config);
    if (existing.table.config_yaml() == yaml) {
      existing.from_file = false;
      return existing;
    }
    if (existing.from_file) {
      // Loaded by --load before any worker registered it: the job's settings win, and the rows
      // move over when they fit (as a trainer's load into its own registered table does).
      TableState probe(config, 1);
      if (const std::string misfit = rows_misfit(existing.table.config(), probe); !misfit.empty()) {
        throw ConfigError(fmt::format("{}: table '{}' from {} does not fit the rows loaded from a checkpoint: {}",
                                      label_, config.spec.name, source, misfit));
      }
      auto replacement = std::make_unique<TableState>(config, options_.num_partitions);
      replacement->table.load_rows(existing.table.save_rows());
      log_->info("{}: table {} (loaded from a checkpoint) takes the settings of {}: {}", label_, config.spec.name,
                 source, config::format_differences(config::yaml_differences(existing.table.config_yaml(), yaml)));
      it->second = std::move(replacement);
      return *it->second;
    }
    throw ConfigError(fmt::format("{}: table '{}' from {} differs from the one registered: {}", label_,
                                  config.spec.name, source,
                                  config::format_differences(config::yaml_differences(existing.table.config_yaml(), yaml))));
  }

  TableState& table_of(const RequestHeader& h) {
    auto it = tables_.find(h.table);
    if (it == tables_.end()) {
      throw CommError(fmt::format("{}: {} for an unknown table (key {:#x}): create_table first",
                                  label_, op_name(h.op), h.table));
    }
    return *it->second;
  }

  void handle(std::vector<net::Message> parts) {
    if (parts.size() < 2) {
      log_->warn("{}: dropped a message of {} frames (expected routing id + header)", label_,
                 parts.size());
      return;
    }
    auto request = std::make_shared<Received>();
    request->parts = std::move(parts);  // no more moves of the frames from here on
    const auto routing = request->parts[0].bytes();
    request->routing.assign(reinterpret_cast<const char*>(routing.data()), routing.size());
    try {
      request->header = decode_request_header(request->parts[1].bytes(), label_);
    } catch (const CommError& e) {
      log_->warn("{}: dropped a request: {}", label_, e.what());
      return;
    }
    const RequestHeader& h = request->header;
    try {
      dispatch(request);
    } catch (const std::exception& e) {
      log_->warn("{}: {} from worker {} (step {}, seq {}) failed: {}", label_, op_name(h.op),
                 h.worker, h.step, h.seq, e.what());
      reply_error(*request, e.what());
    }
  }

  // Checks the frame count and sizes of a pull/push and fills the typed views.
  void parse_rows(Received& r, const TableState& state, bool with_grads) {
    const RequestHeader& h = r.header;
    const std::size_t expected_parts = with_grads ? 4 : 3;
    if (r.parts.size() != expected_parts) {
      throw CommError(fmt::format("{} with {} frames (expected {})", op_name(h.op),
                                  r.parts.size() - 1, expected_parts - 1));
    }
    if (h.dim != static_cast<std::uint32_t>(state.table.dim())) {
      throw CommError(fmt::format("{} of table '{}' with dim {} (the table has dim {})",
                                  op_name(h.op), state.table.name(), h.dim, state.table.dim()));
    }
    const auto id_bytes = r.parts[2].bytes();
    // Compared by division: count x 8 (x dim x 4) computed from a hostile count can wrap around
    // to the frame's size.
    if (id_bytes.size() % sizeof(std::int64_t) != 0 || id_bytes.size() / sizeof(std::int64_t) != h.count) {
      throw CommError(fmt::format("{}: ids frame of {} bytes for {} ids", op_name(h.op),
                                  id_bytes.size(), h.count));
    }
    r.ids = detail::frame_as(id_bytes, r.id_copy);
    if (with_grads) {
      const auto grad_bytes = r.parts[3].bytes();
      if (grad_bytes.size() != r.ids.size() * h.dim * sizeof(float)) {
        throw CommError(fmt::format("push: gradient frame of {} bytes for {} ids of dim {}",
                                    grad_bytes.size(), h.count, h.dim));
      }
      r.grads = detail::frame_as(grad_bytes, r.grad_copy).data();
    }
  }

  void dispatch(const std::shared_ptr<Received>& request) {
    Received& r = *request;
    const RequestHeader& h = r.header;
    // Every request takes a seq from the client's one counter per shard: control requests are
    // recorded too (their repeats are harmless and served again), or the floor of the log
    // would stop below the first of them and every later pull and push stay tracked above it.
    if (h.op != Op::pull && h.op != Op::push) log_requests_.record(h.worker, h.session, h.seq);
    if (h.op != Op::create_table) announce_registrations();
    switch (h.op) {
      case Op::create_table: {
        if (r.parts.size() != 3) throw CommError("create_table without its config frame");
        const TableConfig config = decode_table_config(
            as_text(r.parts[2].bytes()), fmt::format("create_table from worker {}", h.worker));
        register_table(config, fmt::format("worker {}", h.worker));
        reply(r, Status::ok, 0, 0);
        return;
      }
      case Op::pull: {
        TableState& state = table_of(h);
        parse_rows(r, state, false);
        if ((h.flags & kPullReadOnly) != 0) {
          // Recorded like any request (its sequence number would otherwise stay a gap below
          // every later one, and the retry log could never drop them), but served whether or
          // not it is a retry, and without telling the clock a step.
          log_requests_.record(h.worker, h.session, h.seq);
          serve_pull(state, r, /*repeat=*/false, /*read_only=*/true);
          return;
        }
        const bool is_new = log_requests_.record(h.worker, h.session, h.seq);
        if (state.clock) {
          // The pull says how many steps its worker has completed (a resumed worker pulls
          // before it pushes), which may release other workers' held pulls.
          const std::uint64_t slowest = state.clock->min_clock();
          state.clock->completed(static_cast<int>(h.worker), h.step);
          if (state.clock->min_clock() != slowest) serve_deferred(state);
        }
        if (state.clock && !state.clock->may_serve(h.step)) {
          if (!is_new && is_deferred(state, h)) return;  // a retry of a pull still held
          state.deferred.push_back({request, net::Clock::now(), !is_new});
          return;
        }
        serve_pull(state, r, !is_new);
        return;
      }
      case Op::push: {
        TableState& state = table_of(h);
        parse_rows(r, state, true);
        handle_push(state, request);
        return;
      }
      case Op::stats: reply_text(r, stats_json()); return;
      case Op::save:
      case Op::load: {
        if (r.parts.size() != 3) throw CommError(fmt::format("{} without its path frame", op_name(h.op)));
        const std::string path(as_text(r.parts[2].bytes()));
        if (h.op == Op::save) {
          std::vector<const ServerTable*> tables;
          for (const auto& [key, state] : tables_) tables.push_back(&state->table);
          write_shard_checkpoint(path, options_.shard, options_.num_shards, tables);
          log_checkpoint_written(path, tables);
        } else {
          restore(read_shard_checkpoint(path), path);
        }
        reply_text(r, path);
        return;
      }
      case Op::dump_rows: serve_dump(table_of(h), r); return;
      case Op::load_rows: restore_rows(table_of(h), r); return;
      case Op::shutdown:
        log_->info("{}: shutdown requested by worker {}", label_, h.worker);
        reply(r, Status::ok, 0, 0);
        stop_.store(true);
        return;
    }
  }

  bool is_deferred(const TableState& state, const RequestHeader& h) const {
    for (const Deferred& d : state.deferred) {
      if (d.request->header.worker == h.worker && d.request->header.seq == h.seq) return true;
    }
    return false;
  }

  void handle_push(TableState& state, const std::shared_ptr<Received>& request) {
    Received& r = *request;
    const RequestHeader& h = r.header;
    if (options_.fault_after_step_for_testing >= 0 &&
        static_cast<std::int64_t>(h.step) > options_.fault_after_step_for_testing && !fault_injected_.exchange(true)) {
      log_->warn("{}: test fault injection: signal {} at a push of step {}", label_,
                 options_.fault_signal_for_testing, h.step);
      std::raise(options_.fault_signal_for_testing);
    }
    if (state.clock && h.worker >= static_cast<std::uint32_t>(state.table.config().options.num_workers)) {
      // Checked before recording or applying: a push the clock cannot account for must change nothing.
      throw CommError(fmt::format("push to table '{}' from worker {}, but the table has {} workers",
                                  state.table.name(), h.worker,
                                  state.table.config().options.num_workers));
    }
    if (!log_requests_.record(h.worker, h.session, h.seq)) {
      // A retry or duplicate: applied once already (or waiting in its step's aggregate, whose
      // reply will answer it).
      if (state.sync && state.sync->pending(static_cast<int>(h.worker), h.seq)) return;
      ++state.table.counters().duplicate_pushes;
      reply(r, Status::duplicate, 0, 0);
      return;
    }
    if (state.sync) {
      Contribution c;
      c.worker = static_cast<int>(h.worker);
      c.seq = h.seq;
      c.ids = r.ids;
      c.grads = r.grads;
      c.lr = h.lr;
      c.owner = request;
      c.reply_to = r.routing;
      state.sync->add(h.step, std::move(c));
      ReadyStep ready;
      while (state.sync->pop_ready(ready)) {
        try {
          if (static_cast<std::int64_t>(ready.step) == options_.fail_sync_step_for_testing) {
            throw Error("injected failure (fail_sync_step_for_testing)");
          }
          state.table.push(ready.ids, ready.grads.data(), ready.lr, ready.step);
        } catch (const std::exception& e) {
          // The step's contributions have left the aggregator: every worker must hear that it
          // failed (this request from the caller's handler). Unanswered, their retries would be
          // taken for repeats of applied pushes and acknowledged.
          for (const Contribution& failed : ready.contributions) {
            if (failed.owner != request) {
              reply_error(*std::static_pointer_cast<const Received>(failed.owner),
                          fmt::format("sync step {} of table '{}' could not be applied: {}", ready.step,
                                      state.table.name(), e.what()));
            }
          }
          throw;
        }
        for (const Contribution& done : ready.contributions) {
          reply(*std::static_pointer_cast<const Received>(done.owner), Status::ok, 0, 0);
        }
      }
      return;
    }
    state.table.push(r.ids, r.grads, h.lr, h.step);
    if (options_.drop_push_replies_for_testing > dropped_replies_) {
      ++dropped_replies_;
    } else {
      reply(r, Status::ok, 0, 0);
    }
    if (state.clock) {
      state.clock->advance(static_cast<int>(h.worker), h.step);
      serve_deferred(state);
    }
  }

  void serve_deferred(TableState& state) {
    for (auto it = state.deferred.begin(); it != state.deferred.end();) {
      if (state.clock->may_serve(it->request->header.step)) {
        serve_pull(state, *it->request, it->repeat);
        it = state.deferred.erase(it);
      } else {
        ++it;
      }
    }
  }

  void expire_deferred() {
    // A synchronous step that some worker never pushes (it froze, or its host did) is given up
    // before the pushing workers' own deadlines (ps.timeout_s), so that they hear who is
    // missing: a timeout on their side could only blame this shard, which is alive.
    const double sync_give_up_s = 0.8 * options_.wait_timeout_s;
    std::vector<std::string> given_up;
    std::string last_reason;
    for (auto& [key, state] : tables_) {
      if (!state->sync || state->sync->oldest_wait_seconds() <= sync_give_up_s) continue;
      last_reason = fmt::format("table '{}' {} for {:.0f} s, giving up on the step (that worker's process may be "
                                "stopped or its host unreachable, or it may be waiting for another shard)",
                                state->table.name(), state->sync->describe_waiting(),
                                state->sync->oldest_wait_seconds());
      for (const Contribution& c : state->sync->take_waiting()) {
        reply_error(*std::static_pointer_cast<const Received>(c.owner), last_reason);
      }
      given_up.push_back(state->table.name());
    }
    if (given_up.size() == 1) log_->error("{}: {}", label_, last_reason);
    if (given_up.size() > 1) {
      log_->error("{}: {} (and likewise tables {})", label_, last_reason, fmt::join(given_up.begin(), given_up.end() - 1, ", "));
    }
    for (auto& [key, state] : tables_) {
      while (!state->deferred.empty() &&
             net::seconds_since(state->deferred.front().since) > options_.wait_timeout_s) {
        const Received& r = *state->deferred.front().request;
        reply_error(r, fmt::format("pull of table '{}' at step {} held {:.0f} s for bounded "
                                   "staleness {}: the slowest worker {} has completed {} steps",
                                   state->table.name(), r.header.step, options_.wait_timeout_s,
                                   state->clock->staleness(), state->clock->slowest_worker(),
                                   state->clock->min_clock()));
        state->deferred.pop_front();
      }
    }
  }

  // A `repeat` (a retry whose first copy was served) is served again but not counted twice.
  void serve_pull(TableState& state, const Received& r, bool repeat, bool read_only = false) {
    if (state.clock && !read_only) {
      auto& max_lag = state.table.counters().max_staleness;
      max_lag = std::max(max_lag, state.clock->lag(r.header.step));
    }
    const auto dim = static_cast<std::size_t>(state.table.dim());
    detail::OutFrame rows(r.ids.size() * dim * sizeof(float));
    auto read = [&](float* out) {
      if (read_only) {
        state.table.peek(r.ids, out);
      } else {
        state.table.pull(r.ids, out, r.header.step, repeat);
      }
    };
    if (reinterpret_cast<std::uintptr_t>(rows.data()) % alignof(float) == 0) {
      read(reinterpret_cast<float*>(rows.data()));
    } else {
      std::vector<float> aligned(r.ids.size() * dim);
      read(aligned.data());
      std::memcpy(rows.data(), aligned.data(), rows.size());
    }
    send_reply_header(r, Status::ok, r.ids.size(), static_cast<std::uint32_t>(dim), true);
    rows.send(socket_.handle(), false, label_);
  }

  void serve_dump(TableState& state, const Received& r) {
    const auto tensors = state.table.save_rows();
    const std::int64_t count = tensors[0].second.dim(0);
    send_reply_header(r, Status::ok, static_cast<std::uint64_t>(count),
                      static_cast<std::uint32_t>(state.table.dim()), true);
    for (std::size_t i = 0; i < 3; ++i) {
      const Tensor& t = tensors[i].second;
      // The tensor's storage travels without a copy; the lambda's copy keeps it alive.
      auto owner = std::make_shared<Tensor>(t);
      detail::send_frame(socket_.handle(),
                         {static_cast<const std::byte*>(owner->raw_data()), owner->num_bytes()},
                         owner, i < 2, 0, label_);
    }
  }

  void restore_rows(TableState& state, const Received& r) {
    const RequestHeader& h = r.header;
    if (r.parts.size() != 5) throw CommError("load_rows without its ids, values and state frames");
    const int dim = state.table.dim();
    const int s = state.table.store().state_floats();
    // The row count comes from the wire: each frame must hold exactly that many rows, checked
    // by division before anything is allocated (a count such as 2^62 made count x 8 wrap to 0,
    // so empty frames passed and the store read 2^62 ids from a 64-byte tensor).
    auto check_rows = [&](const net::Message& part, std::size_t row_bytes, const char* what) {
      const bool ok = row_bytes == 0 ? part.size() == 0
                                     : part.size() % row_bytes == 0 && part.size() / row_bytes == h.count;
      if (!ok) {
        throw CommError(fmt::format("load_rows of table '{}': {} frame of {} bytes for {} rows of {} bytes",
                                    state.table.name(), what, part.size(), h.count, row_bytes));
      }
    };
    check_rows(r.parts[2], sizeof(std::int64_t), "ids");
    check_rows(r.parts[3], static_cast<std::size_t>(dim) * sizeof(float), "values");
    check_rows(r.parts[4], static_cast<std::size_t>(s) * sizeof(float), "state");
    const auto count = static_cast<std::int64_t>(h.count);  // <= frame bytes / 8: fits
    auto tensor_of = [&](const net::Message& part, DType dtype, const Shape& shape) {
      Tensor t = Tensor::empty(shape, dtype);
      if (part.size() != t.num_bytes()) {
        throw CommError(fmt::format("load_rows of table '{}': frame of {} bytes for {} {}",
                                    state.table.name(), part.size(), dtype_name(dtype), shape.str()));
      }
      if (part.size() > 0) std::memcpy(t.raw_data(), part.bytes().data(), part.size());
      return t;
    };
    const std::string& name = state.table.name();
    state.table.load_rows({{name + ".ids", tensor_of(r.parts[2], DType::i64, Shape{count})},
                           {name + ".values", tensor_of(r.parts[3], DType::f32, Shape{count, dim})},
                           {name + ".state", tensor_of(r.parts[4], DType::f32, Shape{count, s})}});
    reply(r, Status::ok, h.count, static_cast<std::uint32_t>(dim));
  }

  std::string stats_json() const {
    nlohmann::json tables = nlohmann::json::array();
    for (const auto& [key, state] : tables_) {
      const TableStats s = state->table.stats();
      tables.push_back({{"name", s.name}, {"rows", s.rows}, {"memory_bytes", s.memory_bytes},
                        {"row_bytes", s.row_bytes}, {"pulled_rows", s.pulled_rows},
                        {"pushed_rows", s.pushed_rows}, {"duplicate_pushes", s.duplicate_pushes},
                        {"max_staleness", s.max_staleness},
                        {"not_admitted_rows", s.not_admitted_rows},
                        {"evicted_rows", s.evicted_rows}});
    }
    return nlohmann::json{{"shard", options_.shard}, {"num_shards", options_.num_shards},
                          {"tables", tables}}.dump();
  }

  void send_reply_header(const Received& r, Status status, std::uint64_t count, std::uint32_t dim,
                         bool more) {
    ReplyHeader header;
    header.op = r.header.op;
    header.status = status;
    header.seq = r.header.seq;
    header.count = count;
    header.dim = dim;
    header.incarnation = incarnation_;
    detail::send_frame(socket_.handle(), as_bytes(r.routing), nullptr, true, -1, label_);
    detail::send_frame(socket_.handle(), header_bytes(header), nullptr, more, -1, label_);
  }

  void reply(const Received& r, Status status, std::uint64_t count, std::uint32_t dim) {
    send_reply_header(r, status, count, dim, false);
  }

  void reply_text(const Received& r, const std::string& text) {
    send_reply_header(r, Status::ok, 0, 0, true);
    detail::send_frame(socket_.handle(), as_bytes(text), nullptr, false, -1, label_);
  }

  void reply_error(const Received& r, const std::string& message) {
    try {
      send_reply_header(r, Status::error, 0, 0, true);
      detail::send_frame(socket_.handle(), as_bytes(message), nullptr, false, -1, label_);
    } catch (const std::exception& e) {
      log_->warn("{}: could not send an error reply to worker {}: {}", label_, r.header.worker,
                 e.what());
    }
  }

  ServerOptions options_;
  std::uint64_t incarnation_ = 0;  // in every reply: tells this process from a restarted shard
  std::shared_ptr<spdlog::logger> log_;
  std::atomic<bool> fault_injected_{false};  // the test fault is raised once (SIGTERM is caught)
  net::Socket monitor_;  // socket_'s connection events (request thread); declared first, so
                         // socket_ (whose close stops the monitor) is destroyed before it
  net::Socket socket_;  // used by the request thread only, once it runs
  net::ConnectionEvents connection_events_;
  std::mutex abort_mutex_;
  std::string abort_reason_;  // under abort_mutex_: set by abort(), taken by the request thread
  mutable std::mutex connections_mutex_;
  Connections connections_;
  std::optional<net::Clock::time_point> below_expected_since_;
  std::string endpoint_;
  std::string label_;
  int request_threads_ = 0;  // OpenMP threads of a request (0: OMP_NUM_THREADS decides)
  mutable std::mutex mutex_;  // tables_ and their state: the request thread vs stats/checkpoints
  std::map<std::uint64_t, std::unique_ptr<TableState>> tables_;
  struct Registration {
    std::string name, what, source;
  };
  std::vector<Registration> unannounced_;  // request thread: tables registered but not logged yet
  RequestLog log_requests_;
  int dropped_replies_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex stopped_mutex_;
  std::condition_variable stopped_cv_;
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::thread thread_;
};

PsServer::PsServer(const ServerOptions& options, std::shared_ptr<net::Context> context,
                   const ShardCheckpoint* initial)
    : impl_(std::make_unique<Impl>(options, std::move(context), initial)) {}
PsServer::~PsServer() = default;
const std::string& PsServer::endpoint() const { return impl_->endpoint(); }
int PsServer::shard() const { return impl_->shard(); }
int PsServer::num_shards() const { return impl_->num_shards(); }
void PsServer::abort(const std::string& reason) { impl_->abort(reason); }
void PsServer::stop() { impl_->stop(); }
bool PsServer::wait_stopped(net::Deadline deadline) const { return impl_->wait_stopped(deadline); }
void PsServer::check() const { impl_->check(); }
PsServer::Connections PsServer::connections() const { return impl_->connections(); }

std::vector<TableStats> PsServer::stats() const { return impl_->stats(); }
std::size_t PsServer::tracked_requests() const { return impl_->tracked_requests(); }
void PsServer::save_checkpoint(const std::string& path) const { impl_->save_checkpoint(path); }
void PsServer::load_checkpoint(const std::string& path) { impl_->load_checkpoint(path); }

}  // namespace aiacc::ps
