// Wait chain: after a collective timed out, which rank is the silent one? In a ring each rank
// waits for its neighbour, so when one rank stops (SIGSTOP, a hung GPU, a stuck data loader)
// the others time out too, most of them waiting for a healthy rank that itself waits for the
// stopped one: each error alone blames a neighbour. So every rank that times out publishes at
// the job's rendezvous store which rank it waited for, and follows the others' reports from its
// own peer on: to a rank that reported nothing (the likely cause: stopped, stuck or cut off),
// or round a cycle (every rank in it alive and waiting: collectives issued in different orders,
// or a network fault). The device collectives' stall check (ring/device_collective.h) asks the
// same question where the error cannot name the peer.
#pragma once

#include <map>
#include <string>

#include "core/net/rendezvous_client.h"

namespace aiacc::ring {

// What one rank reports after a timeout: the rank it waited for (-1: its error does not say)
// and what it was doing ("all-reducing gradients").
struct WaitReport {
  int peer = -1;
  std::string operation;
};

// The finding for `self` (its own report is reports.at(self)) from the reports known so far,
// by rank, as a clause to append to its error: "wait chain: rank 2 was itself waiting for rank
// 1 (all-reducing gradients), which reported nothing within 3.0 s: rank 1 is likely the cause,
// ...". `waited_s`: how long the other ranks had to report. Empty when self's peer is unknown.
std::string describe_wait_chain(int self, const std::map<int, WaitReport>& reports, double waited_s);

// Whether no further report can change the finding: the chain from `self` ends in a cycle or
// at a rank that reported without naming its peer (or self's peer is unknown).
bool wait_chain_complete(int self, const std::map<int, WaitReport>& reports);

// Publishes `mine` for rank `self` at `store`, then reads the reports along the chain (polling)
// until it is complete or `window_s` has passed, and returns describe_wait_chain's finding (or
// what kept it from one: the store did not answer, another rank's failure reported there cut
// the exchange short in its first half). Returns "" after publishing (given a second at most)
// when mine.peer is unknown. Never throws; returns within window_s and half a second (the last
// look may take that long). Keys: "wait-chain/<rank>", once per job (a store serves one attempt
// of a job).
std::string exchange_wait_chain(net::RendezvousClient& store, int self, const WaitReport& mine,
                                double window_s) noexcept;

}  // namespace aiacc::ring
