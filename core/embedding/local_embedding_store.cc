// LocalEmbeddingStore: request planning (positions grouped by partition), the parallel
// partition loop, row initialisation and checkpoint (de)serialisation.
#include "core/embedding/local_embedding_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>

#include <omp.h>

#include "core/check.h"
#include "core/error.h"
#include "core/kernels/row_copy.h"
#include "core/util/random.h"

namespace aiacc {
namespace {

constexpr int kMaxPartitions = 4096;  // partition indices fit in 16 bits

// A one-thread request's per-position arrays (hashes, partitions, row pointers), kept per thread
// between requests: allocated afresh, a request of 50k positions paid a page fault every 4 KiB
// and a memset of all three, every time (about 4% of a dim-8 push on a shard). Requests above
// kMaxKeptPositions, and a request made from inside another's visit, get arrays of their own.
class RequestScratch {
 public:
  explicit RequestScratch(std::size_t n) {
    Kept& kept = kept_arrays();
    if (n <= kMaxKeptPositions && !kept.in_use) {
      kept_ = &kept;
      kept.in_use = true;
      arrays_ = &kept.arrays;
    } else {
      arrays_ = &own_;
    }
    if (arrays_->hashes.size() < n) {
      arrays_->hashes.resize(n);
      arrays_->part_of.resize(n);
      arrays_->rows.resize(n);
    }
  }
  ~RequestScratch() {
    if (kept_ != nullptr) kept_->in_use = false;
  }
  RequestScratch(const RequestScratch&) = delete;
  RequestScratch& operator=(const RequestScratch&) = delete;

  std::uint64_t* hashes() { return arrays_->hashes.data(); }
  std::uint16_t* part_of() { return arrays_->part_of.data(); }
  float** rows() { return arrays_->rows.data(); }

 private:
  static constexpr std::size_t kMaxKeptPositions = std::size_t{1} << 20;  // 18 MiB a thread at most
  struct Arrays {
    std::vector<std::uint64_t> hashes;
    std::vector<std::uint16_t> part_of;
    std::vector<float*> rows;
  };
  struct Kept {
    Arrays arrays;
    bool in_use = false;
  };
  static Kept& kept_arrays() {
    thread_local Kept kept;
    return kept;
  }
  Kept* kept_ = nullptr;
  Arrays own_;
  Arrays* arrays_ = nullptr;
};
// How many positions ahead the first pass of a partition loop prefetches a slot, and the second
// pass a row (whose address the first pass found): enough to cover a miss to memory with the
// work of the positions in between. Measured with aiacc-bench-kernels (StorePushCold: the rows
// evicted from the caches first, as the training step leaves them): 8 and 4 took 56 us for 800
// rows of dim 16 and 5.1 ms for 50k rows of a 200k-row table; 32 and 16 take 50 us and 4.5 ms,
// and no more in cache. Since one thread takes a request in request order (the serial path),
// rows 32 ahead beat 16 by 10-15% for 50k rows of a 200k-row table (pull 1.7 -> 1.5 ms at dim 8,
// push 2.1 -> 1.7 ms; medians of three, three interleaved rounds); 64 is no better.
constexpr std::size_t kPrefetchDistance = 32;
constexpr std::size_t kRowPrefetchDistance = 32;

// Hints the cache to load the first `row_floats` floats of a row for writing.
void prefetch_row(const float* row, std::size_t row_floats) {
  for (std::size_t f = 0; f < row_floats; f += 16) __builtin_prefetch(row + f, 1);
  __builtin_prefetch(row + row_floats - 1, 1);  // a row need not start on a cache line
}

void validate(const EmbeddingTableSpec& spec, const LocalEmbeddingStoreOptions& o) {
  const std::string table = spec.name.empty() ? std::string("(unnamed)") : spec.name;
  if (spec.dim < 1 || spec.dim > INT_MAX / 4) {
    throw ConfigError(fmt::format("embedding table {}: dim {} (expected >= 1)", table, spec.dim));
  }
  if (!(spec.init_scale >= 0.0)) {
    throw ConfigError(
        fmt::format("embedding table {}: init_scale {} (expected >= 0)", table, spec.init_scale));
  }
  if (o.num_partitions < 1 || o.num_partitions > kMaxPartitions) {
    throw ConfigError(fmt::format("embedding table {}: num_partitions {} (expected 1..{})", table,
                                  o.num_partitions, kMaxPartitions));
  }
  if (!(o.max_load_factor >= 0.25 && o.max_load_factor <= 0.95)) {
    throw ConfigError(fmt::format("embedding table {}: max_load_factor {} (expected 0.25..0.95)",
                                  table, o.max_load_factor));
  }
  if (o.rows_per_block < 0 ||
      (o.rows_per_block > 0 && !std::has_single_bit(static_cast<std::uint64_t>(o.rows_per_block)))) {
    throw ConfigError(fmt::format("embedding table {}: rows_per_block {} (expected 0 or a power "
                                  "of two)", table, o.rows_per_block));
  }
}

// 2-4 MiB per block: huge pages (core/memory/huge_pages.h) back at least the first 2 MiB of
// each, block allocation stays rare, and the partially filled last block of a partition holds no
// more than one untouched-but-resident huge page (untouched pages past it are not resident).
std::int64_t auto_rows_per_block(std::int64_t row_floats) {
  const auto target = static_cast<std::uint64_t>(
      std::max<std::int64_t>((std::int64_t{4} << 20) / (row_floats * 4), 1));
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::bit_floor(target)), 64,
                                  std::int64_t{1} << 20);
}

const Tensor* find_tensor(const std::vector<std::pair<std::string, Tensor>>& rows,
                          const std::string& name) {
  for (const auto& [key, tensor] : rows) {
    if (key == name) return &tensor;
  }
  return nullptr;
}

const Tensor& require_tensor(const std::vector<std::pair<std::string, Tensor>>& rows,
                             const std::string& name, DType dtype, const Shape& shape) {
  const Tensor* t = find_tensor(rows, name);
  if (t == nullptr || !t->defined()) {
    throw DataError(fmt::format("embedding rows: tensor '{}' is missing", name));
  }
  if (t->dtype() != dtype || t->shape() != shape || !t->device().is_cpu()) {
    throw DataError(fmt::format("embedding rows: tensor '{}' is {} {} on {}, expected {} {} on cpu",
                                name, dtype_name(t->dtype()), t->shape().str(), t->device().str(),
                                dtype_name(dtype), shape.str()));
  }
  return *t;
}

}  // namespace

LocalEmbeddingStore::LocalEmbeddingStore(const EmbeddingTableSpec& spec,
                                         const optim::OptimizerOptions& sparse_optimizer,
                                         const LocalEmbeddingStoreOptions& options)
    : spec_(spec), optimizer_(sparse_optimizer), options_(options) {
  validate(spec_, options_);
  dim_ = static_cast<int>(spec_.dim);
  state_floats_ = optimizer_.state_floats(dim_);
  rows_per_block_ = options_.rows_per_block > 0 ? options_.rows_per_block
                                                : auto_rows_per_block(dim_ + state_floats_);
  partitions_.reserve(static_cast<std::size_t>(options_.num_partitions));
  for (int p = 0; p < options_.num_partitions; ++p) {
    partitions_.push_back(std::make_unique<Partition>(make_table()));
  }
}

embedding::detail::RowTable LocalEmbeddingStore::make_table() const {
  return embedding::detail::RowTable(dim_ + state_floats_, rows_per_block_, options_.max_load_factor);
}

void LocalEmbeddingStore::init_row(std::int64_t id, float* row) const {
  // Only (id, seed) decide the value: the same row comes back in any order, in any process.
  Rng rng(mix64(static_cast<std::uint64_t>(id) ^ spec_.seed));
  for (int j = 0; j < dim_; ++j) {
    row[j] = static_cast<float>(rng.uniform(-spec_.init_scale, spec_.init_scale));
  }
  optimizer_.init_state(row + dim_, dim_);
}

template <class Visit>
void LocalEmbeddingStore::for_each_row_serial(std::span<const std::int64_t> ids, std::size_t row_floats,
                                              Visit& visit) {
  // One thread: the partitions the request touches are locked at once (in index order, like
  // every multi-partition lock) and the positions taken in request order, so the prefetches run
  // ahead over the whole request. Grouped by partition, a small request (the ~100-400 rows of a
  // training step's table) left each partition a handful of positions, fewer than the prefetch
  // distance, and every lookup missed. An id always lands in one partition, so a duplicate's
  // updates still apply in request order: the same result as the partitioned loop.
  const int num_parts = num_partitions();
  const std::size_t n = ids.size();
  RequestScratch scratch(n);
  std::uint64_t* hashes = scratch.hashes();
  std::uint16_t* part_of = scratch.part_of();  // kMaxPartitions fits
  float** rows = scratch.rows();
  std::vector<char> touched(static_cast<std::size_t>(num_parts), 0);
  for (std::size_t i = 0; i < n; ++i) {
    hashes[i] = embedding::detail::row_hash(ids[i]);
    part_of[i] = static_cast<std::uint16_t>(embedding::detail::partition_of_hash(hashes[i], num_parts));
    touched[part_of[i]] = 1;
  }
  std::vector<std::unique_lock<std::mutex>> locks;
  for (int p = 0; p < num_parts; ++p) {
    if (touched[static_cast<std::size_t>(p)] != 0) locks.emplace_back(partitions_[static_cast<std::size_t>(p)]->mutex);
  }
  auto table_of = [&](std::size_t i) -> embedding::detail::RowTable& { return partitions_[part_of[i]]->table; };
  // The first positions' slots, and below their rows, are asked for up front: a request of a
  // hundred rows would otherwise wait for a third of them one miss at a time.
  for (std::size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) table_of(i).prefetch(hashes[i]);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) table_of(i + kPrefetchDistance).prefetch(hashes[i + kPrefetchDistance]);
    bool created = false;
    float* row = table_of(i).find_or_insert(ids[i], hashes[i], created);
    if (created) init_row(ids[i], row);
    rows[i] = row;
  }
  for (std::size_t i = 0; i < std::min(n, kRowPrefetchDistance); ++i) prefetch_row(rows[i], row_floats);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kRowPrefetchDistance < n) prefetch_row(rows[i + kRowPrefetchDistance], row_floats);
    visit(i, rows[i]);
  }
}

template <class Visit>
void LocalEmbeddingStore::for_each_row(std::span<const std::int64_t> ids, std::size_t row_floats,
                                       Visit&& visit) {
  const int num_parts = num_partitions();
  const std::size_t n = ids.size();
  const bool parallel = num_parts > 1 && omp_get_max_threads() > 1 &&
                        static_cast<std::int64_t>(n) * (dim_ + state_floats_) >= options_.min_parallel_floats;
  if (!parallel) {
    for_each_row_serial(ids, row_floats, visit);
    return;
  }
  // Counting sort of positions by partition; a partition sees its positions in request order.
  std::vector<std::uint64_t> hashes(n);
  std::vector<std::size_t> start(static_cast<std::size_t>(num_parts) + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    hashes[i] = embedding::detail::row_hash(ids[i]);
    ++start[static_cast<std::size_t>(embedding::detail::partition_of_hash(hashes[i], num_parts)) + 1];
  }
  for (int p = 0; p < num_parts; ++p) start[p + 1] += start[p];
  std::vector<std::size_t> order(n);
  {
    std::vector<std::size_t> fill(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < n; ++i) {
      order[fill[static_cast<std::size_t>(embedding::detail::partition_of_hash(hashes[i], num_parts))]++] = i;
    }
  }
  std::vector<float*> rows(n);
  auto run = [&](int p) {
    const std::size_t begin = start[p], end = start[p + 1];
    if (begin == end) return;
    Partition& part = *partitions_[static_cast<std::size_t>(p)];
    std::lock_guard lock(part.mutex);
    // First every position's row (created when missing), probes prefetched ahead; rows never
    // move once allocated (the arena only adds blocks), so the pointers stay valid.
    for (std::size_t k = begin; k < end; ++k) {
      if (k + kPrefetchDistance < end) part.table.prefetch(hashes[order[k + kPrefetchDistance]]);
      const std::size_t i = order[k];
      bool created = false;
      float* row = part.table.find_or_insert(ids[i], hashes[i], created);
      if (created) init_row(ids[i], row);
      rows[k] = row;
    }
    // Then the visits, each row prefetched a few ahead: its address is known now, where a
    // single pass had to probe the table a second time to find it.
    for (std::size_t k = begin; k < end; ++k) {
      if (k + kRowPrefetchDistance < end) prefetch_row(rows[k + kRowPrefetchDistance], row_floats);
      visit(order[k], rows[k]);
    }
  };
  // Exceptions must not cross the OpenMP region: keep each partition's, rethrow the first.
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(num_parts));
#pragma omp parallel for schedule(dynamic, 1)
  for (int p = 0; p < num_parts; ++p) {
    try {
      run(p);
    } catch (...) {
      errors[static_cast<std::size_t>(p)] = std::current_exception();
    }
  }
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

void LocalEmbeddingStore::pull(std::span<const std::int64_t> ids, float* rows) {
  if (ids.empty()) return;
  if (read_only_.load()) return peek(ids, rows);
  AIACC_CHECK(rows != nullptr, "embedding table {}: pull into a null buffer", spec_.name);
  const auto dim = static_cast<std::size_t>(dim_);
  for_each_row(ids, dim, [&](std::size_t i, const float* row) { kernels::copy_row(rows + i * dim, row, dim); });
}

void LocalEmbeddingStore::peek(std::span<const std::int64_t> ids, float* rows) const {
  if (ids.empty()) return;
  AIACC_CHECK(rows != nullptr, "embedding table {}: peek into a null buffer", spec_.name);
  const auto dim = static_cast<std::size_t>(dim_);
  std::vector<float> fresh(dim + static_cast<std::size_t>(state_floats_));
  const int parts = num_partitions();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint64_t hash = embedding::detail::row_hash(ids[i]);
    const Partition& part = *partitions_[static_cast<std::size_t>(embedding::detail::partition_of_hash(hash, parts))];
    std::lock_guard lock(part.mutex);
    const float* row = part.table.find(ids[i], hash);
    if (row == nullptr) {
      init_row(ids[i], fresh.data());
      row = fresh.data();
    }
    kernels::copy_row(rows + i * dim, row, dim);
  }
}

void LocalEmbeddingStore::push(std::span<const std::int64_t> ids, const float* grads, double lr) {
  if (ids.empty()) return;
  AIACC_CHECK(grads != nullptr, "embedding table {}: push of a null gradient", spec_.name);
  for_each_row(ids, static_cast<std::size_t>(dim_ + state_floats_), [&](std::size_t i, float* row) {
    optimizer_.update_row(row, row + dim_, grads + i * static_cast<std::size_t>(dim_), dim_, lr);
  });
}

void LocalEmbeddingStore::rows_of(std::span<const std::int64_t> ids, float** rows) {
  if (ids.empty()) return;
  AIACC_CHECK(rows != nullptr, "embedding table {}: row addresses into a null array", spec_.name);
  // The rows are prefetched whole: the caller updates them next.
  for_each_row(ids, static_cast<std::size_t>(dim_ + state_floats_), [&](std::size_t i, float* row) { rows[i] = row; });
}

void LocalEmbeddingStore::push_rows(std::span<float* const> rows, const float* grads, double lr) {
  if (rows.empty()) return;
  AIACC_CHECK(grads != nullptr, "embedding table {}: push of a null gradient", spec_.name);
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(partitions_.size());
  for (const auto& part : partitions_) locks.emplace_back(part->mutex);
  const auto row_floats = static_cast<std::size_t>(dim_ + state_floats_);
  const auto dim = static_cast<std::size_t>(dim_);
  const std::size_t n = rows.size();
  for (std::size_t i = 0; i < std::min(n, kRowPrefetchDistance); ++i) prefetch_row(rows[i], row_floats);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kRowPrefetchDistance < n) prefetch_row(rows[i + kRowPrefetchDistance], row_floats);
    optimizer_.update_row(rows[i], rows[i] + dim_, grads + i * dim, dim_, lr);
  }
}

std::int64_t LocalEmbeddingStore::num_rows() const {
  std::int64_t total = 0;
  for (const auto& part : partitions_) {
    std::lock_guard lock(part->mutex);
    total += part->table.size();
  }
  return total;
}

void LocalEmbeddingStore::reserve(std::int64_t rows) {
  const int num_parts = num_partitions();
  // Hash partitions are binomially filled: a few standard deviations of slack avoids a rehash.
  const double mean = static_cast<double>(rows) / num_parts;
  const auto per_part = static_cast<std::int64_t>(mean + 4.0 * std::sqrt(mean) + 16.0);
  for (const auto& part : partitions_) {
    std::lock_guard lock(part->mutex);
    part->table.reserve(per_part);
  }
}

std::size_t LocalEmbeddingStore::memory_bytes() const {
  std::size_t total = 0;
  for (const auto& part : partitions_) {
    std::lock_guard lock(part->mutex);
    total += part->table.memory_bytes();
  }
  return total;
}

std::size_t LocalEmbeddingStore::row_bytes() const {
  return static_cast<std::size_t>(num_rows()) * static_cast<std::size_t>(dim_ + state_floats_) *
         sizeof(float);
}

std::vector<std::pair<std::string, Tensor>> LocalEmbeddingStore::save_rows() const {
  // All partitions locked (in index order, like every multi-partition lock) for a consistent cut.
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(partitions_.size());
  for (const auto& part : partitions_) locks.emplace_back(part->mutex);

  std::vector<std::pair<std::int64_t, const float*>> entries;
  for (const auto& part : partitions_) {
    part->table.for_each([&](std::int64_t id, const float* row) { entries.emplace_back(id, row); });
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto count = static_cast<std::int64_t>(entries.size());
  Tensor ids = Tensor::empty(Shape{count}, DType::i64);
  Tensor values = Tensor::empty(Shape{count, dim_}, DType::f32);
  Tensor state = Tensor::empty(Shape{count, state_floats_}, DType::f32);
  std::int64_t* id_out = ids.data<std::int64_t>();
  float* value_out = values.data<float>();
  float* state_out = state.data<float>();
  const auto d = static_cast<std::size_t>(dim_);
  const auto s = static_cast<std::size_t>(state_floats_);
  for (std::size_t r = 0; r < entries.size(); ++r) {
    id_out[r] = entries[r].first;
    std::memcpy(value_out + r * d, entries[r].second, d * sizeof(float));
    if (s > 0) std::memcpy(state_out + r * s, entries[r].second + d, s * sizeof(float));
  }
  return {{spec_.name + ".ids", ids}, {spec_.name + ".values", values}, {spec_.name + ".state", state}};
}

void LocalEmbeddingStore::load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) {
  const Tensor* ids_found = find_tensor(rows, spec_.name + ".ids");
  if (ids_found == nullptr || !ids_found->defined() || ids_found->rank() != 1) {
    throw DataError(fmt::format("embedding rows: tensor '{}.ids' is missing or not 1-D (table "
                                "{}, dim {})", spec_.name, spec_.name, dim_));
  }
  const std::int64_t count = ids_found->dim(0);
  const Tensor& ids = require_tensor(rows, spec_.name + ".ids", DType::i64, Shape{count});
  const Tensor& values = require_tensor(rows, spec_.name + ".values", DType::f32, Shape{count, dim_});
  const Tensor& state =
      require_tensor(rows, spec_.name + ".state", DType::f32, Shape{count, state_floats_});

  // Build the new contents aside, so a bad input leaves the store untouched.
  const int num_parts = num_partitions();
  const std::int64_t* id_in = ids.data<std::int64_t>();
  std::vector<std::int64_t> per_part(static_cast<std::size_t>(num_parts), 0);
  for (std::int64_t r = 0; r < count; ++r) {
    ++per_part[static_cast<std::size_t>(partition_of(id_in[r], num_parts))];
  }
  std::vector<embedding::detail::RowTable> tables;
  tables.reserve(static_cast<std::size_t>(num_parts));
  for (int p = 0; p < num_parts; ++p) {
    tables.push_back(make_table());
    tables.back().reserve(per_part[static_cast<std::size_t>(p)]);
  }
  const float* value_in = values.data<float>();
  const float* state_in = state.data<float>();
  const auto d = static_cast<std::size_t>(dim_);
  const auto s = static_cast<std::size_t>(state_floats_);
  for (std::int64_t r = 0; r < count; ++r) {
    const std::uint64_t hash = embedding::detail::row_hash(id_in[r]);
    bool created = false;
    float* row = tables[static_cast<std::size_t>(embedding::detail::partition_of_hash(hash, num_parts))]
                     .find_or_insert(id_in[r], hash, created);
    if (!created) {
      throw DataError(fmt::format("embedding rows: tensor '{}.ids' holds id {} twice (row {})",
                                  spec_.name, id_in[r], r));
    }
    const auto ru = static_cast<std::size_t>(r);
    std::memcpy(row, value_in + ru * d, d * sizeof(float));
    if (s > 0) std::memcpy(row + d, state_in + ru * s, s * sizeof(float));
  }

  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(partitions_.size());
  for (const auto& part : partitions_) locks.emplace_back(part->mutex);
  for (int p = 0; p < num_parts; ++p) {
    partitions_[static_cast<std::size_t>(p)]->table = std::move(tables[static_cast<std::size_t>(p)]);
  }
}

EmbeddingStoreFactory local_embedding_store_factory(const optim::OptimizerOptions& sparse_optimizer,
                                                    const LocalEmbeddingStoreOptions& options) {
  return [sparse_optimizer, options](const EmbeddingTableSpec& spec) {
    return std::make_shared<LocalEmbeddingStore>(spec, sparse_optimizer, options);
  };
}

}  // namespace aiacc
