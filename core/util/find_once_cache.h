// FindOnceCache: a value looked up (or measured) once per key and kept for the process, e.g.
// the cuDNN algorithm benchmarked for one convolution shape. Thread-safe. Callers look up
// first and remember what they measured; two threads missing the same key at once both
// measure (rare, and harmless: the first value stays).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>

namespace aiacc {

template <class Key, class Value>
class FindOnceCache {
 public:
  std::optional<Value> lookup(const Key& key) const {
    std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }

  // Keeps `value` for `key` unless one is kept already; returns the kept one.
  Value remember(const Key& key, const Value& value) {
    std::lock_guard lock(mutex_);
    return values_.emplace(key, value).first->second;
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return values_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<Key, Value> values_;
};

}  // namespace aiacc
