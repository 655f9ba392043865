// AutoTuner's choice (the fewest streams among the near-fastest) and StreamBalancer's shares
// against a model of streams whose time is a fixed latency plus their bytes over their rate:
// equal streams stay equal from a perturbed start (the rate-proportional rule it replaced ran
// away from that fixed point), and a slower stream ends with a share matching its rate.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "ring/auto_tuner.h"
#include "tests/ring/ring_fixture.h"

namespace aiacc::ring {
namespace {

using testing::ring_options;
using testing::run_world;

int choice_for(const std::vector<double>& scores) {
  int chosen = -1;
  run_world(1, ring_options(8), [&](std::shared_ptr<Communicator> comm) {
    std::vector<TuningCandidate> candidates;
    for (int k = 1; k <= 8; k *= 2) candidates.push_back({1 << 20, k});
    AutoTuner tuner(comm, candidates, 0, 1);
    for (double score : scores) tuner.record(score);
    EXPECT_TRUE(tuner.done());
    chosen = tuner.current().streams;
  });
  return chosen;
}

TEST(AutoTuner, FewestStreamsAmongTheNearFastest) {
  EXPECT_EQ(choice_for({10.0, 5.0, 2.04, 2.0}), 4);  // 4 streams within 5% of 8
  EXPECT_EQ(choice_for({10.0, 5.0, 3.0, 2.0}), 8);   // 8 clearly faster
  EXPECT_EQ(choice_for({1.0, 1.04, 0.99, 0.5}), 8);
  EXPECT_EQ(choice_for({1.0, 1.01, 1.02, 1.03}), 1);
}

// Candidates 1, 2, 4, 8 streams, three measured steps each: 8 streams has two fast steps and one
// slow one (a queue overrun), 4 streams three steady ones.
int choice_by(TuningScore score) {
  int chosen = -1;
  run_world(1, ring_options(8), [&](std::shared_ptr<Communicator> comm) {
    std::vector<TuningCandidate> candidates;
    for (int k = 1; k <= 8; k *= 2) candidates.push_back({1 << 20, k});
    AutoTuner tuner(comm, candidates, 0, 3, score);
    for (double t : {8.0, 8.0, 8.0, 4.0, 4.0, 4.0, 2.0, 2.0, 2.0, 1.8, 1.8, 3.0}) tuner.record(t);
    EXPECT_TRUE(tuner.done());
    EXPECT_DOUBLE_EQ(tuner.scores()[3], score == TuningScore::kMean ? 2.2 : 1.8);
    chosen = tuner.current().streams;
  });
  return chosen;
}

TEST(AutoTuner, TheMeanCountsASlowStepTheMedianIgnores) {
  EXPECT_EQ(choice_by(TuningScore::kMedian), 8);
  EXPECT_EQ(choice_by(TuningScore::kMean), 4);
}

// Runs the balancer over `updates` rounds of the model: stream s takes latency + w_s * bytes /
// rate_s seconds. Returns the final weights.
std::vector<double> balance(const std::vector<double>& rates, std::vector<double> start, int updates) {
  std::vector<double> result;
  const int streams = static_cast<int>(rates.size());
  run_world(1, ring_options(streams), [&](std::shared_ptr<Communicator> comm) {
    comm->set_stream_weights(start);
    StreamBalancer balancer(comm, 1);
    const double latency = 2e-4, bytes = 4e6;
    for (int u = 0; u < updates; ++u) {
      const auto& w = comm->stream_weights();
      std::vector<std::int64_t> sent(rates.size());
      std::vector<double> seconds(rates.size());
      for (std::size_t s = 0; s < rates.size(); ++s) {
        sent[s] = static_cast<std::int64_t>(w[s] * bytes);
        seconds[s] = latency + w[s] * bytes / rates[s];
      }
      balancer.record({sent, seconds});
    }
    result = comm->stream_weights();
  });
  return result;
}

TEST(StreamBalancer, EqualStreamsReturnToEqualSharesDespiteLatency) {
  const auto weights = balance({1e9, 1e9, 1e9, 1e9}, {0.22, 0.26, 0.26, 0.26}, 40);
  for (double w : weights) EXPECT_NEAR(w, 0.25, 0.005);
}

TEST(StreamBalancer, ASlowerStreamGetsAShareMatchingItsRate) {
  const auto weights = balance({1e9, 1e9, 1e9, 0.5e9}, {0.25, 0.25, 0.25, 0.25}, 40);
  // Equal finishing times: the half-rate stream carries half as much as each of the others.
  EXPECT_NEAR(weights[3] / weights[0], 0.5, 0.03);
  EXPECT_NEAR(weights[1], weights[0], 0.002);
}

TEST(StreamBalancer, SwitchedOffStreamsStayOff) {
  const auto weights = balance({1e9, 1e9, 1e9, 1e9}, {0.5, 0.5, 0.0, 0.0}, 10);
  EXPECT_EQ(weights[2], 0.0);
  EXPECT_EQ(weights[3], 0.0);
  EXPECT_NEAR(weights[0], 0.5, 0.005);
}

}  // namespace
}  // namespace aiacc::ring
