// CheckpointManager: bitwise round trip, the on-disk layout, keep_last pruning, and recovery:
// load_latest() skips .tmp directories and checkpoints with a missing file, a corrupted byte, a
// truncated file or no manifest in favour of the previous complete one, and refuses to start
// afresh when none is complete; load() of a bad one throws DataError naming it.
#include "tools/trainer/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "tests/core/io/temp_dir.h"
#include "tests/testing/file_size_limit.h"

namespace aiacc::trainer {
namespace {

namespace fs = std::filesystem;
using aiacc::testing::FileSizeLimit;
using aiacc::testing::list_names;
using aiacc::testing::read_bytes;
using aiacc::testing::TempDir;
using aiacc::testing::write_bytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Checkpoint make_checkpoint(std::int64_t step) {
  const float s = static_cast<float>(step);
  Checkpoint c;
  c.step = step;
  c.files["model"] = {
      {"fc.weight", Tensor::from_vector<float>({s, -1.5f, 1e-20f, 3, 4, 5}, Shape{2, 3})},
      {"fc.bias", Tensor::from_vector<float>({0.25f, s}, Shape{2})},
      {"bn.num_batches_tracked", Tensor::from_vector<std::int64_t>({step}, Shape{})},
  };
  c.files["optimizer"] = {
      {"fc.weight.exp_avg", Tensor::from_vector<double>({1e-300, 2, 3, 4, 5, s}, Shape{2, 3})},
      {"step", Tensor::from_vector<std::int64_t>({step}, Shape{})},
  };
  c.files["embeddings.deep.C1"] = {
      {"deep.C1.ids", Tensor::from_vector<std::int64_t>({7, 1LL << 50}, Shape{2})},
      {"deep.C1.values", Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2})},
      {"deep.C1.state", Tensor::zeros(Shape{2, 0})},
  };
  c.state = {{"epoch", 3}, {"batch", 17}, {"rng", {{"data", 12345}}}, {"config_hash", "ab12"}};
  return c;
}

void expect_bitwise_equal(const Checkpoint& got, const Checkpoint& expected) {
  EXPECT_EQ(got.step, expected.step);
  EXPECT_EQ(got.state, expected.state);
  ASSERT_EQ(got.files.size(), expected.files.size());
  for (const auto& [key, tensors] : expected.files) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(got.files.count(key));
    const NamedTensors& loaded = got.files.at(key);
    ASSERT_EQ(loaded.size(), tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(loaded[i].first, tensors[i].first);
      EXPECT_EQ(loaded[i].second.dtype(), tensors[i].second.dtype());
      EXPECT_EQ(loaded[i].second.shape(), tensors[i].second.shape());
      ASSERT_EQ(loaded[i].second.num_bytes(), tensors[i].second.num_bytes());
      EXPECT_EQ(std::memcmp(loaded[i].second.raw_data(), tensors[i].second.raw_data(),
                            tensors[i].second.num_bytes()),
                0)
          << tensors[i].first;
    }
  }
}

TEST(CheckpointTest, SaveLoadRoundTripIsBitwise) {
  TempDir run;
  CheckpointManager manager(run.path(), 3);
  EXPECT_FALSE(manager.load_latest().has_value()) << "no checkpoints directory yet";
  Checkpoint original = make_checkpoint(1000);
  fs::path dir = manager.save(original);
  EXPECT_EQ(dir, run.path() / "checkpoints" / "step-000000001000");
  EXPECT_THAT(list_names(dir), ElementsAre("embeddings.deep.C1.safetensors", "manifest.json",
                                           "model.safetensors", "optimizer.safetensors"));
  expect_bitwise_equal(manager.load(dir), original);
  std::optional<Checkpoint> latest = manager.load_latest();
  ASSERT_TRUE(latest.has_value());
  expect_bitwise_equal(*latest, original);

  // The model file is a plain safetensors file with the PyTorch names and our metadata.
  io::SafetensorsFile model = io::read_safetensors((dir / "model.safetensors").string());
  EXPECT_EQ(model.metadata.at("format"), "pt");
  EXPECT_EQ(model.metadata.at("aiacc.step"), "1000");
  auto manifest = nlohmann::json::parse(read_bytes(dir / "manifest.json"));
  EXPECT_EQ(manifest["version"], 1);
  EXPECT_EQ(manifest["files"]["model"]["bytes"], fs::file_size(dir / "model.safetensors"));
  EXPECT_EQ(manifest["files"]["model"]["crc32"], model.crc32);
}

TEST(CheckpointTest, KeepLastPrunesOldestAndTmpLeftovers) {
  TempDir run;
  CheckpointManager manager(run.path(), 2);
  fs::create_directories(manager.directory() / "step-000000000005.tmp");  // a crashed save
  for (std::int64_t step : {10, 20, 30, 40}) manager.save(make_checkpoint(step));
  EXPECT_THAT(list_names(manager.directory()),
              ElementsAre("step-000000000030", "step-000000000040"));
  EXPECT_EQ(manager.load_latest()->step, 40);

  CheckpointManager keep_all(run.path(), 0);
  keep_all.save(make_checkpoint(50));
  keep_all.save(make_checkpoint(60));
  EXPECT_EQ(keep_all.list().size(), 4u);
}

// An incomplete checkpoint (here: a file gone) is not counted in keep_last: it used to take the
// place of a complete one, leaving fewer to resume from than asked for. It is removed once it
// is older than the complete ones kept.
TEST(CheckpointTest, KeepLastCountsCompleteCheckpointsOnly) {
  TempDir run;
  CheckpointManager manager(run.path(), 3);
  for (std::int64_t step : {10, 20, 30}) manager.save(make_checkpoint(step));
  fs::remove(manager.path_for(30) / "model.safetensors");
  manager.save(make_checkpoint(40));
  EXPECT_THAT(list_names(manager.directory()),
              ElementsAre("step-000000000010", "step-000000000020", "step-000000000030", "step-000000000040"));
  manager.save(make_checkpoint(50));
  EXPECT_THAT(list_names(manager.directory()), ElementsAre("step-000000000020", "step-000000000030",
                                                           "step-000000000040", "step-000000000050"));
  manager.save(make_checkpoint(60));
  EXPECT_THAT(list_names(manager.directory()),
              ElementsAre("step-000000000040", "step-000000000050", "step-000000000060"));
}

TEST(CheckpointTest, SavingAnOlderStepKeepsNewerCheckpoints) {
  TempDir run;
  CheckpointManager manager(run.path(), 1);
  manager.save(make_checkpoint(200));
  manager.save(make_checkpoint(100));  // e.g. resumed from 100 after 200 was found corrupt
  EXPECT_THAT(list_names(manager.directory()),
              ElementsAre("step-000000000100", "step-000000000200"));
}

TEST(CheckpointTest, SameStepIsReplaced) {
  TempDir run;
  CheckpointManager manager(run.path(), 3);
  manager.save(make_checkpoint(7));
  Checkpoint changed = make_checkpoint(7);
  changed.state["epoch"] = 99;
  manager.save(changed);
  EXPECT_EQ(manager.list().size(), 1u);
  EXPECT_EQ(manager.load_latest()->state["epoch"], 99);
}

// Damage the newest of three checkpoints in one way; load_latest() must return the middle one,
// and load() of the damaged one must throw DataError naming its directory.
struct Damage {
  const char* label;
  void (*apply)(const fs::path& newest);
  const char* expected;  // part of load()'s message
};

class CheckpointDamageTest : public ::testing::TestWithParam<Damage> {};

TEST_P(CheckpointDamageTest, LoadLatestFallsBackToPreviousComplete) {
  TempDir run;
  CheckpointManager manager(run.path(), 0);
  manager.save(make_checkpoint(1));
  manager.save(make_checkpoint(2));
  fs::path newest = manager.save(make_checkpoint(3));
  GetParam().apply(newest);
  // A save that crashed half-way at a later step is never a candidate either.
  fs::create_directories(manager.directory() / "step-000000000004.tmp");
  write_bytes(manager.directory() / "step-000000000004.tmp" / "model.safetensors", "partial");

  std::optional<Checkpoint> latest = manager.load_latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 2);
  expect_bitwise_equal(*latest, make_checkpoint(2));
  try {
    manager.load(newest);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(newest.string()));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().expected));
  }
}

// When every checkpoint is damaged, resuming is refused naming the folder and each reason: it
// used to train from step 0 and save over the damaged folders.
TEST_P(CheckpointDamageTest, NoLoadableCheckpointIsAnErrorNotAFreshStart) {
  TempDir run;
  CheckpointManager manager(run.path(), 0);
  fs::path only = manager.save(make_checkpoint(5));
  GetParam().apply(only);
  try {
    (void)manager.load_latest();
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(manager.directory().string() + " holds 1 checkpoint(s) and none can be loaded"));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().expected));
  }
  EXPECT_TRUE(fs::exists(only)) << "the damaged checkpoint stays for repair";
}

void flip_byte(const fs::path& file, std::uintmax_t offset_from_end) {
  std::string bytes = read_bytes(file);
  bytes[bytes.size() - 1 - offset_from_end] ^= 0x01;
  write_bytes(file, bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Damages, CheckpointDamageTest,
    ::testing::Values(
        Damage{"missing_file", [](const fs::path& d) { fs::remove(d / "optimizer.safetensors"); },
               "optimizer.safetensors is missing"},
        Damage{"flipped_data_byte",
               [](const fs::path& d) { flip_byte(d / "model.safetensors", 3); }, "CRC-32"},
        Damage{"flipped_header_byte",
               [](const fs::path& d) {
                 // Byte 12 sits in the JSON header: usually invalid JSON, else a CRC mismatch.
                 std::string bytes = read_bytes(d / "model.safetensors");
                 bytes[12] = '!';
                 write_bytes(d / "model.safetensors", bytes);
               },
               "model.safetensors"},
        Damage{"truncated_file",
               [](const fs::path& d) {
                 fs::resize_file(d / "model.safetensors",
                                 fs::file_size(d / "model.safetensors") - 1);
               },
               "the manifest says"},
        Damage{"no_manifest", [](const fs::path& d) { fs::remove(d / "manifest.json"); },
               "manifest.json is missing"},
        Damage{"garbled_manifest",
               [](const fs::path& d) { write_bytes(d / "manifest.json", "{\"format\": "); },
               "not valid JSON"},
        Damage{"newer_version",
               [](const fs::path& d) {
                 auto m = nlohmann::json::parse(read_bytes(d / "manifest.json"));
                 m["version"] = 2;
                 write_bytes(d / "manifest.json", m.dump());
               },
               "newer than this program"},
        Damage{"escaping_file_name",
               [](const fs::path& d) {
                 auto m = nlohmann::json::parse(read_bytes(d / "manifest.json"));
                 m["files"]["model"]["file"] = "../step-000000000002/model.safetensors";
                 write_bytes(d / "manifest.json", m.dump());
               },
               "malformed manifest entry for 'model'"},
        Damage{"state_with_text_epoch",
               [](const fs::path& d) {
                 auto m = nlohmann::json::parse(read_bytes(d / "manifest.json"));
                 m["state"]["epoch"] = "three";
                 write_bytes(d / "manifest.json", m.dump());
               },
               "state lacks a non-negative integer epoch and batch"},
        Damage{"state_not_an_object",
               [](const fs::path& d) {
                 auto m = nlohmann::json::parse(read_bytes(d / "manifest.json"));
                 m["state"] = nlohmann::json::array({1, 2});
                 write_bytes(d / "manifest.json", m.dump());
               },
               "state lacks a non-negative integer epoch and batch"}),
    [](const ::testing::TestParamInfo<Damage>& info) { return std::string(info.param.label); });

TEST(CheckpointTest, BadKeysAndStepsAreRejectedBeforeWriting) {
  TempDir run;
  CheckpointManager manager(run.path(), 1);
  Checkpoint bad = make_checkpoint(1);
  bad.files["../escape"] = {};
  EXPECT_THROW(manager.save(bad), InternalError);
  Checkpoint negative = make_checkpoint(-1);
  EXPECT_THROW(manager.save(negative), InternalError);
  EXPECT_FALSE(fs::exists(manager.directory()));
  EXPECT_THROW(CheckpointManager(run.path(), -1), InternalError);
}

// A write that fails half-way (a full disk, simulated as root-proof with RLIMIT_FSIZE) leaves
// the previous checkpoint loadable and no partial directory behind.
TEST(CheckpointTest, FailedSaveLeavesPreviousCheckpointLoadable) {
  TempDir run;
  CheckpointManager manager(run.path(), 1);
  manager.save(make_checkpoint(1));
  Checkpoint big = make_checkpoint(2);
  big.files["model"].emplace_back("huge", Tensor::zeros(Shape{64 * 1024}));

  std::string message;
  {
    const FileSizeLimit limit(16 * 1024);
    try {
      manager.save(big);
    } catch (const IoError& e) {
      message = e.what();
    }
  }

  EXPECT_THAT(message, HasSubstr("model.safetensors"));
  EXPECT_THAT(list_names(manager.directory()), ElementsAre("step-000000000001"));
  ASSERT_TRUE(manager.load_latest().has_value());
  EXPECT_EQ(manager.load_latest()->step, 1);
}

// Files other processes write into the checkpoint (parameter-server shards) are recorded in
// the manifest with size and CRC-32; load() verifies them and a damaged one makes the
// checkpoint incomplete (load_latest falls back), like its own files.
TEST(CheckpointTest, ExternalFilesAreVerifiedLikeOwnFiles) {
  TempDir run;
  CheckpointManager manager(run.path(), 0);
  for (std::int64_t step : {1, 2}) {
    Checkpoint c = make_checkpoint(step);
    c.write_external = [step](const fs::path& directory) {
      const auto path = directory / "ps-shard-00000-of-00001.safetensors";
      io::write_safetensors(path.string(),
                            {{"t.ids", Tensor::from_vector<std::int64_t>({step, 9}, Shape{2})}}, {});
      return std::vector<std::string>{path.string()};
    };
    manager.save(c);
  }
  const Checkpoint latest = manager.load(manager.path_for(2));
  ASSERT_EQ(latest.external.size(), 1u);
  EXPECT_EQ(latest.external.begin()->first, "ps-shard-00000-of-00001.safetensors");
  EXPECT_EQ(io::read_safetensors(latest.external.begin()->second.string()).tensors[0].second.data<std::int64_t>()[0], 2);

  // One flipped byte in the newest shard file: that checkpoint is refused, the older one loads.
  const fs::path shard = manager.path_for(2) / "ps-shard-00000-of-00001.safetensors";
  auto bytes = read_bytes(shard);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x40);
  write_bytes(shard, bytes);
  EXPECT_THROW(
      {
        try {
          manager.load(manager.path_for(2));
        } catch (const DataError& e) {
          EXPECT_THAT(e.what(), HasSubstr("ps-shard-00000-of-00001.safetensors is corrupt"));
          throw;
        }
      },
      DataError);
  const auto fallback = manager.load_latest();
  ASSERT_TRUE(fallback.has_value());
  EXPECT_EQ(fallback->step, 1);

  // A writer that puts its file elsewhere is a programming error, caught before the manifest.
  Checkpoint stray = make_checkpoint(3);
  stray.write_external = [&](const fs::path&) {
    return std::vector<std::string>{(run.path() / "elsewhere.safetensors").string()};
  };
  EXPECT_THROW(manager.save(stray), InternalError);
}

// Shard files are joined row-wise: pieces in file order, and pieces that cannot be joined (a
// tampered or mismatched file) refused naming the tensor and both shards, not copied past the
// joined tensor.
TEST(CheckpointTest, ShardRowsJoinInFileOrderAndMismatchedPiecesAreRefused) {
  auto piece = [](std::vector<float> values, std::int64_t rows) {
    return Tensor::from_vector(values, Shape{rows, static_cast<std::int64_t>(values.size()) / rows});
  };
  const NamedTensors a{{"t.values", piece({1, 2, 3, 4}, 2)}};
  const NamedTensors b{{"t.values", piece({5, 6}, 1)}};
  const NamedTensors joined = concat_shard_rows({a, b});
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0].second.shape(), Shape({3, 2}));
  EXPECT_EQ(joined[0].second.to_vector<float>(), std::vector<float>({1, 2, 3, 4, 5, 6}));

  const NamedTensors wider{{"t.values", piece({5, 6, 7, 8}, 1)}};
  try {
    concat_shard_rows({a, wider});
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'t.values'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("shard 1"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("shard 0"));
  }
  const NamedTensors ids{{"t.values", Tensor::from_vector(std::vector<std::int64_t>{9, 9}, Shape{1, 2})}};
  EXPECT_THROW(concat_shard_rows({a, ids}), DataError);
  const NamedTensors flat{{"t.values", Tensor::from_vector(std::vector<float>{1, 2}, Shape{2})}};
  EXPECT_THROW(concat_shard_rows({a, flat}), DataError);
}

}  // namespace
}  // namespace aiacc::trainer
