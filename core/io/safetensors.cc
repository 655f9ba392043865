// safetensors writer (streaming, atomic) and validating reader.
#include "core/io/safetensors.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/io/atomic_file.h"

namespace aiacc::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

// The deepest legal header: root object -> tensor object -> shape array.
constexpr std::size_t kMaxJsonDepth = 3;
// No array in a legal header is longer than a shape (data_offsets has 2 entries).
constexpr std::size_t kMaxJsonArrayLength = Shape::kMaxRank;

bool parse_dtype_name(std::string_view name, DType& dtype) {
  static constexpr std::pair<std::string_view, DType> kNames[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"F16", DType::f16}, {"BF16", DType::bf16},
      {"I64", DType::i64}, {"I32", DType::i32}, {"U8", DType::u8}};
  for (const auto& [text, value] : kNames) {
    if (text == name) {
      dtype = value;
      return true;
    }
  }
  return false;
}

std::uint64_t load_le64(const unsigned char* bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

void store_le64(std::uint64_t value, char* bytes) {
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

void check_writable(const std::string& path, const NamedTensors& tensors) {
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    AIACC_CHECK(!name.empty() && name != kMetadataKey, "{}: invalid tensor name '{}'", path, name);
    AIACC_CHECK(names.insert(name).second, "{}: duplicate tensor name '{}'", path, name);
    AIACC_CHECK(tensor.defined(), "{}: tensor '{}' is undefined", path, name);
    AIACC_CHECK(tensor.device().is_cpu(), "{}: tensor '{}' is on {}; copy it to the CPU first",
                path, name, tensor.device().str());
  }
}

// Tracks the JSON parser's nesting so a hostile header is rejected while it is parsed: depth and
// array length limits bound the work and memory, and duplicate keys (which nlohmann would
// silently collapse to the last one) are errors.
class HeaderGuard {
 public:
  explicit HeaderGuard(const std::string& path) : path_(path) {}

  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (frames_.size() >= kMaxJsonDepth) fail("is nested deeper than the format allows");
        frames_.push_back(Frame{event == Event::array_start, 0, {}});
        break;
      case Event::key:
        if (!frames_.back().keys.insert(parsed.get<std::string>()).second) {
          fail(fmt::format("has the key '{}' twice in one object", parsed.get<std::string>()));
        }
        break;
      case Event::value: count_element(); break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        count_element();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_array;
    std::size_t length;
    std::set<std::string> keys;
  };

  void count_element() {
    if (!frames_.empty() && frames_.back().is_array &&
        ++frames_.back().length > kMaxJsonArrayLength) {
      fail(fmt::format("has an array longer than {} elements (shapes have rank <= {})",
                       kMaxJsonArrayLength, Shape::kMaxRank));
    }
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw DataError(fmt::format("{}: invalid safetensors header: the JSON {}", path_, problem));
  }

  std::string path_;
  std::vector<Frame> frames_;
};

struct Entry {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> dims;
  std::uint64_t begin;
  std::uint64_t end;
};

// Parses one tensor's {"dtype", "shape", "data_offsets"} and checks it against the buffer size.
Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& info,
                  std::uint64_t buffer_bytes) {
  auto fail = [&](const std::string& problem) {
    throw DataError(fmt::format("{}: tensor '{}': {}", path, name, problem));
  };
  if (!info.is_object()) fail("its header entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(key)) fail(fmt::format("'{}' is missing", key));
  }
  Entry entry{name, DType::f32, {}, 0, 0};
  const auto& dtype = info["dtype"];
  if (!dtype.is_string()) fail("'dtype' is not a string");
  if (!parse_dtype_name(dtype.get_ref<const std::string&>(), entry.dtype)) {
    fail(fmt::format("unsupported dtype {} (supported: F32, F64, F16, BF16, I64, I32, U8)",
                     dtype.dump()));
  }
  const auto& shape = info["shape"];
  if (!shape.is_array()) fail("'shape' is not an array");
  // Count the bytes with an overflow check at each factor: the product of hostile dimensions
  // must not wrap around to a small number that happens to match the offsets.
  std::uint64_t num_bytes = dtype_size(entry.dtype);
  // The element count of the non-zero dimensions must fit int64 as well: with a 0 among them
  // the byte count is 0 whatever the others are, but Shape::numel() multiplies them all.
  std::uint64_t nonzero_elements = 1;
  bool elements_overflow = false;
  for (const auto& dim : shape) {
    if (!dim.is_number_unsigned())
      fail(fmt::format("shape {} is not a list of non-negative integers", shape.dump()));
    std::uint64_t d = dim.get<std::uint64_t>();
    if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail(fmt::format("dimension {} is too large", d));
    }
    if (d != 0) {
      if (nonzero_elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / d) {
        elements_overflow = true;
      }
      nonzero_elements *= d;
    }
    entry.dims.push_back(static_cast<std::int64_t>(d));
    if (d != 0 && num_bytes > std::numeric_limits<std::uint64_t>::max() / d) {
      num_bytes = std::numeric_limits<std::uint64_t>::max();  // certainly larger than the file
    } else {
      num_bytes *= d;
    }
  }
  if (elements_overflow && num_bytes == 0) {
    fail(fmt::format("shape {} has a zero dimension, but the others multiply past 2^63 elements",
                     shape.dump()));
  }
  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail(fmt::format("data_offsets {} is not a pair of non-negative integers", offsets.dump()));
  }
  entry.begin = offsets[0].get<std::uint64_t>();
  entry.end = offsets[1].get<std::uint64_t>();
  if (entry.begin > entry.end) {
    fail(fmt::format("data_offsets [{}, {}] end before they begin", entry.begin, entry.end));
  }
  if (entry.end > buffer_bytes) {
    fail(fmt::format("data_offsets [{}, {}] run past the data buffer of {} bytes", entry.begin,
                     entry.end, buffer_bytes));
  }
  if (entry.end - entry.begin != num_bytes) {
    fail(fmt::format(
        "data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", entry.begin, entry.end,
        entry.end - entry.begin, shape.dump(), dtype.get_ref<const std::string&>(),
        num_bytes == std::numeric_limits<std::uint64_t>::max() ? std::string("more than 2^64")
                                                               : std::to_string(num_bytes)));
  }
  return entry;
}

Metadata parse_metadata(const std::string& path, const nlohmann::json& value) {
  if (!value.is_object()) {
    throw DataError(fmt::format("{}: __metadata__ is not a JSON object", path));
  }
  Metadata metadata;
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string()) {
      throw DataError(fmt::format("{}: __metadata__ value of '{}' is not a string", path, key));
    }
    metadata[key] = text.get<std::string>();
  }
  return metadata;
}

std::uint32_t update_crc(std::uint32_t crc, const void* data, std::size_t num_bytes) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (num_bytes > 0) {
    std::size_t piece = std::min<std::size_t>(num_bytes, std::size_t{1} << 30);
    crc = static_cast<std::uint32_t>(::crc32(crc, bytes, static_cast<uInt>(piece)));
    bytes += piece;
    num_bytes -= piece;
  }
  return crc;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
  }
  return "?";
}

const Tensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& [tensor_name, tensor] : tensors) {
    if (tensor_name == name) return &tensor;
  }
  return nullptr;
}

std::string encode_safetensors_header(const NamedTensors& tensors, const Metadata& metadata) {
  // ordered_json keeps insertion order: __metadata__ first, then the tensors as laid out, which
  // is what the reference writer emits and what makes the bytes predictable.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    std::uint64_t end = offset + tensor.num_bytes();
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", tensor.shape().dims()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a metadata value that is not UTF-8
    throw Error(fmt::format("cannot encode a safetensors header: {}", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  store_le64(text.size(), bytes.data());
  return bytes + text;
}

SafetensorsWriteResult write_safetensors(const std::string& path, const NamedTensors& tensors,
                                         const Metadata& metadata) {
  check_writable(path, tensors);
  std::string header = encode_safetensors_header(tensors, metadata);
  AtomicFile file(path);
  file.write(header);
  for (const auto& [name, tensor] : tensors) {
    if (tensor.num_bytes() > 0) file.write(tensor.raw_data(), tensor.num_bytes());
  }
  file.commit();
  return {file.bytes_written(), file.crc32()};
}

SafetensorsFile read_safetensors(const std::string& path) {
  FileDescriptor fd = open_for_reading(path);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    throw IoError(fmt::format("cannot stat {}: {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) throw DataError(fmt::format("{}: not a regular file", path));
  const auto file_bytes = static_cast<std::uint64_t>(info.st_size);
  if (file_bytes < 8) {
    throw DataError(
        fmt::format("{}: {} bytes is too short for a safetensors file", path, file_bytes));
  }
  unsigned char prefix[8];
  read_exact(fd, path, 0, prefix, sizeof prefix);
  const std::uint64_t header_bytes = load_le64(prefix);
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    throw DataError(fmt::format("{}: header size {} exceeds the limit of {} bytes (corrupt file?)",
                                path, header_bytes, kMaxSafetensorsHeaderBytes));
  }
  if (header_bytes > file_bytes - 8) {
    throw DataError(fmt::format("{}: header size {} runs past the end of the {}-byte file", path,
                                header_bytes, file_bytes));
  }
  std::string header_text(header_bytes, '\0');  // bounded by the file size, checked above
  read_exact(fd, path, 8, header_text.data(), header_text.size());
  if (header_text.empty() || header_text[0] != '{') {
    throw DataError(fmt::format("{}: the header does not start with a JSON object", path));
  }

  nlohmann::json header;
  try {
    HeaderGuard guard(path);
    header = nlohmann::json::parse(
        header_text, [&guard](int depth, nlohmann::json::parse_event_t event,
                              nlohmann::json& parsed) { return guard(depth, event, parsed); });
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: the header is not valid JSON: {}", path, e.what()));
  }
  if (!header.is_object())
    throw DataError(fmt::format("{}: the header is not a JSON object", path));

  SafetensorsFile file;
  file.num_bytes = file_bytes;
  const std::uint64_t data_start = 8 + header_bytes;
  const std::uint64_t buffer_bytes = file_bytes - data_start;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      file.metadata = parse_metadata(path, value);
    } else {
      entries.push_back(parse_entry(path, name, value, buffer_bytes));
    }
  }

  // The tensors must tile the buffer exactly: sorted by offset, each starts where the previous
  // one ended, and the last ends at the end of the file.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < expected) {
      throw DataError(fmt::format("{}: tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}'",
                                  path, e.name, e.begin, e.end, entries[i - 1].name));
    }
    if (e.begin > expected) {
      throw DataError(fmt::format("{}: bytes [{}, {}) of the data buffer belong to no tensor", path,
                                  expected, e.begin));
    }
    expected = e.end;
  }
  if (expected != buffer_bytes) {
    throw DataError(
        fmt::format("{}: {} trailing bytes after the last tensor", path, buffer_bytes - expected));
  }

  // Read in file order, so the CRC covers the file front to back.
  std::uint32_t crc = update_crc(0, prefix, sizeof prefix);
  crc = update_crc(crc, header_text.data(), header_text.size());
  header_text = std::string();  // the JSON tree holds what is still needed
  file.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor tensor = Tensor::empty(Shape(e.dims), e.dtype);
    read_exact(fd, path, data_start + e.begin, tensor.raw_data(), e.end - e.begin);
    crc = update_crc(crc, tensor.raw_data(), e.end - e.begin);
    file.tensors.emplace_back(e.name, std::move(tensor));
  }
  file.crc32 = crc;
  return file;
}

}  // namespace aiacc::io
