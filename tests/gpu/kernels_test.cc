// Each of our CUDA kernels against its CPU reference on random inputs: conversions bit for bit
// (core/util/half.h), the unscale-and-check step, Adam/AdamW/SGD against core/optim's rules over
// several steps, and the embedding bag against core/kernels in both modes, with empty bags and
// repeated rows, and both losses with their gradients and bad-label reports. Skipped (exit 77) where no GPU is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/kernels/embedding_bag.h"
#include "core/cuda/kernels/losses.h"
#include "core/cuda/kernels/optimizer_update.h"
#include "core/cuda/kernels/precision.h"
#include "core/cuda/kernels/row_cache.h"
#include "core/cuda/stream.h"
#include "core/embedding/hot_row_cache.h"
#include "core/error.h"
#include "core/kernels/embedding_bag.h"
#include "core/kernels/losses.h"
#include "core/optim/adam.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/sgd.h"
#include "tests/gpu/device_vector.h"

namespace aiacc::cuda {
namespace {

using testing::DeviceVector;
using testing::expect_close;

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Inputs that exercise rounding: random magnitudes over the whole float range, ties, the
// limits of fp16, subnormals, infinities and NaN.
std::vector<float> conversion_inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f,
                          6.1e-5f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 512,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(), 3.4e38f};
  std::mt19937_64 rng(11);
  for (int i = 0; i < 100000; ++i) {
    const auto bits = static_cast<std::uint32_t>(rng());
    v.push_back(bits_float(bits));
  }
  return v;
}

TEST(GpuKernels, ConversionsMatchTheCpuBitForBit) {
  const std::vector<float> input = conversion_inputs();
  const std::int64_t n = static_cast<std::int64_t>(input.size());
  const DeviceVector<float> in(input);
  DeviceVector<BFloat16> bf(std::vector<BFloat16>(input.size()));
  DeviceVector<Half> half(std::vector<Half>(input.size()));
  launch_float_to_bf16(in.get(), bf.get(), n, nullptr);
  launch_float_to_half(in.get(), half.get(), n, nullptr);
  const auto bf_host = bf.to_host();
  const auto half_host = half.to_host();
  for (std::size_t i = 0; i < input.size(); ++i) {
    const float x = input[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(to_float(bf_host[i]))) << i;
      EXPECT_TRUE(std::isnan(to_float(half_host[i]))) << i;
      continue;
    }
    ASSERT_EQ(bf_host[i].bits, to_bf16(x).bits) << "bf16 of " << x;
    ASSERT_EQ(half_host[i].bits, to_half(x).bits) << "fp16 of " << x;
  }
  DeviceVector<float> back_bf(std::vector<float>(input.size()));
  DeviceVector<float> back_half(std::vector<float>(input.size()));
  launch_bf16_to_float(bf.get(), back_bf.get(), n, nullptr);
  launch_half_to_float(half.get(), back_half.get(), n, nullptr);
  const auto wide_bf = back_bf.to_host();
  const auto wide_half = back_half.to_host();
  for (std::size_t i = 0; i < input.size(); ++i) {
    if (std::isnan(input[i])) continue;
    ASSERT_EQ(float_bits(wide_bf[i]), float_bits(to_float(bf_host[i]))) << i;
    ASSERT_EQ(float_bits(wide_half[i]), float_bits(to_float(half_host[i]))) << i;
  }
}

TEST(GpuKernels, UnscaleMultipliesAndFlagsNonFiniteValues) {
  std::vector<float> grads = random_floats(1 << 20, 3, 1000.0f);
  DeviceVector<float> finite(grads);
  DeviceVector<int> flag(std::vector<int>{0});
  launch_unscale_and_check(finite.get(), static_cast<std::int64_t>(grads.size()), 1.0f / 1024, flag.get(), nullptr);
  std::vector<float> reference = grads;
  EXPECT_FALSE(optim::unscale_gradients(reference, 1.0f / 1024));
  EXPECT_EQ(finite.to_host(), reference);
  EXPECT_EQ(flag.to_host()[0], 0);
  grads[777777] = std::numeric_limits<float>::infinity();
  DeviceVector<float> overflowed(grads);
  launch_unscale_and_check(overflowed.get(), static_cast<std::int64_t>(grads.size()), 0.5f, flag.get(), nullptr);
  EXPECT_EQ(flag.to_host()[0], 1);
}

// Gradient clipping's sum of squares: each size's partials add up to a float64 reference within
// rounding (magnitudes from 1e-3 to 1e3), a zero-length tensor to 0, and the same input gives
// the same partial bits again (no atomics: every worker's norm is equal for equal gradients).
TEST(GpuKernels, SumOfSquaresPartialsAddUpToTheFloat64Sum) {
  for (std::int64_t n : {0, 1, 255, 256, 257, 128 * 256, 128 * 256 + 1, 1000003}) {
    std::vector<float> values = random_floats(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), 11);
    values.resize(static_cast<std::size_t>(n));
    long double reference = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] *= std::pow(10.0f, static_cast<float>(i % 7) - 3.0f);
      reference += static_cast<long double>(values[i]) * values[i];
    }
    const unsigned blocks = sum_squares_blocks(n);
    ASSERT_GE(blocks, 1u);
    ASSERT_LE(blocks, 128u);
    DeviceVector<float> device(values);
    DeviceVector<double> partial(std::vector<double>(blocks, -1.0));
    launch_sum_squares(device.get(), n, partial.get(), nullptr);
    const std::vector<double> first = partial.to_host();
    double total = 0;
    for (double p : first) total += p;
    EXPECT_NEAR(total, static_cast<double>(reference), 1e-12 * static_cast<double>(reference)) << n;
    launch_sum_squares(device.get(), n, partial.get(), nullptr);
    EXPECT_EQ(partial.to_host(), first) << n;
  }
}

TEST(GpuKernels, AdamAndAdamWFollowTheCpuRule) {
  for (bool decoupled : {false, true}) {
    optim::AdamRule rule;
    rule.weight_decay = 0.01;
    rule.decoupled = decoupled;
    const std::size_t n = 100003;
    std::vector<float> w = random_floats(n, 1), m(n, 0.0f), v(n, 0.0f);
    DeviceVector<float> dw(w), dm(m), dv(v);
    for (int step = 1; step <= 5; ++step) {
      const std::vector<float> g = random_floats(n, 100 + step, 0.1f);
      DeviceVector<float> dg(g);
      rule.update(w, g, m, v, step, 1e-3);
      launch_adam_update(rule, dw.get(), dg.get(), dm.get(), dv.get(), static_cast<std::int64_t>(n), step, 1e-3, nullptr);
    }
    expect_close(dw.to_host(), w, 1e-6f, decoupled ? "adamw weights" : "adam weights");
    expect_close(dm.to_host(), m, 1e-6f, "exp_avg");
    expect_close(dv.to_host(), v, 1e-6f, "exp_avg_sq");
  }
}

TEST(GpuKernels, SgdWithAndWithoutMomentumFollowsTheCpuRule) {
  for (double momentum : {0.0, 0.9}) {
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0.0) continue;
      optim::SgdRule rule;
      rule.momentum = momentum;
      rule.nesterov = nesterov;
      rule.dampening = nesterov ? 0.0 : 0.1;
      rule.weight_decay = 1e-4;
      const std::size_t n = 65537;
      std::vector<float> w = random_floats(n, 5), buf(n, 0.0f);
      DeviceVector<float> dw(w), dbuf(buf);
      for (int step = 1; step <= 4; ++step) {
        const std::vector<float> g = random_floats(n, 50 + step);
        DeviceVector<float> dg(g);
        rule.update(w, g, momentum > 0 ? std::span<float>(buf) : std::span<float>(), step, 0.05);
        launch_sgd_update(rule, dw.get(), dg.get(), momentum > 0 ? dbuf.get() : nullptr,
                          static_cast<std::int64_t>(n), step, 0.05, nullptr);
      }
      expect_close(dw.to_host(), w, 1e-6f, "sgd weights");
    }
  }
}

TEST(GpuKernels, EmbeddingBagMatchesTheCpuKernels) {
  // 300 bags (some empty), 40 unique rows of dim 19, rows used many times.
  std::mt19937_64 rng(9);
  kernels::EmbeddingBagGeometry g;
  g.batch = 300;
  g.num_unique = 40;
  g.dim = 19;
  std::vector<std::int64_t> offsets{0}, indices;
  for (std::int64_t i = 0; i < g.batch; ++i) {
    const int size = static_cast<int>(rng() % 6);  // 0..5: empty bags included
    for (int k = 0; k < size; ++k) indices.push_back(static_cast<std::int64_t>(rng() % 40));
    offsets.push_back(static_cast<std::int64_t>(indices.size()));
  }
  g.num_positions = static_cast<std::int64_t>(indices.size());
  const std::vector<float> rows = random_floats(static_cast<std::size_t>(g.num_unique * g.dim), 21);
  const std::vector<float> grad_out = random_floats(static_cast<std::size_t>(g.batch * g.dim), 22);
  const DeviceVector<std::int64_t> d_indices(indices), d_offsets(offsets);
  const DeviceVector<float> d_rows(rows), d_grad_out(grad_out);
  const kernels::EmbeddingBagBackwardPlan plan = kernels::make_backward_plan(g, indices.data(), offsets.data());
  const DeviceVector<std::int64_t> d_row_start(plan.row_start), d_bag_of(plan.bag_of);
  for (kernels::BagMode mode : {kernels::BagMode::sum, kernels::BagMode::mean}) {
    std::vector<float> out(static_cast<std::size_t>(g.batch * g.dim));
    std::vector<float> grad_rows(static_cast<std::size_t>(g.num_unique * g.dim));
    kernels::embedding_bag_forward(g, mode, rows.data(), indices.data(), offsets.data(), out.data());
    kernels::embedding_bag_backward(g, mode, grad_out.data(), indices.data(), offsets.data(), grad_rows.data());
    DeviceVector<float> d_out(std::vector<float>(out.size(), 7.0f));
    DeviceVector<float> d_grad_rows(std::vector<float>(grad_rows.size(), 7.0f));
    launch_embedding_bag_forward(g, mode, d_rows.get(), d_indices.get(), d_offsets.get(), d_out.get(), g.dim,
                                 nullptr);
    launch_embedding_bag_backward(g, mode, d_grad_out.get(), g.dim, d_row_start.get(), d_bag_of.get(),
                                  d_offsets.get(), d_grad_rows.get(), nullptr);
    expect_close(d_out.to_host(), out, 1e-6f, "bag forward");
    expect_close(d_grad_rows.to_host(), grad_rows, 1e-6f, "bag backward");

    // Strided: the bags fill columns [3, 3 + D) of a [N, D + 8] matrix (one field of a model's
    // concatenated input), leaving the other columns alone; the backward reads them from there.
    const std::int64_t stride = g.dim + 8, column = 3;
    DeviceVector<float> d_wide(std::vector<float>(static_cast<std::size_t>(g.batch * stride), 7.0f));
    launch_embedding_bag_forward(g, mode, d_rows.get(), d_indices.get(), d_offsets.get(), d_wide.get() + column,
                                 stride, nullptr);
    const std::vector<float> wide = d_wide.to_host();
    std::vector<float> wide_expected(wide.size(), 7.0f), wide_grad(wide.size(), -1.0f);
    for (std::int64_t i = 0; i < g.batch; ++i) {
      for (std::int64_t j = 0; j < g.dim; ++j) {
        wide_expected[static_cast<std::size_t>(i * stride + column + j)] = out[static_cast<std::size_t>(i * g.dim + j)];
        wide_grad[static_cast<std::size_t>(i * stride + column + j)] = grad_out[static_cast<std::size_t>(i * g.dim + j)];
      }
    }
    expect_close(wide, wide_expected, 1e-6f, "strided bag forward");
    const DeviceVector<float> d_wide_grad(wide_grad);
    DeviceVector<float> d_grad_rows_strided(std::vector<float>(grad_rows.size(), 7.0f));
    launch_embedding_bag_backward(g, mode, d_wide_grad.get() + column, stride, d_row_start.get(), d_bag_of.get(),
                                  d_offsets.get(), d_grad_rows_strided.get(), nullptr);
    expect_close(d_grad_rows_strided.to_host(), grad_rows, 1e-6f, "strided bag backward");
  }
}

TEST(GpuKernels, LossesMatchTheCpuKernels) {
  const std::int64_t batch = 333, classes = 10;
  const std::vector<float> logits = random_floats(static_cast<std::size_t>(batch * classes), 31, 3.0f);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = (i * 7) % classes;
  for (double smoothing : {0.0, 0.1}) {
    std::vector<float> dlogits(logits.size());
    const double loss = kernels::softmax_cross_entropy<float>(batch, classes, logits.data(), labels.data(),
                                                              smoothing, dlogits.data());
    const DeviceVector<float> d_logits(logits);
    const DeviceVector<std::int64_t> d_labels(labels);
    DeviceVector<float> d_dlogits(std::vector<float>(logits.size(), 9.0f));
    const LossOnDevice result = launch_softmax_cross_entropy(batch, classes, d_logits.get(), d_labels.get(),
                                                             smoothing, d_dlogits.get(), 0, nullptr);
    EXPECT_NEAR(read_loss(result, nullptr), loss, 1e-12 * std::fabs(loss));
    expect_close(d_dlogits.to_host(), dlogits, 1e-6f, "softmax cross-entropy gradient");
  }
  // A label outside [0, C) is named, like the CPU's DataError.
  labels[200] = classes;
  const DeviceVector<float> d_logits(logits);
  const DeviceVector<std::int64_t> d_bad(labels);
  const LossOnDevice bad = launch_softmax_cross_entropy(batch, classes, d_logits.get(), d_bad.get(), 0.0,
                                                        nullptr, 0, nullptr);
  try {
    read_loss(bad, nullptr);
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("example 200"), std::string::npos) << e.what();
  }

  std::vector<float> targets(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) targets[static_cast<std::size_t>(i)] = i % 3 == 0 ? 0.25f : float(i % 2);
  const std::vector<float> x = random_floats(targets.size(), 32, 4.0f);
  std::vector<float> dx(x.size());
  const double bce = kernels::binary_cross_entropy_with_logits<float>(batch, x.data(), targets.data(), dx.data());
  const DeviceVector<float> d_x(x), d_targets(targets);
  DeviceVector<float> d_dx(std::vector<float>(x.size(), 9.0f));
  const LossOnDevice result = launch_binary_cross_entropy_with_logits(batch, d_x.get(), d_targets.get(), d_dx.get(), 0, nullptr);
  EXPECT_NEAR(read_loss(result, nullptr), bce, 1e-12 * std::fabs(bce));
  expect_close(d_dx.to_host(), dx, 1e-6f, "binary cross-entropy gradient");
}

// A step of a hot-row cache: the plan's fetched rows scattered into their slots, then the
// batch gathered from the slots, against the same moves done on the host.
TEST(GpuKernels, RowCacheScatterAndGatherFollowThePlan) {
  const std::int64_t slots = 64, dim = 24;
  embedding::HotRowCache cache(slots, 2);
  std::vector<float> host_table(static_cast<std::size_t>(slots * dim), 0.0f);
  DeviceVector<float> table(host_table);
  for (std::int64_t step = 0; step < 6; ++step) {
    std::vector<std::int64_t> ids;
    for (std::int64_t k = 0; k < 40; ++k) ids.push_back((k * 7 + step * 11) % 90);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    const embedding::RowCachePlan plan = cache.plan(ids, step);
    // The servers' rows: a function of id and step, so a stale slot would show.
    std::vector<float> fetched(plan.fetch_ids.size() * static_cast<std::size_t>(dim));
    for (std::size_t r = 0; r < plan.fetch_ids.size(); ++r) {
      for (std::int64_t j = 0; j < dim; ++j) {
        fetched[r * dim + j] = static_cast<float>(plan.fetch_ids[r] * 1000 + step * 10 + j);
        host_table[static_cast<std::size_t>(plan.fetch_slots[r] * dim + j)] = fetched[r * dim + j];
      }
    }
    const DeviceVector<float> d_fetched(fetched);
    const DeviceVector<std::int32_t> d_fetch_slots(plan.fetch_slots), d_slot_of(plan.slot_of);
    launch_scatter_to_slots(d_fetched.get(), d_fetch_slots.get(), static_cast<std::int64_t>(plan.fetch_ids.size()),
                            dim, table.get(), nullptr);
    DeviceVector<float> batch(std::vector<float>(ids.size() * static_cast<std::size_t>(dim), -1.0f));
    launch_gather_slots(table.get(), d_slot_of.get(), static_cast<std::int64_t>(ids.size()), dim, batch.get(), nullptr);
    std::vector<float> expected(ids.size() * static_cast<std::size_t>(dim));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      for (std::int64_t j = 0; j < dim; ++j) {
        expected[i * dim + j] = host_table[static_cast<std::size_t>(plan.slot_of[i] * dim + j)];
      }
    }
    ASSERT_EQ(batch.to_host(), expected) << "step " << step;
    ASSERT_EQ(table.to_host(), host_table) << "step " << step;
  }
}

}  // namespace
}  // namespace aiacc::cuda
