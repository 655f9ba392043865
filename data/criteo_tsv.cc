// The criteo_tsv dataset: option checks, loading through detail::read_criteo_file, the load log.
#include "data/criteo_tsv.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
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

std::vector<InputFile> CriteoTsv::input_files(const Options& options, const DatasetContext& context) {
  check_split(context, "criteo_tsv");
  const bool train = context.split == "train";
  const std::string key = fmt::format("data.{}.criteo_tsv.{}", context.split, train ? "train_file" : "test_file");
  const std::string& path = train ? options.train_file : options.test_file;
  if (path.empty()) {
    throw ConfigError(fmt::format("{} is not set (the {} split's TSV file; the {} split reads {})", key,
                                  context.split, context.split, train ? "train_file" : "test_file"));
  }
  // The fetch script's output folder (its default: data-cache/flights).
  std::string hint;
  if (std::filesystem::path(path).parent_path().filename() == "flights") {
    hint = "make the flights data with tools/flights/fetch_flights.sh";
  }
  return {{key, path, hint}};
}

CriteoTsv::CriteoTsv(const Options& options, const DatasetContext& context) {
  const std::vector<InputFile> files = input_files(options, context);
  check_input_files(files);
  path_ = files.front().path;
  layout_.num_integer = static_cast<int>(options.num_integer);
  layout_.num_categorical = static_cast<int>(options.num_categorical);
  for (std::int64_t i = 1; i <= options.num_integer; ++i) layout_.integer_names.push_back(fmt::format("I{}", i));
  layout_.categorical_names = default_field_names(options.categorical_names, options.num_categorical);

  detail::CriteoReadOptions read_options;
  read_options.skip_malformed = options.malformed == "skip";
  read_options.limit = options.limit;
  read_options.threads = static_cast<int>(options.parse_threads);
  auto parse = [&](detail::CriteoLoadReport& report) { return detail::read_criteo_file(path_, layout_, read_options, report); };
  auto logger = log::get("data");
  if (options.cache_dir.empty()) {
    data_.parsed = parse(report_);
  } else {
    const auto key = detail::CtrCacheKey::of(path_, layout_.num_integer, layout_.num_categorical,
                                             read_options.skip_malformed, options.limit);
    data_ = detail::load_ctr_cached(options.cache_dir, key, parse, report_);
    if (data_.how == detail::CachedCtrColumns::How::parsed) {
      logger->warn("criteo_tsv {}: not using the column cache {} (data.{}.criteo_tsv.cache_dir): {}; the file is "
                   "parsed into this process's memory", path_, data_.file.string(), context.split, data_.why_parsed);
    }
  }
  view_ = data_.view();

  const double mb_in_memory = static_cast<double>(view_.bytes_per_example() * static_cast<std::size_t>(view_.size())) / 1e6;
  if (data_.how == detail::CachedCtrColumns::How::mapped) {
    logger->info("criteo_tsv {}: {} examples from {} lines, mapped from the column cache {} in {:.3f} s ({:.1f} MB, "
                 "shared by this host's processes)", path_, view_.size(), report_.lines, data_.file.string(), report_.seconds,
                 mb_in_memory);
  } else {
    const double mb = static_cast<double>(report_.bytes) / 1e6;
    const double seconds = std::max(report_.seconds, 1e-9);
    logger->info("criteo_tsv {}: {} examples from {} lines, {:.1f} MB in {:.2f} s ({:.0f} MB/s, {:.2f}M lines/s, "
                 "{} threads); {:.1f} MB {}",
                 path_, view_.size(), report_.lines, mb, report_.seconds, mb / seconds,
                 static_cast<double>(report_.lines) / seconds / 1e6, report_.threads, mb_in_memory,
                 data_.how == detail::CachedCtrColumns::How::built
                     ? fmt::format("written to the column cache {} and mapped from it", data_.file.string())
                     : std::string("in memory"));
  }
  if (report_.malformed > 0) {
    logger->warn("criteo_tsv {}: skipped {} malformed line{}{} (first at line{} {}; line {}: {})", path_,
                 report_.malformed, report_.malformed == 1 ? "" : "s",
                 data_.how == detail::CachedCtrColumns::How::mapped ? " when its column cache was built" : "",
                 report_.malformed_lines.size() == 1 ? "" : "s", fmt::join(report_.malformed_lines, ", "),
                 report_.malformed_lines.empty() ? 0 : report_.malformed_lines.front(), report_.first_malformed);
  }
}

InputSpec CriteoTsv::spec() const { return detail::ctr_spec(layout_.num_integer, layout_.categorical_names); }

void CriteoTsv::read(std::span<const std::int64_t> indices, Batch& batch) {
  detail::read_ctr_batch(view_, indices, batch);
}

AIACC_REGISTER_DATASET("criteo_tsv", CriteoTsv);

}  // namespace aiacc::data
