// Header (de)serialisation and validation, table configs as YAML.
#include "ps/protocol.h"

#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "core/config/node.h"
#include "core/error.h"
#include "core/util/random.h"

namespace aiacc::ps {

const char* op_name(Op op) {
  switch (op) {
    case Op::create_table: return "create_table";
    case Op::pull: return "pull";
    case Op::push: return "push";
    case Op::stats: return "stats";
    case Op::save: return "save";
    case Op::load: return "load";
    case Op::shutdown: return "shutdown";
    case Op::dump_rows: return "dump_rows";
    case Op::load_rows: return "load_rows";
  }
  return "unknown";
}

namespace {

bool valid_op(Op op) {
  const auto value = static_cast<std::uint16_t>(op);
  return value >= static_cast<std::uint16_t>(Op::create_table) &&
         value <= static_cast<std::uint16_t>(Op::load_rows);
}

template <class Header>
Header decode_header(std::span<const std::byte> frame, std::string_view from, const char* kind) {
  Header header;
  // Magic and version first (every version's headers start with them): a peer of another
  // version has other header sizes, and should be told so.
  std::uint32_t magic = 0;
  std::uint16_t version = 0;
  if (frame.size() >= sizeof magic + sizeof version) {
    std::memcpy(&magic, frame.data(), sizeof magic);
    std::memcpy(&version, frame.data() + sizeof magic, sizeof version);
    if (magic != kMagic || version != kVersion) {
      throw CommError(fmt::format("ps {} from {}: magic {:#x} version {} (expected {:#x} version {}: "
                                  "a foreign peer or another aiacc-train version)",
                                  kind, from, magic, version, kMagic, kVersion));
    }
  }
  if (frame.size() != sizeof(Header)) {
    throw CommError(fmt::format("malformed ps {} from {}: header of {} bytes (expected {})", kind,
                                from, frame.size(), sizeof(Header)));
  }
  std::memcpy(&header, frame.data(), sizeof(Header));
  if (!valid_op(header.op)) {
    throw CommError(fmt::format("ps {} from {}: unknown op {}", kind, from,
                                static_cast<std::uint16_t>(header.op)));
  }
  return header;
}

}  // namespace

void TableConfig::validate(const config::Node& node) const {
  if (spec.name.empty()) node.fail_key("name", "required: the table name");
  if (spec.dim < 1) node.fail_key("dim", "required: floats per row (>= 1)");
}

std::string encode_table_config(const TableConfig& config) {
  return config::write(config, config::Writer::Mode::resolved);
}

TableConfig decode_table_config(std::string_view yaml, const std::string& where) {
  return config::read<TableConfig>(config::Document::from_string(std::string(yaml), where).root());
}

std::uint64_t table_key(std::string_view name) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::uint64_t random_process_id() {
  std::random_device device;
  const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::uint64_t id = mix64((static_cast<std::uint64_t>(device()) << 32) ^ device() ^ now);
  return id != 0 ? id : 1;
}

std::span<const std::byte> header_bytes(const RequestHeader& header) {
  return {reinterpret_cast<const std::byte*>(&header), sizeof header};
}
std::span<const std::byte> header_bytes(const ReplyHeader& header) {
  return {reinterpret_cast<const std::byte*>(&header), sizeof header};
}

RequestHeader decode_request_header(std::span<const std::byte> frame, std::string_view from) {
  return decode_header<RequestHeader>(frame, from, "request");
}
ReplyHeader decode_reply_header(std::span<const std::byte> frame, std::string_view from) {
  return decode_header<ReplyHeader>(frame, from, "reply");
}

}  // namespace aiacc::ps
