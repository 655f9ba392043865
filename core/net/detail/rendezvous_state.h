// The rendezvous store's job state and request handling (rendezvous_protocol.h), internal to
// core/net. RendezvousServer owns one and hands it every request frame from its thread; the
// fuzz harness tests/fuzz/rendezvous_fuzz.cc drives it with bytes directly.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/net/detail/wire.h"

namespace aiacc::net::detail {

// The job as the server sees it. Not thread-safe: touched only by the server thread.
class RendezvousState {
 public:
  // The reply frame to one request frame from the connection `identity`. A malformed request
  // (truncated, trailing bytes, unknown op) gets an error reply naming the problem and leaves
  // the state unchanged; never throws for bad bytes.
  std::string answer(const std::string& identity, std::span<const std::byte> request);

  // After an abort: whether every registered rank but the one that failed has been answered
  // with it since (so the failed rank may take the store down).
  bool abort_delivered() const;

 private:
  struct Entry {
    std::string identity;  // the connection that registered it (tells retries from duplicates)
    std::vector<std::string> addresses;
  };

  // Handles one request from the connection `identity`; fills `reply` after its status.
  void handle(const std::string& identity, WireReader& request, WireWriter& reply);
  void register_rank(const std::string& identity, int rank, int world,
                     std::vector<std::string> addresses);

  int world_size_ = -1;
  int first_rank_ = -1;
  std::map<int, Entry> ranks_;
  std::map<std::string, std::string> kv_;
  std::map<std::string, std::set<int>> barriers_;
  std::string fatal_;  // non-empty once the job is broken
  int aborted_by_ = -1;  // the rank whose abort set fatal_
  std::uint32_t abort_kind_ = 0;
  std::set<int> told_;   // ranks answered with an abort's error since
};

}  // namespace aiacc::net::detail
