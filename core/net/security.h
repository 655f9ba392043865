// Job security: the job token every process of one job shares, and the ZeroMQ CURVE keys
// derived from it.
//
// Admission works by knowledge of the token. Every process derives the same CURVE *server* key
// pair from the token (BLAKE2b keyed by the token), and every socket that binds runs as a CURVE
// server with it; every socket that connects must name that server public key. A process
// without the token cannot compute the key, so its handshake fails (CurveZMQ encrypts the
// client's first message to the server's long-term key) before a single frame reaches the
// application: it can neither pull, push, join the ring nor talk to the rendezvous store.
// Client key pairs are random per process; CurveZMQ's per-connection transient keys give every
// connection its own session keys, so one process's traffic cannot be replayed to another.
//
// What this does not protect: the token itself (whoever can read the environment or the token
// file of a job process is inside the job), NCCL traffic (NCCL has no encryption), and shared
// memory between processes on one host (same-user processes can map it).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace aiacc::net {

// A fresh token: 64 hex characters (32 bytes) from the OS's CSPRNG.
std::string generate_job_token();

// Throws ConfigError naming `source` (e.g. "AIACC_JOB_TOKEN") unless the token has 32 to 4096
// printable, non-space ASCII characters. Short tokens are guessable (offline, from a captured
// handshake); odd characters break shells and manifests that carry them.
void check_job_token(std::string_view token, std::string_view source);

// The token a token file's text holds: its first line, without surrounding blanks (spaces, tabs,
// a Windows line end). AIACC_JOB_TOKEN is read the same way, as a Secret made from the file
// hands it over whole.
std::string token_line(std::string_view text);

// The token in `path`: its first line without surrounding whitespace. Throws ConfigError when
// the file cannot be read, is a symbolic link or not a regular file, belongs to another user,
// is empty, or can be read by other users (like ssh with a key file: a token others can read
// admits them).
std::string read_job_token_file(const std::string& path);

// The job token this process was given: AIACC_JOB_TOKEN when set (it wins, like MASTER_ADDR
// over the config), else the contents of `token_file` when not empty, else nullopt. Checked.
std::optional<std::string> job_token_from_environment(const std::string& token_file);

// The variable that carries the token to a job's processes.
inline constexpr const char* kJobTokenVariable = "AIACC_JOB_TOKEN";

struct CurveKeys;
// Keys from AIACC_JOB_TOKEN when it is set, else nullopt (tools that take no config: the
// stand-alone shard server, the benchmarks).
std::optional<CurveKeys> curve_keys_from_environment();

using CurveKey = std::array<std::uint8_t, 32>;

// The CURVE material of one process in a job.
struct CurveKeys {
  CurveKey server_public{};  // the same in every process of the job (derived from the token)
  CurveKey server_secret{};
  CurveKey client_public{};  // this process's own, random
  CurveKey client_secret{};
  // A MAC key for handshakes over plain TCP (meshes with MeshSpec::hello_key), derived from
  // the token like the server key, so only the job's processes can compute their proofs.
  CurveKey hello_key{};

  // Derives the server pair from `token` (checked with check_job_token) and draws a client pair.
  static CurveKeys from_token(std::string_view token);

  // A short, non-secret label of the job's key (16 hex characters of a hash of the server
  // public key): processes print it so an operator can see which job a process belongs to.
  std::string fingerprint() const;
};

// A 32-byte keyed BLAKE2b MAC of `message` (binary, as a string).
std::string keyed_hash(const CurveKey& key, std::string_view message);

// Compares two MACs in time independent of where they differ (no timing oracle).
bool same_mac(std::string_view a, std::string_view b);

// Describes a ZMQ_EVENT_HANDSHAKE_FAILED_* monitor event for logs, e.g. "the peer does not
// use CURVE (a process without this job's token?)".
std::string describe_handshake_failure(int event, std::uint32_t value);

// True for monitor events that mean a connection was refused during the handshake.
bool is_handshake_failure(int event);

// The monitor events that is_handshake_failure() accepts, for zmq_socket_monitor.
int handshake_failure_events();

}  // namespace aiacc::net
