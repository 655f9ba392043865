// Helpers for ring tests: a world of communicators as threads of the test process (each rank
// with its own ZeroMQ context, meshes exchanged in memory), fast failure timeouts, and exact
// integer-valued inputs whose sums are known in closed form.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ring/allreduce.h"
#include "ring/communicator.h"
#include "tests/core/net/net_fixture.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::testing {

// `transport`: "tcp" (the default links) or "zmq" (the ZeroMQ channels).
inline ring::CommunicatorOptions ring_options(int streams = 1, double timeout_s = 30.0, const char* transport = "tcp") {
  ring::CommunicatorOptions options;
  options.streams = streams;
  options.timeout_s = timeout_s;
  options.transport = transport;
  options.channel = fast_options();
  return options;
}

// Runs fn(comm) on `world` ranks concurrently; rethrows the first rank's failure.
inline void run_world(int world, const ring::CommunicatorOptions& options,
                      const std::function<void(std::shared_ptr<ring::Communicator>)>& fn) {
  LocalExchange exchange(world);
  run_ranks(world, [&](int rank) {
    auto mesh = local_mesh(exchange, ring::Communicator::make_mesh_spec(rank, world, options, "ring-test"));
    fn(std::make_shared<ring::Communicator>(std::move(mesh), options));
  });
}

// Rank r's element i: a small integer, exact in every float type we reduce (|value| <= 64).
inline double input_value(int rank, std::int64_t i) {
  return static_cast<double>(((i * 7 + rank * 13) % 17) - 8 + (rank % 3));
}
inline double expected_sum(int world, std::int64_t i) {
  double sum = 0;
  for (int r = 0; r < world; ++r) sum += input_value(r, i);
  return sum;
}

// Inputs of the compressed-wire tests: smooth values of a different scale on every rank.
inline float wire_input(int rank, std::int64_t i) {
  return static_cast<float>(std::sin(0.001 * static_cast<double>(i) * (rank + 1)) * (1 + rank));
}

// Every rank's result of all-reducing wire_input (`count` elements, 64 KiB chunks) over `world`
// threads with `wire` and `op`, the ranks on `hosts` (empty: a host each). Expects no fp32
// fallback, and `algorithm` where given.
inline std::vector<std::vector<float>> run_compressed(int world, const std::vector<int>& hosts, ring::WireType wire,
                                                     ring::ReduceOp op, std::int64_t count,
                                                     const char* algorithm = nullptr) {
  std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
  run_world(world, ring_options(2), [&](std::shared_ptr<ring::Communicator> comm) {
    if (!hosts.empty()) comm->set_hosts(hosts);
    std::vector<float> data(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = wire_input(comm->rank(), i);
    ring::AllreduceSpec spec;
    spec.wire = wire;
    spec.op = op;
    spec.chunk_bytes = 64 * 1024;
    ring::Allreduce allreduce(comm, ring::Buffer{data.data(), count, DType::f32}, spec);
    if (algorithm != nullptr) {
      EXPECT_STREQ(allreduce.algorithm(), algorithm);
    }
    EXPECT_FALSE(allreduce.run());
    results[static_cast<std::size_t>(comm->rank())] = std::move(data);
  });
  return results;
}

// results[r]: rank r's all-reduced wire_input over `world` ranks (a sum, or an average where
// `divisor` is the world). Rank 0's elements must lie within `rounding` x the sum of the inputs'
// magnitudes (/ divisor, + 1e-7) of the exact result, and every rank's bits equal rank 0's.
inline void expect_within_wire_bound(const std::vector<std::vector<float>>& results, double divisor, double rounding,
                                     const std::string& what) {
  const int world = static_cast<int>(results.size());
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < world; ++r) {
      exact += wire_input(r, static_cast<std::int64_t>(i));
      magnitude += std::abs(wire_input(r, static_cast<std::int64_t>(i)));
    }
    ASSERT_NEAR(results[0][i], exact / divisor, rounding * magnitude / divisor + 1e-7) << what << ", element " << i;
  }
  for (int r = 1; r < world; ++r) {
    ASSERT_EQ(0, std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(),
                             results[0].size() * sizeof(float)))
        << "rank " << r << " differs from rank 0 (" << what << ")";
  }
}

}  // namespace aiacc::testing
