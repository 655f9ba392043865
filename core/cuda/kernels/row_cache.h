// The device side of a HotRowCache (core/embedding/hot_row_cache.h): a table of slots x dim
// floats on the GPU, rows fetched from the parameter servers scattered into their slots, and a
// batch's rows gathered from the slots. A step with a cache:
//   plan = cache.plan(unique_ids, step);
//   pull plan.fetch_ids from the servers into pinned memory, copy them to the device
//   (cuda::copy_host_to_device), launch_scatter_to_slots(rows, plan.fetch_slots, ...);
//   launch_gather_slots(table, plan.slot_of, ...) -> the batch's unique rows on the device.
// Pointers are device memory; each launcher queues one kernel on `stream`. Built only with
// CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace aiacc::cuda {

// out[i, :] = table[slot_of[i], :] for i < count.
void launch_gather_slots(const float* table, const std::int32_t* slot_of, std::int64_t count, std::int64_t dim,
                         float* out, cudaStream_t stream);

// table[slots[j], :] = rows[j, :] for j < count (slots distinct). The i64 form takes the slots
// as the device ops' index arrays are (DeviceOps::scatter_rows).
void launch_scatter_to_slots(const float* rows, const std::int32_t* slots, std::int64_t count, std::int64_t dim,
                             float* table, cudaStream_t stream);
void launch_scatter_to_slots(const float* rows, const std::int64_t* slots, std::int64_t count, std::int64_t dim,
                             float* table, cudaStream_t stream);

}  // namespace aiacc::cuda
