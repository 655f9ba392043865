// Fuzz target: the mesh handshake a rank accepts from any peer that connects to its ring or
// control ports (core/net/detail/hello.h decode_hello, built on core/net/detail/wire.h).
//
// Input: the handshake frame.
// Property: a frame that decodes is exactly what encode_hello writes for the decoded value
// (the format has no slack: no padding, no trailing bytes).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/net/detail/hello.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace aiacc;
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);
  fuzz::expect_input_errors([&] {
    const net::detail::Hello hello = net::detail::decode_hello(frame, "tcp://fuzz:1");
    if (net::detail::encode_hello(hello) != std::string(reinterpret_cast<const char*>(data), size)) {
      throw fuzz::PropertyViolation("a decoded handshake does not encode to the same bytes");
    }
  });
  return 0;
}
