// Fuzz target: loading a training checkpoint (tools/trainer/checkpoint.h CheckpointManager::load
// and load_latest): manifest.json, then every safetensors file it lists, with sizes and CRC-32.
//
// Input: [u8 mode][...]
//   mode bit 0 clear: [u16 manifest length][manifest.json][model.safetensors]: both as given.
//   mode bit 0 set:   [model.safetensors]; the harness writes a manifest that matches the file
//                     (size and CRC-32), so the input reaches the safetensors reader.
//   mode bit 1: load_latest() (scans checkpoints/, skips invalid ones) instead of load().
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_util.h"
#include "tools/trainer/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace aiacc;
  fuzz::quiet_logs();
  fuzz::InputCursor input(data, size);
  const std::uint8_t mode = input.u8();

  const std::filesystem::path run = fuzz::scratch_path("run");
  const trainer::CheckpointManager manager(run, 3);
  const std::filesystem::path directory = manager.path_for(7);
  std::filesystem::remove_all(run);
  std::filesystem::create_directories(directory);

  std::string manifest;
  std::string model;
  if ((mode & 1) == 0) {
    manifest = std::string(input.bytes(input.u16()));
    model = std::string(input.rest());
  } else {
    model = std::string(input.rest());
    const auto crc = crc32(0, reinterpret_cast<const Bytef*>(model.data()), static_cast<uInt>(model.size()));
    manifest = nlohmann::json{
        {"format", "aiacc-checkpoint"},
        {"version", 1},
        {"step", 7},
        {"files", {{"model", {{"file", "model.safetensors"}, {"bytes", model.size()}, {"crc32", crc}, {"tensors", 1}}}}},
        {"state", {{"epoch", 0}}}}.dump();
  }
  fuzz::write_file(directory / "manifest.json", manifest);
  fuzz::write_file(directory / "model.safetensors", model);

  fuzz::expect_input_errors([&] {
    if (mode & 2) {
      (void)manager.load_latest();
    } else {
      (void)manager.load(directory);
    }
  });
  return 0;
}
