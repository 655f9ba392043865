// The safetensors file format (https://github.com/huggingface/safetensors, "Format"), so that a
// checkpoint written here loads with PyTorch's `safetensors.torch.load_file` under the same
// tensor names:
//   bytes [0, 8)        N: unsigned 64-bit little-endian, the header size
//   bytes [8, 8 + N)    UTF-8 JSON object, padded with spaces to a multiple of 8 bytes:
//                       {"__metadata__": {"k": "v", ...},            (optional, strings only)
//                        "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...}
//   bytes [8 + N, end)  the data buffer: tensor bytes, row-major, little-endian; data_offsets are
//                       relative to the buffer's start, and the tensors cover it exactly (no
//                       holes, no overlap, nothing after the last one).
// Supported dtypes: F32, F64, F16, BF16, I64, I32, U8 (our DType set). A 0-dim tensor has shape
// [] and one element; an empty tensor has begin == end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace aiacc::io {

// Same type as optim::NamedTensors and EmbeddingStore::save_rows()'s result.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// A header larger than this is rejected as corrupt (the reference implementation's limit).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsFile {
  NamedTensors tensors;  // in data-buffer order (= the order they were written in)
  Metadata metadata;
  std::uint64_t num_bytes = 0;  // size of the whole file
  std::uint32_t crc32 = 0;      // zlib CRC-32 of the whole file, computed while reading it

  // The tensor called `name`, or nullptr.
  const Tensor* find(std::string_view name) const;
};

struct SafetensorsWriteResult {
  std::uint64_t num_bytes = 0;  // size of the file written
  std::uint32_t crc32 = 0;      // zlib CRC-32 of the file written
};

// The safetensors name of a dtype ("F32", "BF16", ...).
const char* safetensors_dtype_name(DType dtype);

// The first bytes of the file write_safetensors() produces for these tensors: the 8-byte size
// and the padded JSON header (metadata first when non-empty, then the tensors in the given
// order, compact JSON). Same preconditions as write_safetensors.
std::string encode_safetensors_header(const NamedTensors& tensors, const Metadata& metadata);

// Writes `tensors` (in the given order) and `metadata` to `path`, atomically (core/io/
// atomic_file.h): on any failure the previous file at `path` is unchanged. Tensor bytes stream
// from the tensors' own memory, so no second copy of a large table is made.
// Preconditions (InternalError otherwise, naming the path and the tensor): every tensor is
// defined and on the CPU; names are non-empty, unique and not "__metadata__".
// Throws IoError on filesystem failures. Assumes a little-endian host (checked at compile time).
SafetensorsWriteResult write_safetensors(const std::string& path, const NamedTensors& tensors,
                                         const Metadata& metadata);

// Reads and validates a whole file into CPU tensors. Throws IoError when the file cannot be
// opened or read, and DataError naming the file and the problem when it is not a valid
// safetensors file in our dtype set: too short, header size larger than the file or than
// kMaxSafetensorsHeaderBytes, header not a JSON object (or nested deeper than the format
// allows), duplicate names, unknown dtype, bad shape (rank above Shape::kMaxRank), data_offsets
// out of range, overlapping, leaving holes, or not matching shape x dtype size, and bytes after
// the last tensor. Memory use is bounded by the file's size: no allocation is sized from a
// length field before that field has been checked against the file.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace aiacc::io
