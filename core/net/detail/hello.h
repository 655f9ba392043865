// The mesh handshake messages, internal to core/net (tests use them to impersonate a peer).
// A connecting rank sends a Hello naming itself, the rank it wants and the stream; the binding
// rank answers with an accept Hello or a reject carrying the reason. Over plain TCP with a hello
// key, hello and accept carry a proof of the job token (see Mesh).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/net/security.h"

namespace aiacc::net::detail {

struct Hello {
  enum Kind : std::uint32_t { kHello = 1, kAccept = 2, kReject = 3 };
  Kind kind = kHello;
  int from_rank = -1;
  int to_rank = -1;
  int stream = -1;
  std::string job;
  std::string reason;  // kReject only
  std::string proof;   // meshes with a hello key: MAC of the fields and the binder's nonce
};

std::string encode_hello(const Hello& hello);
// Throws CommError naming `source` if the bytes are not a Hello.
Hello decode_hello(std::span<const std::byte> bytes, const std::string& source);

// The proof a hello or accept carries where the mesh has a hello key: a MAC over every field
// the receiver checks and the acceptor's nonce, so a proof is valid for one link of one mesh.
std::string hello_proof(const CurveKey& key, Hello::Kind kind, int from, int to, int stream, const std::string& job,
                        const std::string& nonce);

}  // namespace aiacc::net::detail
