// The CTR column cache: its file format, the mapping, and the build under an flock.
//
// File layout (native little-endian; other byte orders fail the header check and rebuild):
//   [0, 4096)  Header (below), zero-padded
//   then, each section starting on a 4096-byte boundary: labels u8 [N], integers f32 [N, I],
//   categoricals u32 [N, C], missing u8 [N, ceil(C/8)]; the file ends with the last section.
#include "data/detail/ctr_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/log.h"
#include "core/util/random.h"

namespace aiacc::data::detail {
namespace fs = std::filesystem;
namespace {

constexpr std::array<char, 8> kMagic = {'A', 'I', 'A', 'C', 'C', 'C', 'T', 'R'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kByteOrder = 0x01020304;
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::size_t kSectionAlign = 4096;
constexpr std::size_t kMaxSourceChars = 2048;
constexpr std::size_t kMaxMessageChars = 1024;
constexpr std::size_t kMaxMalformedLines = 5;
constexpr std::string_view kSuffix = ".ctrcache";

struct Header {
  std::array<char, 8> magic;
  std::uint32_t version;
  std::uint32_t byte_order;
  std::uint64_t key_hash;
  std::int64_t count;
  std::int64_t lines;
  std::int64_t malformed;
  std::int32_t num_integer;
  std::int32_t num_categorical;
  std::uint64_t source_bytes;
  std::int64_t source_mtime_ns;
  std::int64_t source_ctime_ns;
  std::int64_t limit;
  std::uint32_t skip_malformed;
  std::uint32_t source_chars;  // of `source` used (the path, cut at kMaxSourceChars)
  std::uint64_t total_bytes;
  std::uint32_t malformed_line_count;
  std::uint32_t message_chars;
  std::array<std::int64_t, kMaxMalformedLines> malformed_lines;
  std::array<char, kMaxSourceChars> source;
  std::array<char, kMaxMessageChars> first_malformed;
};
static_assert(sizeof(Header) <= kHeaderBytes);

std::size_t align_up(std::size_t n) { return (n + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

// Byte offsets of the four sections and the file's end, for N examples of I + C columns.
struct Layout {
  std::size_t labels, integers, categoricals, missing, end;
};

Layout layout_of(std::int64_t count, int num_integer, int num_categorical) {
  const auto n = static_cast<std::size_t>(count);
  Layout l{};
  l.labels = kHeaderBytes;
  l.integers = align_up(l.labels + n);
  l.categoricals = align_up(l.integers + n * static_cast<std::size_t>(num_integer) * 4);
  l.missing = align_up(l.categoricals + n * static_cast<std::size_t>(num_categorical) * 4);
  l.end = l.missing + n * ((static_cast<std::size_t>(num_categorical) + 7) / 8);
  return l;
}

std::string_view stored_source(const std::string& source) {
  return std::string_view(source).substr(0, kMaxSourceChars);
}

// Why the header does not describe a cache of `key` of `file_bytes` bytes ("" when it does).
std::string header_mismatch(const Header& h, const CtrCacheKey& key, std::uint64_t file_bytes) {
  if (h.magic != kMagic) return "not a column cache (its first bytes differ)";
  if (h.byte_order != kByteOrder) return "written on a machine of another byte order";
  if (h.version != kVersion) return fmt::format("written in format version {}, this program reads {}", h.version, kVersion);
  if (h.source_chars > kMaxSourceChars) return "its header is damaged (source path length)";
  const std::string_view source(h.source.data(), h.source_chars);
  if (h.key_hash != key.hash() || source != stored_source(key.source) || h.source_bytes != key.source_bytes ||
      h.source_mtime_ns != key.source_mtime_ns || h.source_ctime_ns != key.source_ctime_ns || h.num_integer != key.num_integer ||
      h.num_categorical != key.num_categorical || (h.skip_malformed != 0) != key.skip_malformed || h.limit != key.limit) {
    return "made from another version of the source or with other options";
  }
  if (h.count < 0 || h.lines < h.count || h.malformed < 0 || h.malformed_line_count > kMaxMalformedLines ||
      h.message_chars > kMaxMessageChars) {
    return "its header is damaged (counts)";
  }
  const Layout l = layout_of(h.count, h.num_integer, h.num_categorical);
  if (h.total_bytes != l.end || file_bytes != l.end) {
    return fmt::format("{} bytes where {} examples take {} (a cut or damaged copy)", file_bytes, h.count, l.end);
  }
  return {};
}

std::optional<Header> read_header(const fs::path& file, std::uint64_t& file_bytes, std::string& why_not) {
  io::FileDescriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno != ENOENT) why_not = fmt::format("cannot be opened: {}", std::strerror(errno));
    return std::nullopt;
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) {
    why_not = fmt::format("cannot be examined: {}", std::strerror(errno));
    return std::nullopt;
  }
  file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes < kHeaderBytes) {
    why_not = fmt::format("{} bytes, shorter than its header", file_bytes);
    return std::nullopt;
  }
  Header h{};
  io::read_exact(fd, file, 0, &h, sizeof h);
  return h;
}

// Removes the caches of earlier versions of the source made with the same options: they would
// never be read again. (A cache of other options, a limit say, may be: it stays.) Best effort: a
// process still mapping one keeps its pages (unlinking does not unmap).
void remove_stale_caches(const fs::path& dir, const CtrCacheKey& key, const fs::path& current) {
  const std::string prefix = fs::path(key.source).filename().string() + ".";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path() == current || !name.starts_with(prefix) || !name.ends_with(kSuffix)) continue;
    std::uint64_t bytes = 0;
    std::string why_not;
    std::optional<Header> h;
    try {
      h = read_header(entry.path(), bytes, why_not);
    } catch (const Error&) {
      continue;  // unreadable: not ours to judge
    }
    if (!h || h->source_chars > kMaxSourceChars ||
        std::string_view(h->source.data(), h->source_chars) != stored_source(key.source) ||
        h->num_integer != key.num_integer || h->num_categorical != key.num_categorical ||
        (h->skip_malformed != 0) != key.skip_malformed || h->limit != key.limit) {
      continue;
    }
    std::error_code failed;
    if (fs::remove(entry.path(), failed)) {
      log::get("data")->info("removed the stale column cache {} of {}", entry.path().string(), key.source);
    }
    fs::remove(fs::path(entry.path().string() + ".lock"), failed);
  }
}

void write_padding(io::AtomicFile& out, std::size_t to) {
  static const std::array<char, kSectionAlign> zeros{};
  while (out.bytes_written() < to) {
    out.write(zeros.data(), std::min<std::size_t>(zeros.size(), to - out.bytes_written()));
  }
}

}  // namespace

CtrCacheKey CtrCacheKey::of(const fs::path& source, int num_integer, int num_categorical, bool skip_malformed,
                            std::int64_t limit) {
  std::error_code ec;
  fs::path absolute = fs::absolute(source, ec);
  if (ec) throw IoError(fmt::format("{}: cannot resolve the path: {}", source.string(), ec.message()));
  struct stat st{};
  if (::stat(absolute.c_str(), &st) != 0) {
    throw IoError(fmt::format("{}: cannot be examined: {}", source.string(), std::strerror(errno)));
  }
  CtrCacheKey key;
  key.source = absolute.lexically_normal().string();
  key.source_bytes = static_cast<std::uint64_t>(st.st_size);
  key.source_mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  key.source_ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  key.num_integer = num_integer;
  key.num_categorical = num_categorical;
  key.skip_malformed = skip_malformed;
  key.limit = limit;
  return key;
}

std::uint64_t CtrCacheKey::hash() const {
  std::uint64_t h = mix64(kVersion);
  for (const char c : source) h = mix64(h ^ static_cast<unsigned char>(c));
  for (const std::uint64_t v : {source_bytes, static_cast<std::uint64_t>(source_mtime_ns),
                                static_cast<std::uint64_t>(source_ctime_ns),
                                static_cast<std::uint64_t>(num_integer), static_cast<std::uint64_t>(num_categorical),
                                static_cast<std::uint64_t>(skip_malformed), static_cast<std::uint64_t>(limit)}) {
    h = mix64(h ^ v);
  }
  return h;
}

fs::path ctr_cache_file(const fs::path& dir, const CtrCacheKey& key) {
  return dir / fmt::format("{}.{:016x}{}", fs::path(key.source).filename().string(), key.hash(), kSuffix);
}

std::optional<MappedCtrColumns> MappedCtrColumns::open(const fs::path& file, const CtrCacheKey& key,
                                                       std::string& why_not) {
  why_not.clear();
  std::uint64_t file_bytes = 0;
  const std::optional<Header> h = read_header(file, file_bytes, why_not);
  if (!h) return std::nullopt;
  why_not = header_mismatch(*h, key, file_bytes);
  if (!why_not.empty()) return std::nullopt;
  io::FileDescriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    why_not = fmt::format("cannot be opened: {}", std::strerror(errno));
    return std::nullopt;
  }
  // Fault the pages in at once where they fit in memory with room to spare (no page faults
  // scattered over the first epoch's steps); a file too large for that is paged as read.
  const long page = ::sysconf(_SC_PAGESIZE);
  const long available_pages = ::sysconf(_SC_AVPHYS_PAGES);
  const bool populate = page > 0 && available_pages > 0 &&
                        file_bytes <= static_cast<std::uint64_t>(available_pages) * static_cast<std::uint64_t>(page) / 2;
  void* base = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd.get(), 0);
  if (base == MAP_FAILED) {
    why_not = fmt::format("cannot be mapped: {}", std::strerror(errno));
    return std::nullopt;
  }
  MappedCtrColumns m;
  m.base_ = base;
  m.bytes_ = file_bytes;
  m.lines_ = h->lines;
  m.malformed_ = h->malformed;
  m.malformed_lines_.assign(h->malformed_lines.begin(), h->malformed_lines.begin() + h->malformed_line_count);
  m.first_malformed_.assign(h->first_malformed.data(), h->message_chars);
  const Layout l = layout_of(h->count, h->num_integer, h->num_categorical);
  const auto* bytes = static_cast<const std::byte*>(base);
  m.view_.num_integer = h->num_integer;
  m.view_.num_categorical = h->num_categorical;
  m.view_.count = h->count;
  m.view_.labels = reinterpret_cast<const std::uint8_t*>(bytes + l.labels);
  m.view_.integers = reinterpret_cast<const float*>(bytes + l.integers);
  m.view_.categoricals = reinterpret_cast<const std::uint32_t*>(bytes + l.categoricals);
  m.view_.missing = reinterpret_cast<const std::uint8_t*>(bytes + l.missing);
  return m;
}

MappedCtrColumns::~MappedCtrColumns() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

MappedCtrColumns::MappedCtrColumns(MappedCtrColumns&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      view_(std::exchange(other.view_, {})),
      lines_(other.lines_),
      malformed_(other.malformed_),
      malformed_lines_(std::move(other.malformed_lines_)),
      first_malformed_(std::move(other.first_malformed_)) {}

MappedCtrColumns& MappedCtrColumns::operator=(MappedCtrColumns&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    view_ = std::exchange(other.view_, {});
    lines_ = other.lines_;
    malformed_ = other.malformed_;
    malformed_lines_ = std::move(other.malformed_lines_);
    first_malformed_ = std::move(other.first_malformed_);
  }
  return *this;
}

void write_ctr_cache(const fs::path& file, const CtrCacheKey& key, const CtrColumns& columns,
                     const CriteoLoadReport& report) {
  if (columns.num_integer != key.num_integer || columns.num_categorical != key.num_categorical) {
    throw InternalError(fmt::format("column cache {}: columns of {} + {} for a key of {} + {}", file.string(),
                                    columns.num_integer, columns.num_categorical, key.num_integer, key.num_categorical));
  }
  const std::int64_t count = columns.size();
  const Layout l = layout_of(count, columns.num_integer, columns.num_categorical);
  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.byte_order = kByteOrder;
  h.key_hash = key.hash();
  h.count = count;
  h.lines = report.lines;
  h.malformed = report.malformed;
  h.num_integer = key.num_integer;
  h.num_categorical = key.num_categorical;
  h.source_bytes = key.source_bytes;
  h.source_mtime_ns = key.source_mtime_ns;
  h.source_ctime_ns = key.source_ctime_ns;
  h.limit = key.limit;
  h.skip_malformed = key.skip_malformed ? 1 : 0;
  const std::string_view source = stored_source(key.source);
  h.source_chars = static_cast<std::uint32_t>(source.size());
  std::copy(source.begin(), source.end(), h.source.begin());
  h.total_bytes = l.end;
  h.malformed_line_count = static_cast<std::uint32_t>(std::min(report.malformed_lines.size(), kMaxMalformedLines));
  std::copy_n(report.malformed_lines.begin(), h.malformed_line_count, h.malformed_lines.begin());
  const std::string_view message = std::string_view(report.first_malformed).substr(0, kMaxMessageChars);
  h.message_chars = static_cast<std::uint32_t>(message.size());
  std::copy(message.begin(), message.end(), h.first_malformed.begin());

  io::AtomicFile out(file);
  out.write(&h, sizeof h);
  write_padding(out, l.labels);
  out.write(columns.labels.data(), columns.labels.size());
  write_padding(out, l.integers);
  out.write(columns.integers.data(), columns.integers.size() * sizeof(float));
  write_padding(out, l.categoricals);
  out.write(columns.categoricals.data(), columns.categoricals.size() * sizeof(std::uint32_t));
  write_padding(out, l.missing);
  out.write(columns.missing.data(), columns.missing.size());
  if (out.bytes_written() != l.end) {
    throw InternalError(fmt::format("column cache {}: wrote {} bytes, the layout says {}", file.string(), out.bytes_written(), l.end));
  }
  out.commit();
}

CachedCtrColumns load_ctr_cached(const fs::path& dir, const CtrCacheKey& key,
                                 const std::function<CtrColumns(CriteoLoadReport&)>& parse, CriteoLoadReport& report,
                                 double lock_timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto logger = log::get("data");
  CachedCtrColumns result;
  result.file = ctr_cache_file(dir, key);
  auto parsed_in_memory = [&](std::string why) {
    result.how = CachedCtrColumns::How::parsed;
    result.why_parsed = std::move(why);
    result.parsed = parse(report);
    return std::move(result);
  };
  // The report of a load that parsed nothing: what the build recorded, and the time to map.
  auto mapped = [&](MappedCtrColumns m, CachedCtrColumns::How how) {
    if (how == CachedCtrColumns::How::mapped) {
      report = {};
      report.lines = m.lines();
      report.malformed = m.malformed();
      report.malformed_lines = m.malformed_lines();
      report.first_malformed = m.first_malformed();
      report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    result.how = how;
    result.mapped = std::move(m);
    return std::move(result);
  };

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return parsed_in_memory(fmt::format("the cache folder {} cannot be created: {}", dir.string(), ec.message()));
  std::string why_not;
  if (auto m = MappedCtrColumns::open(result.file, key, why_not)) return mapped(std::move(*m), CachedCtrColumns::How::mapped);
  if (!why_not.empty()) logger->warn("column cache {}: {}; building it again", result.file.string(), why_not);

  const fs::path lock_path = result.file.string() + ".lock";
  io::FileDescriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock.valid()) {
    return parsed_in_memory(fmt::format("its lock file {} cannot be created: {}", lock_path.string(), std::strerror(errno)));
  }
  bool announced = false;
  while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      // A filesystem without flock (some network mounts): build without it. Two processes may
      // then both parse and write; each rename installs a whole, identical file.
      logger->warn("column cache {}: cannot lock {} ({}); building it without the lock", result.file.string(), lock_path.string(),
                   std::strerror(errno));
      break;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > lock_timeout_s) {
      throw IoError(fmt::format("column cache {}: waited {:.0f} s for another process building it (holding {}); "
                                "remove the lock file if no process of this job is alive",
                                result.file.string(), waited, lock_path.string()));
    }
    if (!announced && waited > 1.0) {
      logger->info("column cache {}: another process is building it; waiting", result.file.string());
      announced = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Another process may have built it while this one waited.
  if (auto m = MappedCtrColumns::open(result.file, key, why_not)) return mapped(std::move(*m), CachedCtrColumns::How::mapped);

  CtrColumns columns = parse(report);
  try {
    write_ctr_cache(result.file, key, columns, report);
  } catch (const IoError& e) {
    result.how = CachedCtrColumns::How::parsed;
    result.why_parsed = fmt::format("it cannot be written: {}", e.what());
    result.parsed = std::move(columns);
    return result;
  }
  remove_stale_caches(dir, key, result.file);
  if (auto m = MappedCtrColumns::open(result.file, key, why_not)) return mapped(std::move(*m), CachedCtrColumns::How::built);
  result.how = CachedCtrColumns::How::parsed;
  result.why_parsed = fmt::format("the file just written cannot be read back: {}", why_not);
  result.parsed = std::move(columns);
  return result;
}

}  // namespace aiacc::data::detail
