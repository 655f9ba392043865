// `criteo_tsv`: click-through data in the Criteo format, one example per line, tab-separated:
//   label (0/1), I integer columns (signed decimal, may be empty), C categorical columns (1-8 hex
//   digits, normally 8 lowercase, either case accepted; empty = missing); LF or CRLF line ends,
//   the final newline optional; plain or gzip'd. I and C come from the options (Criteo: 13 + 26,
//   the flights data of tools/flights: 5 + 3).
//
// Batches follow the CTR contract (data/detail/ctr_columns.h): inputs [N, I] f32 holding
// log1p(max(x, 0)) of each integer (missing and negative: 0), labels [N] f32 0/1, and one
// SparseField per categorical column with exactly one id per example: the 32-bit value as a
// non-negative int64, or -1 when missing. spec(): Task::binary, example_shape [I], the field names.
//
// A split reads one file (train_file / test_file) or several (train_files / test_files: paths
// or glob patterns, each pattern's files in natural order, day_2 before day_10, its folders and
// column-cache files left out), their examples concatenated in the order given, as one file
// made of them would read. A file is read once: naming it twice, through a link too, is an error.
//
// The split's files are loaded whole at construction, compactly: 1 + 4*I + 4*C + ceil(C/8) bytes
// per example (Criteo: 161 bytes, so Kaggle's 45.8M lines take ~7.4 GB; flights: 34 bytes).
// Without cache_dir every process parses the files into its own memory. With it, each file's
// parsed columns are written once to a cache file that every process maps read-only
// (data/detail/ctr_cache.h): a host's workers share one copy in the page cache, later starts do
// not parse, and a file larger than memory is paged from disk as batches touch it (slowly: the
// shuffled order reads it at random).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/detail/criteo_file.h"
#include "data/detail/ctr_cache.h"

namespace aiacc::data {

class CriteoTsv final : public Dataset {
 public:
  struct Options {
    std::string train_file;
    std::string test_file;
    std::vector<std::string> train_files;
    std::vector<std::string> test_files;
    std::int64_t num_integer = 13;
    std::int64_t num_categorical = 26;
    std::vector<std::string> categorical_names;
    std::string malformed = "fail";
    std::int64_t limit = 0;
    std::int64_t parse_threads = 0;
    std::string cache_dir;

    template <class V>
    void visit(V& v) {
      v.field("train_file", train_file, "TSV file of the train split (plain or .gz); required when "
              "the train split uses criteo_tsv");
      v.field("test_file", test_file, "TSV file of the test split; required when the test split uses it");
      v.field("train_files", train_files, "instead of train_file: several TSV files (plain or .gz) or glob "
              "patterns (day_*.gz: its files in natural order, day_2 before day_10), read as one file made of them "
              "in this order");
      v.field("test_files", test_files, "instead of test_file: several TSV files or glob patterns");
      v.field("num_integer", num_integer, "integer columns after the label (Criteo: 13)",
              config::in_range<std::int64_t>(0, 10000));
      v.field("num_categorical", num_categorical, "categorical (hex) columns after the integers (Criteo: 26)",
              config::in_range<std::int64_t>(0, 10000));
      v.field("categorical_names", categorical_names, "names of the categorical fields, as models see "
              "them (empty: C1..Cn)");
      v.field("malformed", malformed, "a malformed line: fail (stop at the first, naming file and "
              "line) or skip (count them, log the first few)", config::one_of({"fail", "skip"}));
      v.field("limit", limit, "use only the first N valid lines (0: all; over several files, of all of them "
              "in order); for quick runs",
              config::at_least<std::int64_t>(0));
      v.field("parse_threads", parse_threads, "threads parsing the file (0: OpenMP's default)",
              config::in_range<std::int64_t>(0, 1024));
      v.field("cache_dir", cache_dir, "folder for a parsed copy of each file (empty: parse at every start). The "
              "first start writes <file name>.<key>.ctrcache there; later starts, and the other workers of a host, "
              "map it read-only instead of parsing: one copy in memory per host, shared by its workers. Rebuilt "
              "when the file or these options change");
    }
    // Checks that span fields: names match the column count, are non-empty and distinct; at
    // least one feature column; not both a split's file and its files.
    void validate(const config::Node& node) const;
  };

  // Loads the split's files (DataError naming file and line, see detail::read_criteo_file) and
  // logs a line for each with the speed and, with malformed: skip, the skipped lines. ConfigError
  // for an unknown split, when the split's file is not set, when a pattern matches no file, and
  // when a file is missing, empty or not a regular file (check_input_files).
  CriteoTsv(const Options& options, const DatasetContext& context);

  // The split's files, patterns expanded (key "data.<split>.criteo_tsv.train_files[i]" for
  // entry i); ConfigError for an unknown split, when none is set, when a pattern matches no file
  // and when a file is named twice.
  static std::vector<InputFile> input_files(const Options& options, const DatasetContext& context);

  InputSpec spec() const override;
  std::int64_t size() const override { return starts_.back(); }
  // Thread-safe (immutable after construction).
  void read(std::span<const std::int64_t> indices, Batch& batch) override;

  // The files read (a limit reached early leaves the later ones out), in order.
  std::size_t num_files() const { return files_.size(); }
  const std::string& path(std::size_t file = 0) const { return files_.at(file).path; }
  const detail::CriteoLoadReport& load_report(std::size_t file = 0) const { return files_.at(file).report; }
  // How a file's examples were had: parsed into memory (no cache_dir, or the cache could not be
  // written), parsed and cached ("built"), or mapped from an existing cache.
  detail::CachedCtrColumns::How load_how(std::size_t file = 0) const { return files_.at(file).data.how; }
  // A file's cache file (with cache_dir; empty without).
  const std::filesystem::path& cache_file(std::size_t file = 0) const { return files_.at(file).data.file; }

 private:
  struct File {
    std::string path;
    detail::CriteoLoadReport report;
    detail::CachedCtrColumns data;
  };
  // Loads `path` (at most `limit` examples when positive) into a new element of files_ and logs it.
  void load_file(const std::string& path, const Options& options, const DatasetContext& context, std::int64_t limit);

  detail::CriteoLayout layout_;
  std::vector<File> files_;
  std::vector<detail::CtrColumnsView> views_;  // of files_, in order
  std::vector<std::int64_t> starts_{0};        // file f's first example; the last: size()
};

// The field names: `names` when given, else C1..C<count>.
std::vector<std::string> default_field_names(const std::vector<std::string>& names, std::int64_t count);

}  // namespace aiacc::data
