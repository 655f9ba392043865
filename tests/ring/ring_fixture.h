// Helpers for ring tests: a world of communicators as threads of the test process (each rank
// with its own ZeroMQ context, meshes exchanged in memory), fast failure timeouts, and exact
// integer-valued inputs whose sums are known in closed form.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

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

}  // namespace aiacc::testing
