// FindOnceCache: a value looked up (or measured) once per key and kept, e.g. the cuDNN
// algorithm benchmarked for one convolution shape. Thread-safe; a key's finder runs once even
// when several threads ask at the same time (under the cache's lock: finders are rare and
// slow, and two of them benchmarking the same GPU at once would skew each other's timings).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

namespace aiacc {

template <class Key, class Value>
class FindOnceCache {
 public:
  // The cached value of `key`, or find() stored and returned. A throwing find() stores nothing.
  template <class Find>
  Value get_or_find(const Key& key, Find&& find) {
    std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    if (it != values_.end()) return it->second;
    return values_.emplace(key, std::forward<Find>(find)()).first->second;
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
