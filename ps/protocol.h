// The parameter-server wire format: the one place that defines it (shared/DESIGN.md §5).
// A request is one ZeroMQ multipart message from a worker's DEALER to a shard's ROUTER:
//   create_table  [RequestHeader][TableConfig as YAML]
//   pull          [RequestHeader][ids: i64 x count]
//   push          [RequestHeader][ids: i64 x count][grads: f32 x count x dim]
//   stats         [RequestHeader]                      -> reply [ReplyHeader][JSON text]
//   save, load    [RequestHeader][file path]           -> reply [ReplyHeader][file path]
//   shutdown      [RequestHeader]
//   dump_rows     [RequestHeader]                      -> reply [ReplyHeader][ids][values][state]
//   load_rows     [RequestHeader][ids][values][state]  (replaces the shard's rows of the table)
// and the reply is [ReplyHeader] plus, for a pull, [rows: f32 x count x dim] in request order;
// an error reply is [ReplyHeader status=error][message]. Bulk frames (ids, grads, rows) are
// sent without copies when large (the receiver reads them in place from ZeroMQ's buffer).
// Every request carries (worker, session, step, seq): seq counts this client's requests to the
// shard (1, 2, ...), session tells one incarnation of a worker from the next, and step is the
// worker's training step (consistency). Every reply carries the shard process's incarnation (a
// random number drawn at its start): a client that sees it change knows the shard was restarted
// and lost what it held, and fails rather than train on. Headers are host-order PODs: every target is
// little-endian (x86-64, aarch64), as in core/net/detail/wire.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/embedding/embedding_store.h"
#include "core/optim/optimizer_options.h"
#include "ps/ps_options.h"

namespace aiacc::ps {

inline constexpr std::uint32_t kMagic = 0x53504941;  // "AIPS"
inline constexpr std::uint16_t kVersion = 2;  // 2: ReplyHeader::incarnation

enum class Op : std::uint16_t {
  create_table = 1,
  pull = 2,
  push = 3,
  stats = 4,
  save = 5,
  load = 6,
  shutdown = 7,
  dump_rows = 8,  // -> reply [ReplyHeader count=R][ids i64 x R][values f32 x R x D][state f32 x R x S]
  load_rows = 9,  // [RequestHeader count=R][ids][values][state]: replaces the table's rows
};
const char* op_name(Op op);

enum class Status : std::uint32_t {
  ok = 0,
  error = 1,
  duplicate = 2,  // a push whose sequence number was already applied: acknowledged, not redone
};

struct RequestHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  Op op = Op::pull;
  std::uint32_t worker = 0;
  std::uint32_t flags = 0;
  std::uint64_t table = 0;    // table_key(name)
  std::uint64_t session = 0;  // random per client incarnation
  std::uint64_t step = 0;
  std::uint64_t seq = 0;
  std::uint64_t count = 0;    // ids in the request
  std::uint32_t dim = 0;      // floats per row (pull, push)
  std::uint32_t reserved = 0;
  double lr = 0.0;            // push: learning rate
};
static_assert(sizeof(RequestHeader) == 72);
// RequestHeader::flags of a pull: read the rows without creating any or counting the request
// towards admission, eviction or a worker's step (an evaluation's reads).
inline constexpr std::uint32_t kPullReadOnly = 1;

struct ReplyHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  Op op = Op::pull;
  Status status = Status::ok;
  std::uint32_t dim = 0;
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  std::uint64_t incarnation = 0;  // random per shard process, never 0
};
static_assert(sizeof(ReplyHeader) == 40);

// A table as registered on every shard: its spec, its sparse optimiser and its consistency,
// admission and eviction options. Travels as YAML (config::write / config::read), so both
// sides validate it with the same schema.
struct TableConfig {
  EmbeddingTableSpec spec;
  optim::OptimizerOptions optimizer;
  TableOptions options;

  template <class V>
  void visit(V& v) {
    v.field("name", spec.name, "table name", config::non_empty());
    v.field("dim", spec.dim, "floats per row", config::at_least<std::int64_t>(1));
    v.field("init_scale", spec.init_scale, "new rows start uniform(-s, s)", config::at_least(0.0));
    // As its int64 bit pattern: the config reader takes integers up to 2^63 - 1 only, and
    // seeds use all 64 bits.
    auto seed_bits = static_cast<std::int64_t>(spec.seed);
    v.field("seed", seed_bits, "with the id, a new row's initial value (64-bit pattern)");
    spec.seed = static_cast<std::uint64_t>(seed_bits);
    v.field("optimizer", optimizer, "sparse optimiser applied on the servers");
    v.field("table", options, "consistency, admission and eviction");
  }
  // name and dim have no usable default: a config that omits them is refused, not registered
  // as a table called "" or of dim 0.
  void validate(const config::Node& node) const;
};
std::string encode_table_config(const TableConfig& config);
// Throws ConfigError naming the bad key (the text names its source `where`).
TableConfig decode_table_config(std::string_view yaml, const std::string& where);

// A random 64-bit number, never 0, drawn once per client (its session) and once per shard
// process (its incarnation): it tells one incarnation of a process from the next.
std::uint64_t random_process_id();

// 64-bit key of a table name (FNV-1a); shards reject a second name with the same key.
std::uint64_t table_key(std::string_view name);

std::span<const std::byte> header_bytes(const RequestHeader& header);
std::span<const std::byte> header_bytes(const ReplyHeader& header);
// Decode and validate a header frame (size, magic, version, op). Throw CommError naming `from`.
RequestHeader decode_request_header(std::span<const std::byte> frame, std::string_view from);
ReplyHeader decode_reply_header(std::span<const std::byte> frame, std::string_view from);

inline std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}
inline std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace aiacc::ps
