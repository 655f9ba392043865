// configs/reference.yaml is generated from the config structs; this fails when they disagree,
// and checks that every example config in configs/ reads without error and that every built-in
// model and dataset is registered (static registration survived linking).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/dataset.h"
#include "models/model.h"
#include "tools/trainer/job_options.h"

namespace aiacc::trainer {
namespace {

std::filesystem::path source_root() {
  const char* root = std::getenv("AIACC_SOURCE_ROOT");
  return root ? root : ".";
}

TEST(ConfigReference, FileMatchesStructs) {
  std::ifstream in(source_root() / "configs" / "reference.yaml");
  ASSERT_TRUE(in) << "configs/reference.yaml is missing";
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(file.str(), reference_yaml())
      << "configs/reference.yaml is out of date: regenerate it with\n"
         "  build/tools/aiacc-train --print-reference > configs/reference.yaml";
}

TEST(ConfigReference, ReferenceIsItselfAValidJob) {
  JobOptions job = load_job((source_root() / "configs" / "reference.yaml").string(), {});
  EXPECT_EQ(resolved_yaml(job), resolved_yaml(JobOptions{}));
}

TEST(ConfigReference, EveryExampleConfigReads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source_root() / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(load_job(entry.path().string(), {}));
    ++count;
  }
  EXPECT_GE(count, 2);
}

TEST(Registries, BuiltinsSurviveStaticLinking) {
  for (const char* name : {"mlp", "resnet", "wide_deep"}) {
    EXPECT_TRUE(models::model_registry().contains(name)) << name;
  }
  for (const char* name : {"idx_images", "synthetic_images", "cifar", "criteo_tsv", "synthetic_ctr"}) {
    EXPECT_TRUE(data::dataset_registry().contains(name)) << name;
  }
}

}  // namespace
}  // namespace aiacc::trainer
