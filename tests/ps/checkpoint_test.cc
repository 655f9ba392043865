// Shard checkpoints: a shard restored from its safetensors file serves identical rows and
// optimiser state (and keeps training identically); the file is refused by another shard; a
// table's rows round-trip through the EmbeddingStore save_rows/load_rows of the remote store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "ps/remote_embedding_store.h"
#include "ps/shard_checkpoint.h"
#include "tests/ps/ps_fixture.h"

namespace aiacc::ps {
namespace {

using testing::Cluster;
using testing::table_config;

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("aiacc_ps_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void train(PsClient& client, const std::string& table, int dim, int first_step, int steps) {
  for (int step = first_step; step < first_step + steps; ++step) {
    const auto ids = testing::random_ids(500, 800, step);
    const auto grads = testing::random_grads(ids.size(), dim, step);
    client.wait(client.push(table, ids, grads.data(), 0.05, step));
  }
}

TEST(PsCheckpoint, RestoredShardServesIdenticalRows) {
  const auto dir = temp_dir("restore");
  const TableConfig adam = table_config("emb_adam", 8, "adam");
  const TableConfig ftrl = table_config("emb_ftrl", 3, "ftrl");
  std::vector<std::pair<std::string, Tensor>> before_adam;
  std::vector<std::pair<std::string, Tensor>> before_ftrl;
  std::vector<float> continued;
  {
    Cluster cluster(2);
    auto client = cluster.client();
    client->create_table(adam);
    client->create_table(ftrl);
    train(*client, "emb_adam", 8, 0, 5);
    train(*client, "emb_ftrl", 3, 0, 5);
    const auto paths = client->save_checkpoint(dir.string());
    ASSERT_EQ(paths.size(), 2u);
    for (const auto& p : paths) EXPECT_TRUE(std::filesystem::exists(p)) << p;
    before_adam = client->dump_rows("emb_adam");
    before_ftrl = client->dump_rows("emb_ftrl");
    train(*client, "emb_adam", 8, 5, 3);  // the run goes on after the checkpoint
    const auto probe = testing::random_ids(1000, 900, 1);
    continued.resize(probe.size() * 8);
    client->wait(client->pull("emb_adam", probe, continued.data(), 8));
  }
  // Fresh shards (new processes would be the same: nothing survives but the files).
  Cluster cluster(2);
  auto client = cluster.client();
  client->load_checkpoint(dir.string());
  client->create_table(adam);  // the restored config is the same: accepted
  client->create_table(ftrl);
  for (const auto& [want, name] : {std::pair{&before_adam, "emb_adam"}, std::pair{&before_ftrl, "emb_ftrl"}}) {
    const auto got = client->dump_rows(name);
    ASSERT_EQ(got.size(), want->size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].second.shape(), (*want)[i].second.shape()) << got[i].first;
      EXPECT_EQ(0, std::memcmp(got[i].second.raw_data(), (*want)[i].second.raw_data(),
                               got[i].second.num_bytes())) << got[i].first;
    }
  }
  train(*client, "emb_adam", 8, 5, 3);
  const auto probe = testing::random_ids(1000, 900, 1);
  std::vector<float> rows(probe.size() * 8);
  client->wait(client->pull("emb_adam", probe, rows.data(), 8));
  EXPECT_EQ(rows, continued) << "training resumed from the checkpoint diverged";
  std::filesystem::remove_all(dir);
}

// Every dumped tensor of `after` holds the bytes of `before`'s.
void expect_same_rows(const std::vector<std::pair<std::string, Tensor>>& before,
                      const std::vector<std::pair<std::string, Tensor>>& after) {
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after[i].second.num_bytes(), before[i].second.num_bytes()) << after[i].first;
    EXPECT_EQ(0, std::memcmp(after[i].second.raw_data(), before[i].second.raw_data(), after[i].second.num_bytes()))
        << after[i].first;
  }
}

// Trains `config`'s table on a one-shard cluster, saves its checkpoint into `dir` and returns
// the rows it saved.
std::vector<std::pair<std::string, Tensor>> train_and_save(const TableConfig& config, const std::filesystem::path& dir) {
  Cluster cluster(1);
  auto client = cluster.client();
  client->create_table(config);
  train(*client, config.spec.name, static_cast<int>(config.spec.dim), 0, 3);
  client->save_checkpoint(dir.string());
  return client->dump_rows(config.spec.name);
}

// A checkpoint whose second table does not fit the one registered (another optimiser: its
// state means something else) is refused before anything is loaded: the first table keeps its
// rows (it used to be restored, leaving the shard half loaded), and the error is a DataError
// naming the file, the table and what differs.
TEST(PsCheckpoint, ACheckpointThatDoesNotFitLoadsNothing) {
  const auto dir = temp_dir("partial");
  const TableConfig a = table_config("a_table", 4, "adagrad");
  TableConfig b = table_config("b_table", 4, "adagrad");
  {
    Cluster cluster(1);
    auto client = cluster.client();
    client->create_table(a);
    client->create_table(b);
    train(*client, "a_table", 4, 0, 3);
    client->save_checkpoint(dir.string());
  }
  Cluster cluster(1);
  auto client = cluster.client();
  client->create_table(a);
  b.optimizer.type = "sgd";  // registered with another rule than the checkpoint's
  client->create_table(b);
  const auto before = client->dump_rows("a_table");
  try {
    client->load_checkpoint(dir.string());
    FAIL() << "a mismatched table was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("table 'b_table' in the checkpoint does not fit the one registered "
                                         "(nothing was loaded): dim 4 and adagrad optimiser"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("optimizer.type: adagrad -> sgd"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
  expect_same_rows(before, client->dump_rows("a_table"));
  std::filesystem::remove_all(dir);
}

// A job resumes its shards' rows under other table settings (learning rate, consistency,
// worker count, eviction): the rows come back as saved (they used to be refused: "differs from
// the one registered").
TEST(PsCheckpoint, RowsLoadUnderOtherTableSettings) {
  const auto dir = temp_dir("settings");
  const TableConfig saved = table_config("t", 4, "adagrad");
  const auto before = train_and_save(saved, dir);
  TableConfig now = saved;
  now.optimizer.lr = 0.5;
  now.options.consistency = "sync";
  now.options.num_workers = 1;
  now.options.capacity_rows = 100000;
  Cluster cluster(1);
  auto client = cluster.client();
  client->create_table(now);
  client->load_checkpoint(dir.string());
  expect_same_rows(before, client->dump_rows("t"));
  EXPECT_EQ(cluster.servers[0]->stats().at(0).rows, before.at(0).second.dim(0));
  std::filesystem::remove_all(dir);
}

// A shard started with its checkpoint file (aiacc-ps-server --load) before any worker registered
// the table: the first create_table gives the table the job's settings and keeps the rows; one
// whose rows would not fit (another optimiser) is refused, naming what differs.
TEST(PsCheckpoint, ATableLoadedBeforeRegistrationTakesTheJobsSettings) {
  const auto dir = temp_dir("preloaded");
  const TableConfig saved = table_config("pre", 4, "adagrad");
  const auto before = train_and_save(saved, dir);
  const std::string file = (dir / shard_checkpoint_name(0, 1)).string();
  {
    Cluster cluster(1);
    cluster.servers[0]->load_checkpoint(file);
    TableConfig now = saved;
    now.optimizer.lr = 0.5;
    now.options.consistency = "sync";
    auto client = cluster.client();
    client->create_table(now);  // used to fail: "differs from the one registered"
    expect_same_rows(before, client->dump_rows("pre"));
    // Now registered: a second, different registration is refused, in one line.
    TableConfig other = now;
    other.optimizer.lr = 0.25;
    try {
      cluster.client(1)->create_table(other);
      FAIL() << "a second registration with other settings was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("differs from the one registered: optimizer.lr: 0.5 -> 0.25"));
    }
  }
  Cluster cluster(1);
  cluster.servers[0]->load_checkpoint(file);
  TableConfig misfit = saved;
  misfit.optimizer.type = "sgd";
  try {
    cluster.client()->create_table(misfit);
    FAIL() << "rows of another optimiser were given to an sgd table";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("does not fit the rows loaded from a checkpoint"));
  }
  std::filesystem::remove_all(dir);
}

TEST(PsCheckpoint, FileIsSafetensorsWithShardMetadata) {
  const auto dir = temp_dir("format");
  Cluster cluster(1);
  auto client = cluster.client();
  client->create_table(table_config("meta", 4, "adagrad"));
  train(*client, "meta", 4, 0, 1);
  const auto path = (dir / "one.safetensors").string();
  cluster.servers[0]->save_checkpoint(path);
  const io::SafetensorsFile file = io::read_safetensors(path);
  EXPECT_EQ(file.metadata.at("aiacc.ps.shard"), "0");
  EXPECT_EQ(file.metadata.at("aiacc.ps.num_shards"), "1");
  ASSERT_NE(file.find("meta.ids"), nullptr);
  ASSERT_NE(file.find("meta.values"), nullptr);
  ASSERT_NE(file.find("meta.state"), nullptr);
  EXPECT_EQ(file.find("meta.state")->dim(1), 4);  // adagrad: one sum per weight
  const ShardCheckpoint checkpoint = read_shard_checkpoint(path);
  ASSERT_EQ(checkpoint.tables.size(), 1u);
  EXPECT_EQ(checkpoint.tables[0].optimizer.type, "adagrad");

  // Shard 1 of 2 refuses shard 0 of 1's file.
  ServerOptions other;
  other.shard = 1;
  other.num_shards = 2;
  PsServer wrong(other);
  try {
    wrong.load_checkpoint(path);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("shard 0 of 1"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(PsCheckpoint, RemoteStoreSaveRowsLoadRowsRoundTrip) {
  Cluster cluster(3);
  auto client = cluster.client();
  const TableConfig config = table_config("rt", 5, "adagrad");
  RemoteEmbeddingStore store(client, config);
  auto reference = testing::reference_store(config);
  const auto ids = testing::random_ids(300, 200, 3);
  std::vector<std::int64_t> unique;
  std::vector<float> summed;
  testing::aggregate(ids, testing::random_grads(ids.size(), 5, 3), 5, unique, summed);
  store.push(unique, summed.data(), 0.1);
  reference->push(unique, summed.data(), 0.1);
  const auto rows = store.save_rows();
  const auto want = reference->save_rows();
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(rows[i].second.shape(), want[i].second.shape());
    EXPECT_EQ(0, std::memcmp(rows[i].second.raw_data(), want[i].second.raw_data(), rows[i].second.num_bytes()));
  }
  Cluster fresh(3);
  RemoteEmbeddingStore restored(fresh.client(), config);
  restored.load_rows(rows);
  EXPECT_EQ(restored.num_rows(), reference->num_rows());
  std::vector<float> got(unique.size() * 5);
  std::vector<float> expected(got.size());
  restored.pull(unique, got.data());
  reference->pull(unique, expected.data());
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace aiacc::ps
