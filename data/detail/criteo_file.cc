// Chunked, parallel loading of Criteo TSV. Each chunk is cut at its last newline (the partial
// line carries over to the next chunk), split into one piece per thread at line boundaries, and
// the pieces are parsed independently; merging them in order restores file order and the global
// line numbers that messages need.
#include "data/detail/criteo_file.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "data/detail/data_file.h"

namespace aiacc::data::detail {
namespace {

// The read buffer: uninitialised bytes (a zero-filled vector would write every byte once more).
class ChunkBuffer {
 public:
  explicit ChunkBuffer(std::size_t size) : data_(std::make_unique_for_overwrite<char[]>(size)), size_(size) {}
  char* data() { return data_.get(); }
  std::size_t size() const { return size_; }
  // Doubles the size, keeping the first `keep` bytes.
  void grow(std::size_t keep) {
    auto bigger = std::make_unique_for_overwrite<char[]>(2 * size_);
    std::memcpy(bigger.get(), data_.get(), keep);
    data_ = std::move(bigger);
    size_ *= 2;
  }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_;
};

// A chunk is split into pieces of at least this many bytes (one per thread at most): below it,
// waking a thread costs more than the parse.
constexpr std::size_t kMinPieceBytes = std::size_t{256} << 10;

// Splits `text` (whole lines) into at most `count` pieces of whole lines.
std::vector<std::string_view> split_lines(std::string_view text, std::size_t count) {
  std::vector<std::string_view> pieces;
  std::size_t begin = 0;
  for (std::size_t k = 1; k <= count && begin < text.size(); ++k) {
    std::size_t end = text.size();
    if (k < count) {
      const std::size_t target = std::max(begin, text.size() * k / count);
      const std::size_t newline = text.find('\n', target);
      end = newline == std::string_view::npos ? text.size() : newline + 1;
    }
    pieces.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return pieces;
}

class ChunkParser {
 public:
  ChunkParser(const std::string& path, const CriteoLayout& layout, const CriteoReadOptions& options,
              CriteoLoadReport& report, CtrColumns& out)
      : path_(path), layout_(layout), options_(options), report_(report), out_(out) {}

  // Parses the whole lines of `text` and appends them; returns false once `limit` is reached.
  bool parse(std::string_view text) {
    const bool limited = options_.limit > 0;
    // With a limit, one sequential piece stops exactly at the limit-th example, so nothing
    // after it (malformed or not) is looked at.
    const std::size_t count =
        limited ? 1 : std::clamp<std::size_t>(text.size() / kMinPieceBytes, 1, static_cast<std::size_t>(report_.threads));
    const std::vector<std::string_view> pieces = split_lines(text, count);
    // The parts are reused from chunk to chunk: fresh ones would page-fault their memory in
    // again every chunk (measured: a fifth of the load time).
    parts_.resize(std::max(parts_.size(), pieces.size()));
    ParseLimits limits;
    limits.stop_at_malformed = !options_.skip_malformed;
    if (limited) limits.max_examples = options_.limit - out_.size();
    std::vector<std::exception_ptr> errors(pieces.size());
    const auto n = static_cast<int>(pieces.size());
#pragma omp parallel for schedule(static, 1) num_threads(n) if (n > 1)
    for (int k = 0; k < n; ++k) {
      try {  // nothing may escape an OpenMP region; only bad_alloc can happen here
        ParsedLines& part = parts_[static_cast<std::size_t>(k)];
        part.columns.num_integer = layout_.num_integer;
        part.columns.num_categorical = layout_.num_categorical;
        part.columns.truncate(0);
        part.lines = part.malformed_count = 0;
        part.malformed.clear();
        parse_criteo_lines(pieces[static_cast<std::size_t>(k)], layout_, limits, part);
      } catch (...) {
        errors[static_cast<std::size_t>(k)] = std::current_exception();
      }
    }
    for (const auto& error : errors) {
      if (error) std::rethrow_exception(error);
    }
    for (std::size_t k = 0; k < pieces.size(); ++k) merge(parts_[k]);
    return !(limited && out_.size() >= options_.limit);
  }

 private:
  void merge(const ParsedLines& part) {
    if (part.malformed_count > 0) {
      const MalformedLine& first = part.malformed.front();
      if (!options_.skip_malformed) {
        throw DataError(fmt::format("{}:{}: {}", path_, report_.lines + first.line + 1, first.message));
      }
      if (report_.malformed == 0) report_.first_malformed = first.message;
      report_.malformed += part.malformed_count;
      for (const MalformedLine& m : part.malformed) {
        if (report_.malformed_lines.size() < 5) report_.malformed_lines.push_back(report_.lines + m.line + 1);
      }
    }
    report_.lines += part.lines;
    out_.append(part.columns);
  }

  const std::string& path_;
  const CriteoLayout& layout_;
  const CriteoReadOptions& options_;
  CriteoLoadReport& report_;
  CtrColumns& out_;
  std::vector<ParsedLines> parts_;  // one per piece of the current chunk
};

}  // namespace

CtrColumns read_criteo_file(const std::string& path, const CriteoLayout& layout,
                            const CriteoReadOptions& options, CriteoLoadReport& report) {
  const auto started = std::chrono::steady_clock::now();
  DataFile file(path);
  const std::uint64_t file_bytes = file.file_bytes();

  report = CriteoLoadReport{};
  report.threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  CtrColumns out(layout.num_integer, layout.num_categorical);
  ChunkParser parser(path, layout, options, report, out);

  // No bigger than the file needs (small files are common in tests and quick runs) nor, with a
  // limit, than its lines probably take; a gzip file may expand several times.
  std::size_t chunk_bytes = std::max<std::size_t>(options.chunk_bytes, 1);
  chunk_bytes = std::min<std::size_t>(chunk_bytes, std::max<std::uintmax_t>(file_bytes * (file.compressed() ? 8 : 1) + 1, 4096));
  if (options.limit > 0) {
    chunk_bytes = std::min<std::size_t>(chunk_bytes, std::max<std::size_t>(static_cast<std::size_t>(options.limit) * 256, 4096));
  }
  ChunkBuffer buffer(chunk_bytes);
  std::size_t held = 0;  // bytes at the front of `buffer`: the unfinished line of the last chunk
  bool reserved = false;
  // A line no valid one comes near (integers of 20 digits, 8 hex digits a category, generous
  // room for leading zeros) is not buffered whole: a file without newlines would otherwise be
  // held in memory to its end before it is found malformed.
  const std::size_t max_line = 256 + 32 * static_cast<std::size_t>(layout.num_integer) +
                               16 * static_cast<std::size_t>(layout.num_categorical);
  bool discarding = false;  // dropping the rest of an overlong line, up to its newline
  const auto overlong_line = [&] {
    const std::int64_t line = report.lines + 1;
    const std::string message = fmt::format("a line longer than {} bytes: not a Criteo TSV line ({} columns: label, "
                                            "{} integer, {} categorical)",
                                            max_line, layout.columns(), layout.num_integer, layout.num_categorical);
    if (!options.skip_malformed) throw DataError(fmt::format("{}:{}: {}", path, line, message));
    if (report.malformed == 0) report.first_malformed = message;
    ++report.malformed;
    if (report.malformed_lines.size() < 5) report.malformed_lines.push_back(line);
    ++report.lines;
    discarding = true;
    held = 0;
  };
  for (bool more = true, eof = false; more && !eof;) {
    if (held == buffer.size()) buffer.grow(held);  // a line longer than a chunk
    // A cut or trailed gzip stream throws here, before what it left is parsed.
    const std::size_t got = file.read(buffer.data() + held, buffer.size() - held);
    eof = got == 0;
    report.bytes += static_cast<std::uint64_t>(got);
    std::size_t used = held + got;
    if (discarding) {
      const auto newline = std::string_view(buffer.data(), used).find('\n');
      if (newline == std::string_view::npos) {
        held = 0;
        continue;
      }
      std::memmove(buffer.data(), buffer.data() + newline + 1, used - newline - 1);
      used -= newline + 1;
      discarding = false;
    }
    std::size_t text_end = used;  // at the end of the file the last line needs no newline
    if (!eof) {
      const auto last = std::string_view(buffer.data(), used).rfind('\n');
      if (last == std::string_view::npos) {
        held = used;
        if (held > max_line) overlong_line();
        continue;
      }
      text_end = last + 1;
    }
    const std::int64_t before = out.size();
    more = parser.parse(std::string_view(buffer.data(), text_end));
    // After the first chunk, reserve for the whole file (from its bytes per example) so the
    // columns do not grow by doubling through gigabytes. Only for plain files: a gzip file's
    // size says little about its text.
    if (!reserved && options.limit == 0 && !file.compressed() && text_end > 0 && out.size() > before) {
      const double per_byte = static_cast<double>(out.size() - before) / static_cast<double>(text_end);
      out.reserve(static_cast<std::int64_t>(per_byte * static_cast<double>(file_bytes) * 1.02) + 1024);
      reserved = true;
    }
    std::memmove(buffer.data(), buffer.data() + text_end, used - text_end);
    held = used - text_end;
    if (held > max_line && more) overlong_line();
  }
  if (report.bytes == 0) {
    throw DataError(fmt::format("{}: empty file, expected Criteo TSV lines ({} columns: label, {} integer, "
                                "{} categorical)", path, layout.columns(), layout.num_integer,
                                layout.num_categorical));
  }
  if (out.size() == 0) {
    throw DataError(fmt::format("{}: no valid line: all {} lines are malformed (line {}: {})", path,
                                report.lines, report.malformed_lines.empty() ? 0 : report.malformed_lines[0],
                                report.first_malformed));
  }
  // Growth by doubling (no reserve, or an estimate that fell short) can leave up to half the
  // memory unused; a reserve that held leaves ~2%, not worth a copy of everything.
  if (static_cast<double>(out.labels.capacity()) > 1.1 * static_cast<double>(out.size())) out.shrink_to_fit();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace aiacc::data::detail
