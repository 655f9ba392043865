// connect_mesh: the usual way to build a Mesh, exchanging listener addresses through the
// rendezvous store's key-value map (keys "mesh/<name>/<rank>"), so several meshes (ring
// streams, parameter-server links) can be built in one job without re-registering ranks.
#pragma once

#include <memory>
#include <string_view>

#include "core/net/context.h"
#include "core/net/deadline.h"
#include "core/net/mesh.h"
#include "core/net/rendezvous_client.h"

namespace aiacc::net {

// Binds, publishes this rank's addresses under `name`, fetches its peers', and connects.
// Every rank in spec.peers (all ranks when empty) must call it with the same `name`.
// Blocks until the mesh is up or `deadline` (TimeoutError naming what is missing).
Mesh connect_mesh(std::shared_ptr<Context> context, RendezvousClient& rendezvous,
                  const MeshSpec& spec, std::string_view name, Deadline deadline);

}  // namespace aiacc::net
