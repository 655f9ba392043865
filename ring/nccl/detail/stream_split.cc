#include "ring/nccl/detail/stream_split.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"

namespace aiacc::ring::detail {

void validate_stream_weights(std::span<const double> weights, std::size_t streams) {
  if (weights.size() != streams) {
    throw ConfigError(fmt::format("NCCL stream weights: {} given for {} streams (one per stream)",
                                  weights.size(), streams));
  }
  double total = 0.0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    if (!std::isfinite(weights[k]) || weights[k] < 0.0) {
      throw ConfigError(fmt::format(
          "NCCL stream weights: weight {} of stream {} must be finite and >= 0", weights[k], k));
    }
    total += weights[k];
  }
  if (!(total > 0.0)) {
    throw ConfigError("NCCL stream weights: at least one stream needs a positive weight");
  }
}

std::vector<StreamPart> split_by_weights(std::int64_t count, std::size_t element_size,
                                         std::span<const double> weights,
                                         std::size_t alignment_bytes) {
  AIACC_CHECK_GE(count, std::int64_t{0});
  AIACC_CHECK(!weights.empty());
  AIACC_CHECK(element_size > 0 && alignment_bytes % element_size == 0,
              "element size {} must divide the alignment {}", element_size, alignment_bytes);
  const auto granule = static_cast<std::int64_t>(alignment_bytes / element_size);
  // Boundaries are placed on a grid of whole granules: units counts the granules the buffer
  // touches (the last one may be partial).
  const std::int64_t units = (count + granule - 1) / granule;
  double total = 0.0;
  for (double w : weights) total += w;
  AIACC_CHECK(total > 0.0 && std::isfinite(total), "stream weights must have a positive sum");

  std::vector<StreamPart> parts(weights.size());
  std::int64_t begin = 0;
  double cumulative = 0.0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    std::int64_t end = count;
    if (k + 1 < weights.size()) {
      cumulative += weights[k];
      // Round to the nearest granule; cumulative is non-decreasing, so boundaries are too.
      const auto boundary_units =
          static_cast<std::int64_t>(std::llround(static_cast<double>(units) * cumulative / total));
      end = std::clamp(boundary_units * granule, begin, count);
    }
    parts[k] = StreamPart{begin, end - begin};
    begin = end;
  }
  return parts;
}

}  // namespace aiacc::ring::detail
