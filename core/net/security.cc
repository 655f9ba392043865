// Job tokens and CURVE key derivation (libsodium: the same library ZeroMQ's CURVE uses).
#include "core/net/security.h"

#include <sodium.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::net {
namespace {

void ensure_sodium() {
  // sodium_init is idempotent and thread-safe; it fails only when no entropy source exists.
  if (sodium_init() < 0) throw IoError("libsodium could not initialise (no entropy source)");
}

std::string to_hex(const std::uint8_t* bytes, std::size_t size) {
  std::string hex(2 * size + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), bytes, size);
  hex.pop_back();
  return hex;
}

// BLAKE2b-256 of `label`, keyed by the token: a token-dependent key no one can compute without
// the token. The label separates this derivation from any later one (a version bump changes it).
CurveKey derive(std::string_view token, std::string_view label) {
  CurveKey out{};
  // BLAKE2b keys are at most 64 bytes: longer tokens are hashed down first.
  std::array<std::uint8_t, crypto_generichash_KEYBYTES_MAX> key{};
  std::size_t key_size = token.size();
  if (token.size() > key.size()) {
    crypto_generichash(key.data(), key.size(), reinterpret_cast<const std::uint8_t*>(token.data()),
                       token.size(), nullptr, 0);
    key_size = key.size();
  } else {
    std::memcpy(key.data(), token.data(), token.size());
  }
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const std::uint8_t*>(label.data()),
                     label.size(), key.data(), key_size);
  sodium_memzero(key.data(), key.size());
  return out;
}

}  // namespace

std::string generate_job_token() {
  ensure_sodium();
  std::array<std::uint8_t, 32> bytes{};
  randombytes_buf(bytes.data(), bytes.size());
  std::string token = to_hex(bytes.data(), bytes.size());
  sodium_memzero(bytes.data(), bytes.size());
  return token;
}

void check_job_token(std::string_view token, std::string_view source) {
  // 32 characters: at least 128 bits for a hex token. A captured CURVE handshake lets anyone
  // test guesses offline, so short tokens are refused rather than merely discouraged.
  if (token.size() < 32) {
    throw ConfigError(fmt::format("{}: the job token has {} characters; it needs at least 32 "
                                  "(generate one with: head -c 32 /dev/urandom | od -An -tx1 | "
                                  "tr -d ' \\n')",
                                  source, token.size()));
  }
  if (token.size() > 4096) {
    throw ConfigError(fmt::format("{}: the job token has {} characters; at most 4096 are allowed",
                                  source, token.size()));
  }
  const auto bad = std::find_if(token.begin(), token.end(), [](char c) { return c <= ' ' || c > '~'; });
  if (bad != token.end()) {
    throw ConfigError(fmt::format("{}: the job token has a space, control or non-ASCII character "
                                  "at position {}; use printable ASCII only",
                                  source, bad - token.begin()));
  }
}

std::string token_line(std::string_view text) {
  std::string_view line = text.substr(0, text.find('\n'));
  const auto first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return "";
  return std::string(line.substr(first, line.find_last_not_of(" \t\r") - first + 1));
}

std::string read_job_token_file(const std::string& path) {
  // Open first, then check what was opened (no stat-then-open race), without following a
  // symbolic link (which could point anywhere, e.g. at a file someone else controls).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    // O_NOFOLLOW refuses a link with ELOOP ("Too many levels of symbolic links"), which reads
    // like a loop; say what it is and what to give instead.
    struct stat entry {};
    if (error_number == ELOOP && ::lstat(path.c_str(), &entry) == 0 && S_ISLNK(entry.st_mode)) {
      std::string points_to;
      std::error_code ignored;
      const auto target = std::filesystem::read_symlink(path, ignored);
      if (!ignored) points_to = fmt::format("; it points to '{}'", target.string());
      throw ConfigError(fmt::format(
          "cluster.security.token_file: '{}' is a symbolic link; the job token file must be a "
          "regular file (give the file it points to){}",
          path, points_to));
    }
    throw ConfigError(fmt::format("cluster.security.token_file: cannot open '{}': {}", path,
                                  std::strerror(error_number)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    throw ConfigError(fmt::format("cluster.security.token_file: '{}' is not a regular file", path));
  }
  if (info.st_uid != ::geteuid()) {
    throw ConfigError(fmt::format(
        "cluster.security.token_file: '{}' belongs to user {}, not to this process's user {}: "
        "a token file must be the job owner's",
        path, info.st_uid, ::geteuid()));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw ConfigError(fmt::format(
        "cluster.security.token_file: '{}' can be read or written by other users (mode {:03o}); "
        "a job token others can read admits them to the job: chmod 600 '{}'",
        path, info.st_mode & 0777, path));
  }
  std::string text(8192, '\0');
  const ssize_t got = ::read(fd, text.data(), text.size());
  if (got < 0) {
    throw ConfigError(fmt::format("cluster.security.token_file: cannot read '{}': {}", path,
                                  std::strerror(errno)));
  }
  text.resize(static_cast<std::size_t>(got));
  std::string line = token_line(text);
  if (line.empty()) {
    throw ConfigError(fmt::format("cluster.security.token_file: '{}' is empty", path));
  }
  check_job_token(line, fmt::format("cluster.security.token_file '{}'", path));
  sodium_memzero(text.data(), text.size());
  return line;
}

std::optional<std::string> job_token_from_environment(const std::string& token_file) {
  if (const char* value = std::getenv(kJobTokenVariable); value != nullptr) {
    // A Kubernetes Secret made from a token file (--from-file) hands the pods the whole file:
    // the token is what read_job_token_file takes from it.
    std::string token = token_line(value);
    check_job_token(token, kJobTokenVariable);
    return token;
  }
  if (!token_file.empty()) return read_job_token_file(token_file);
  return std::nullopt;
}

CurveKeys CurveKeys::from_token(std::string_view token) {
  check_job_token(token, "job token");
  ensure_sodium();
  CurveKeys keys;
  keys.server_secret = derive(token, "aiacc-train/curve-server-key/v1");
  if (crypto_scalarmult_base(keys.server_public.data(), keys.server_secret.data()) != 0) {
    throw InternalError("crypto_scalarmult_base failed for the job's server key");
  }
  keys.hello_key = derive(token, "aiacc-train/mesh-hello-key/v1");
  if (crypto_box_keypair(keys.client_public.data(), keys.client_secret.data()) != 0) {
    throw InternalError("crypto_box_keypair failed");
  }
  return keys;
}

std::optional<CurveKeys> curve_keys_from_environment() {
  auto token = job_token_from_environment("");
  if (!token) return std::nullopt;
  return CurveKeys::from_token(*token);
}

std::string CurveKeys::fingerprint() const {
  std::array<std::uint8_t, 8> digest{};
  crypto_generichash(digest.data(), digest.size(), server_public.data(), server_public.size(),
                     nullptr, 0);
  return to_hex(digest.data(), digest.size());
}

std::string keyed_hash(const CurveKey& key, std::string_view message) {
  std::string out(32, '\0');
  crypto_generichash(reinterpret_cast<std::uint8_t*>(out.data()), out.size(),
                     reinterpret_cast<const std::uint8_t*>(message.data()), message.size(),
                     key.data(), key.size());
  return out;
}

bool same_mac(std::string_view a, std::string_view b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool is_handshake_failure(int event) {
  return event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
         event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}

int handshake_failure_events() {
  return ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
         ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}

std::string describe_handshake_failure(int event, std::uint32_t value) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
      return "the peer does not use CURVE (a process without this job's token, or one with "
             "cluster.security.curve off)";
    }
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
      return "the peer's keys do not match this job's (a process with another job token)";
    }
    return fmt::format("ZMTP protocol error 0x{:x} (not a process of this job, or a corrupted "
                       "connection)",
                       value);
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    return fmt::format("the peer could not prove this job's token (authentication status {})", value);
  }
  return fmt::format("handshake failed: {}", zmq_strerror(static_cast<int>(value)));
}

}  // namespace aiacc::net
