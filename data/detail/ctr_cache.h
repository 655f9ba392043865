// The column cache of a parsed CTR file: the first load parses the TSV and writes its columns to
// one binary file in a cache folder; every later load, and every other process on the host,
// maps that file read-only instead of parsing. A host's workers then share one copy of the
// examples in the page cache (each parsed its own before), start without parsing, and a file
// larger than memory can still be read (pages come from disk as batches touch them).
// Internal to data/ (used by criteo_tsv).
//
// A cache file is tied to what its columns depend on (CtrCacheKey): the source's absolute path,
// size, modification and status change times, the column counts, the malformed-line mode and
// the limit, and the parser's version (kCriteoParseVersion). It is named "<source file
// name>.<16 hex digits of the key's hash>.ctrcache"; a source that changed, or a program whose
// parser changed, gets a new file, and the builder removes the stale one of the same source and
// options (or an earlier parser's) unless a process still maps it. Files
// are written atomically (temp file, fsync, rename), so a reader sees a whole file or none; a
// file that does not match its key or its size (a cut or damaged copy) is rebuilt, with a
// warning.
//
// Locks (flock, released with their holder's process, so a process that dies never leaves the
// others waiting): processes building the same cache take turns on "<cache file>.lock" (one
// parses and writes, the others wait, then map what it wrote); a process mapping a cache holds
// "<cache file>.users" shared, and stale caches are removed only under it exclusively. The folder
// should be local to the host: on a network folder shared by hosts with their own copies of the
// data, each host's copy has its own key (its times), so each host has its own cache files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"
#include "data/detail/criteo_file.h"
#include "data/detail/criteo_parser.h"
#include "data/detail/ctr_columns.h"

namespace aiacc::data::detail {

// What a cache's columns depend on.
struct CtrCacheKey {
  std::string source;               // the TSV's absolute, normalised path
  std::uint64_t source_bytes = 0;   // its size on disk
  std::int64_t source_mtime_ns = 0; // its modification time
  std::int64_t source_ctime_ns = 0; // its status change time: any write, rename over it, chmod
                                    // or touch moves it, and no user can set it back
  int num_integer = 0;
  int num_categorical = 0;
  bool skip_malformed = false;
  std::int64_t limit = 0;
  std::uint32_t parse_version = kCriteoParseVersion;

  // The key of `source` as it is now (stat). IoError naming the file when it cannot be read.
  static CtrCacheKey of(const std::filesystem::path& source, int num_integer, int num_categorical,
                        bool skip_malformed, std::int64_t limit);
  std::uint64_t hash() const;
  bool operator==(const CtrCacheKey&) const = default;
};

// "<dir>/<source file name>.<hash>.ctrcache".
std::filesystem::path ctr_cache_file(const std::filesystem::path& dir, const CtrCacheKey& key);

// A cache file mapped read-only (MAP_SHARED: one copy in the page cache for every process),
// holding its ".users" lock shared. Unmapped and unlocked on destruction. Move-only.
class MappedCtrColumns {
 public:
  // The file's columns when it is a complete cache of `key`; nullopt, with the reason in
  // `why_not` ("" when there is no file), when it is not a regular file, cannot be read, is of
  // another key or format, or is not of its recorded size. Never throws for what the file holds.
  static std::optional<MappedCtrColumns> open(const std::filesystem::path& file, const CtrCacheKey& key,
                                              std::string& why_not);
  ~MappedCtrColumns();
  MappedCtrColumns(MappedCtrColumns&& other) noexcept;
  MappedCtrColumns& operator=(MappedCtrColumns&& other) noexcept;
  MappedCtrColumns(const MappedCtrColumns&) = delete;
  MappedCtrColumns& operator=(const MappedCtrColumns&) = delete;

  CtrColumnsView view() const { return view_; }
  std::size_t mapped_bytes() const { return bytes_; }
  // What the parse that built the file reported: lines read and malformed lines skipped.
  std::int64_t lines() const { return lines_; }
  std::int64_t malformed() const { return malformed_; }
  const std::vector<std::int64_t>& malformed_lines() const { return malformed_lines_; }  // the first few
  const std::string& first_malformed() const { return first_malformed_; }

 private:
  MappedCtrColumns() = default;
  io::FileDescriptor users_;  // "<file>.users", locked shared (invalid where it cannot be made)
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  CtrColumnsView view_;
  std::int64_t lines_ = 0;
  std::int64_t malformed_ = 0;
  std::vector<std::int64_t> malformed_lines_;
  std::string first_malformed_;
};

// Writes `columns` (parsed from the source of `key`, as `report` says) to `file` atomically.
// IoError naming the file when it cannot be written (the folder read-only, the disk full); no
// partial file is left then.
void write_ctr_cache(const std::filesystem::path& file, const CtrCacheKey& key, const CtrColumns& columns,
                     const CriteoLoadReport& report);

// Columns loaded through a cache folder: mapped from the cache, or, where the cache could not
// be written, parsed into memory.
struct CachedCtrColumns {
  enum class How { mapped, built, parsed };
  How how = How::parsed;             // mapped: an existing cache; built: parsed now and cached
  std::filesystem::path file;        // the cache file
  std::optional<MappedCtrColumns> mapped;
  CtrColumns parsed;                 // How::parsed only
  std::string why_parsed;            // How::parsed: why the cache was not used
  double waited_s = 0;               // for another process building the cache

  CtrColumnsView view() const { return mapped ? mapped->view() : parsed.view(); }
};

// Loads the columns of `key`'s source through the cache folder `dir` (created when missing):
// maps a valid cache file, or takes the build lock, parses with `parse` (which fills `report`),
// writes the file and maps it. When the folder or the file cannot be written, or the source
// changed while it was parsed, the parsed columns are kept in memory instead (How::parsed, with
// the reason: the caller warns). `report` comes from the cache file's header when nothing was
// parsed. Errors of `parse` propagate; waiting more than `lock_timeout_s` for another builder is
// an IoError naming the lock file.
CachedCtrColumns load_ctr_cached(const std::filesystem::path& dir, const CtrCacheKey& key,
                                 const std::function<CtrColumns(CriteoLoadReport&)>& parse, CriteoLoadReport& report,
                                 double lock_timeout_s = 3600);

}  // namespace aiacc::data::detail
