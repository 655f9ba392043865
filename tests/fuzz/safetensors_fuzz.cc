// Fuzz target: the safetensors reader (core/io/safetensors.h read_safetensors), which loads
// checkpoints, parameter-server shard files and user-supplied weights.
//
// Input: the file's bytes.
// Property: a file that reads is written back with write_safetensors and reads again to the
// same tensors (names, order, dtypes, shapes, bytes) and metadata.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace aiacc;

// Compared by name: the order of empty tensors sharing an offset is not defined.
bool same_tensors(io::NamedTensors a, io::NamedTensors b) {
  if (a.size() != b.size()) return false;
  auto by_name = [](const auto& x, const auto& y) { return x.first < y.first; };
  std::sort(a.begin(), a.end(), by_name);
  std::sort(b.begin(), b.end(), by_name);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a[i].second;
    const Tensor& y = b[i].second;
    if (a[i].first != b[i].first || x.dtype() != y.dtype() || x.shape() != y.shape() ||
        x.num_bytes() != y.num_bytes() ||
        (x.num_bytes() > 0 && std::memcmp(x.raw_data(), y.raw_data(), x.num_bytes()) != 0)) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  const auto path = fuzz::scratch_path("input.safetensors");
  fuzz::write_file(path, std::string(reinterpret_cast<const char*>(data), size));
  fuzz::expect_input_errors([&] {
    const io::SafetensorsFile file = io::read_safetensors(path.string());
    if (file.num_bytes != size) throw fuzz::PropertyViolation("num_bytes differs from the file size");

    const auto copy = fuzz::scratch_path("copy.safetensors");
    try {
      io::write_safetensors(copy.string(), file.tensors, file.metadata);
    } catch (const Error&) {
      return;  // e.g. metadata text that is not UTF-8: the writer refuses it, and says so
    }
    const io::SafetensorsFile again = io::read_safetensors(copy.string());
    if (!same_tensors(file.tensors, again.tensors) || file.metadata != again.metadata) {
      throw fuzz::PropertyViolation("a safetensors file does not survive write + read");
    }
  });
  return 0;
}
