// The dataset registry and the `data:` config section: every built-in dataset is registered
// (so link_whole works), type and option errors are located, and make_dataset/loader_options
// build what the section says.
#include "data/dataset.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/config/node.h"
#include "core/error.h"
#include "core/util/cpus.h"
#include "data/data_options.h"
#include "tests/data/data_files.h"

namespace aiacc::data {
namespace {

using ::testing::HasSubstr;

DataOptions parse(const std::string& text) {
  return config::read<DataOptions>(config::Document::from_string(text, "job.yaml").root());
}

std::string config_error(const std::string& text) {
  try {
    parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no ConfigError>";
}

TEST(DatasetRegistry, EveryBuiltInIsRegistered) {
  for (const char* name : {"idx_images", "synthetic_images", "cifar", "criteo_tsv", "synthetic_ctr"}) {
    EXPECT_TRUE(dataset_registry().contains(name)) << name;
  }
}

// -1 (the default) reads in the background except where a host-computing process may use one
// CPU only; explicit depths are kept, and so is the auto choice on a machine that does not say.
TEST(DataOptions, AutoPrefetchReadsOnTheTrainingThreadOfAOneCpuProcess) {
  EXPECT_EQ(resolve_prefetch_batches(kAutoPrefetch, 1, true), 0);
  EXPECT_EQ(resolve_prefetch_batches(kAutoPrefetch, 1, false), 4);  // a GPU worker's thread waits
  EXPECT_EQ(resolve_prefetch_batches(kAutoPrefetch, 2, true), 4);
  EXPECT_EQ(resolve_prefetch_batches(kAutoPrefetch, 0, true), 4);
  EXPECT_EQ(resolve_prefetch_batches(0, 8, true), 0);
  EXPECT_EQ(resolve_prefetch_batches(7, 1, true), 7);
  EXPECT_EQ(parse("prefetch_batches: 2").prefetch_batches, 2);
  EXPECT_THAT(config_error("prefetch_batches: -2"), HasSubstr("prefetch_batches"));
  // loader_options resolves it for the CPUs this test can keep busy.
  const std::size_t cpus = util::usable_cpus();
  EXPECT_EQ(loader_options(parse("{}"), true, 1).prefetch_batches, cpus == 1 ? 0 : 4);
  EXPECT_EQ(loader_options(parse("{}"), true, 1, /*host_compute=*/false).prefetch_batches, 4);
}

TEST(DataOptions, DefaultsAndTypedBlocks) {
  DataOptions defaults = parse("{}");
  EXPECT_EQ(defaults.batch_size, 64);
  EXPECT_TRUE(defaults.shuffle);
  EXPECT_TRUE(defaults.drop_last);
  EXPECT_EQ(defaults.prefetch_batches, kAutoPrefetch);
  EXPECT_EQ(defaults.train.type, "idx_images");
  EXPECT_FALSE(defaults.augment.enabled());

  DataOptions o = parse(
      "batch_size: 8\n"
      "train: {type: synthetic_images, synthetic_images: {size: 50, height: 4, width: 5}}\n"
      "test: {type: synthetic_images, synthetic_images: {size: 20, height: 4, width: 5}}\n"
      "augment: {random_crop_padding: 2, horizontal_flip: true}\n");
  auto train = make_dataset(o.train, {"train", 1});
  auto test = make_dataset(o.test, {"test", 1});
  EXPECT_EQ(train->size(), 50);
  EXPECT_EQ(test->size(), 20);
  EXPECT_EQ(train->spec().example_shape, (Shape{1, 4, 5}));

  LoaderOptions training = loader_options(o, true, 9);
  EXPECT_EQ(training.batch_size, 8);
  EXPECT_EQ(training.seed, 9u);
  EXPECT_EQ(training.augment.random_crop_padding, 2);
  EXPECT_TRUE(training.drop_last);
  LoaderOptions evaluation = loader_options(o, false, 9);
  EXPECT_FALSE(evaluation.augment.enabled());
  EXPECT_FALSE(evaluation.shuffle);
  EXPECT_FALSE(evaluation.drop_last);

  Loader loader(*train, training, 0, 1);
  loader.start_epoch(0);
  auto batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->inputs.shape(), (Shape{8, 1, 4, 5}));
}

TEST(DataOptions, ErrorsAreLocated) {
  EXPECT_THAT(config_error("train: {type: synthetic_image}\n"), HasSubstr("did you mean 'synthetic_images'"));
  EXPECT_THAT(config_error("train:\n  synthetic_images: {sise: 3}\n"),
              HasSubstr("job.yaml:2:22: train.synthetic_images.sise: unknown key (did you mean 'size'?)"));
  EXPECT_THAT(config_error("batch_size: 0\n"), HasSubstr("batch_size: expected a value in [1, 1048576]"));
  EXPECT_THAT(config_error("augment: {horizontal_flp: true}\n"),
              HasSubstr("augment.horizontal_flp: unknown key (did you mean 'horizontal_flip'?)"));
  EXPECT_THAT(config_error("test: {cifar: {normalize_std: [0.2, 0.0, 0.2]}}\n"), HasSubstr("expected values > 0"));
  EXPECT_THAT(config_error("test: {cifar: {normalize_mean: [0.2]}}\n"), HasSubstr("expected 3 values"));
  EXPECT_THAT(config_error("suffle: true\n"), HasSubstr("did you mean 'shuffle'"));
}

TEST(DataOptions, ReferenceListsEveryDatasetAndResolvedOnlyTheChosen) {
  std::string reference = config::write(DataOptions{}, config::Writer::Mode::reference);
  EXPECT_THAT(reference, HasSubstr("idx_images:"));
  EXPECT_THAT(reference, HasSubstr("cifar:"));
  EXPECT_THAT(reference, HasSubstr("synthetic_images:"));
  EXPECT_THAT(reference, HasSubstr("normalize_mean: 0.286"));
  EXPECT_THAT(reference, HasSubstr("random_crop_padding: 0"));
  // The reference reads back to the defaults.
  EXPECT_EQ(config::write(parse(reference), config::Writer::Mode::reference), reference);

  std::string resolved = config::write(parse("train: {type: cifar}\ntest: {type: cifar}\n"), config::Writer::Mode::resolved);
  EXPECT_THAT(resolved, HasSubstr("cifar:"));
  EXPECT_THAT(resolved, HasSubstr("train_files: [data_batch_1.bin"));
}

// What the local launcher checks once before it starts a job's processes: both splits' files,
// through the type each split names; types that read no files pass.
TEST(DataOptions, CheckDataFilesNamesTheKeyOfEachSplit) {
  const std::string missing = "/no/such/folder/f.tsv";
  testing::TempDir dir;
  const std::string existing = dir.file("f.tsv");
  testing::write_text(existing, "1\t2\n");
  const auto error = [](const DataOptions& o) {
    try {
      check_data_files(o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no ConfigError>");
  };
  const auto job = [](const std::string& train, const std::string& test) {
    return parse(fmt::format("train: {{type: criteo_tsv, criteo_tsv: {{train_file: '{}'}}}}\n"
                             "test: {{type: criteo_tsv, criteo_tsv: {{test_file: '{}'}}}}\n", train, test));
  };
  EXPECT_EQ(error(job(missing, existing)), "data.train.criteo_tsv.train_file: " + missing + ": no such file");
  EXPECT_EQ(error(job(existing, missing)), "data.test.criteo_tsv.test_file: " + missing + ": no such file");
  EXPECT_EQ(error(job(existing, existing)), "<no ConfigError>");
  EXPECT_EQ(error(parse("train: {type: synthetic_ctr}\ntest: {type: synthetic_ctr}\n")), "<no ConfigError>");
  EXPECT_EQ(error(parse("train: {type: idx_images, idx_images: {directory: /no/such/folder}}\n")),
            "data.train.idx_images.train_images: /no/such/folder/train-images-idx3-ubyte.gz: no such file "
            "(install Fashion-MNIST with `apt-get install dataset-fashion-mnist`)");
}

TEST(DatasetRegistry, UnknownSplitAndType) {
  DatasetOptions options;
  options.type = "synthetic_images";
  EXPECT_THROW(make_dataset(options, {"validation", 0}), ConfigError);
  options.type = "nope";
  try {
    make_dataset(options, {"train", 0});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown dataset type 'nope'; known: cifar, criteo_tsv, idx_images, synthetic_ctr, synthetic_images"));
  }
}

}  // namespace
}  // namespace aiacc::data
