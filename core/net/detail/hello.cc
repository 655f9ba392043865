// Hello encoding: magic, kind, ranks, stream, job, reason, proof.
#include "core/net/detail/hello.h"

#include <fmt/format.h>

#include "core/net/detail/wire.h"

namespace aiacc::net::detail {

namespace {
constexpr std::uint32_t kMagic = 0x41494d32;  // "AIM2": aiacc mesh, version 2 (with proofs)
}

std::string encode_hello(const Hello& hello) {
  WireWriter writer;
  writer.u32(kMagic).u32(hello.kind).i32(hello.from_rank).i32(hello.to_rank).i32(hello.stream);
  writer.str(hello.job).str(hello.reason).str(hello.proof);
  auto bytes = writer.bytes();
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Hello decode_hello(std::span<const std::byte> bytes, const std::string& source) {
  WireReader reader(bytes, "mesh handshake from " + source);
  if (reader.u32() != kMagic) {
    throw CommError("malformed mesh handshake from " + source +
                    ": bad magic (not an aiacc-train mesh peer, or another version)");
  }
  Hello hello;
  const std::uint32_t kind = reader.u32();
  if (kind < Hello::kHello || kind > Hello::kReject) {
    throw CommError("malformed mesh handshake from " + source + ": unknown kind");
  }
  hello.kind = static_cast<Hello::Kind>(kind);
  hello.from_rank = reader.i32();
  hello.to_rank = reader.i32();
  hello.stream = reader.i32();
  hello.job = reader.str();
  hello.reason = reader.str();
  hello.proof = reader.str();
  reader.finish();
  return hello;
}

std::string hello_proof(const CurveKey& key, Hello::Kind kind, int from, int to, int stream, const std::string& job,
                        const std::string& nonce) {
  return keyed_hash(key, fmt::format("{}|{}|{}|{}|{}|{}", static_cast<int>(kind), from, to, stream, job, nonce));
}

}  // namespace aiacc::net::detail
