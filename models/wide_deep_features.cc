// FeatureHasher: per-field salted hashing, cross features, bucket folding.
#include "models/wide_deep_features.h"

#include <fmt/format.h>

#include <optional>

#include "core/config/suggest.h"
#include "core/error.h"
#include "core/util/random.h"

namespace aiacc::models {
namespace {

void check_offsets(const SparseField& field, std::int64_t batch, const std::string& name) {
  const auto count = static_cast<std::int64_t>(field.ids.size());
  if (static_cast<std::int64_t>(field.offsets.size()) != batch + 1 || field.offsets.front() != 0 ||
      field.offsets.back() != count) {
    throw DataError(fmt::format("sparse field '{}': expected {} offsets from 0 to {} ids, got {}",
                                name, batch + 1, count, field.offsets.size()));
  }
  for (std::int64_t i = 0; i < batch; ++i) {
    if (field.offsets[i] > field.offsets[i + 1]) {
      throw DataError(fmt::format("sparse field '{}': offsets decrease at example {}", name, i));
    }
  }
}

}  // namespace

std::vector<CrossFeature> parse_cross_features(const std::vector<std::string>& entries,
                                               const std::vector<std::string>& fields) {
  std::vector<CrossFeature> crosses;
  const std::string separator = "_x_";
  for (const std::string& entry : entries) {
    // Try every "_x_" split point: a field name may itself contain "_x_".
    std::optional<CrossFeature> found;
    for (std::size_t at = entry.find(separator); at != std::string::npos && !found;
         at = entry.find(separator, at + 1)) {
      const std::string a = entry.substr(0, at);
      const std::string b = entry.substr(at + separator.size());
      int ia = -1;
      int ib = -1;
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f] == a) ia = static_cast<int>(f);
        if (fields[f] == b) ib = static_cast<int>(f);
      }
      if (ia >= 0 && ib >= 0) found = CrossFeature{entry, ia, ib};
    }
    if (!found) {
      throw ConfigError(fmt::format(
          "model wide_deep: cross_features entry '{}' is not '<field>_x_<field>' over the data's "
          "categorical fields ({})",
          entry, config::join_names(fields)));
    }
    for (const CrossFeature& c : crosses) {
      if (c.name == entry) {
        throw ConfigError(fmt::format("model wide_deep: cross_features lists '{}' twice", entry));
      }
    }
    crosses.push_back(*found);
  }
  return crosses;
}

FeatureHasher::FeatureHasher(const std::vector<std::string>& fields, std::vector<CrossFeature> crosses,
                             std::uint64_t hash_buckets)
    : fields_(fields), crosses_(std::move(crosses)), buckets_(hash_buckets) {
  for (const std::string& field : fields_) salts_.push_back(salt_of(field));
  for (const CrossFeature& cross : crosses_) cross_salts_.push_back(salt_of(cross.name));
}

std::uint64_t FeatureHasher::salt_of(const std::string& name) {
  // FNV-1a over the name, then mixed: a fixed function of the name on every platform.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h);
}

std::uint64_t FeatureHasher::field_id(int field, std::int64_t raw) const {
  return mix64(static_cast<std::uint64_t>(raw) ^ salts_[static_cast<std::size_t>(field)]);
}

void FeatureHasher::hash(const std::vector<SparseField>& raw, std::int64_t batch,
                         std::vector<SparseField>& ids, std::vector<SparseField>& cross_ids) const {
  if (raw.size() != fields_.size()) {
    throw DataError(fmt::format("model wide_deep: the batch has {} sparse fields, the model was "
                                "built for {} ({})",
                                raw.size(), fields_.size(), config::join_names(fields_)));
  }
  ids.resize(fields_.size());
  // Crosses need the unfolded ids of their fields: keep them while folding.
  std::vector<std::vector<std::uint64_t>> full(fields_.size());
  for (std::size_t f = 0; f < fields_.size(); ++f) {
    check_offsets(raw[f], batch, fields_[f]);
    full[f].resize(raw[f].ids.size());
    ids[f].ids.resize(raw[f].ids.size());
    for (std::size_t p = 0; p < raw[f].ids.size(); ++p) {
      full[f][p] = field_id(static_cast<int>(f), raw[f].ids[p]);
      ids[f].ids[p] = fold(full[f][p]);
    }
    ids[f].offsets = raw[f].offsets;
  }
  cross_ids.resize(crosses_.size());
  for (std::size_t c = 0; c < crosses_.size(); ++c) {
    const auto a = static_cast<std::size_t>(crosses_[c].field_a);
    const auto b = static_cast<std::size_t>(crosses_[c].field_b);
    SparseField& out = cross_ids[c];
    out.ids.clear();
    out.offsets.assign(1, 0);
    for (std::int64_t i = 0; i < batch; ++i) {
      for (std::int64_t p = raw[a].offsets[i]; p < raw[a].offsets[i + 1]; ++p) {
        const std::uint64_t left = mix64(full[a][static_cast<std::size_t>(p)] ^ cross_salts_[c]);
        for (std::int64_t q = raw[b].offsets[i]; q < raw[b].offsets[i + 1]; ++q) {
          out.ids.push_back(fold(mix64(left ^ full[b][static_cast<std::size_t>(q)])));
        }
      }
      out.offsets.push_back(static_cast<std::int64_t>(out.ids.size()));
    }
  }
}

}  // namespace aiacc::models
