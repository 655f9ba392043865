// split_by_weights: parts cover the buffer exactly, in order, with 256-byte-aligned boundaries
// and sizes proportional to the weights; bad weights are ConfigErrors naming the stream. Runs
// without a GPU.
#include "ring/nccl/detail/stream_split.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"

namespace aiacc::ring::detail {
namespace {

using ::testing::HasSubstr;

// Contiguous, in order, covering [0, count); every boundary before the end is aligned.
void expect_valid_split(const std::vector<StreamPart>& parts, std::int64_t count,
                        std::size_t element_size) {
  std::int64_t next = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    EXPECT_EQ(parts[k].offset, next) << "part " << k;
    EXPECT_GE(parts[k].count, 0) << "part " << k;
    next = parts[k].offset + parts[k].count;
    if (next != count) {
      EXPECT_EQ(static_cast<std::size_t>(next) * element_size % kPartAlignmentBytes, 0u)
          << "boundary after part " << k;
    }
  }
  EXPECT_EQ(next, count);
}

TEST(StreamSplit, OneStreamTakesEverything) {
  const std::vector<double> weights{1.0};
  const auto parts = split_by_weights(12345, 4, weights);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0], (StreamPart{0, 12345}));
}

TEST(StreamSplit, EqualWeightsGiveNearlyEqualAlignedParts) {
  const std::vector<double> weights{1.0, 1.0, 1.0};
  // 1000 floats = 15.6 granules of 64 floats: boundaries at 5 and 11 granules.
  const auto parts = split_by_weights(1000, 4, weights);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], (StreamPart{0, 320}));
  EXPECT_EQ(parts[1], (StreamPart{320, 384}));
  EXPECT_EQ(parts[2], (StreamPart{704, 296}));
}

TEST(StreamSplit, PartsFollowUnevenWeights) {
  const std::vector<double> weights{3.0, 1.0};
  const std::int64_t count = 1 << 20;  // f16: 128 elements per granule
  const auto parts = split_by_weights(count, 2, weights);
  expect_valid_split(parts, count, 2);
  EXPECT_EQ(parts[0].count, count * 3 / 4);
  EXPECT_EQ(parts[1].count, count / 4);
}

TEST(StreamSplit, ZeroWeightGetsAnEmptyPart) {
  const std::vector<double> weights{2.0, 0.0, 1.0};
  const auto parts = split_by_weights(3000, 8, weights);
  expect_valid_split(parts, 3000, 8);
  EXPECT_EQ(parts[1].count, 0);
  EXPECT_GT(parts[0].count, parts[2].count);
}

TEST(StreamSplit, SmallBuffersLeaveLaterPartsEmpty) {
  const std::vector<double> weights{1.0, 1.0, 1.0, 1.0};
  for (std::int64_t count : {0, 1, 7, 63, 64, 65, 200}) {
    SCOPED_TRACE(count);
    const auto parts = split_by_weights(count, 4, weights);
    ASSERT_EQ(parts.size(), 4u);
    expect_valid_split(parts, count, 4);
  }
}

TEST(StreamSplit, ManySizesAndDtypesStayValid) {
  const std::vector<double> weights{0.7, 1.3, 2.0, 0.01, 1.0};
  for (std::size_t element_size : {1u, 2u, 4u, 8u}) {
    for (std::int64_t count = 0; count < 5000; count += 37) {
      SCOPED_TRACE(::testing::Message() << count << " elements of " << element_size << " bytes");
      expect_valid_split(split_by_weights(count, element_size, weights), count, element_size);
    }
  }
}

TEST(StreamSplit, IsDeterministic) {
  const std::vector<double> weights{0.31, 0.27, 0.42};
  EXPECT_EQ(split_by_weights(987654321, 4, weights), split_by_weights(987654321, 4, weights));
}

TEST(StreamSplit, ElementSizeMustDivideTheAlignment) {
  const std::vector<double> weights{1.0};
  EXPECT_THROW(split_by_weights(10, 3, weights), InternalError);
  EXPECT_THROW(split_by_weights(-1, 4, weights), InternalError);
}

TEST(StreamWeights, AcceptsOneNonNegativeWeightPerStream) {
  const std::vector<double> weights{1.0, 0.0, 2.5};
  EXPECT_NO_THROW(validate_stream_weights(weights, 3));
}

TEST(StreamWeights, RejectsBadWeightsNamingThem) {
  const std::vector<double> two{1.0, 1.0};
  try {
    validate_stream_weights(two, 3);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("2 given for 3 streams"));
  }
  const std::vector<double> negative{1.0, -0.5};
  try {
    validate_stream_weights(negative, 2);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("stream 1"));
  }
  const std::vector<double> zeros{0.0, 0.0};
  EXPECT_THROW(validate_stream_weights(zeros, 2), ConfigError);
  const std::vector<double> not_finite{1.0, std::numeric_limits<double>::infinity()};
  EXPECT_THROW(validate_stream_weights(not_finite, 2), ConfigError);
}

}  // namespace
}  // namespace aiacc::ring::detail
