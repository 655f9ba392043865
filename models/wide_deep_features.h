// Feature hashing for Wide&Deep: raw categorical values (Criteo's 32-bit hex values as int64,
// -1 for missing) become 64-bit embedding ids salted per field, so equal raw values in two fields
// never share a row; crossed features are hashed from the pair of their fields' ids.
// Legend: N = batch, P = ids of a field in the batch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/batch.h"

namespace aiacc::models {

// A crossed feature: every pair (id of field a, id of field b) of one example.
struct CrossFeature {
  std::string name;  // "<a>_x_<b>"
  int field_a = 0;
  int field_b = 0;
};

// Parses "a_x_b" entries against the field names. Throws ConfigError naming the entry (and the
// known fields) for an unknown field or a repeated cross.
std::vector<CrossFeature> parse_cross_features(const std::vector<std::string>& entries,
                                               const std::vector<std::string>& fields);

// Stateless and thread-safe after construction.
class FeatureHasher {
 public:
  // hash_buckets 0: ids span all of int64; > 0: ids are folded into [0, hash_buckets) (bounded
  // tables, as in a framework with fixed-size embedding matrices).
  FeatureHasher(const std::vector<std::string>& fields, std::vector<CrossFeature> crosses,
                std::uint64_t hash_buckets);

  // The salt of a field or cross: a hash of its name, so it is stable under field reordering.
  static std::uint64_t salt_of(const std::string& name);
  // The unfolded 64-bit id of raw value `raw` in field `field`: mix64(raw ^ salt).
  std::uint64_t field_id(int field, std::int64_t raw) const;

  // Hashes every field of `raw` (one SparseField per field, CSR over N examples) into `ids`
  // (same offsets) and every cross into `cross_ids`. Throws DataError when the batch has another
  // number of fields or a field's offsets are not N + 1 entries from 0 to its id count.
  void hash(const std::vector<SparseField>& raw, std::int64_t batch, std::vector<SparseField>& ids,
            std::vector<SparseField>& cross_ids) const;

  const std::vector<CrossFeature>& crosses() const { return crosses_; }

 private:
  std::int64_t fold(std::uint64_t id) const {
    return static_cast<std::int64_t>(buckets_ == 0 ? id : id % buckets_);
  }

  std::vector<std::string> fields_;
  std::vector<std::uint64_t> salts_;        // per field
  std::vector<CrossFeature> crosses_;
  std::vector<std::uint64_t> cross_salts_;  // per cross
  std::uint64_t buckets_;
};

}  // namespace aiacc::models
