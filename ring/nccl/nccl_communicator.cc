#include "ring/nccl/nccl_communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <optional>
#include <span>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "core/error.h"
#include "core/log.h"
#include "ring/nccl/detail/nccl_comm_group.h"
#include "ring/nccl/detail/nccl_types.h"

namespace aiacc::ring {

namespace {

// Rank 0 creates the ids and publishes them; the others wait for them (until `deadline`).
std::vector<ncclUniqueId> exchange_ids(net::RendezvousClient& rendezvous, int rank, int streams,
                                       const std::string& name, net::Deadline deadline) {
  std::vector<ncclUniqueId> ids(static_cast<std::size_t>(streams));
  const std::string key = fmt::format("nccl/{}/ids", name);
  if (rank == 0) {
    for (auto& id : ids) AIACC_NCCL_CHECK(ncclGetUniqueId(&id));
    rendezvous.set(key, std::as_bytes(std::span<const ncclUniqueId>(ids)), deadline);
    return ids;
  }
  const std::vector<std::byte> bytes = rendezvous.get(key, deadline);
  if (bytes.size() != ids.size() * sizeof(ncclUniqueId)) {
    throw CommError(fmt::format(
        "rank {}: NCCL '{}': rendezvous key '{}' holds {} bytes, expected {} ({} ids of {} bytes); "
        "do all ranks use the same number of streams, and is the name unique in the job?",
        rank, name, key, bytes.size(), ids.size() * sizeof(ncclUniqueId), ids.size(),
        sizeof(ncclUniqueId)));
  }
  std::memcpy(ids.data(), bytes.data(), bytes.size());
  return ids;
}

}  // namespace

NcclCommunicator::NcclCommunicator(net::RendezvousClient& rendezvous, int rank, int world_size,
                                   int cuda_device, int streams, std::string_view name,
                                   net::Deadline deadline)
    : rank_(rank), world_size_(world_size), cuda_device_(cuda_device), name_(name) {
  if (name_.empty()) throw ConfigError("NCCL communicator: the name must not be empty");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ConfigError(
        fmt::format("NCCL '{}': rank {} is outside [0, world size {})", name_, rank, world_size));
  }
  if (streams < 1 || streams > kMaxStreams) {
    throw ConfigError(fmt::format("rank {}: NCCL '{}': streams = {} is outside [1, {}]", rank,
                                  name_, streams, kMaxStreams));
  }
  const int devices = cuda::device_count();
  if (cuda_device < 0 || cuda_device >= devices) {
    throw ConfigError(fmt::format("rank {}: NCCL '{}': CUDA device {} requested, {} visible", rank,
                                  name_, cuda_device, devices));
  }
  weights_.assign(static_cast<std::size_t>(streams), 1.0);
  const auto start = net::Clock::now();
  cuda::DeviceGuard guard(cuda_device_);

  const std::vector<ncclUniqueId> ids = exchange_ids(rendezvous, rank, streams, name_, deadline);
  streams_.reserve(ids.size());
  done_events_.reserve(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) {
    streams_.push_back(cuda::CudaStream::create_non_blocking());
    done_events_.push_back(cuda::CudaEvent::create_for_ordering());
  }
  start_event_ = cuda::CudaEvent::create_for_ordering();
  comms_ = std::make_unique<detail::NcclCommGroup>(ids, rank, world_size, name_, deadline);
  log::get("ring")->info("{}: {} communicator(s) on CUDA device {} ready in {:.2f} s",
                         comms_->where(), ids.size(), cuda_device_, net::seconds_since(start));
}

NcclCommunicator::~NcclCommunicator() {
  std::optional<cuda::DeviceGuard> guard;
  try {
    guard.emplace(cuda_device_);
  } catch (const std::exception& e) {
    try {
      log::get("ring")->warn("NCCL '{}': teardown on the wrong device: {}", name_, e.what());
    } catch (...) {
      // A destructor must not throw, not even when logging fails.
    }
  }
  comms_.reset();  // finalize or abort; never throws
  timed_parts_.clear();
  done_events_.clear();
  start_event_ = cuda::CudaEvent();
  streams_.clear();
}

void NcclCommunicator::set_stream_weights(std::vector<double> weights) {
  detail::validate_stream_weights(weights, streams_.size());
  weights_ = std::move(weights);
}

void NcclCommunicator::set_launch_timeout(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0.0) {
    throw ConfigError(
        fmt::format("NCCL '{}': launch timeout {} s must be positive", name_, seconds));
  }
  launch_timeout_s_ = seconds;
}

std::vector<detail::StreamPart> NcclCommunicator::plan(std::int64_t count, DType dtype) const {
  return detail::split_by_weights(count, dtype_size(dtype), weights_);
}

bool NcclCommunicator::aborted() const { return comms_->aborted(); }

void NcclCommunicator::abort() noexcept {
  try {
    cuda::DeviceGuard guard(cuda_device_);
    comms_->abort("abort() was called");
    return;
  } catch (...) {
    // The device could not be made current; NCCL switches to the communicator's device itself.
  }
  comms_->abort("abort() was called");
}

void NcclCommunicator::require_usable(std::string_view op) const {
  if (comms_->aborted()) {
    throw CommError(fmt::format("{}: NCCL {} on communicators aborted earlier ({})",
                                comms_->where(), op, comms_->abort_reason()));
  }
}

void NcclCommunicator::check_device_pointer(const void* pointer, std::string_view op,
                                            std::string_view what) const {
  AIACC_CHECK(pointer != nullptr, "{}: NCCL {}: {} is null", comms_->where(), op, what);
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, pointer);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; clear it so later calls do not report it
    AIACC_CHECK(false, "{}: NCCL {}: {} {} is not CUDA memory ({})", comms_->where(), op, what,
                pointer, cudaGetErrorString(status));
  }
  const bool on_device =
      (attributes.type == cudaMemoryTypeDevice && attributes.device == cuda_device_) ||
      attributes.type == cudaMemoryTypeManaged;
  AIACC_CHECK(on_device,
              "{}: NCCL {}: {} {} is not memory of CUDA device {} (memory type {}, device {})",
              comms_->where(), op, what, pointer, cuda_device_, static_cast<int>(attributes.type),
              attributes.device);
}

void NcclCommunicator::allreduce(void* device_data, std::int64_t count, DType dtype, ReduceOp op,
                                 cudaStream_t caller_stream, bool caller_waits) {
  constexpr std::string_view kOp = "allreduce";
  require_usable(kOp);
  const ncclDataType_t type = detail::nccl_dtype(dtype, /*reducing=*/true, kOp);
  const ncclRedOp_t reduction = detail::nccl_reduce_op(op);
  AIACC_CHECK_GE(count, std::int64_t{0}, "{}: NCCL allreduce count", comms_->where());
  if (count == 0) return;  // every rank skips alike: no collective is issued
  cuda::DeviceGuard guard(cuda_device_);
  check_device_pointer(device_data, kOp, "buffer");
  const std::vector<detail::StreamPart> parts = plan(count, dtype);
  const std::size_t element_size = dtype_size(dtype);

  // Every part starts after the work already queued on the caller's stream.
  AIACC_CUDA_CHECK(cudaEventRecord(start_event_.get(), caller_stream));
  std::vector<std::size_t> used;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].count == 0) continue;  // empty on every rank alike (same weights and count)
    used.push_back(k);
    AIACC_CUDA_CHECK(cudaStreamWaitEvent(streams_[k].get(), start_event_.get(), 0));
    if (timing_) {
      if (timed_parts_.size() != streams_.size()) {
        timed_parts_.resize(streams_.size());
        timed_count_.assign(streams_.size(), 0);
      }
      auto& pool = timed_parts_[k];
      if (timed_count_[k] == pool.size()) {
        pool.emplace_back(cuda::CudaEvent::create_for_timing(), cuda::CudaEvent::create_for_timing());
      }
      AIACC_CUDA_CHECK(cudaEventRecord(pool[timed_count_[k]].first.get(), streams_[k].get()));
    }
  }
  note_pending(kOp);
  // Launched in stream order on every rank, so the communicators' kernels are queued in one
  // order everywhere (DESIGN §4: same launch order on each stream).
  for (std::size_t k : used) {
    const detail::StreamPart& part = parts[k];
    std::byte* data =
        static_cast<std::byte*>(device_data) + static_cast<std::size_t>(part.offset) * element_size;
    const ncclResult_t status = ncclAllReduce(data, data, static_cast<std::size_t>(part.count),
                                              type, reduction, comms_->comm(k), streams_[k].get());
    if (status != ncclSuccess && status != ncclInProgress) {
      comms_->fail(kOp,
                   fmt::format("ncclAllReduce of {} {} elements on communicator {} returned {}",
                               part.count, dtype_name(dtype), k, comms_->describe(status, k)));
    }
  }
  finish_launch(kOp, used, caller_stream, caller_waits);
}

void NcclCommunicator::broadcast(void* device_data, std::int64_t count, DType dtype, int root,
                                 cudaStream_t caller_stream) {
  constexpr std::string_view kOp = "broadcast";
  require_usable(kOp);
  const ncclDataType_t type = detail::nccl_dtype(dtype, /*reducing=*/false, kOp);
  if (root < 0 || root >= world_size_) {
    throw ConfigError(fmt::format("{}: NCCL broadcast root {} is outside [0, {})", comms_->where(),
                                  root, world_size_));
  }
  AIACC_CHECK_GE(count, std::int64_t{0}, "{}: NCCL broadcast count", comms_->where());
  if (count == 0) return;
  cuda::DeviceGuard guard(cuda_device_);
  check_device_pointer(device_data, kOp, "buffer");
  AIACC_CUDA_CHECK(cudaEventRecord(start_event_.get(), caller_stream));
  AIACC_CUDA_CHECK(cudaStreamWaitEvent(streams_[0].get(), start_event_.get(), 0));
  note_pending(kOp);
  const ncclResult_t status =
      ncclBroadcast(device_data, device_data, static_cast<std::size_t>(count), type, root,
                    comms_->comm(0), streams_[0].get());
  if (status != ncclSuccess && status != ncclInProgress) {
    comms_->fail(kOp, fmt::format("ncclBroadcast of {} {} elements from root {} returned {}", count,
                                  dtype_name(dtype), root, comms_->describe(status, 0)));
  }
  finish_launch(kOp, {0}, caller_stream);
}

void NcclCommunicator::allgather(const void* send, void* recv, std::int64_t count_per_rank,
                                 DType dtype, cudaStream_t caller_stream) {
  constexpr std::string_view kOp = "allgather";
  require_usable(kOp);
  const ncclDataType_t type = detail::nccl_dtype(dtype, /*reducing=*/false, kOp);
  AIACC_CHECK_GE(count_per_rank, std::int64_t{0}, "{}: NCCL allgather count", comms_->where());
  if (count_per_rank == 0) return;
  cuda::DeviceGuard guard(cuda_device_);
  check_device_pointer(send, kOp, "send buffer");
  check_device_pointer(recv, kOp, "receive buffer");
  AIACC_CUDA_CHECK(cudaEventRecord(start_event_.get(), caller_stream));
  AIACC_CUDA_CHECK(cudaStreamWaitEvent(streams_[0].get(), start_event_.get(), 0));
  note_pending(kOp);
  const ncclResult_t status = ncclAllGather(send, recv, static_cast<std::size_t>(count_per_rank),
                                            type, comms_->comm(0), streams_[0].get());
  if (status != ncclSuccess && status != ncclInProgress) {
    comms_->fail(kOp, fmt::format("ncclAllGather of {} {} elements per rank returned {}",
                                  count_per_rank, dtype_name(dtype), comms_->describe(status, 0)));
  }
  finish_launch(kOp, {0}, caller_stream);
}

void NcclCommunicator::note_pending(std::string_view op) {
  if (std::find(pending_ops_.begin(), pending_ops_.end(), op) == pending_ops_.end()) {
    pending_ops_.emplace_back(op);
  }
}

std::string NcclCommunicator::pending_ops() const {
  return pending_ops_.empty() ? std::string("synchronize")
                              : fmt::format("{}", fmt::join(pending_ops_, "/"));
}

void NcclCommunicator::finish_launch(std::string_view op, const std::vector<std::size_t>& used,
                                     cudaStream_t caller_stream, bool caller_waits) {
  // A non-blocking communicator may return ncclInProgress before the kernel is on the stream
  // (e.g. while the first collective connects to the peers); an event recorded now would not
  // cover it, so wait until NCCL has enqueued everything.
  comms_->wait_ready(op, net::deadline_after(launch_timeout_s_));
  if (timing_ && op == "allreduce") {
    // The end events go after NCCL has put the part's kernel on its stream (wait_ready above).
    for (std::size_t k : used) {
      AIACC_CUDA_CHECK(cudaEventRecord(timed_parts_[k][timed_count_[k]].second.get(), streams_[k].get()));
      ++timed_count_[k];
    }
  }
  if (!caller_waits) return;
  for (std::size_t k : used) {
    AIACC_CUDA_CHECK(cudaEventRecord(done_events_[k].get(), streams_[k].get()));
    AIACC_CUDA_CHECK(cudaStreamWaitEvent(caller_stream, done_events_[k].get(), 0));
  }
}

void NcclCommunicator::join(cudaStream_t caller_stream) {
  require_usable("join");
  cuda::DeviceGuard guard(cuda_device_);
  for (std::size_t k = 0; k < streams_.size(); ++k) {
    AIACC_CUDA_CHECK(cudaEventRecord(done_events_[k].get(), streams_[k].get()));
    AIACC_CUDA_CHECK(cudaStreamWaitEvent(caller_stream, done_events_[k].get(), 0));
  }
}

double NcclCommunicator::take_busy_seconds() {
  if (timed_count_.empty()) return 0.0;
  if (aborted()) {
    // Parts cut short never recorded their end: nothing to time.
    std::fill(timed_count_.begin(), timed_count_.end(), std::size_t{0});
    return 0.0;
  }
  cuda::DeviceGuard guard(cuda_device_);
  double busiest = 0.0;
  for (std::size_t k = 0; k < timed_count_.size(); ++k) {
    double busy = 0.0;
    for (std::size_t i = 0; i < timed_count_[k]; ++i) {
      float ms = 0.0f;
      AIACC_CUDA_CHECK(cudaEventElapsedTime(&ms, timed_parts_[k][i].first.get(), timed_parts_[k][i].second.get()));
      busy += ms / 1000.0;
    }
    busiest = std::max(busiest, busy);
    timed_count_[k] = 0;
  }
  return busiest;
}

void NcclCommunicator::synchronize(double timeout_s) {
  require_usable("synchronize");
  if (!(timeout_s >= 0.0) || !std::isfinite(timeout_s)) {
    throw ConfigError(fmt::format("{}: synchronize timeout {} s must be finite and >= 0",
                                  comms_->where(), timeout_s));
  }
  cuda::DeviceGuard guard(cuda_device_);
  poll_until(timeout_s, "in synchronize()", "is a peer missing, or did ranks issue collectives in different orders?",
             [&](const std::string& ops) {
               bool idle = true;
               for (std::size_t k = 0; k < streams_.size(); ++k) {
                 const cudaError_t status = cudaStreamQuery(streams_[k].get());
                 if (status == cudaErrorNotReady) {
                   idle = false;
                 } else if (status != cudaSuccess) {
                   fail_on_cuda(status, fmt::format("CUDA stream {} failed during NCCL {}", k, ops));
                 }
               }
               // Throws CommError (after aborting) when a communicator reports an asynchronous
               // error, e.g. a peer process died or a network link failed.
               const bool enqueued = comms_->poll(ops);
               return idle && enqueued;
             });
  pending_ops_.clear();
}

void NcclCommunicator::wait_for_stream(cudaStream_t stream, double timeout_s) {
  require_usable("wait_for_stream");
  cuda::DeviceGuard guard(cuda_device_);
  const cuda::CudaEvent done = cuda::CudaEvent::create_for_ordering();
  AIACC_CUDA_CHECK(cudaEventRecord(done.get(), stream));
  poll_until(timeout_s, "for the compute stream", "is a peer missing?", [&](const std::string& ops) {
    const cudaError_t status = cudaEventQuery(done.get());
    if (status != cudaSuccess && status != cudaErrorNotReady) {
      fail_on_cuda(status, fmt::format("the compute stream failed while NCCL {} ran", ops));
    }
    comms_->poll(ops);  // throws CommError (after aborting) on a communicator's asynchronous error
    return status == cudaSuccess;
  });
}

void NcclCommunicator::poll_until(double timeout_s, std::string_view waiting, std::string_view hint,
                                  const std::function<bool(const std::string& ops)>& done) {
  const auto start = net::Clock::now();
  const net::Deadline deadline = net::deadline_after(timeout_s);
  const std::string ops = pending_ops();
  detail::PollBackoff backoff;
  while (!done(ops)) {
    if (net::Clock::now() >= deadline) {
      comms_->fail(ops,
                   fmt::format("not complete after {:.2f} s {} (limit {} s); {}", net::seconds_since(start), waiting,
                               timeout_s, hint),
                   /*timeout=*/true);
    }
    backoff.wait();
  }
}

void NcclCommunicator::fail_on_cuda(cudaError_t status, std::string_view what) {
  const std::string message =
      fmt::format("{}: {}: {} ({})", comms_->where(), what, cudaGetErrorString(status), cudaGetErrorName(status));
  comms_->abort(message);
  throw CudaError(message);
}

}  // namespace aiacc::ring
