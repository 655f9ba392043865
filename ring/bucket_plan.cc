#include "ring/bucket_plan.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/util/random.h"
#include "ring/allgather.h"

namespace aiacc::ring {
namespace {

std::uint64_t combine(std::uint64_t seed, std::uint64_t value) { return mix64(seed ^ (value + 0x9e3779b97f4a7c15ull + (seed << 6))); }

std::uint64_t hash_string(std::uint64_t seed, std::string_view text) {
  for (char c : text) seed = combine(seed, static_cast<unsigned char>(c));
  return combine(seed, text.size());
}

}  // namespace

BucketPlan::BucketPlan(const std::vector<std::pair<std::string, std::int64_t>>& tensors, std::int64_t bucket_bytes,
                       DType dtype)
    : bucket_bytes_(bucket_bytes), dtype_(dtype) {
  const auto element_bytes = static_cast<std::int64_t>(dtype_size(dtype));
  for (const auto& [name, count] : tensors) {
    if (count < 0) throw ConfigError(fmt::format("bucket plan: tensor '{}' has {} elements", name, count));
    const bool fits = !buckets_.empty() && bucket_bytes > 0 &&
                      (buckets_.back().count + count) * element_bytes <= bucket_bytes;
    if (!fits) buckets_.push_back(PlannedBucket{total_count_, 0, {}});
    PlannedBucket& bucket = buckets_.back();
    tensors_.push_back(PlannedTensor{name, count, total_count_, static_cast<int>(buckets_.size() - 1)});
    bucket.tensors.push_back(static_cast<int>(tensors_.size() - 1));
    bucket.count += count;
    total_count_ += count;
  }
}

std::uint64_t BucketPlan::hash() const {
  std::uint64_t h = combine(0x706c616eull, static_cast<std::uint64_t>(dtype_));
  for (const auto& t : tensors_) {
    h = hash_string(h, t.name);
    h = combine(h, static_cast<std::uint64_t>(t.count));
  }
  for (const auto& b : buckets_) h = combine(combine(h, static_cast<std::uint64_t>(b.offset)), static_cast<std::uint64_t>(b.count));
  return h;
}

std::string BucketPlan::summary() const {
  return fmt::format("{} tensors, {} buckets, {} elements of {}, bucket size {} B, hash {:#018x}", tensors_.size(),
                     buckets_.size(), total_count_, dtype_name(dtype_), bucket_bytes_, hash());
}

void verify_plan(std::shared_ptr<Communicator> comm, const BucketPlan& plan, std::string_view what) {
  constexpr int kFields = 4;
  const int n = comm->world_size();
  std::vector<std::int64_t> table(static_cast<std::size_t>(n * kFields));
  std::int64_t* mine = table.data() + comm->rank() * kFields;
  mine[0] = static_cast<std::int64_t>(plan.hash());
  mine[1] = static_cast<std::int64_t>(plan.tensors().size());
  mine[2] = plan.total_count();
  mine[3] = static_cast<std::int64_t>(plan.buckets().size());
  Allgather(comm, Buffer{table.data(), n * kFields, DType::i64}).run();
  auto describe = [&](int r) {
    const std::int64_t* f = table.data() + r * kFields;
    return fmt::format("rank {}: {} tensors, {} buckets, {} elements, hash {:#018x}", r, f[1], f[3], f[2],
                       static_cast<std::uint64_t>(f[0]));
  };
  std::vector<int> different;
  for (int r = 1; r < n; ++r) {
    if (!std::equal(table.begin() + r * kFields, table.begin() + (r + 1) * kFields, table.begin())) different.push_back(r);
  }
  if (different.empty()) return;
  throw ConfigError(fmt::format("{}: the ranks derived different gradient bucket plans (different models, "
                                "parameter order or bucket settings): {} vs {}{}",
                                what, describe(different.front()), describe(0),
                                different.size() > 1 ? fmt::format(" ({} ranks differ from rank 0)", different.size()) : ""));
}

}  // namespace aiacc::ring
