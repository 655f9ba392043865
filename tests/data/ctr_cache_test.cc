// criteo_tsv's column cache (data.*.criteo_tsv.cache_dir, data/detail/ctr_cache.h): a cached
// load reads exactly what a parse reads (plain and gzip'd, with malformed lines skipped); the
// first load builds, later ones map; a changed source, other options, a damaged or foreign cache
// file each lead to a rebuild, never to stale or wrong examples; an unusable folder falls back
// to parsing, and so does a cache file that cannot be written (a full disk); loads racing on one
// cache build it once; a lock held too long is an IoError naming the lock file.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "core/error.h"
#include "data/criteo_tsv.h"
#include "data/detail/ctr_cache.h"
#include "tests/data/ctr_examples.h"
#include "tests/data/data_files.h"

namespace aiacc::data {
namespace {

namespace fs = std::filesystem;
using How = detail::CachedCtrColumns::How;
using ::testing::HasSubstr;
using testing::CtrExamples;
using testing::read_scrambled;
using testing::TempDir;
using testing::write_text;

// Lines of every value kind (negative and missing integers, missing and upper-case categories)
// and, at line 4, one malformed line (a label of 2).
std::string tsv_lines(int count, int salt, bool with_malformed = false) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    if (with_malformed && i == 3) {
      text += "2\t1\t2\t3\t0000000a\t0000000b\t0000000c\n";
      continue;
    }
    const int v = i * 7 + salt;
    text += fmt::format("{}\t{}\t{}\t{}\t{:08x}\t{}\t{:08X}\n", v % 3 == 0 ? 1 : 0,
                        v % 5 == 0 ? std::string() : std::to_string(v),
                        -v % 4, v * 1000, 0x1000 + v, v % 4 == 0 ? std::string() : fmt::format("{:08x}", v * 31),
                        0xABC00 + v % 11);
  }
  return text;
}

CriteoTsv::Options options_for(const std::string& path, const std::string& cache_dir) {
  CriteoTsv::Options o;
  o.train_file = path;
  o.num_integer = 3;
  o.num_categorical = 3;
  o.cache_dir = cache_dir;
  return o;
}

// The examples of `path` as a load without a cache reads them.
CtrExamples parsed_examples(const std::string& path) {
  CriteoTsv parsed(options_for(path, ""), {"train", 0});
  EXPECT_EQ(parsed.load_how(), How::parsed);
  return read_scrambled(parsed);
}

std::vector<fs::path> sorted(std::vector<fs::path> paths) {
  std::sort(paths.begin(), paths.end());
  return paths;
}

// Overwrites the bytes of `value` at `offset` of `file` (a header field of a cache file).
template <class T>
void overwrite_at(const fs::path& file, std::streamoff offset, T value) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
}

// Why MappedCtrColumns::open refuses `file` as the cache of <dir>/f.tsv (3 + 3 columns), or
// "<mapped>" when it maps it.
std::string why_refused(const fs::path& file, const TempDir& dir) {
  std::string why_not;
  const auto key = detail::CtrCacheKey::of(dir.file("f.tsv"), 3, 3, false, 0);
  return detail::MappedCtrColumns::open(file, key, why_not).has_value() ? "<mapped>" : why_not;
}

// The cache files in `dir`, sorted.
std::vector<fs::path> cache_files(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".ctrcache") files.push_back(entry.path());
  }
  return sorted(std::move(files));
}

TEST(CtrCache, TheFirstLoadBuildsLaterLoadsMapTheSameExamples) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(40, 1));
  const CtrExamples reference = parsed_examples(dir.file("f.tsv"));
  ASSERT_EQ(reference.labels.size(), 40u);

  CriteoTsv built(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(built.load_how(), How::built);
  EXPECT_EQ(read_scrambled(built), reference);
  ASSERT_EQ(cache_files(dir.file("cache")).size(), 1u);
  EXPECT_EQ(built.cache_file(), cache_files(dir.file("cache")).front());
  EXPECT_THAT(built.cache_file().filename().string(), ::testing::StartsWith("f.tsv."));

  CriteoTsv mapped(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(mapped.load_how(), How::mapped);
  EXPECT_EQ(mapped.size(), 40);
  EXPECT_EQ(mapped.load_report().lines, 40);
  EXPECT_EQ(read_scrambled(mapped), reference);
}

TEST(CtrCache, GzipAndSkippedMalformedLinesReadAsParsed) {
  TempDir dir;
  const std::string text = tsv_lines(30, 5, /*with_malformed=*/true);
  testing::write_gzip(dir.file("f.tsv.gz"), std::vector<std::uint8_t>(text.begin(), text.end()));
  CriteoTsv::Options o = options_for(dir.file("f.tsv.gz"), "");
  o.malformed = "skip";
  CriteoTsv parsed(o, {"train", 0});
  ASSERT_EQ(parsed.size(), 29);
  o.cache_dir = dir.file("cache");
  CriteoTsv built(o, {"train", 0});
  CriteoTsv mapped(o, {"train", 0});
  EXPECT_EQ(mapped.load_how(), How::mapped);
  EXPECT_EQ(read_scrambled(mapped), read_scrambled(parsed));
  // What the build's parse found is reported by every load that maps its cache.
  EXPECT_EQ(mapped.load_report().lines, 30);
  EXPECT_EQ(mapped.load_report().malformed, 1);
  EXPECT_EQ(mapped.load_report().malformed_lines, parsed.load_report().malformed_lines);
  EXPECT_EQ(mapped.load_report().first_malformed, parsed.load_report().first_malformed);
  EXPECT_FALSE(mapped.load_report().first_malformed.empty());
}

TEST(CtrCache, AChangedSourceIsRebuiltAndItsStaleCacheRemovedOnceNoProcessMapsIt) {
  TempDir dir;
  const std::string cache = dir.file("cache");
  write_text(dir.file("f.tsv"), tsv_lines(20, 1));
  CriteoTsv::Options limited = options_for(dir.file("f.tsv"), cache);
  limited.limit = 7;
  const fs::path limited_file = CriteoTsv(limited, {"train", 0}).cache_file();
  auto first = std::make_unique<CriteoTsv>(options_for(dir.file("f.tsv"), cache), DatasetContext{"train", 0});
  const fs::path first_file = first->cache_file();
  // Other contents, and a later modification time (a rewrite within the clock's resolution would
  // keep it; the key has the size too).
  write_text(dir.file("f.tsv"), tsv_lines(20, 2));
  fs::last_write_time(dir.file("f.tsv"), fs::last_write_time(dir.file("f.tsv")) + std::chrono::seconds(5));
  auto second = std::make_unique<CriteoTsv>(options_for(dir.file("f.tsv"), cache), DatasetContext{"train", 0});
  EXPECT_EQ(second->load_how(), How::built);
  EXPECT_NE(second->cache_file(), first_file);
  EXPECT_EQ(read_scrambled(*second), parsed_examples(dir.file("f.tsv")));
  // `first` still maps its file: it stays, and still reads the examples it had.
  EXPECT_NE(read_scrambled(*second), read_scrambled(*first));
  EXPECT_EQ(cache_files(cache), sorted({first_file, limited_file, second->cache_file()}));

  // The same size and the modification time set back (a copy that keeps times): the status
  // change time still tells. No process maps the two earlier versions' files any more: they go.
  // The cache made with a limit stays (its options differ: a load with that limit removes it).
  const CtrExamples second_examples = read_scrambled(*second);
  first.reset();
  second.reset();
  std::string text = tsv_lines(20, 2);
  text[0] = text[0] == '0' ? '1' : '0';
  const auto mtime = fs::last_write_time(dir.file("f.tsv"));
  write_text(dir.file("f.tsv"), text);
  fs::last_write_time(dir.file("f.tsv"), mtime);
  CriteoTsv third(options_for(dir.file("f.tsv"), cache), {"train", 0});
  EXPECT_EQ(third.load_how(), How::built);
  EXPECT_EQ(read_scrambled(third), parsed_examples(dir.file("f.tsv")));
  EXPECT_NE(read_scrambled(third), second_examples);
  EXPECT_EQ(cache_files(cache), sorted({limited_file, third.cache_file()}));
}

// A program whose parser changed (kCriteoParseVersion) makes a new cache of the same source and
// options; the earlier parser's would never be read again and goes (once no process maps it),
// where a later parser's, read by a newer build sharing the folder, stays.
TEST(CtrCache, AnEarlierParsersCacheIsRemovedALaterOnesStays) {
  TempDir dir;
  const std::string cache = dir.file("cache");
  write_text(dir.file("f.tsv"), tsv_lines(20, 1));
  const fs::path built = CriteoTsv(options_for(dir.file("f.tsv"), cache), {"train", 0}).cache_file();
  // Copies under other names (the key's hash differs with the parser's version), as the parsers
  // before and after this one would have written them.
  constexpr std::streamoff kParseVersionAt = 92;  // the header's parse_version
  const fs::path earlier = dir.file("cache/f.tsv.00000000000000e1.ctrcache");
  const fs::path later = dir.file("cache/f.tsv.00000000000000e2.ctrcache");
  fs::copy_file(built, earlier);
  fs::copy_file(built, later);
  overwrite_at(earlier, kParseVersionAt, std::uint32_t{detail::kCriteoParseVersion - 1});
  overwrite_at(later, kParseVersionAt, std::uint32_t{detail::kCriteoParseVersion + 1});
  EXPECT_THAT(why_refused(earlier, dir), ::testing::HasSubstr("made from another version of the source or with other options"));
  // This parser's own cache is removed too, so that the next load builds again.
  fs::remove(built);
  CriteoTsv rebuilt(options_for(dir.file("f.tsv"), cache), {"train", 0});
  EXPECT_EQ(rebuilt.load_how(), How::built);
  EXPECT_EQ(rebuilt.cache_file(), built);
  EXPECT_EQ(read_scrambled(rebuilt), parsed_examples(dir.file("f.tsv")));
  EXPECT_EQ(cache_files(cache), sorted({built, later}));
}

TEST(CtrCache, OtherOptionsAndOtherSourcesKeepTheirOwnCaches) {
  TempDir dir;
  fs::create_directories(dir.file("a"));
  fs::create_directories(dir.file("b"));
  write_text(dir.file("a/f.tsv"), tsv_lines(20, 1));
  write_text(dir.file("b/f.tsv"), tsv_lines(20, 3));  // the same file name, in another folder
  CriteoTsv::Options limited = options_for(dir.file("a/f.tsv"), dir.file("cache"));
  limited.limit = 7;
  CriteoTsv all_a(options_for(dir.file("a/f.tsv"), dir.file("cache")), {"train", 0});
  CriteoTsv some_a(limited, {"train", 0});
  CriteoTsv all_b(options_for(dir.file("b/f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(cache_files(dir.file("cache")).size(), 3u);
  CriteoTsv again_some_a(limited, {"train", 0});
  CriteoTsv again_all_a(options_for(dir.file("a/f.tsv"), dir.file("cache")), {"train", 0});
  CriteoTsv again_b(options_for(dir.file("b/f.tsv"), dir.file("cache")), {"train", 0});
  for (const CriteoTsv* d : {&again_some_a, &again_all_a, &again_b}) EXPECT_EQ(d->load_how(), How::mapped);
  EXPECT_EQ(again_some_a.size(), 7);
  EXPECT_EQ(read_scrambled(again_all_a), read_scrambled(all_a));
  EXPECT_EQ(read_scrambled(again_b), read_scrambled(all_b));
  EXPECT_NE(read_scrambled(again_b), read_scrambled(again_all_a));
}

TEST(CtrCache, ADamagedOrForeignCacheFileIsRebuilt) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(50, 1));
  const CtrExamples reference = parsed_examples(dir.file("f.tsv"));
  const fs::path file = CriteoTsv(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0}).cache_file();
  // Cut short (a copy that stopped part-way), then not a cache at all, then a header of another
  // format version.
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - 1);
  CriteoTsv after_cut(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(after_cut.load_how(), How::built);
  EXPECT_EQ(read_scrambled(after_cut), reference);
  EXPECT_EQ(fs::file_size(file), size);

  write_text(file.string(), std::string(8192, 'x'));
  CriteoTsv after_garbage(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(after_garbage.load_how(), How::built);
  EXPECT_EQ(read_scrambled(after_garbage), reference);

  overwrite_at(file, 8, std::uint32_t{99});  // the header's format version
  EXPECT_THAT(why_refused(file, dir), HasSubstr("format version 99"));
  CriteoTsv after_version(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(after_version.load_how(), How::built);
  EXPECT_EQ(read_scrambled(after_version), reference);
}

TEST(CtrCache, AHeaderWhoseCountOverrunsTheFileIsRefused) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(50, 1));
  const fs::path file = CriteoTsv(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0}).cache_file();
  // A count whose sections' sizes wrap around (the header's count is at byte 24).
  overwrite_at(file, 24, std::int64_t{709490156681136600});
  EXPECT_THAT(why_refused(file, dir), HasSubstr("damaged (counts)"));
  CriteoTsv rebuilt(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(rebuilt.load_how(), How::built);
  EXPECT_EQ(read_scrambled(rebuilt), parsed_examples(dir.file("f.tsv")));
}

TEST(CtrCache, SomethingElseAtTheCachesNameIsLeftAndTheFileParsed) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(10, 1));
  const CtrExamples reference = parsed_examples(dir.file("f.tsv"));
  const auto key = detail::CtrCacheKey::of(dir.file("f.tsv"), 3, 3, false, 0);
  const fs::path file = detail::ctr_cache_file(dir.path(), key);
  // A folder at the cache's name; then a FIFO there, which must not block the open or the write.
  fs::create_directory(file);
  CriteoTsv beside_folder(options_for(dir.file("f.tsv"), dir.path()), {"train", 0});
  EXPECT_EQ(beside_folder.load_how(), How::parsed);
  EXPECT_EQ(read_scrambled(beside_folder), reference);
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  CriteoTsv beside_fifo(options_for(dir.file("f.tsv"), dir.path()), {"train", 0});
  EXPECT_EQ(beside_fifo.load_how(), How::parsed);
  EXPECT_EQ(read_scrambled(beside_fifo), reference);
  fs::remove(file);
  // A folder at the lock file's name (the earlier loads made the file): no lock to take, parsed.
  fs::remove(file.string() + ".lock");
  fs::create_directory(file.string() + ".lock");
  CriteoTsv beside_lock_folder(options_for(dir.file("f.tsv"), dir.path()), {"train", 0});
  EXPECT_EQ(beside_lock_folder.load_how(), How::parsed);
  EXPECT_EQ(read_scrambled(beside_lock_folder), reference);
}

TEST(CtrCache, ASourceRewrittenWhileItIsParsedIsNotCached) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(10, 1));
  const auto key = detail::CtrCacheKey::of(dir.file("f.tsv"), 3, 3, false, 0);
  detail::CriteoLoadReport report;
  auto parse_while_rewriting = [&](detail::CriteoLoadReport&) {
    write_text(dir.file("f.tsv"), tsv_lines(11, 1));
    return detail::CtrColumns(3, 3);
  };
  const detail::CachedCtrColumns loaded =
      detail::load_ctr_cached(dir.file("cache"), key, parse_while_rewriting, report);
  EXPECT_EQ(loaded.how, How::parsed);
  EXPECT_THAT(loaded.why_parsed, HasSubstr("changed while it was parsed"));
  EXPECT_TRUE(cache_files(dir.file("cache")).empty());
}

TEST(CtrCache, AnAbandonedTemporaryFileIsRemovedByTheNextBuild) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(10, 1));
  const auto key = detail::CtrCacheKey::of(dir.file("f.tsv"), 3, 3, false, 0);
  fs::create_directories(dir.file("cache"));
  // What AtomicFile leaves when its process is killed while writing.
  const std::string name = detail::ctr_cache_file(dir.file("cache"), key).filename().string();
  const fs::path abandoned = fs::path(dir.file("cache")) / ("." + name + ".tmp-Ab12Cd");
  write_text(abandoned.string(), std::string(10000, 'x'));
  CriteoTsv built(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
  EXPECT_EQ(built.load_how(), How::built);
  EXPECT_FALSE(fs::exists(abandoned));
}

TEST(CtrCache, ACacheThatCannotBeWrittenLeavesTheParsedColumnsInMemory) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(3000, 1));
  const auto key = detail::CtrCacheKey::of(dir.file("f.tsv"), 3, 3, false, 0);
  detail::CriteoLayout layout;
  layout.num_integer = 3;
  layout.num_categorical = 3;
  layout.integer_names = {"I1", "I2", "I3"};
  layout.categorical_names = {"C1", "C2", "C3"};
  detail::CriteoLoadReport report;
  const detail::CtrColumns parsed = detail::read_criteo_file(dir.file("f.tsv"), layout, {}, report);
  // The cache file (about 40 KB) cannot grow past 16 KB, as on a full disk: writes beyond fail
  // with EFBIG (SIGXFSZ ignored). Nothing in the window below writes any other file.
  struct rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 16 * 1024;
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::optional<detail::CachedCtrColumns> loaded;
  std::string error;
  try {
    loaded = detail::load_ctr_cached(dir.file("cache"), key, [&](detail::CriteoLoadReport&) { return parsed; }, report);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous_handler);
  ASSERT_TRUE(loaded.has_value()) << error;
  EXPECT_EQ(loaded->how, How::parsed);
  EXPECT_THAT(loaded->why_parsed, HasSubstr("cannot be written"));
  EXPECT_EQ(loaded->parsed.labels, parsed.labels);
  EXPECT_EQ(loaded->parsed.categoricals, parsed.categoricals);
  EXPECT_TRUE(cache_files(dir.file("cache")).empty());
  for (const auto& entry : fs::directory_iterator(dir.file("cache"))) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr(".tmp-"))) << "a temporary file is left";
  }
}

TEST(CtrCache, AFolderThatCannotBeMadeFallsBackToParsing) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(10, 1));
  write_text(dir.file("a_file"), "not a folder");
  CriteoTsv fallback(options_for(dir.file("f.tsv"), dir.file("a_file/cache")), {"train", 0});
  EXPECT_EQ(fallback.load_how(), How::parsed);
  EXPECT_EQ(read_scrambled(fallback), parsed_examples(dir.file("f.tsv")));
}

TEST(CtrCache, LoadsRacingOnOneCacheBuildItOnce) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(3000, 1));
  const CtrExamples reference = parsed_examples(dir.file("f.tsv"));
  // Threads open the lock file each on their own, so flock() keeps them apart as it keeps
  // processes apart.
  constexpr int kLoads = 4;
  std::vector<How> how(kLoads);
  std::vector<CtrExamples> seen(kLoads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kLoads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kLoads) std::this_thread::yield();
      CriteoTsv dataset(options_for(dir.file("f.tsv"), dir.file("cache")), {"train", 0});
      how[static_cast<std::size_t>(t)] = dataset.load_how();
      seen[static_cast<std::size_t>(t)] = read_scrambled(dataset);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(std::count(how.begin(), how.end(), How::built), 1);
  EXPECT_EQ(std::count(how.begin(), how.end(), How::mapped), kLoads - 1);
  for (const CtrExamples& e : seen) EXPECT_EQ(e, reference);
  EXPECT_EQ(cache_files(dir.file("cache")).size(), 1u);
}

TEST(CtrCache, ALockHeldTooLongIsAnErrorNamingTheLockFile) {
  TempDir dir;
  write_text(dir.file("f.tsv"), tsv_lines(10, 1));
  const auto key = detail::CtrCacheKey::of(dir.file("f.tsv"), 3, 3, false, 0);
  const fs::path lock_path = detail::ctr_cache_file(dir.path(), key).string() + ".lock";
  const int held = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  bool parsed = false;
  detail::CriteoLoadReport report;
  try {
    detail::load_ctr_cached(dir.path(), key, [&](detail::CriteoLoadReport&) {
      parsed = true;
      return detail::CtrColumns(3, 3);
    }, report, /*lock_timeout_s=*/0.2);
    ADD_FAILURE() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(lock_path.string()));
    EXPECT_THAT(e.what(), HasSubstr("another process building it"));
  }
  EXPECT_FALSE(parsed);
  ::close(held);
}

}  // namespace
}  // namespace aiacc::data
