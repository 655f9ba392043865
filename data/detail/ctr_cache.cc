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
constexpr std::uint32_t kFormatVersion = 1;
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
  std::uint32_t parse_version;
  std::uint32_t source_chars;  // of `source` used (the path, cut at kMaxSourceChars)
  std::uint32_t malformed_line_count;
  std::uint64_t total_bytes;
  std::uint32_t message_chars;
  std::array<std::int64_t, kMaxMalformedLines> malformed_lines;
  std::array<char, kMaxSourceChars> source;
  std::array<char, kMaxMessageChars> first_malformed;
};
static_assert(sizeof(Header) <= kHeaderBytes);

std::size_t align_up(std::size_t n) { return (n + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

std::size_t bytes_per_example(int num_integer, int num_categorical) {
  return CtrColumnsView{num_integer, num_categorical}.bytes_per_example();
}

// Byte offsets of the four sections and the file's end, for N examples of I + C columns (N no
// more than a file of the sizes checked fits: nothing here overflows).
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

// Why `h` is not a header of this program's format ("" when it is).
std::string format_mismatch(const Header& h) {
  if (h.magic != kMagic) return "not a column cache (its first bytes differ)";
  if (h.byte_order != kByteOrder) return "written on a machine of another byte order";
  if (h.version != kFormatVersion) {
    return fmt::format("written in format version {}, this program reads {}", h.version, kFormatVersion);
  }
  if (h.source_chars > kMaxSourceChars || h.malformed_line_count > kMaxMalformedLines ||
      h.message_chars > kMaxMessageChars) {
    return "its header is damaged (lengths)";
  }
  return {};
}

// The same source path and load options, whichever parser wrote it.
bool same_source_and_load_options(const Header& h, const CtrCacheKey& key) {
  return std::string_view(h.source.data(), h.source_chars) == stored_source(key.source) &&
         h.num_integer == key.num_integer && h.num_categorical == key.num_categorical &&
         (h.skip_malformed != 0) == key.skip_malformed && h.limit == key.limit;
}

bool same_source_and_options(const Header& h, const CtrCacheKey& key) {
  return same_source_and_load_options(h, key) && h.parse_version == key.parse_version;
}

// Why the header does not describe a cache of `key` of `file_bytes` bytes ("" when it does).
std::string header_mismatch(const Header& h, const CtrCacheKey& key, std::uint64_t file_bytes) {
  if (std::string why = format_mismatch(h); !why.empty()) return why;
  if (h.key_hash != key.hash() || !same_source_and_options(h, key) || h.source_bytes != key.source_bytes ||
      h.source_mtime_ns != key.source_mtime_ns || h.source_ctime_ns != key.source_ctime_ns) {
    return "made from another version of the source or with other options";
  }
  // The count bounded by the bytes there are before any size is computed from it.
  const std::size_t example_bytes = bytes_per_example(h.num_integer, h.num_categorical);
  if (h.count < 0 || h.lines < h.count || h.malformed < 0 ||
      static_cast<std::uint64_t>(h.count) > (file_bytes - kHeaderBytes) / example_bytes) {
    return "its header is damaged (counts)";
  }
  const Layout l = layout_of(h.count, h.num_integer, h.num_categorical);
  if (h.total_bytes != l.end || file_bytes != l.end) {
    return fmt::format("{} bytes where {} examples take {} (a cut or damaged copy)", file_bytes, h.count, l.end);
  }
  return {};
}

// A regular file at `file`, opened for reading (non-blocking, so a FIFO put there does not hang
// the open), its size and header; nullopt with the reason in `why_not` ("" when there is none).
struct OpenedCache {
  io::FileDescriptor fd;
  std::uint64_t bytes = 0;
  Header header{};
};

std::optional<OpenedCache> open_cache(const fs::path& file, std::string& why_not) {
  why_not.clear();
  OpenedCache c;
  c.fd = io::open_retrying(file, O_RDONLY | O_NONBLOCK);
  if (!c.fd.valid()) {
    if (errno != ENOENT) why_not = fmt::format("cannot be opened: {}", std::strerror(errno));
    return std::nullopt;
  }
  struct stat st{};
  if (::fstat(c.fd.get(), &st) != 0) {
    why_not = fmt::format("cannot be examined: {}", std::strerror(errno));
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    why_not = "not a regular file";
    return std::nullopt;
  }
  c.bytes = static_cast<std::uint64_t>(st.st_size);
  if (c.bytes < kHeaderBytes) {
    why_not = fmt::format("{} bytes, shorter than its header", c.bytes);
    return std::nullopt;
  }
  try {
    io::read_exact(c.fd, file, 0, &c.header, sizeof c.header);
  } catch (const Error& e) {
    why_not = e.what();
    return std::nullopt;
  }
  return c;
}

fs::path users_path(const fs::path& file) { return file.string() + ".users"; }
fs::path lock_path(const fs::path& file) { return file.string() + ".lock"; }

// Removes the caches of earlier versions of the source made with the same options, and those an
// earlier parser (a lower kCriteoParseVersion) made of it: they would never be read again. (A
// cache of other options, a limit say, may be: it stays; so does one a later parser made, which
// a newer build of the program sharing the folder reads.) One that a process maps (its ".users"
// lock held) stays too. Best effort: errors skip a file.
void remove_stale_caches(const fs::path& dir, const CtrCacheKey& key, const fs::path& current) {
  const std::string prefix = fs::path(key.source).filename().string() + ".";
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path path = it->path();
    const std::string name = path.filename().string();
    if (path == current || !name.starts_with(prefix) || !name.ends_with(kSuffix)) continue;
    std::string why_not;
    const std::optional<OpenedCache> c = open_cache(path, why_not);
    if (!c || !format_mismatch(c->header).empty() || !same_source_and_load_options(c->header, key) ||
        c->header.parse_version > key.parse_version) {
      continue;
    }
    const io::FileDescriptor users = io::open_retrying(users_path(path), O_RDONLY | O_CREAT, 0644);
    if (users.valid() && !io::flock_retrying(users, LOCK_EX | LOCK_NB)) continue;  // mapped by a process
    std::error_code failed;
    if (fs::remove(path, failed)) {
      log::get("data")->info("removed the stale column cache {} of {}{}", path.string(), key.source,
                             c->header.parse_version < key.parse_version
                                 ? fmt::format(" (written by parser version {}, this program's is {})",
                                               c->header.parse_version, key.parse_version)
                                 : std::string());
    }
    fs::remove(users_path(path), failed);
    fs::remove(lock_path(path), failed);
  }
}

// Removes what a builder killed part-way left: AtomicFile's temporary files of `file`
// (".<name>.tmp-XXXXXX"). Only under the build lock, where no other builder of `file` writes.
void remove_abandoned_temp_files(const fs::path& file) {
  const std::string prefix = "." + file.filename().string() + ".tmp-";
  std::error_code ec;
  fs::directory_iterator it(file.parent_path(), ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->path().filename().string().starts_with(prefix)) continue;
    std::error_code failed;
    if (fs::remove(it->path(), failed)) {
      log::get("data")->info("removed {}, left by a build of {} that did not finish", it->path().string(),
                             file.string());
    }
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
  std::uint64_t h = mix64(kFormatVersion);
  for (const char c : source) h = mix64(h ^ static_cast<unsigned char>(c));
  for (const std::uint64_t v : {source_bytes, static_cast<std::uint64_t>(source_mtime_ns),
                                static_cast<std::uint64_t>(source_ctime_ns), static_cast<std::uint64_t>(num_integer),
                                static_cast<std::uint64_t>(num_categorical), static_cast<std::uint64_t>(skip_malformed),
                                static_cast<std::uint64_t>(limit), static_cast<std::uint64_t>(parse_version)}) {
    h = mix64(h ^ v);
  }
  return h;
}

fs::path ctr_cache_file(const fs::path& dir, const CtrCacheKey& key) {
  return dir / fmt::format("{}.{:016x}{}", fs::path(key.source).filename().string(), key.hash(), kSuffix);
}

std::optional<MappedCtrColumns> MappedCtrColumns::open(const fs::path& file, const CtrCacheKey& key,
                                                       std::string& why_not) {
  MappedCtrColumns m;
  // Shared before the file is checked: from then on no builder removes it as stale. A folder
  // this process may not write (caches made by another user) has no lock to take, and no
  // builder of this user removes anything there either.
  m.users_ = io::open_retrying(users_path(file), O_RDONLY | O_CREAT, 0644);
  if (m.users_.valid() && !io::flock_retrying(m.users_, LOCK_SH)) m.users_ = io::FileDescriptor();
  std::optional<OpenedCache> c = open_cache(file, why_not);
  if (!c) return std::nullopt;
  const Header& h = c->header;
  why_not = header_mismatch(h, key, c->bytes);
  if (!why_not.empty()) return std::nullopt;
  // Fault the pages in at once where they fit in memory with room to spare (no page faults
  // scattered over the first epoch's steps); a file too large for that is paged as read.
  const long page = ::sysconf(_SC_PAGESIZE);
  const long available_pages = ::sysconf(_SC_AVPHYS_PAGES);
  const bool populate = page > 0 && available_pages > 0 &&
                        c->bytes <= static_cast<std::uint64_t>(available_pages) * static_cast<std::uint64_t>(page) / 2;
  // The descriptor the header was read from: the same file, whatever was renamed over its name since.
  void* base = ::mmap(nullptr, c->bytes, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), c->fd.get(), 0);
  if (base == MAP_FAILED) {
    why_not = fmt::format("cannot be mapped: {}", std::strerror(errno));
    return std::nullopt;
  }
  m.base_ = base;
  m.bytes_ = c->bytes;
  m.lines_ = h.lines;
  m.malformed_ = h.malformed;
  m.malformed_lines_.assign(h.malformed_lines.begin(), h.malformed_lines.begin() + h.malformed_line_count);
  m.first_malformed_.assign(h.first_malformed.data(), h.message_chars);
  const Layout l = layout_of(h.count, h.num_integer, h.num_categorical);
  const auto* bytes = static_cast<const std::byte*>(base);
  m.view_.num_integer = h.num_integer;
  m.view_.num_categorical = h.num_categorical;
  m.view_.count = h.count;
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
    : users_(std::move(other.users_)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      view_(std::exchange(other.view_, {})),
      lines_(other.lines_),
      malformed_(other.malformed_),
      malformed_lines_(std::move(other.malformed_lines_)),
      first_malformed_(std::move(other.first_malformed_)) {}

MappedCtrColumns& MappedCtrColumns::operator=(MappedCtrColumns&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    users_ = std::move(other.users_);
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
                                    columns.num_integer, columns.num_categorical, key.num_integer,
                                    key.num_categorical));
  }
  const std::int64_t count = columns.size();
  const Layout l = layout_of(count, columns.num_integer, columns.num_categorical);
  Header h{};
  h.magic = kMagic;
  h.version = kFormatVersion;
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
  h.parse_version = key.parse_version;
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
    throw InternalError(fmt::format("column cache {}: wrote {} bytes, the layout says {}", file.string(),
                                    out.bytes_written(), l.end));
  }
  out.commit();
}

CachedCtrColumns load_ctr_cached(const fs::path& dir, const CtrCacheKey& key,
                                 const std::function<CtrColumns(CriteoLoadReport&)>& parse, CriteoLoadReport& report,
                                 double lock_timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto logger = log::get("data");
  CachedCtrColumns result;
  result.file = ctr_cache_file(dir, key);
  // Columns kept in this process's memory instead of a cache, and why.
  auto keep_parsed = [&](CtrColumns columns, std::string why) {
    result.how = CachedCtrColumns::How::parsed;
    result.why_parsed = std::move(why);
    result.parsed = std::move(columns);
    return std::move(result);
  };
  // A load that parsed nothing reports what the build recorded, and the time to map.
  auto mapped = [&](MappedCtrColumns m) {
    report = {};
    report.lines = m.lines();
    report.malformed = m.malformed();
    report.malformed_lines = m.malformed_lines();
    report.first_malformed = m.first_malformed();
    report.seconds = since(start);
    result.how = CachedCtrColumns::How::mapped;
    result.mapped = std::move(m);
    return std::move(result);
  };

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return keep_parsed(parse(report), fmt::format("the cache folder {} cannot be created: {}", dir.string(),
                                                  ec.message()));
  }
  std::string why_not;
  if (auto m = MappedCtrColumns::open(result.file, key, why_not)) return mapped(std::move(*m));

  // O_RDONLY: flock needs no write access, so a lock file this user may only read still works.
  const io::FileDescriptor lock = io::open_retrying(lock_path(result.file), O_RDONLY | O_CREAT, 0644);
  if (!lock.valid()) {
    const std::string why = fmt::format("its lock file {} cannot be opened: {}", lock_path(result.file).string(),
                                        std::strerror(errno));
    return keep_parsed(parse(report), why);
  }
  const auto wait_start = Clock::now();
  bool announced = false;
  while (!io::flock_retrying(lock, LOCK_EX | LOCK_NB)) {
    if (errno != EWOULDBLOCK) {
      // A filesystem without flock (some network mounts): build without it. Two processes may
      // then both parse and write; each rename installs a whole, identical file.
      logger->warn("column cache {}: cannot lock {} ({}); building it without the lock", result.file.string(),
                   lock_path(result.file).string(), std::strerror(errno));
      break;
    }
    if (since(wait_start) > lock_timeout_s) {
      throw IoError(fmt::format("column cache {}: waited {:.0f} s for another process building it (holding {}); "
                                "remove the lock file if no process of this job is alive",
                                result.file.string(), since(wait_start), lock_path(result.file).string()));
    }
    if (!announced && since(wait_start) > 1.0) {
      logger->info("column cache {}: another process is building it; waiting", result.file.string());
      announced = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.waited_s = since(wait_start);
  // Another process may have built it while this one waited.
  if (auto m = MappedCtrColumns::open(result.file, key, why_not)) return mapped(std::move(*m));

  // Something else at the cache's name (a folder, a FIFO) is not replaced: AtomicFile would
  // write a FIFO in place, and block there until it had a reader.
  if (fs::exists(fs::symlink_status(result.file, ec)) && !fs::is_regular_file(fs::status(result.file, ec))) {
    return keep_parsed(parse(report), fmt::format("{} is not a regular file (remove it to have the cache made)",
                                                  result.file.string()));
  }
  if (!why_not.empty()) logger->warn("column cache {}: {}; building it again", result.file.string(), why_not);
  remove_abandoned_temp_files(result.file);
  CtrColumns columns = parse(report);
  // A source rewritten while it was parsed: its columns may mix both versions, and the key
  // (taken before) would name them the old one's.
  try {
    const CtrCacheKey after = CtrCacheKey::of(key.source, key.num_integer, key.num_categorical, key.skip_malformed,
                                              key.limit);
    if (!(after == key)) return keep_parsed(std::move(columns), "the file changed while it was parsed");
  } catch (const IoError& e) {
    return keep_parsed(std::move(columns), fmt::format("the file changed while it was parsed ({})", e.what()));
  }
  try {
    write_ctr_cache(result.file, key, columns, report);
  } catch (const IoError& e) {
    return keep_parsed(std::move(columns), fmt::format("it cannot be written: {}", e.what()));
  }
  remove_stale_caches(dir, key, result.file);
  auto m = MappedCtrColumns::open(result.file, key, why_not);
  if (!m) return keep_parsed(std::move(columns), fmt::format("the file just written cannot be read back: {}", why_not));
  result.how = CachedCtrColumns::How::built;
  result.mapped = std::move(*m);
  return result;
}

}  // namespace aiacc::data::detail
