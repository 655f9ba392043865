// NcclCommunicator on real GPUs (skipped, exit 77, without one).
// World 1 with K = 1 and 3 streams: sum and average of integers-in-float equal the input,
// f16/bf16/f64/i32/i64 buffers, uneven and zero stream weights, broadcast and allgather, ordering
// with the caller's stream (also beside it, then join(), with timed parts), argument errors and
// an NCCL init that times out naming the rank; the trainer's DeviceGradientFuser over the NCCL
// factory.
// Two or more ranks as threads, one GPU each (skipped with fewer than two GPUs): exact
// closed-form sums, averages, broadcast and allgather, a caller stream that runs on beside a
// collective until it joins, the fuser's averages, and a collective that one rank never joins
// -> TimeoutError.
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "core/cuda/stream.h"
#include "core/cuda/tensor_backend.h"
#include "core/error.h"
#include "core/net/context.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "core/parameter.h"
#include "core/util/half.h"
#include "ring/device_gradient_fuser.h"
#include "ring/nccl/nccl_communicator.h"
#include "ring/nccl/nccl_device_collective.h"
#include "tests/ring/ring_fixture.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::ring {
namespace {

using ::testing::HasSubstr;

// Device memory of the current device, freed at scope exit; copies on the given stream.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t num_bytes) : num_bytes_(num_bytes) {
    AIACC_CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(num_bytes, 1)));
  }
  ~DeviceBuffer() { (void)cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  template <class T>
  void upload(const std::vector<T>& values, cudaStream_t stream) {
    AIACC_CHECK_LE(values.size() * sizeof(T), num_bytes_);
    AIACC_CUDA_CHECK(cudaMemcpyAsync(data_, values.data(), values.size() * sizeof(T),
                                     cudaMemcpyHostToDevice, stream));
    AIACC_CUDA_CHECK(cudaStreamSynchronize(stream));  // `values` may die after this returns
  }
  template <class T>
  std::vector<T> download(std::size_t count, cudaStream_t stream) const {
    std::vector<T> values(count);
    AIACC_CUDA_CHECK(
        cudaMemcpyAsync(values.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
    AIACC_CUDA_CHECK(cudaStreamSynchronize(stream));
    return values;
  }

 private:
  void* data_ = nullptr;
  std::size_t num_bytes_;
};

// A caller stream created on the current device.
class TestStream {
 public:
  TestStream() { AIACC_CUDA_CHECK(cudaStreamCreate(&stream_)); }
  ~TestStream() { (void)cudaStreamDestroy(stream_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A rendezvous server on loopback for the NCCL id exchange.
struct Job {
  net::RendezvousServer server{net::Context::create(), "127.0.0.1", 0};
  net::RendezvousClient client() const {
    return net::RendezvousClient(net::Context::create(), server.endpoint());
  }
};

// The single-rank communicator of `job` on device 0.
std::unique_ptr<NcclCommunicator> single_rank(const Job& job, int streams,
                                              const std::string& name) {
  AIACC_CUDA_CHECK(cudaSetDevice(0));
  auto client = job.client();
  return std::make_unique<NcclCommunicator>(client, 0, 1, 0, streams, name,
                                            net::deadline_after(60));
}

// Integers in [-500, 500), exactly representable in every dtype tested here.
std::vector<float> integer_floats(std::size_t count, int scale = 1) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>((static_cast<int>(i % 1000) - 500) * scale);
  }
  return values;
}

class SingleRank : public ::testing::TestWithParam<int> {};

TEST_P(SingleRank, SumAndAverageOfIntegersInFloatEqualTheInput) {
  Job job;
  auto comm = single_rank(job, GetParam(), "sum");
  EXPECT_EQ(comm->streams(), GetParam());
  TestStream stream;
  // Odd size: the last part is not a whole number of 256-byte granules.
  const std::size_t count = 100003;
  const auto input = integer_floats(count);
  DeviceBuffer buffer(count * sizeof(float));
  AIACC_CUDA_CHECK(cudaMemsetAsync(buffer.get(), 0xff, count * sizeof(float), stream.get()));
  // The upload is queued on the caller's stream just before the allreduce: the collective must
  // wait for it (stream ordering through events), and the download must wait for the collective.
  AIACC_CUDA_CHECK(cudaMemcpyAsync(buffer.get(), input.data(), count * sizeof(float),
                                   cudaMemcpyHostToDevice, stream.get()));
  comm->allreduce(buffer.get(), static_cast<std::int64_t>(count), DType::f32, ReduceOp::kSum,
                  stream.get());
  EXPECT_EQ(buffer.download<float>(count, stream.get()), input);
  comm->allreduce(buffer.get(), static_cast<std::int64_t>(count), DType::f32, ReduceOp::kAverage,
                  stream.get());
  comm->synchronize(60);
  EXPECT_EQ(buffer.download<float>(count, stream.get()), input);
}

TEST_P(SingleRank, HalfPrecisionAndOtherDtypes) {
  Job job;
  auto comm = single_rank(job, GetParam(), "dtypes");
  TestStream stream;
  const std::size_t count = 4099;
  const auto floats = integer_floats(count);
  {
    std::vector<Half> halves(count);
    std::transform(floats.begin(), floats.end(), halves.begin(), to_half);
    DeviceBuffer buffer(count * sizeof(Half));
    buffer.upload(halves, stream.get());
    comm->allreduce(buffer.get(), count, DType::f16, ReduceOp::kSum, stream.get());
    const auto result = buffer.download<Half>(count, stream.get());
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(to_float(result[i]), floats[i]) << i;
  }
  {
    std::vector<BFloat16> bf16(count);
    // bf16 holds integers exactly only up to 256: scale into that range.
    for (std::size_t i = 0; i < count; ++i) bf16[i] = to_bf16(static_cast<float>(i % 256) - 128);
    DeviceBuffer buffer(count * sizeof(BFloat16));
    buffer.upload(bf16, stream.get());
    comm->allreduce(buffer.get(), count, DType::bf16, ReduceOp::kAverage, stream.get());
    const auto result = buffer.download<BFloat16>(count, stream.get());
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(result[i].bits, bf16[i].bits) << i;
  }
  {
    std::vector<double> doubles(floats.begin(), floats.end());
    DeviceBuffer buffer(count * sizeof(double));
    buffer.upload(doubles, stream.get());
    comm->allreduce(buffer.get(), count, DType::f64, ReduceOp::kSum, stream.get());
    EXPECT_EQ(buffer.download<double>(count, stream.get()), doubles);
  }
  {
    std::vector<std::int32_t> ints(count);
    for (std::size_t i = 0; i < count; ++i) ints[i] = static_cast<std::int32_t>(i) - 2000;
    DeviceBuffer buffer(count * sizeof(std::int32_t));
    buffer.upload(ints, stream.get());
    comm->allreduce(buffer.get(), count, DType::i32, ReduceOp::kSum, stream.get());
    EXPECT_EQ(buffer.download<std::int32_t>(count, stream.get()), ints);
  }
  {
    std::vector<std::int64_t> longs(count);
    for (std::size_t i = 0; i < count; ++i) longs[i] = (std::int64_t{1} << 40) + std::int64_t(i);
    DeviceBuffer buffer(count * sizeof(std::int64_t));
    buffer.upload(longs, stream.get());
    comm->allreduce(buffer.get(), count, DType::i64, ReduceOp::kSum, stream.get());
    EXPECT_EQ(buffer.download<std::int64_t>(count, stream.get()), longs);
  }
  comm->synchronize(60);
}

TEST_P(SingleRank, BroadcastAndAllgather) {
  Job job;
  auto comm = single_rank(job, GetParam(), "bcast");
  TestStream stream;
  const std::size_t count = 777;
  const auto input = integer_floats(count, 3);
  DeviceBuffer buffer(count * sizeof(float));
  buffer.upload(input, stream.get());
  comm->broadcast(buffer.get(), count, DType::f32, 0, stream.get());
  EXPECT_EQ(buffer.download<float>(count, stream.get()), input);

  DeviceBuffer gathered(count * sizeof(float));
  AIACC_CUDA_CHECK(cudaMemsetAsync(gathered.get(), 0, count * sizeof(float), stream.get()));
  comm->allgather(buffer.get(), gathered.get(), count, DType::f32, stream.get());
  EXPECT_EQ(gathered.download<float>(count, stream.get()), input);

  std::vector<std::uint8_t> bytes(count);
  for (std::size_t i = 0; i < count; ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
  DeviceBuffer byte_buffer(count);
  byte_buffer.upload(bytes, stream.get());
  comm->broadcast(byte_buffer.get(), count, DType::u8, 0, stream.get());
  EXPECT_EQ(byte_buffer.download<std::uint8_t>(count, stream.get()), bytes);
  comm->synchronize(60);
}

INSTANTIATE_TEST_SUITE_P(Streams, SingleRank, ::testing::Values(1, 3));

TEST(NcclCommunicator, UnevenAndZeroWeights) {
  Job job;
  auto comm = single_rank(job, 3, "weights");
  comm->set_stream_weights({3.0, 1.0, 0.0});
  const auto parts = comm->plan(1 << 16, DType::f32);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].count, 3 * (1 << 14));
  EXPECT_EQ(parts[1].count, 1 << 14);
  EXPECT_EQ(parts[2].count, 0);

  TestStream stream;
  const std::size_t count = (1 << 16) + 5;
  const auto input = integer_floats(count);
  DeviceBuffer buffer(count * sizeof(float));
  buffer.upload(input, stream.get());
  comm->allreduce(buffer.get(), count, DType::f32, ReduceOp::kSum, stream.get());
  comm->synchronize(60);
  EXPECT_EQ(buffer.download<float>(count, stream.get()), input);

  EXPECT_THROW(comm->set_stream_weights({1.0, 1.0}), ConfigError);
  EXPECT_THROW(comm->set_stream_weights({0.0, 0.0, 0.0}), ConfigError);
}

TEST(NcclCommunicator, ArgumentErrorsNameTheProblemAndLeaveItUsable) {
  Job job;
  auto comm = single_rank(job, 2, "errors");
  TestStream stream;
  DeviceBuffer buffer(1024);
  try {
    comm->allreduce(buffer.get(), 16, DType::u8, ReduceOp::kSum, stream.get());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("u8"));
  }
  EXPECT_THROW(comm->broadcast(buffer.get(), 16, DType::f32, 1, stream.get()), ConfigError);
  std::vector<float> host(16);
  EXPECT_THROW(comm->allreduce(host.data(), 16, DType::f32, ReduceOp::kSum, stream.get()),
               InternalError);
  EXPECT_THROW(comm->set_launch_timeout(0), ConfigError);
  EXPECT_FALSE(comm->aborted());
  // Nothing issued: returns at once. Zero elements: no collective at all.
  comm->synchronize(1);
  comm->allreduce(buffer.get(), 0, DType::f32, ReduceOp::kSum, stream.get());
  comm->allreduce(buffer.get(), 256, DType::f32, ReduceOp::kSum, stream.get());
  comm->synchronize(60);

  comm->abort();
  EXPECT_TRUE(comm->aborted());
  try {
    comm->allreduce(buffer.get(), 256, DType::f32, ReduceOp::kSum, stream.get());
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("aborted"));
  }
}

TEST(NcclCommunicator, ConstructorRejectsBadArguments) {
  Job job;
  auto client = job.client();
  const auto deadline = net::deadline_after(10);
  EXPECT_THROW(NcclCommunicator(client, 2, 2, 0, 1, "bad", deadline), ConfigError);
  EXPECT_THROW(NcclCommunicator(client, 0, 1, 0, 0, "bad", deadline), ConfigError);
  EXPECT_THROW(NcclCommunicator(client, 0, 1, cuda::device_count(), 1, "bad", deadline),
               ConfigError);
}

TEST(NcclCommunicator, InitWithAMissingRankTimesOutNamingTheRank) {
  Job job;
  auto client = job.client();
  AIACC_CUDA_CHECK(cudaSetDevice(0));
  const auto start = net::Clock::now();
  try {
    // World of 2, but rank 1 never comes: NCCL's bootstrap waits for it until the deadline.
    NcclCommunicator comm(client, 0, 2, 0, 2, "lonely", net::deadline_after(2));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0"));
    EXPECT_THAT(e.what(), HasSubstr("NCCL init"));
  }
  EXPECT_LT(net::seconds_since(start), 30.0);
}

TEST(NcclCommunicator, MissingIdsTimeOutNamingTheKey) {
  Job job;
  auto client = job.client();
  try {
    NcclCommunicator comm(client, 1, 2, 0, 1, "no-root", net::deadline_after(0.5));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("nccl/no-root/ids"));
  }
}

// ----- several ranks, one GPU each, as threads of this process -----

int gpu_world() { return std::min(cuda::device_count(), 4); }

class MultiRank : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (gpu_world() < 2) GTEST_SKIP() << "needs at least 2 GPUs, found " << cuda::device_count();
  }
};

TEST_P(MultiRank, SumAverageBroadcastAndAllgatherMatchClosedForms) {
  const int world = gpu_world();
  const int streams = GetParam();
  Job job;
  testing::run_ranks(world, [&](int rank) {
    AIACC_CUDA_CHECK(cudaSetDevice(rank));
    auto client = job.client();
    NcclCommunicator comm(client, rank, world, rank, streams, "multi", net::deadline_after(120));
    if (streams == 3) comm.set_stream_weights({2.0, 1.0, 0.5});  // same on every rank
    TestStream stream;
    const std::size_t count = 300007;
    // Rank r holds (r + 1) * v_i, so the sum is v_i * world (world + 1) / 2, exact in float.
    std::vector<float> mine(count);
    const auto base = integer_floats(count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = base[i] * static_cast<float>(rank + 1);
    const float factor = static_cast<float>(world * (world + 1) / 2);

    DeviceBuffer buffer(count * sizeof(float));
    buffer.upload(mine, stream.get());
    comm.allreduce(buffer.get(), count, DType::f32, ReduceOp::kSum, stream.get());
    comm.synchronize(60);
    const auto sum = buffer.download<float>(count, stream.get());
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(sum[i], base[i] * factor) << "element " << i;

    buffer.upload(mine, stream.get());
    comm.allreduce(buffer.get(), count, DType::f32, ReduceOp::kAverage, stream.get());
    comm.synchronize(60);
    const auto average = buffer.download<float>(count, stream.get());
    for (std::size_t i = 0; i < count; ++i) {
      const float expected = base[i] * factor / static_cast<float>(world);
      ASSERT_NEAR(average[i], expected, 1e-5f * std::abs(expected) + 1e-6f) << "element " << i;
    }

    // f16: small integers, so sums stay exact (below 2048).
    std::vector<Half> halves(count);
    for (std::size_t i = 0; i < count; ++i) {
      halves[i] = to_half(static_cast<float>((i % 31) * static_cast<std::size_t>(rank + 1)));
    }
    DeviceBuffer half_buffer(count * sizeof(Half));
    half_buffer.upload(halves, stream.get());
    comm.allreduce(half_buffer.get(), count, DType::f16, ReduceOp::kSum, stream.get());
    comm.synchronize(60);
    const auto half_sum = half_buffer.download<Half>(count, stream.get());
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(to_float(half_sum[i]), static_cast<float>(i % 31) * factor) << "element " << i;
    }

    // Broadcast from the last rank.
    const int root = world - 1;
    buffer.upload(mine, stream.get());
    comm.broadcast(buffer.get(), count, DType::f32, root, stream.get());
    comm.synchronize(60);
    const auto broadcast = buffer.download<float>(count, stream.get());
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(broadcast[i], base[i] * static_cast<float>(root + 1)) << "element " << i;
    }

    // Allgather: rank r contributes `per_rank` copies of r.
    const std::size_t per_rank = 1001;
    DeviceBuffer send(per_rank * sizeof(std::int32_t));
    send.upload(std::vector<std::int32_t>(per_rank, rank), stream.get());
    DeviceBuffer recv(per_rank * world * sizeof(std::int32_t));
    comm.allgather(send.get(), recv.get(), per_rank, DType::i32, stream.get());
    comm.synchronize(60);
    const auto gathered = recv.download<std::int32_t>(per_rank * world, stream.get());
    for (std::size_t i = 0; i < gathered.size(); ++i) {
      ASSERT_EQ(gathered[i], static_cast<std::int32_t>(i / per_rank)) << "element " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Streams, MultiRank, ::testing::Values(1, 3));

TEST(MultiRankFailure, ACollectiveOneRankNeverJoinsTimesOutNamingRankAndOp) {
  if (gpu_world() < 2) GTEST_SKIP() << "needs at least 2 GPUs, found " << cuda::device_count();
  Job job;
  std::atomic<bool> rank0_done{false};
  testing::run_ranks(2, [&](int rank) {
    AIACC_CUDA_CHECK(cudaSetDevice(rank));
    auto client = job.client();
    NcclCommunicator comm(client, rank, 2, rank, 2, "desync", net::deadline_after(120));
    TestStream stream;
    DeviceBuffer buffer(4096 * sizeof(float));
    AIACC_CUDA_CHECK(cudaMemsetAsync(buffer.get(), 0, 4096 * sizeof(float), stream.get()));
    // Both ranks: one allreduce, so NCCL's lazy connection set-up is done.
    comm.allreduce(buffer.get(), 4096, DType::f32, ReduceOp::kSum, stream.get());
    comm.synchronize(60);
    if (rank == 0) {
      comm.set_launch_timeout(2);
      const auto start = net::Clock::now();
      try {
        comm.allreduce(buffer.get(), 4096, DType::f32, ReduceOp::kSum, stream.get());
        comm.synchronize(2);
        ADD_FAILURE() << "expected TimeoutError";
      } catch (const TimeoutError& e) {
        EXPECT_THAT(e.what(), HasSubstr("rank 0"));
        EXPECT_THAT(e.what(), HasSubstr("allreduce"));
      }
      EXPECT_LT(net::seconds_since(start), 30.0);
      EXPECT_TRUE(comm.aborted());
      rank0_done = true;
    } else {
      // Bounded, in case rank 0 failed before setting the flag.
      const auto give_up = net::deadline_after(60);
      while (!rank0_done && net::Clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      comm.abort();  // its peer is gone: do not wait for a finalize that cannot complete
    }
  });
}

// An allreduce that does not hold the caller's stream (the gradient buckets' mode), then join():
// with one rank the result equals the input once the stream has joined, and the busy time of
// the timed parts is positive.
TEST(NcclCommunicator, AllreduceBesideTheCallerStreamThenJoin) {
  Job job;
  auto comm = single_rank(job, 2, "beside");
  comm->set_timing(true);
  TestStream stream;
  const std::size_t count = 250007;
  const auto input = integer_floats(count);
  DeviceBuffer buffer(count * sizeof(float));
  AIACC_CUDA_CHECK(cudaMemcpyAsync(buffer.get(), input.data(), count * sizeof(float), cudaMemcpyHostToDevice,
                                   stream.get()));
  for (int i = 0; i < 3; ++i) {
    comm->allreduce(buffer.get(), static_cast<std::int64_t>(count), DType::f32, ReduceOp::kAverage, stream.get(),
                    /*caller_waits=*/false);
  }
  comm->join(stream.get());
  EXPECT_EQ(buffer.download<float>(count, stream.get()), input);
  comm->synchronize(60);
  EXPECT_GT(comm->take_busy_seconds(), 0.0);
  EXPECT_EQ(comm->take_busy_seconds(), 0.0) << "taken once";
}

// Overlap: while rank 1 holds back its part of an allreduce, rank 0's caller stream (which the
// allreduce was queued beside) goes on; only join() makes it wait for the collective.
TEST(MultiRankOverlap, TheCallerStreamRunsOnUntilItJoins) {
  if (gpu_world() < 2) GTEST_SKIP() << "needs at least 2 GPUs, found " << cuda::device_count();
  Job job;
  std::atomic<bool> rank0_checked{false}, rank0_looked{false};
  testing::run_ranks(2, [&](int rank) {
    AIACC_CUDA_CHECK(cudaSetDevice(rank));
    auto client = job.client();
    NcclCommunicator comm(client, rank, 2, rank, 1, "overlap", net::deadline_after(120));
    TestStream stream;
    const std::size_t count = 1 << 20;
    DeviceBuffer buffer(count * sizeof(float));
    AIACC_CUDA_CHECK(cudaMemsetAsync(buffer.get(), 0, count * sizeof(float), stream.get()));
    comm.allreduce(buffer.get(), static_cast<std::int64_t>(count), DType::f32, ReduceOp::kSum, stream.get());
    comm.synchronize(60);  // connections made
    cuda::CudaEvent after = cuda::CudaEvent::create_for_ordering();
    if (rank == 0) {
      comm.allreduce(buffer.get(), static_cast<std::int64_t>(count), DType::f32, ReduceOp::kSum, stream.get(),
                     /*caller_waits=*/false);
      AIACC_CUDA_CHECK(cudaEventRecord(after.get(), stream.get()));
      // Rank 1 has not joined yet: work queued after the allreduce must still complete.
      const auto give_up = net::deadline_after(10);
      cudaError_t state = cudaErrorNotReady;
      while ((state = cudaEventQuery(after.get())) == cudaErrorNotReady && net::Clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_EQ(state, cudaSuccess) << "the caller stream waited for a collective it was queued beside";
      rank0_checked = true;
      comm.join(stream.get());
      AIACC_CUDA_CHECK(cudaEventRecord(after.get(), stream.get()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      // Rank 1 is still held back (it waits for rank0_looked): the joined stream must wait.
      EXPECT_EQ(cudaEventQuery(after.get()), cudaErrorNotReady) << "join() did not order the stream";
      rank0_looked = true;
    } else {
      const auto give_up = net::deadline_after(30);
      while (!(rank0_checked && rank0_looked) && net::Clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      comm.allreduce(buffer.get(), static_cast<std::int64_t>(count), DType::f32, ReduceOp::kSum, stream.get());
    }
    comm.synchronize(60);
    AIACC_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  });
}

// The trainer's path for workers on GPUs: DeviceGradientFuser over NCCL (the plugin's factory),
// parameters on each rank's GPU, buckets queued from the grad-ready hooks on the current
// stream. One rank per GPU, up to 2 (1 on a one-GPU machine: the average is the input); the
// averages of rank-scaled integers are exact.
TEST(NcclDeviceCollective, DeviceGradientFuserAveragesOnTheGpus) {
  const int world = std::min(gpu_world(), 2);
  cuda::register_tensor_backend();
  register_nccl_device_collective();
  Job job;
  testing::run_world(world, testing::ring_options(), [&](std::shared_ptr<Communicator> host) {
    const int rank = host->rank();
    AIACC_CUDA_CHECK(cudaSetDevice(rank));
    auto client = job.client();
    DeviceCollectiveSpec spec;
    spec.rendezvous = &client;
    spec.host = host;
    spec.rank = rank;
    spec.world_size = world;
    spec.device = Device::cuda(rank);
    spec.streams = 2;
    spec.name = "fuser";
    spec.timeout_s = 60;
    auto collective = make_device_collective(spec);
    EXPECT_THAT(collective->describe(), HasSubstr("NCCL, 2 communicators"));
    const std::vector<std::int64_t> sizes = {7, 300000, 1, 65536, 1000};
    std::vector<std::unique_ptr<Parameter>> params;
    std::vector<Parameter*> pointers;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      params.push_back(std::make_unique<Parameter>(fmt::format("p{}", t),
                                                   Tensor::zeros(Shape{sizes[t]}, DType::f32, spec.device)));
      pointers.push_back(params.back().get());
    }
    DeviceGradientFuser fuser(std::move(collective), host, pointers, 256 * 1024, ReduceOp::kAverage);
    EXPECT_GT(fuser.plan().buckets().size(), 2u);
    const float mean_factor = static_cast<float>(world + 1) / 2.0f;  // mean of (r + 1) over ranks
    for (int step = 0; step < 3; ++step) {
      fuser.begin_step();
      for (std::size_t t = 0; t < params.size(); ++t) {
        const auto base = integer_floats(static_cast<std::size_t>(sizes[t]), step + 1);
        Tensor mine = Tensor::zeros(Shape{sizes[t]});
        for (std::int64_t i = 0; i < sizes[t]; ++i) mine.data<float>()[i] = base[static_cast<std::size_t>(i)] * static_cast<float>(rank + 1);
        params[t]->grad().copy_from(mine);
        params[t]->grad_ready();
      }
      fuser.finish_step();
      for (std::size_t t = 0; t < params.size(); ++t) {
        const auto base = integer_floats(static_cast<std::size_t>(sizes[t]), step + 1);
        const Tensor got = params[t]->grad().to(Device::cpu());
        for (std::int64_t i = 0; i < sizes[t]; ++i) {
          ASSERT_EQ(got.data<float>()[i], base[static_cast<std::size_t>(i)] * mean_factor)
              << "rank " << rank << " p" << t << " element " << i << " step " << step;
        }
      }
    }
    EXPECT_EQ(fuser.buckets_queued(), 3 * static_cast<std::int64_t>(fuser.plan().buckets().size()));
  });
}

}  // namespace
}  // namespace aiacc::ring
