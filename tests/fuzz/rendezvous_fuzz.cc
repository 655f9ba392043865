// Fuzz target: the requests the rendezvous store (rank 0's RendezvousServer) accepts from any
// process that connects to it: core/net/detail/rendezvous_state.h, the server's request
// handling without the socket (register, table, set, get, barrier; core/net/detail/wire.h).
//
// Input: up to 32 requests, each [u8 connection][u16 length][request frame], answered in order
// by one fresh store; the connection byte picks one of four client identities (a rank
// re-registering vs a second process claiming its rank).
// Properties: answer() never throws (a malformed request gets an error reply), and every reply
// starts with the u64 sequence and a known status.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "core/net/detail/rendezvous_protocol.h"
#include "core/net/detail/rendezvous_state.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace aiacc;
  fuzz::quiet_logs();
  fuzz::InputCursor input(data, size);
  net::detail::RendezvousState state;
  for (int i = 0; i < 32 && !input.empty(); ++i) {
    const std::string identity(1, static_cast<char>('A' + input.u8() % 4));
    const std::string_view request = input.bytes(input.u16());
    const std::string reply = state.answer(
        identity, std::span<const std::byte>(reinterpret_cast<const std::byte*>(request.data()), request.size()));
    std::uint32_t status = 0;
    if (reply.size() < 12) throw fuzz::PropertyViolation("a rendezvous reply shorter than its header");
    std::memcpy(&status, reply.data() + 8, sizeof status);
    if (status > static_cast<std::uint32_t>(net::detail::RendezvousStatus::kAborted)) {
      throw fuzz::PropertyViolation("a rendezvous reply with an unknown status");
    }
  }
  return 0;
}
