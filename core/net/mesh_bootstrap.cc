// connect_mesh: listener -> key-value exchange -> Mesh.
#include "core/net/mesh_bootstrap.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>

namespace aiacc::net {

Mesh connect_mesh(std::shared_ptr<Context> context, RendezvousClient& rendezvous,
                  const MeshSpec& spec, std::string_view name, Deadline deadline) {
  MeshListener listener(std::move(context), spec);
  // Endpoints never contain newlines, so one line per address is an unambiguous encoding.
  rendezvous.set_string(fmt::format("mesh/{}/{}", name, spec.rank),
                        fmt::format("{}", fmt::join(listener.addresses(), "\n")), deadline);
  AddressTable table(spec.world_size);
  for (int peer : listener.spec().peers) {
    if (peer > spec.rank) continue;  // we bind for higher ranks; only lower ranks' addresses
    std::istringstream lines(
        rendezvous.get_string(fmt::format("mesh/{}/{}", name, peer), deadline));
    for (std::string line; std::getline(lines, line);) table[peer].push_back(line);
  }
  return Mesh(std::move(listener), table, deadline);
}

}  // namespace aiacc::net
