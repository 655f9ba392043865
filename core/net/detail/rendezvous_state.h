// The rendezvous store's job state and request handling (rendezvous_protocol.h), internal to
// core/net. RendezvousServer owns one and hands it every request frame from its thread; the
// fuzz harness tests/fuzz/rendezvous_fuzz.cc drives it with bytes directly.
#pragma once

#include <chrono>
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

  // After an abort: whether every rank that was waiting at the store then (a request within
  // the last kWaitingWindow: waiting ranks poll every 50 ms at most) has been answered with it
  // since, so the failed rank may take the store down. Ranks busy elsewhere (ring, shards)
  // learn of the failure from the closed connections instead.
  bool abort_delivered() const;
  // The first abort's message ("rendezvous: rank R failed: ..."), or "" without one.
  const std::string& abort_message() const { return aborted_by_ >= 0 ? fatal_ : no_abort_; }
  // The rank of the first abort (-1: none) and its own message, without the prefix above.
  int aborted_by() const { return aborted_by_; }
  const std::string& abort_reason() const { return abort_reason_; }

  static constexpr std::chrono::milliseconds kWaitingWindow{250};

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
  // The rank of the connection `identity` registered, or -1.
  int rank_of(const std::string& identity) const;

  int aborted_by_ = -1;  // the rank whose abort set fatal_
  std::string abort_reason_;  // that rank's message
  std::uint32_t abort_kind_ = 0;
  bool abort_seen_ = false;                   // an abort arrived (even after fatal_ was set)
  std::map<int, std::chrono::steady_clock::time_point> last_request_;  // by rank
  std::set<int> waiting_at_abort_;            // ranks polling the store when the abort came
  std::set<int> told_;                        // ranks answered with the abort since
  std::string no_abort_;
};

}  // namespace aiacc::net::detail
