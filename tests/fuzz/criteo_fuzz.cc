// Fuzz target: the Criteo TSV reader (data/detail/criteo_parser.h line parser and
// data/detail/criteo_file.h chunked, parallel, plain or gzip file loader), then a batch read of
// everything it loaded.
//
// Input: [u8 flags][u8 integer columns][u8 categorical columns][u8 chunk][TSV text].
//   flags bit 0: write the file gzip'd; bit 1: malformed: skip (else fail); bit 2: two parse
//   threads; bits 3-7: limit (0: none). chunk 0: the default 8 MiB chunks, else 1..255 bytes
//   (reaches the partial-line and growing-buffer paths).
// Properties: the file loader agrees with the line parser run over the whole text (same
// examples, same malformed count) whatever the chunking; with malformed: fail, a load that
// succeeds saw no malformed line.
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/batch.h"
#include "data/detail/criteo_file.h"
#include "data/detail/criteo_parser.h"
#include "data/detail/ctr_columns.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace aiacc;
using data::detail::CtrColumns;

bool same_columns(const CtrColumns& a, const CtrColumns& b) {
  return a.labels == b.labels && a.integers == b.integers && a.categoricals == b.categoricals &&
         a.missing == b.missing;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  fuzz::InputCursor input(data, size);
  const std::uint8_t flags = input.u8();
  data::detail::CriteoLayout layout;
  layout.num_integer = input.u8() % 16;
  layout.num_categorical = input.u8() % 40;
  if (layout.num_integer + layout.num_categorical == 0) layout.num_categorical = 1;  // as validated
  for (int i = 0; i < layout.num_integer; ++i) layout.integer_names.push_back(fmt::format("I{}", i + 1));
  for (int c = 0; c < layout.num_categorical; ++c) layout.categorical_names.push_back(fmt::format("C{}", c + 1));
  const std::uint8_t chunk = input.u8();
  const std::string text(input.rest());

  data::detail::CriteoReadOptions options;
  options.skip_malformed = (flags & 2) != 0;
  options.threads = (flags & 4) ? 2 : 1;
  options.limit = flags >> 3;
  if (chunk != 0) options.chunk_bytes = chunk;

  // The line parser over the whole text: the reference for the file loader.
  data::detail::ParsedLines direct;
  direct.columns = CtrColumns(layout.num_integer, layout.num_categorical);
  data::detail::parse_criteo_lines(text, layout, data::detail::ParseLimits{}, direct);

  const auto path = fuzz::scratch_path((flags & 1) ? "criteo.tsv.gz" : "criteo.tsv");
  fuzz::write_file(path, (flags & 1) ? fuzz::gzip(text) : text);
  fuzz::expect_input_errors([&] {
    data::detail::CriteoLoadReport report;
    const CtrColumns loaded = data::detail::read_criteo_file(path.string(), layout, options, report);
    if (!options.skip_malformed && direct.malformed_count > 0 && options.limit == 0) {
      throw fuzz::PropertyViolation("malformed: fail loaded a file with a malformed line");
    }
    if (options.limit == 0 && options.skip_malformed &&
        (!same_columns(loaded, direct.columns) || report.malformed != direct.malformed_count ||
         report.lines != direct.lines)) {
      throw fuzz::PropertyViolation("the chunked file loader and the line parser disagree");
    }
    if (options.limit > 0 && loaded.size() > options.limit) {
      throw fuzz::PropertyViolation("the loader returned more examples than its limit");
    }
    std::vector<std::int64_t> indices(static_cast<std::size_t>(loaded.size()));
    std::iota(indices.begin(), indices.end(), 0);
    Batch batch;
    data::detail::read_ctr_batch(loaded.view(), indices, batch);
  });
  return 0;
}
