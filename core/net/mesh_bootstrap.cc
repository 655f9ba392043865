// connect_mesh: listener -> key-value exchange -> Mesh.
#include "core/net/mesh_bootstrap.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace aiacc::net {

namespace {

// What lower rank `peer` published for the mesh `name`; a TimeoutError names it and the links
// that wait for it as the spec names them, not only the store key.
std::string addresses_of(RendezvousClient& rendezvous, const MeshSpec& spec, std::string_view name, int peer,
                         Deadline deadline) {
  try {
    return rendezvous.get_string(fmt::format("mesh/{}/{}", name, peer), deadline);
  } catch (const TimeoutError& e) {
    // The first two (a ring's stream 0, both directions) say which mesh; all are missing alike.
    constexpr int kNamed = 2;
    std::string links;
    for (int stream = 0; stream < std::min(spec.streams, kNamed); ++stream) {
      links += fmt::format("{}{}", stream == 0 ? "" : "; ", stream_name(spec.stream_label, peer, stream));
    }
    if (spec.streams > kNamed) links += fmt::format("; and {} more", spec.streams - kNamed);
    throw TimeoutError(fmt::format("mesh of rank {}: rank {} did not publish its addresses for its links with this "
                                   "rank ({}): it has not come this far, or is stopped or stuck ({})",
                                   spec.rank, peer, links, e.what()));
  }
}

}  // namespace

Mesh connect_mesh(std::shared_ptr<Context> context, RendezvousClient& rendezvous,
                  const MeshSpec& spec, std::string_view name, Deadline deadline) {
  MeshListener listener(std::move(context), spec);
  // Endpoints never contain newlines, so one line per address is an unambiguous encoding.
  rendezvous.set_string(fmt::format("mesh/{}/{}", name, spec.rank),
                        fmt::format("{}", fmt::join(listener.addresses(), "\n")), deadline);
  AddressTable table(spec.world_size);
  for (int peer : listener.spec().peers) {
    if (peer > spec.rank) continue;  // we bind for higher ranks; only lower ranks' addresses
    std::istringstream lines(addresses_of(rendezvous, listener.spec(), name, peer, deadline));
    for (std::string line; std::getline(lines, line);) table[peer].push_back(line);
  }
  return Mesh(std::move(listener), table, deadline);
}

}  // namespace aiacc::net
