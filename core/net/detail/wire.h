// Little-endian field encoding for core/net's own control messages (mesh handshake,
// rendezvous requests). Internal to core/net. A truncated or malformed message throws
// CommError naming its source, never reads out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::net::detail {

class WireWriter {
 public:
  WireWriter& u32(std::uint32_t value) { return raw(&value, sizeof value); }
  WireWriter& i32(std::int32_t value) { return raw(&value, sizeof value); }
  WireWriter& u64(std::uint64_t value) { return raw(&value, sizeof value); }
  WireWriter& str(std::string_view value) {
    u64(value.size());
    return raw(value.data(), value.size());
  }
  WireWriter& strings(const std::vector<std::string>& values) {
    u64(values.size());
    for (const auto& value : values) str(value);
    return *this;
  }
  std::span<const std::byte> bytes() const {
    return {reinterpret_cast<const std::byte*>(buffer_.data()), buffer_.size()};
  }

 private:
  // Host byte order: every machine we target is little-endian x86-64 or aarch64.
  WireWriter& raw(const void* data, std::size_t size) {
    buffer_.append(static_cast<const char*>(data), size);
    return *this;
  }
  std::string buffer_;
};

class WireReader {
 public:
  // `source` names the sender in error messages, e.g. "hello from tcp://127.0.0.1:4000".
  WireReader(std::span<const std::byte> bytes, std::string source)
      : bytes_(bytes), source_(std::move(source)) {}

  std::uint32_t u32() { return pod<std::uint32_t>(); }
  std::int32_t i32() { return pod<std::int32_t>(); }
  std::uint64_t u64() { return pod<std::uint64_t>(); }
  std::string str() {
    const std::uint64_t size = u64();
    need(size);
    std::string value(reinterpret_cast<const char*>(bytes_.data() + offset_), size);
    offset_ += size;
    return value;
  }
  std::vector<std::string> strings() {
    const std::uint64_t count = u64();
    need(count * sizeof(std::uint64_t));  // each string has at least its length
    std::vector<std::string> values;
    for (std::uint64_t i = 0; i < count; ++i) values.push_back(str());
    return values;
  }
  // Throws unless every byte was consumed.
  void finish() const {
    if (offset_ != bytes_.size()) {
      throw CommError(fmt::format("malformed {}: {} trailing bytes", source_,
                                  bytes_.size() - offset_));
    }
  }

 private:
  template <class T>
  T pod() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  void need(std::uint64_t size) const {
    if (size > bytes_.size() - offset_) {
      throw CommError(fmt::format("malformed {}: truncated at byte {} of {}", source_, offset_,
                                  bytes_.size()));
    }
  }
  std::span<const std::byte> bytes_;
  std::size_t offset_ = 0;
  std::string source_;
};

}  // namespace aiacc::net::detail
