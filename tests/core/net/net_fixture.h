// Helpers for core/net tests: build a loopback mesh of `world` ranks in one process (address
// exchange in memory, no rendezvous), fast test options, deterministic payloads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <cstdint>
#include <memory>
#include <string>
#include <mutex>
#include <condition_variable>
#include <vector>

#include "core/error.h"
#include "core/net/mesh.h"

namespace aiacc::testing {

// Short timeouts so failure tests finish in seconds; defaults otherwise.
inline net::ChannelOptions fast_options() {
  net::ChannelOptions options;
  options.connect_timeout_s = 10.0;
  options.linger_ms = 200;
  return options;
}

// The spec of rank `rank` in a full mesh of `world` ranks with `streams` channels per peer.
inline net::MeshSpec mesh_spec(int rank, int world, int streams, net::ChannelOptions options = fast_options()) {
  net::MeshSpec spec;
  spec.rank = rank;
  spec.world_size = world;
  spec.streams = streams;
  spec.channel = options;
  return spec;
}

// Names links as an owner of the mesh would (MeshSpec::stream_label): "user stream 1 with rank
// 2", for tests that errors use the owner's names.
inline net::StreamLabel user_stream_label() {
  return [](int peer, int stream) {
    return "user stream " + std::to_string(stream) + " with rank " + std::to_string(peer);
  };
}

// mesh_spec with links named by user_stream_label.
inline net::MeshSpec labelled_spec(int rank, int world, int streams) {
  net::MeshSpec spec = mesh_spec(rank, world, streams);
  spec.stream_label = user_stream_label();
  return spec;
}

// The error of a receive on `link` that its peer sends nothing to: a timeout, or the peer's own
// timeout closing the link ("" if a message came).
inline std::string silent_recv_error(net::Link& link) {
  try {
    link.recv(net::deadline_after(0.1), "a message never sent");
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

// Every rank binds, publishes into a shared table, waits for all, then connects.
class LocalExchange {
 public:
  explicit LocalExchange(int world) : table_(world), pending_(world) {}

  net::AddressTable exchange(int rank, const std::vector<std::string>& addresses) {
    std::unique_lock lock(mutex_);
    table_[rank] = addresses;
    if (--pending_ == 0) all_.notify_all();
    all_.wait(lock, [&] { return pending_ == 0; });
    return table_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_;
  net::AddressTable table_;
  int pending_;
};

inline net::Mesh local_mesh(LocalExchange& exchange, net::MeshSpec spec) {
  auto context = net::Context::create();
  net::MeshListener listener(context, spec);
  auto table = exchange.exchange(spec.rank, listener.addresses());
  return net::Mesh(std::move(listener), table,
                   net::deadline_after(spec.channel.connect_timeout_s));
}

// Bytes whose value depends on position and seed, so misordered or mixed data is detected.
// Word-wise (splitmix64) so 64 MiB takes milliseconds.
inline std::vector<std::byte> pattern(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; i += 8) {
    std::uint64_t z = (seed << 40) + i + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(bytes.data() + i, &z, std::min<std::size_t>(8, size - i));
  }
  return bytes;
}

inline bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

}  // namespace aiacc::testing
