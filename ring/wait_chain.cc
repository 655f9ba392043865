#include "ring/wait_chain.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/net/deadline.h"

namespace aiacc::ring {
namespace {

// Between looks at the store for a report that is not there yet.
constexpr long kPollMs = 50;
// Time one look may take past the window (the last look comes when the window is over).
constexpr auto kLookGrace = std::chrono::milliseconds(500);
// Seconds a rank that cannot name its peer gives its report to reach the store.
constexpr double kUnknownPeerPublishS = 1.0;

std::string key_of(int rank) { return fmt::format("wait-chain/{}", rank); }

std::string encode(const WaitReport& report) { return fmt::format("{}\n{}", report.peer, report.operation); }

WaitReport decode(const std::string& text) {
  WaitReport report;
  const auto newline = text.find('\n');
  const std::string_view peer = std::string_view(text).substr(0, newline);
  if (std::from_chars(peer.data(), peer.data() + peer.size(), report.peer).ec != std::errc()) report.peer = -1;
  if (newline != std::string::npos) report.operation = text.substr(newline + 1);
  return report;
}

// The chain from `self`: self, then each rank that reported whom it waited for, in order, and
// the rank after the last of them (`end`) with why the chain stops there.
struct Chain {
  enum class Stop { self_unknown, silent, no_peer, cycle };
  std::vector<int> ranks;
  int end = -1;
  Stop stop = Stop::self_unknown;
};

Chain follow(int self, const std::map<int, WaitReport>& reports) {
  Chain chain;
  chain.ranks.push_back(self);
  const auto own = reports.find(self);
  int next = own == reports.end() ? -1 : own->second.peer;
  if (next < 0) return chain;
  for (;;) {
    chain.end = next;
    if (std::find(chain.ranks.begin(), chain.ranks.end(), next) != chain.ranks.end()) {
      chain.stop = Chain::Stop::cycle;
      return chain;
    }
    const auto it = reports.find(next);
    if (it == reports.end()) {
      chain.stop = Chain::Stop::silent;
      return chain;
    }
    if (it->second.peer < 0) {
      chain.stop = Chain::Stop::no_peer;
      return chain;
    }
    chain.ranks.push_back(next);
    next = it->second.peer;
  }
}

// "rank 2 was itself waiting for rank 3 (op), rank 3 for rank 1 (op)": the links after self's.
std::string links_of(const Chain& chain, const std::map<int, WaitReport>& reports) {
  std::string links;
  for (std::size_t i = 1; i < chain.ranks.size(); ++i) {
    const int waiter = chain.ranks[i];
    const int waited_for = i + 1 < chain.ranks.size() ? chain.ranks[i + 1] : chain.end;
    const std::string& operation = reports.at(waiter).operation;
    links += i == 1 ? fmt::format("rank {} was itself waiting for rank {} ({})", waiter, waited_for, operation)
                    : fmt::format(", rank {} for rank {} ({})", waiter, waited_for, operation);
  }
  return links;
}

// The finding when another rank's failure, reported at the store, ended the exchange early in
// the window: the chain's last rank may not have had the time to report, so it is not blamed.
std::string cut_short(int self, const std::map<int, WaitReport>& reports, double waited_s) {
  const Chain chain = follow(self, reports);
  const std::string links = links_of(chain, reports);
  return fmt::format("wait chain: {}{}another rank's failure was reported at the store after {:.1f} s, before rank "
                     "{} had reported (the job's first failure may name the cause)",
                     links, links.empty() ? "" : "; ", waited_s, chain.end);
}

}  // namespace

bool wait_chain_complete(int self, const std::map<int, WaitReport>& reports) {
  return follow(self, reports).stop != Chain::Stop::silent;
}

std::string describe_wait_chain(int self, const std::map<int, WaitReport>& reports, double waited_s) {
  const Chain chain = follow(self, reports);
  if (chain.stop == Chain::Stop::self_unknown) return "";
  const std::string links = links_of(chain, reports);
  // How the chain reaches its end: from this rank directly, or through the links.
  const std::string to_end =
      links.empty() ? fmt::format("rank {}, which this rank waited for,", chain.end) : links + ", which";
  switch (chain.stop) {
    case Chain::Stop::silent:
      return fmt::format("wait chain: {} reported nothing within {:.1f} s: rank {} is likely the cause, stopped or "
                         "stuck (its process alive but silent) or cut off from the network",
                         to_end, waited_s, chain.end);
    case Chain::Stop::no_peer:
      return fmt::format("wait chain: {} timed out too ({}) and cannot tell whom it waited for", to_end,
                         reports.at(chain.end).operation);
    case Chain::Stop::cycle: {
      const auto first = std::find(chain.ranks.begin(), chain.ranks.end(), chain.end);
      std::vector<int> cycle(first, chain.ranks.end());
      std::sort(cycle.begin(), cycle.end());
      return fmt::format("wait chain: {}: ranks {} wait for each other, so all of them are alive: they issued "
                         "collectives in different orders or sizes, or the network between them failed",
                         links, fmt::join(cycle, ", "));
    }
    case Chain::Stop::self_unknown:
      break;
  }
  return "";
}

std::string exchange_wait_chain(net::RendezvousClient& store, int self, const WaitReport& mine,
                                double window_s) noexcept {
  const auto start = net::Clock::now();
  const auto deadline = net::deadline_after(window_s);
  std::map<int, WaitReport> reports;  // empty construction does not allocate: cannot throw
  int unanswered = -1;  // the rank whose report a lookup timed out on, ending the window
  try {
    reports.emplace(self, mine);
    try {
      // A rank that cannot name its peer only tells the others it is alive and waiting (their
      // chains end at it); its timeout may well be the store's own, so it spends less on it.
      const auto publish_by = mine.peer < 0 ? std::min(deadline, net::deadline_after(kUnknownPeerPublishS)) : deadline;
      store.set_string(key_of(self), encode(mine), publish_by);
      if (mine.peer < 0) return "";
      while (!wait_chain_complete(self, reports)) {
        const int next = follow(self, reports).end;  // the first rank on the chain not heard from
        const auto look_by = std::max(deadline, net::Clock::now() + kLookGrace);
        std::optional<std::string> text;
        try {
          text = store.lookup_string(key_of(next), look_by);
        } catch (const TimeoutError&) {
          // Only ever at the window's end (look_by is never before it). The store took this
          // rank's report, so it was up then: on a loaded host (every rank woke at once) its
          // answer comes late. The chain ends where it is, and the description says the last
          // look went unanswered, for the case where the store's server has stopped since.
          unanswered = next;
          break;
        }
        if (text) {
          reports[next] = decode(*text);
          continue;
        }
        const long left_ms = net::remaining_ms(deadline);
        if (left_ms == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left_ms, kPollMs)));
      }
    } catch (const net::PeerFailedError&) {
      // Another rank failed and said so at the store, which now answers nothing else: that
      // failure is the job's first; what was heard until then still stands.
      // Ranks time out within moments of each other, so half the window is long enough for the
      // chain's last rank to have reported if it could (the first rank to time out aborts when
      // its window ends, a little before the others' do).
      const double waited = net::seconds_since(start);
      if (mine.peer < 0) return "";
      if (waited >= window_s / 2 || wait_chain_complete(self, reports)) {
        return describe_wait_chain(self, reports, waited);
      }
      return cut_short(self, reports, waited);
    } catch (const TimeoutError& e) {
      if (mine.peer < 0) return "";
      return fmt::format("wait chain: the rendezvous store did not answer within {:.1f} s, so its server (rank 0 "
                         "under an outer launcher, else the local launcher) may be stopped too ({})",
                         window_s, e.what());
    }
    std::string described = describe_wait_chain(self, reports, net::seconds_since(start));
    if (unanswered >= 0 && !described.empty()) {
      described += fmt::format(" (the rendezvous store, which took this rank's report, did not answer the look for "
                               "rank {}'s in time: a loaded host, or its server stopped since)",
                               unanswered);
    }
    return described;
  } catch (const std::exception& e) {
    try {
      return fmt::format("wait chain: not found ({})", e.what());
    } catch (...) {
      return "";
    }
  }
}

}  // namespace aiacc::ring
