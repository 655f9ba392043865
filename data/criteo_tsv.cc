// The criteo_tsv dataset: option checks, its files (patterns expanded), loading each through
// detail::read_criteo_file or its column cache, the load log.
#include "data/criteo_tsv.h"

#include <glob.h>
#include <sys/stat.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/log.h"

namespace aiacc::data {

std::vector<std::string> default_field_names(const std::vector<std::string>& names, std::int64_t count) {
  if (!names.empty()) return names;
  std::vector<std::string> result;
  for (std::int64_t c = 1; c <= count; ++c) result.push_back(fmt::format("C{}", c));
  return result;
}

void CriteoTsv::Options::validate(const config::Node& node) const {
  if (num_integer + num_categorical == 0) node.fail("num_integer and num_categorical are both 0: no features");
  if (!train_file.empty() && !train_files.empty()) {
    node.child("train_files").fail("train_file is set too: give the train split's files in one of them");
  }
  if (!test_file.empty() && !test_files.empty()) {
    node.child("test_files").fail("test_file is set too: give the test split's files in one of them");
  }
  if (categorical_names.empty()) return;
  const config::Node names = node.child("categorical_names");
  if (static_cast<std::int64_t>(categorical_names.size()) != num_categorical) {
    names.fail(fmt::format("{} names for num_categorical = {} columns", categorical_names.size(), num_categorical));
  }
  std::set<std::string> seen;
  for (const std::string& name : categorical_names) {
    if (name.empty()) names.fail("a name is empty");
    if (!seen.insert(name).second) names.fail(fmt::format("'{}' appears twice", name));
  }
}

namespace {

// The fetch script's output folder (its default: data-cache/flights) gets a hint when missing.
std::string missing_hint(const std::string& path) {
  if (std::filesystem::path(path).parent_path().filename() == "flights") {
    return "make the flights data with tools/flights/fetch_flights.sh";
  }
  return {};
}

bool is_pattern(const std::string& entry) { return entry.find_first_of("*?[") != std::string::npos; }

// What glob(3) could not read while expanding (other than a folder that does not exist): its
// error callback takes no context, and patterns are expanded on one thread at a time.
thread_local std::string g_glob_error;

int record_glob_error(const char* path, int error) {
  if (error != ENOENT && error != ENOTDIR && g_glob_error.empty()) {
    g_glob_error = fmt::format("{}: {}", path, std::strerror(error));
  }
  return 0;  // go on with the folders that can be read
}

// A file this dataset's column cache keeps beside its caches, which a pattern over a folder
// holding both must not take for data.
bool is_cache_file(const std::string& path) {
  return path.ends_with(".ctrcache") || path.ends_with(".ctrcache.lock") || path.ends_with(".ctrcache.users");
}

// The files a glob pattern matches, in natural order (day_2 before day_10: strverscmp), folders
// and column-cache files left out; ConfigError naming `key` when it matches none.
std::vector<std::string> expand(const std::string& pattern, const std::string& key) {
  glob_t matches{};
  g_glob_error.clear();
  const int status = ::glob(pattern.c_str(), GLOB_MARK | GLOB_NOSORT, record_glob_error, &matches);
  std::vector<std::string> paths;
  for (std::size_t i = 0; status == 0 && i < matches.gl_pathc; ++i) {
    const std::string path = matches.gl_pathv[i];
    if (!path.ends_with('/') && !is_cache_file(path)) paths.push_back(path);
  }
  ::globfree(&matches);
  if (status == GLOB_NOSPACE) throw ConfigError(fmt::format("{}: {}: out of memory expanding it", key, pattern));
  if (paths.empty()) {
    std::error_code ec;
    const std::string where = std::filesystem::path(pattern).is_relative()
                                  ? fmt::format("relative to the working directory {}",
                                                std::filesystem::current_path(ec).string())
                                  : std::string();
    const std::string why = g_glob_error.empty() ? where : (where.empty() ? "" : where + "; ") + g_glob_error;
    throw ConfigError(fmt::format("{}: {} matches no file{}", key, pattern, why.empty() ? "" : " (" + why + ")"));
  }
  std::sort(paths.begin(), paths.end(),
            [](const std::string& a, const std::string& b) { return ::strverscmp(a.c_str(), b.c_str()) < 0; });
  return paths;
}

// The files named so far, by identity (device and inode: a file reached through a link or
// another spelling of its path is the same file), each with the key that named it first.
class NamedFiles {
 public:
  // The key that named `path` before, or "" (then it is recorded as named by `key`).
  std::string named_before(const std::string& path, const std::string& key) {
    struct stat st{};
    if (::stat(path.c_str(), &st) == 0) {
      const auto [at, added] = by_inode_.emplace(std::make_pair(st.st_dev, st.st_ino), key);
      return added ? std::string() : at->second;
    }
    // Missing or unreadable: check_input_files says so; meanwhile its spelling identifies it.
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    const auto [at, added] = by_path_.emplace(ec ? path : absolute.lexically_normal().string(), key);
    return added ? std::string() : at->second;
  }

 private:
  std::map<std::pair<dev_t, ino_t>, std::string> by_inode_;
  std::map<std::string, std::string> by_path_;
};

}  // namespace

std::vector<InputFile> CriteoTsv::input_files(const Options& options, const DatasetContext& context) {
  check_split(context, "criteo_tsv");
  const bool train = context.split == "train";
  const std::string one = train ? "train_file" : "test_file", many = train ? "train_files" : "test_files";
  const std::string& path = train ? options.train_file : options.test_file;
  const std::vector<std::string>& entries = train ? options.train_files : options.test_files;
  if (path.empty() && entries.empty()) {
    throw ConfigError(fmt::format("data.{0}.criteo_tsv.{1} is not set (the {0} split's TSV file; the {0} split reads "
                                  "{1}, or several files from {2})", context.split, one, many));
  }
  if (entries.empty()) return {{fmt::format("data.{}.criteo_tsv.{}", context.split, one), path, missing_hint(path)}};
  std::vector<InputFile> files;
  NamedFiles named;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string key = fmt::format("data.{}.criteo_tsv.{}[{}]", context.split, many, i);
    const std::vector<std::string> paths = is_pattern(entries[i]) ? expand(entries[i], key)
                                                                  : std::vector<std::string>{entries[i]};
    for (const std::string& p : paths) {
      if (const std::string before = named.named_before(p, key); !before.empty()) {
        throw ConfigError(fmt::format("{}: {} is named by {} already: each file is read once", key, p, before));
      }
      files.push_back({key, p, missing_hint(p)});
    }
  }
  return files;
}

CriteoTsv::CriteoTsv(const Options& options, const DatasetContext& context) {
  const std::vector<InputFile> inputs = input_files(options, context);
  check_input_files(inputs);
  layout_.num_integer = static_cast<int>(options.num_integer);
  layout_.num_categorical = static_cast<int>(options.num_categorical);
  for (std::int64_t i = 1; i <= options.num_integer; ++i) layout_.integer_names.push_back(fmt::format("I{}", i));
  layout_.categorical_names = default_field_names(options.categorical_names, options.num_categorical);
  files_.reserve(inputs.size());
  for (std::size_t f = 0; f < inputs.size(); ++f) {
    const std::int64_t left = options.limit > 0 ? options.limit - starts_.back() : 0;
    if (options.limit > 0 && left == 0) {
      log::get("data")->info("criteo_tsv: the first {} examples (limit) come from the first {} of {} files: {} and "
                             "later ones are not read", options.limit, f, inputs.size(), inputs[f].path);
      break;
    }
    load_file(inputs[f].path, options, context, left);
    views_.push_back(files_.back().data.view());
    starts_.push_back(starts_.back() + views_.back().size());
  }
  if (files_.size() > 1) {
    log::get("data")->info("criteo_tsv: the {} split's {} examples from {} files", context.split, starts_.back(),
                           files_.size());
  }
}

void CriteoTsv::load_file(const std::string& path, const Options& options, const DatasetContext& context,
                          std::int64_t limit) {
  File& file = files_.emplace_back();
  file.path = path;
  detail::CriteoReadOptions read_options;
  read_options.skip_malformed = options.malformed == "skip";
  read_options.limit = limit;
  read_options.threads = static_cast<int>(options.parse_threads);
  auto parse = [&](detail::CriteoLoadReport& report) {
    return detail::read_criteo_file(path, layout_, read_options, report);
  };
  auto logger = log::get("data");
  if (options.cache_dir.empty()) {
    file.data.parsed = parse(file.report);
  } else {
    const auto key = detail::CtrCacheKey::of(path, layout_.num_integer, layout_.num_categorical,
                                             read_options.skip_malformed, limit);
    file.data = detail::load_ctr_cached(options.cache_dir, key, parse, file.report);
    if (file.data.how == detail::CachedCtrColumns::How::parsed) {
      logger->warn("criteo_tsv {}: not using the column cache {} (data.{}.criteo_tsv.cache_dir): {}; the file is "
                   "parsed into this process's memory", path, file.data.file.string(), context.split,
                   file.data.why_parsed);
    }
  }
  const detail::CtrColumnsView view = file.data.view();
  const detail::CriteoLoadReport& report = file.report;
  const double mb_in_memory =
      static_cast<double>(view.bytes_per_example() * static_cast<std::size_t>(view.size())) / 1e6;
  if (file.data.how == detail::CachedCtrColumns::How::mapped) {
    logger->info("criteo_tsv {}: {} examples from {} lines, mapped from the column cache {} in {:.3f} s{} ({:.1f} "
                 "MB, shared by this host's processes)", path, view.size(), report.lines, file.data.file.string(),
                 report.seconds,
                 file.data.waited_s >= 0.01
                     ? fmt::format(", {:.2f} s of them waiting for another process building it", file.data.waited_s)
                     : std::string(),
                 mb_in_memory);
  } else {
    const double mb = static_cast<double>(report.bytes) / 1e6;
    const double seconds = std::max(report.seconds, 1e-9);
    logger->info("criteo_tsv {}: {} examples from {} lines, {:.1f} MB in {:.2f} s ({:.0f} MB/s, {:.2f}M lines/s, "
                 "{} threads); {:.1f} MB {}",
                 path, view.size(), report.lines, mb, report.seconds, mb / seconds,
                 static_cast<double>(report.lines) / seconds / 1e6, report.threads, mb_in_memory,
                 file.data.how == detail::CachedCtrColumns::How::built
                     ? fmt::format("written to the column cache {} and mapped from it", file.data.file.string())
                     : std::string("in memory"));
  }
  if (report.malformed > 0) {
    logger->warn("criteo_tsv {}: skipped {} malformed line{}{} (first at line{} {}; line {}: {})", path,
                 report.malformed, report.malformed == 1 ? "" : "s",
                 file.data.how == detail::CachedCtrColumns::How::mapped ? " when its column cache was built" : "",
                 report.malformed_lines.size() == 1 ? "" : "s", fmt::join(report.malformed_lines, ", "),
                 report.malformed_lines.empty() ? 0 : report.malformed_lines.front(), report.first_malformed);
  }
}

InputSpec CriteoTsv::spec() const { return detail::ctr_spec(layout_.num_integer, layout_.categorical_names); }

void CriteoTsv::read(std::span<const std::int64_t> indices, Batch& batch) {
  detail::read_ctr_batch(views_, starts_, indices, batch);
}

AIACC_REGISTER_DATASET("criteo_tsv", CriteoTsv);

}  // namespace aiacc::data
