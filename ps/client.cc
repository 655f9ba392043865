// PsClient: de-duplication, sharding and request building; control requests to every shard.
#include "ps/client.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/kernels/dedup.h"
#include "core/kernels/row_copy.h"
#include "core/optim/sparse_row_optimizer.h"
#include "ps/detail/client_io.h"
#include "ps/sharding.h"
#include "ps/shard_checkpoint.h"

namespace aiacc::ps {
namespace {

template <class T>
std::shared_ptr<const void> share(std::vector<T>&& values, std::span<const std::byte>& bytes) {
  auto owner = std::make_shared<std::vector<T>>(std::move(values));
  bytes = {reinterpret_cast<const std::byte*>(owner->data()), owner->size() * sizeof(T)};
  return owner;
}

// The bytes of values [begin, end) of an array the request's owners keep alive.
template <class T>
std::span<const std::byte> slice_bytes(const T* values, std::size_t begin, std::size_t end) {
  return {reinterpret_cast<const std::byte*>(values + begin), (end - begin) * sizeof(T)};
}

}  // namespace

PsClient::PsClient(ClientOptions options, std::shared_ptr<net::Context> context)
    : options_(std::move(options)), session_(random_process_id()) {
  if (options_.endpoints.empty()) throw ConfigError("ps client: no shard endpoints");
  if (!context) context = net::Context::create(1);
  io_ = std::make_unique<detail::ClientIo>(options_, std::move(context));
}

PsClient::~PsClient() = default;

const TableConfig& PsClient::table_config(const std::string& name) const {
  std::lock_guard lock(tables_mutex_);
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    throw ConfigError(fmt::format("ps client: table '{}' was not created (create_table first)", name));
  }
  return it->second;  // std::map nodes are stable; entries are never erased
}

const TableConfig& PsClient::table(const std::string& name) const { return table_config(name); }

std::size_t PsClient::chunk_rows(std::size_t dim) const {
  if (options_.chunk_bytes <= 0) return std::numeric_limits<std::size_t>::max();
  return std::max<std::size_t>(1, static_cast<std::size_t>(options_.chunk_bytes) / (dim * sizeof(float)));
}

detail::OutRequest PsClient::make_request(const std::shared_ptr<detail::TicketState>& ticket,
                                          int shard, Op op, const std::string& table,
                                          std::uint64_t step, std::size_t count, std::size_t dim) {
  detail::OutRequest r;
  r.ticket = ticket;
  r.shard = shard;
  r.header.op = op;
  r.header.table = table_key(table);
  r.header.worker = static_cast<std::uint32_t>(options_.worker);
  r.header.session = session_;
  r.header.step = step;
  r.header.seq = io_->next_seq(shard);
  r.header.count = count;
  r.header.dim = static_cast<std::uint32_t>(dim);
  return r;
}

void PsClient::create_table(const TableConfig& config) {
  broadcast(Op::create_table, table_key(config.spec.name), encode_table_config(config), {});
  // The shards accepted it, so any earlier registration of this name is the same config:
  // keep the first (references handed out by table() stay valid and unchanged).
  std::lock_guard lock(tables_mutex_);
  tables_.try_emplace(config.spec.name, config);
}

Ticket PsClient::submit(std::shared_ptr<detail::TicketState> t, std::vector<detail::OutRequest> requests) {
  t->remaining = static_cast<int>(requests.size());
  if (requests.empty()) {
    t->done = true;  // nothing to send (no ids): the ticket is complete at once
  } else {
    io_->submit(std::move(requests));
  }
  return Ticket(std::move(t));
}

Ticket PsClient::pull(const std::string& table, std::span<const std::int64_t> ids, float* rows,
                      std::uint64_t step, RequestIds kind, bool read_only) {
  const TableConfig& config = table_config(table);
  AIACC_CHECK(rows != nullptr || ids.empty(), "pull of table '{}' into a null buffer", table);
  auto t = std::make_shared<detail::TicketState>();
  t->what = fmt::format("pull of table '{}' (step {}, {} ids)", table, step, ids.size());
  t->dim = static_cast<std::size_t>(config.spec.dim);
  t->out = rows;
  thread_local kernels::IdDeduplicator deduplicator;
  kernels::DedupResult dedup;
  std::span<const std::int64_t> unique = ids;
  if (kind == RequestIds::may_repeat) {
    deduplicator.run(ids, dedup);
    unique = dedup.unique_ids;
  }
  if (unique.size() < ids.size()) {
    t->unique_rows.resize(unique.size() * t->dim);
    t->dest = t->unique_rows.data();
    t->inverse = std::move(dedup.inverse);
  } else {
    t->dest = rows;
  }
  ShardSplit split = split_by_shard(unique, num_shards());
  t->positions = std::move(split.positions);
  // A bounded table's pull tells every shard the worker's step; a read-only one tells none.
  const bool all_shards = config.options.consistency == "bounded" && !read_only;
  const std::size_t chunk = chunk_rows(t->dim);
  std::vector<detail::OutRequest> requests;
  for (int k = 0; k < num_shards(); ++k) {
    const auto ks = static_cast<std::size_t>(k);
    if (split.ids[ks].empty() && !all_shards) continue;
    // Large requests go as several chunks, so every copy on the way (rows into the reply
    // frame, the kernel's, the scatter) stays in cache instead of streaming through memory.
    // The chunks' id frames are slices of the shard's id list, which they keep alive.
    const auto ids_owner = std::make_shared<const std::vector<std::int64_t>>(std::move(split.ids[ks]));
    for (std::size_t begin = 0; begin == 0 || begin < ids_owner->size(); begin += chunk) {
      const std::size_t end = std::min(ids_owner->size(), begin + std::min(chunk, ids_owner->size()));
      detail::OutRequest r = make_request(t, k, Op::pull, table, step, end - begin, t->dim);
      if (read_only) r.header.flags |= kPullReadOnly;
      r.frames.push_back(slice_bytes(ids_owner->data(), begin, end));
      r.owners.push_back(ids_owner);
      r.positions = std::span<const std::int64_t>(t->positions[ks]).subspan(begin, end - begin);
      r.send_twice = options_.duplicate_pulls_for_testing;
      requests.push_back(std::move(r));
    }
  }
  return submit(std::move(t), std::move(requests));
}

Ticket PsClient::push(const std::string& table, std::span<const std::int64_t> ids,
                      const float* grads, double lr, std::uint64_t step, RequestIds kind) {
  const TableConfig& config = table_config(table);
  AIACC_CHECK(grads != nullptr || ids.empty(), "push to table '{}' of a null gradient", table);
  auto t = std::make_shared<detail::TicketState>();
  t->what = fmt::format("push to table '{}' (step {}, {} ids)", table, step, ids.size());
  const auto d = static_cast<std::size_t>(config.spec.dim);
  t->dim = d;
  // Aggregate the gradient rows of repeated ids (sum), so each row is pushed once.
  thread_local kernels::IdDeduplicator deduplicator;
  kernels::DedupResult dedup;
  std::span<const std::int64_t> unique = ids;
  if (kind == RequestIds::may_repeat) {
    deduplicator.run(ids, dedup);
    unique = dedup.unique_ids;
  }
  std::vector<float> summed;
  const float* unique_grads = grads;
  if (unique.size() < ids.size()) {
    summed.assign(unique.size() * d, 0.0f);
    for (std::size_t p = 0; p < ids.size(); ++p) {
      float* row = summed.data() + static_cast<std::size_t>(dedup.inverse[p]) * d;
      for (std::size_t j = 0; j < d; ++j) row[j] += grads[p * d + j];
    }
    unique_grads = summed.data();
  }
  ShardSplit split = split_by_shard(unique, num_shards());
  // Sync and bounded tables count every worker's steps on every shard: they get one push per
  // shard and step (also when empty, never chunked). Async pushes are chunked like pulls.
  const bool whole = config.options.consistency != "async";
  const std::size_t chunk = whole ? std::numeric_limits<std::size_t>::max() : chunk_rows(d);
  struct ShardRows {
    int shard;
    std::shared_ptr<const std::vector<std::int64_t>> ids;
    const std::vector<std::int64_t>* positions;
    std::size_t chunks;
  };
  std::vector<ShardRows> shards;
  std::size_t max_chunks = 0;
  int total = 0;
  for (int k = 0; k < num_shards(); ++k) {
    const auto ks = static_cast<std::size_t>(k);
    if (split.ids[ks].empty() && !whole) continue;
    const std::size_t rows = split.ids[ks].size();
    const std::size_t chunks = rows == 0 ? 1 : (rows + std::min(chunk, rows) - 1) / std::min(chunk, rows);
    shards.push_back({k, std::make_shared<const std::vector<std::int64_t>>(std::move(split.ids[ks])),
                      &split.positions[ks], chunks});
    max_chunks = std::max(max_chunks, chunks);
    total += static_cast<int>(chunks);
  }
  t->remaining = total;
  if (total == 0) {
    t->done = true;
    return Ticket(std::move(t));
  }
  // Each chunk's gradient rows are gathered into a buffer of its own and handed to the I/O
  // thread at once, the shards' chunks in turn: the socket sends the gathered rows while they
  // are still in cache and while the next chunk is gathered, instead of after a gather of the
  // whole request through memory (at dim 128, 100k rows are 51 MB).
  for (std::size_t c = 0; c < max_chunks; ++c) {
    for (const ShardRows& s : shards) {
      if (c >= s.chunks) continue;
      const std::size_t rows = s.ids->size();
      const std::size_t begin = c * std::min(chunk, std::max<std::size_t>(rows, 1));
      const std::size_t end = std::min(rows, begin + std::min(chunk, rows));
      // Left uninitialised: every row is written.
      const std::shared_ptr<float[]> grads_owner(new float[std::max<std::size_t>((end - begin) * d, 1)]);
      for (std::size_t j = begin; j < end; ++j) {
        kernels::copy_row(grads_owner.get() + (j - begin) * d,
                          unique_grads + static_cast<std::size_t>((*s.positions)[j]) * d, d);
      }
      detail::OutRequest r = make_request(t, s.shard, Op::push, table, step, end - begin, d);
      r.header.lr = lr;
      r.frames = {slice_bytes(s.ids->data(), begin, end), slice_bytes(grads_owner.get(), 0, (end - begin) * d)};
      r.owners = {s.ids, grads_owner};
      r.send_twice = options_.duplicate_pushes_for_testing;
      std::vector<detail::OutRequest> one;
      one.push_back(std::move(r));
      io_->submit(std::move(one));
    }
  }
  return Ticket(std::move(t));
}

void PsClient::wait(const Ticket& ticket) {
  if (!ticket.valid()) return;
  detail::TicketState& t = *ticket.state_;
  std::unique_lock lock(t.mutex);
  // The I/O thread fails every request at its own deadline (timeout_s); this bound only
  // guards against that thread being stuck.
  const auto deadline = net::deadline_after(options_.timeout_s + 30.0);
  if (!t.cv.wait_until(lock, deadline, [&] { return t.done; })) {
    throw TimeoutError(fmt::format("ps client worker {}: {} not finished after {:.0f} s (the "
                                   "client's I/O thread is stuck)",
                                   options_.worker, t.what, options_.timeout_s + 30.0));
  }
  if (t.error) std::rethrow_exception(t.error);
}

void PsClient::release_after(const Ticket& ticket, std::shared_ptr<void> owner) {
  if (!ticket.valid()) return;
  detail::TicketState& t = *ticket.state_;
  std::lock_guard lock(t.mutex);
  if (!t.done) t.keep_alive.push_back(std::move(owner));
}

bool PsClient::ready(const Ticket& ticket) const {
  if (!ticket.valid()) return true;
  std::lock_guard lock(ticket.state_->mutex);
  return ticket.state_->done;
}

std::shared_ptr<detail::TicketState> PsClient::broadcast(
    Op op, std::uint64_t table, const std::string& payload_text,
    const std::vector<std::string>& per_shard_text) {
  auto t = std::make_shared<detail::TicketState>();
  t->what = fmt::format("{} request", op_name(op));
  t->replies.resize(static_cast<std::size_t>(num_shards()));
  std::vector<detail::OutRequest> requests;
  for (int k = 0; k < num_shards(); ++k) {
    detail::OutRequest r;
    r.ticket = t;
    r.shard = k;
    r.header.op = op;
    r.header.table = table;
    r.header.worker = static_cast<std::uint32_t>(options_.worker);
    r.header.session = session_;
    r.header.seq = io_->next_seq(k);
    const std::string& text =
        per_shard_text.empty() ? payload_text : per_shard_text[static_cast<std::size_t>(k)];
    if (!text.empty()) {
      std::vector<char> bytes(text.begin(), text.end());
      r.frames.resize(1);
      r.owners.push_back(share(std::move(bytes), r.frames[0]));
    }
    requests.push_back(std::move(r));
  }
  t->remaining = static_cast<int>(requests.size());
  io_->submit(std::move(requests));
  wait(Ticket(t));
  return t;
}

std::vector<std::vector<TableStats>> PsClient::stats() {
  auto t = broadcast(Op::stats, 0, "", {});
  std::vector<std::vector<TableStats>> out;
  for (const auto& reply : t->replies) {
    std::vector<TableStats> shard;
    const auto json = nlohmann::json::parse(as_text(reply.at(0).bytes()));
    for (const auto& j : json.at("tables")) {
      TableStats s;
      s.name = j.at("name").get<std::string>();
      s.rows = j.at("rows").get<std::int64_t>();
      s.memory_bytes = j.at("memory_bytes").get<std::size_t>();
      s.row_bytes = j.at("row_bytes").get<std::size_t>();
      s.pulled_rows = j.at("pulled_rows").get<std::int64_t>();
      s.pushed_rows = j.at("pushed_rows").get<std::int64_t>();
      s.duplicate_pushes = j.at("duplicate_pushes").get<std::int64_t>();
      s.max_staleness = j.at("max_staleness").get<std::int64_t>();
      s.not_admitted_rows = j.at("not_admitted_rows").get<std::int64_t>();
      s.evicted_rows = j.at("evicted_rows").get<std::int64_t>();
      shard.push_back(std::move(s));
    }
    out.push_back(std::move(shard));
  }
  return out;
}

std::vector<std::string> PsClient::save_checkpoint(const std::string& directory) {
  std::vector<std::string> paths;
  for (int k = 0; k < num_shards(); ++k) {
    paths.push_back((std::filesystem::path(directory) / shard_checkpoint_name(k, num_shards())).string());
  }
  broadcast(Op::save, 0, "", paths);
  return paths;
}

void PsClient::load_checkpoint(const std::string& directory) {
  std::vector<std::string> paths;
  for (int k = 0; k < num_shards(); ++k) {
    paths.push_back((std::filesystem::path(directory) / shard_checkpoint_name(k, num_shards())).string());
  }
  broadcast(Op::load, 0, "", paths);
}

std::vector<std::pair<std::string, Tensor>> PsClient::dump_rows(const std::string& table) {
  const TableConfig& config = table_config(table);
  const int dim = static_cast<int>(config.spec.dim);
  const int s = optim::SparseRowOptimizer(config.optimizer).state_floats(dim);
  auto t = broadcast(Op::dump_rows, table_key(table), "", {});
  // Merge the shards' sorted rows into one id-sorted set.
  struct Row { std::int64_t id; const std::byte* value; const std::byte* state; };
  std::vector<Row> rows;
  for (const auto& reply : t->replies) {
    if (reply.size() != 3) throw CommError(fmt::format("dump_rows of '{}': malformed reply", table));
    const std::size_t count = reply[0].size() / sizeof(std::int64_t);
    if (reply[1].size() != count * dim * sizeof(float) || reply[2].size() != count * s * sizeof(float)) {
      throw CommError(fmt::format("dump_rows of '{}': frames do not match {} rows", table, count));
    }
    for (std::size_t r = 0; r < count; ++r) {
      std::int64_t id;
      std::memcpy(&id, reply[0].bytes().data() + r * sizeof id, sizeof id);
      rows.push_back({id, reply[1].bytes().data() + r * dim * sizeof(float),
                      reply[2].bytes().data() + r * s * sizeof(float)});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.id < b.id; });
  const auto count = static_cast<std::int64_t>(rows.size());
  Tensor ids = Tensor::empty(Shape{count}, DType::i64);
  Tensor values = Tensor::empty(Shape{count, dim}, DType::f32);
  Tensor state = Tensor::empty(Shape{count, s}, DType::f32);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    ids.data<std::int64_t>()[r] = rows[r].id;
    std::memcpy(values.data<float>() + r * dim, rows[r].value, dim * sizeof(float));
    if (s > 0) std::memcpy(state.data<float>() + r * s, rows[r].state, s * sizeof(float));
  }
  return {{table + ".ids", ids}, {table + ".values", values}, {table + ".state", state}};
}

void PsClient::load_rows(const std::string& table,
                         const std::vector<std::pair<std::string, Tensor>>& rows) {
  const TableConfig& config = table_config(table);
  const auto d = static_cast<std::size_t>(config.spec.dim);
  const auto s = static_cast<std::size_t>(optim::SparseRowOptimizer(config.optimizer).state_floats(static_cast<int>(d)));
  auto find = [&](const std::string& name) -> const Tensor& {
    for (const auto& [key, tensor] : rows) {
      if (key == name) return tensor;
    }
    throw DataError(fmt::format("embedding rows: tensor '{}' is missing", name));
  };
  const Tensor& ids = find(table + ".ids");
  const Tensor& values = find(table + ".values");
  const Tensor& state = find(table + ".state");
  const auto count = static_cast<std::size_t>(ids.numel());
  if (values.numel() != static_cast<std::int64_t>(count * d) ||
      state.numel() != static_cast<std::int64_t>(count * s)) {
    throw DataError(fmt::format("embedding rows of '{}': values {} / state {} do not match {} ids "
                                "of dim {} with {} state floats", table, values.shape().str(),
                                state.shape().str(), count, d, s));
  }
  ShardSplit split = split_by_shard(ids.span<std::int64_t>(), num_shards());
  auto t = std::make_shared<detail::TicketState>();
  t->what = fmt::format("load_rows of table '{}'", table);
  t->replies.resize(static_cast<std::size_t>(num_shards()));
  std::vector<detail::OutRequest> requests;
  for (int k = 0; k < num_shards(); ++k) {
    const auto ks = static_cast<std::size_t>(k);
    const auto& positions = split.positions[ks];
    std::vector<float> v(positions.size() * d);
    std::vector<float> st(positions.size() * s);
    for (std::size_t j = 0; j < positions.size(); ++j) {
      const auto p = static_cast<std::size_t>(positions[j]);
      std::memcpy(v.data() + j * d, values.data<float>() + p * d, d * sizeof(float));
      if (s > 0) std::memcpy(st.data() + j * s, state.data<float>() + p * s, s * sizeof(float));
    }
    detail::OutRequest r;
    r.ticket = t;
    r.shard = k;
    r.header.op = Op::load_rows;
    r.header.table = table_key(table);
    r.header.worker = static_cast<std::uint32_t>(options_.worker);
    r.header.session = session_;
    r.header.seq = io_->next_seq(k);
    r.header.count = positions.size();
    r.header.dim = static_cast<std::uint32_t>(d);
    r.frames.resize(3);
    r.owners.push_back(share(std::move(split.ids[ks]), r.frames[0]));
    r.owners.push_back(share(std::move(v), r.frames[1]));
    r.owners.push_back(share(std::move(st), r.frames[2]));
    requests.push_back(std::move(r));
  }
  t->remaining = static_cast<int>(requests.size());
  io_->submit(std::move(requests));
  wait(Ticket(t));
}

void PsClient::shutdown_servers() {
  expect_shard_exits();
  broadcast(Op::shutdown, 0, "", {});
}

void PsClient::expect_shard_exits() { io_->expect_shard_exits(); }

}  // namespace aiacc::ps
