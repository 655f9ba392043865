// BucketPlan: how gradients are fused into allreduce buckets. Tensors are listed in the order
// their gradients become ready (the reverse of the forward order) and packed greedily into
// buckets of about `bucket_bytes`, so the first bucket fills while backward is still running.
// The plan is a pure function of the parameter list and the bucket size: every rank derives the
// same plan with no coordinator, and verify_plan() proves it at start.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "ring/communicator.h"

namespace aiacc::ring {

struct PlannedTensor {
  std::string name;
  std::int64_t count = 0;   // elements
  std::int64_t offset = 0;  // in the flat buffer, elements
  int bucket = 0;
};

struct PlannedBucket {
  std::int64_t offset = 0, count = 0;  // elements of the flat buffer
  std::vector<int> tensors;            // indices into tensors(), in ready order
};

class BucketPlan {
 public:
  // `tensors`: (name, element count) in gradient-ready order. A tensor is never split; one
  // larger than bucket_bytes gets a bucket of its own. bucket_bytes <= 0: one bucket per tensor.
  BucketPlan(const std::vector<std::pair<std::string, std::int64_t>>& tensors, std::int64_t bucket_bytes,
             DType dtype = DType::f32);

  const std::vector<PlannedTensor>& tensors() const { return tensors_; }
  const std::vector<PlannedBucket>& buckets() const { return buckets_; }
  std::int64_t total_count() const { return total_count_; }
  std::int64_t bucket_bytes() const { return bucket_bytes_; }
  DType dtype() const { return dtype_; }
  // A 64-bit digest of names, counts, dtype and bucket boundaries.
  std::uint64_t hash() const;
  // "12 tensors, 3 buckets, 1.2 MiB, hash 0x..." for logs and errors.
  std::string summary() const;

 private:
  std::vector<PlannedTensor> tensors_;
  std::vector<PlannedBucket> buckets_;
  std::int64_t total_count_ = 0;
  std::int64_t bucket_bytes_;
  DType dtype_;
};

// Compares every rank's plan (hash, tensor count, elements, buckets) and throws ConfigError on
// every rank if any differs, naming the ranks and both summaries ("rank 1: 11 tensors ... vs
// rank 0: 12 tensors ..."). Collective: every rank calls it. `what` names the plan in errors.
void verify_plan(std::shared_ptr<Communicator> comm, const BucketPlan& plan, std::string_view what);

}  // namespace aiacc::ring
