// --emit slurm|kubernetes: the Kubernetes manifest is read back with yaml-cpp and checked object
// by object (its ConfigMap must hold a config that loads as the same job); the sbatch script is
// parsed by bash and run with stand-ins for srun, hostname and aiacc-train, which record the
// arguments and environment each rank would get.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/net/security.h"
#include "tests/testing/process.h"
#include "tests/testing/scoped_env.h"
#include "tools/trainer/emit.h"
#include "tools/trainer/job_options.h"

namespace aiacc::trainer {
namespace {

namespace fs = std::filesystem;
using aiacc::testing::ScopedEnv;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The first line starts with spaces (a literal block without an indentation indicator would
// misread it) and a blank line sits in the middle.
const char* kJobText =
    "  # emit_test job: 3 workers and 2 parameter-server shards\n"
    "job: {name: Emit_Test.Job, run_dir: /shared/runs}\n"
    "model: {type: mlp, mlp: {hidden: [16]}}\n"
    "\n"
    "data:\n"
    "  batch_size: 32\n"
    "  train: {type: synthetic_images, synthetic_images: {size: 256}}\n"
    "  test: {type: synthetic_images, synthetic_images: {size: 64}}\n"
    "cluster: {workers: 3, servers: 2, master_port: 29511}\n";

// A fresh folder per test, removed at the end.
class EmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("aiacc_emit_test_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(folder_);
    config_path_ = write("job.yaml", kJobText);
  }
  void TearDown() override { fs::remove_all(folder_); }

  std::string write(const std::string& name, const std::string& text) const {
    const fs::path path = folder_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  fs::path folder_;
  std::string config_path_;
};

// The env entry `name` of a container, or an undefined node.
YAML::Node env_entry(const YAML::Node& container, const std::string& name) {
  for (const auto& entry : container["env"]) {
    if (entry["name"].as<std::string>() == name) return entry;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

TEST_F(EmitTest, KubernetesManifestIsAnIndexedJobWithHeadlessService) {
  const std::vector<std::string> overrides = {"optimizer.lr=0.05", "train.note=costs $(5) or $$"};
  const JobOptions job = load_job(config_path_, {});
  const std::vector<YAML::Node> docs = YAML::LoadAll(emit_kubernetes(job, config_path_, overrides));
  ASSERT_EQ(docs.size(), 4u);
  const YAML::Node& config_map = docs[0];
  const YAML::Node& secret = docs[1];
  const YAML::Node& service = docs[2];
  const YAML::Node& kjob = docs[3];
  EXPECT_EQ(config_map["kind"].as<std::string>(), "ConfigMap");
  // The job token: a fresh one per manifest, in a Secret the pods read into AIACC_JOB_TOKEN.
  EXPECT_EQ(secret["kind"].as<std::string>(), "Secret");
  const std::string token = secret["stringData"]["token"].as<std::string>();
  EXPECT_EQ(token.size(), 64u);
  EXPECT_NE(token, YAML::LoadAll(emit_kubernetes(job, config_path_, overrides))[1]["stringData"]["token"].as<std::string>());
  EXPECT_EQ(service["kind"].as<std::string>(), "Service");
  EXPECT_EQ(kjob["kind"].as<std::string>(), "Job");
  EXPECT_EQ(kjob["apiVersion"].as<std::string>(), "batch/v1");

  // Names: DNS labels from job.name.
  EXPECT_EQ(kjob["metadata"]["name"].as<std::string>(), "emit-test-job");
  EXPECT_EQ(service["metadata"]["name"].as<std::string>(), "emit-test-job");

  // The ConfigMap holds the file as written.
  EXPECT_EQ(config_map["data"]["job.yaml"].as<std::string>(), kJobText);

  // One pod per rank, all at once, none retried.
  const YAML::Node spec = kjob["spec"];
  EXPECT_EQ(spec["completionMode"].as<std::string>(), "Indexed");
  EXPECT_EQ(spec["completions"].as<int>(), 5);
  EXPECT_EQ(spec["parallelism"].as<int>(), 5);
  EXPECT_EQ(spec["backoffLimit"].as<int>(), 0);
  const YAML::Node pod = spec["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"].as<std::string>(), "Never");
  EXPECT_EQ(pod["terminationGracePeriodSeconds"].as<int>(), 300);  // time to save on SIGTERM

  // The Service is headless, selects the job's pods and is their subdomain.
  EXPECT_EQ(service["spec"]["clusterIP"].as<std::string>(), "None");
  EXPECT_EQ(pod["subdomain"].as<std::string>(), service["metadata"]["name"].as<std::string>());
  const YAML::Node pod_labels = spec["template"]["metadata"]["labels"];
  for (const auto& selector : service["spec"]["selector"]) {
    const auto key = selector.first.as<std::string>();
    ASSERT_TRUE(pod_labels[key]) << key;
    EXPECT_EQ(pod_labels[key].as<std::string>(), selector.second.as<std::string>()) << key;
  }

  // The container's environment tells each pod its rank and rank 0's address.
  ASSERT_EQ(pod["containers"].size(), 1u);
  const YAML::Node container = pod["containers"][0];
  EXPECT_EQ(env_entry(container, "RANK")["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
            "metadata.annotations['batch.kubernetes.io/job-completion-index']");
  EXPECT_EQ(env_entry(container, "WORLD_SIZE")["value"].as<std::string>(), "5");
  EXPECT_EQ(env_entry(container, "MASTER_ADDR")["value"].as<std::string>(),
            "emit-test-job-0.emit-test-job");
  EXPECT_EQ(env_entry(container, "MASTER_PORT")["value"].as<std::string>(), "29511");
  EXPECT_EQ(env_entry(container, "POD_IP")["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
            "status.podIP");
  const YAML::Node token_ref = env_entry(container, "AIACC_JOB_TOKEN")["valueFrom"]["secretKeyRef"];
  EXPECT_EQ(token_ref["name"].as<std::string>(), secret["metadata"]["name"].as<std::string>());
  EXPECT_EQ(token_ref["key"].as<std::string>(), "token");

  // The command reads the mounted ConfigMap; the user's '$' survives Kubernetes' $(VAR) expansion.
  EXPECT_EQ(container["command"][0].as<std::string>(), "aiacc-train");
  EXPECT_THAT(container["args"].as<std::vector<std::string>>(),
              ElementsAre("/config/job.yaml", "--set", "cluster.launcher=external", "--set",
                          "cluster.ring.interface=$(POD_IP)", "--set", "optimizer.lr=0.05", "--set",
                          "train.note=costs $$(5) or $$$$"));
  const YAML::Node mount = container["volumeMounts"][0];
  EXPECT_EQ(mount["mountPath"].as<std::string>(), "/config");
  const YAML::Node volume = pod["volumes"][0];
  EXPECT_EQ(volume["name"].as<std::string>(), mount["name"].as<std::string>());
  EXPECT_EQ(volume["configMap"]["name"].as<std::string>(),
            config_map["metadata"]["name"].as<std::string>());
}

// The item of `list` (volumes, volumeMounts) named `name`, or an undefined node.
YAML::Node named(const YAML::Node& list, const std::string& name) {
  for (const auto& item : list) {
    if (item["name"].as<std::string>() == name) return item;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

// With cluster.security.token_file the manifest holds no Secret of its own (the token is the
// user's file) but says how to make one from the file, which every pod reads into
// AIACC_JOB_TOKEN. It used to mount the Secret as the file, which made the container run as
// root (runAsUser: 0): restricted namespaces refuse such pods, and elsewhere the run folder's
// files became root's.
TEST_F(EmitTest, KubernetesManifestWithATokenFilePassesItsSecretInTheEnvironment) {
  JobOptions job = load_job(config_path_, {});
  job.cluster.security.token_file = "/secrets/job-token";
  const std::string manifest = emit_kubernetes(job, config_path_, {});
  EXPECT_THAT(manifest, ::testing::Not(HasSubstr("runAsUser"))) << manifest;
  const std::vector<YAML::Node> docs = YAML::LoadAll(manifest);
  ASSERT_EQ(docs.size(), 3u);
  for (const auto& doc : docs) EXPECT_NE(doc["kind"].as<std::string>(), "Secret");
  EXPECT_THAT(manifest, HasSubstr("\n#   kubectl create secret generic emit-test-job-token "
                                  "--from-file=token=/secrets/job-token\n"));

  const YAML::Node pod = docs[2]["spec"]["template"]["spec"];
  const YAML::Node container = pod["containers"][0];
  const YAML::Node token_ref = env_entry(container, "AIACC_JOB_TOKEN")["valueFrom"]["secretKeyRef"];
  ASSERT_TRUE(token_ref) << manifest;
  EXPECT_EQ(token_ref["name"].as<std::string>(), "emit-test-job-token");
  EXPECT_EQ(token_ref["key"].as<std::string>(), "token");
  EXPECT_FALSE(container["securityContext"]) << manifest;
  EXPECT_FALSE(pod["securityContext"]) << manifest;
  // Only the ConfigMap is mounted: no token file in the pods.
  ASSERT_EQ(pod["volumes"].size(), 1u) << manifest;
  EXPECT_TRUE(named(pod["volumes"], "config"));
  ASSERT_EQ(container["volumeMounts"].size(), 1u) << manifest;
  EXPECT_TRUE(named(container["volumeMounts"], "config"));
  EXPECT_THAT(container["args"].as<std::vector<std::string>>(),
              ElementsAre("/config/job.yaml", "--set", "cluster.launcher=external", "--set",
                          "cluster.ring.interface=$(POD_IP)", "--set",
                          "cluster.security.token_file=''"));
}

// A pod as Kubernetes runs it: the ConfigMap's config with the manifest's arguments, and
// AIACC_JOB_TOKEN holding the token file's bytes as they are (kubectl create secret
// --from-file keeps the line break). It joins with the token the file gives ranks elsewhere and
// looks for no file, not even one named by a --set carried from --emit.
TEST_F(EmitTest, KubernetesPodTakesTheTokenFileFromItsSecret) {
  const std::string token(64, 'b');
  const std::string token_file = write("token", token + "\n");
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
  const std::vector<std::string> overrides = {"cluster.security.token_file=" + token_file};
  const JobOptions job = load_job(config_path_, overrides);
  const auto docs = YAML::LoadAll(emit_kubernetes(job, config_path_, overrides));
  ASSERT_EQ(docs.size(), 3u);
  const YAML::Node container = docs[2]["spec"]["template"]["spec"]["containers"][0];
  const auto args = container["args"].as<std::vector<std::string>>();
  ASSERT_EQ(args.at(0), "/config/job.yaml");
  std::vector<std::string> pod_sets;
  for (std::size_t i = 1; i + 1 < args.size(); i += 2) {
    ASSERT_EQ(args[i], "--set");
    pod_sets.push_back(args[i + 1]);
  }
  const std::string pod_config = write("pod_job.yaml", docs[0]["data"]["job.yaml"].as<std::string>());
  const JobOptions in_pod = load_job(pod_config, pod_sets);
  EXPECT_EQ(in_pod.cluster.security.token_file, "");

  std::ifstream in(token_file, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const ScopedEnv secret(net::kJobTokenVariable, bytes.str());
  EXPECT_EQ(net::job_token_from_environment(in_pod.cluster.security.token_file), token);
  EXPECT_EQ(net::read_job_token_file(token_file), token);
}

TEST_F(EmitTest, KubernetesTokenFileWithALineBreakIsRefused) {
  JobOptions job = load_job(config_path_, {});
  job.cluster.security.token_file = "/secrets/a\nb";
  try {
    emit_kubernetes(job, config_path_, {});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cluster.security.token_file: the path has a line break"));
  }
}

// What the Kubernetes manifest needs of a token file, the README says where it tells of --emit.
TEST(EmitReadme, SaysHowTheManifestGivesPodsATokenFile) {
  std::ifstream in(testing::source_root() / "README.md");
  ASSERT_TRUE(in) << testing::source_root();
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const auto start = readme.find("### Running on a cluster");
  ASSERT_NE(start, std::string::npos);
  const std::string section = readme.substr(start, readme.find("\n### ", start + 1) - start);
  EXPECT_THAT(section, HasSubstr("kubectl create secret generic <name>-token --from-file=token=FILE"));
  EXPECT_THAT(section, HasSubstr("`AIACC_JOB_TOKEN`"));
  EXPECT_THAT(section, ::testing::Not(HasSubstr("runAsUser")));
  EXPECT_THAT(section, HasSubstr("`AIACC_TRAIN`"));
}

TEST_F(EmitTest, ConfigMapLoadsAsTheSameJob) {
  const std::vector<std::string> overrides = {"optimizer.lr=0.05"};
  const JobOptions job = load_job(config_path_, overrides);
  const auto docs = YAML::LoadAll(emit_kubernetes(job, config_path_, overrides));
  const std::string in_pod =
      write("pod_job.yaml", docs.at(0)["data"]["job.yaml"].as<std::string>());
  EXPECT_EQ(resolved_yaml(load_job(in_pod, overrides)), resolved_yaml(job));
}

TEST_F(EmitTest, SlurmScriptRunsOneRankPerTask) {
  const JobOptions job = load_job(config_path_, {});
  const std::string script = emit_slurm(job, config_path_, {"optimizer.lr=0.05"});
  EXPECT_THAT(script, HasSubstr("\n#SBATCH --ntasks=5\n"));
  EXPECT_THAT(script, HasSubstr("\n#SBATCH --signal=TERM@120\n"));  // stop with a checkpoint before the time limit
  EXPECT_THAT(script, HasSubstr("\n#SBATCH --job-name=Emit_Test.Job\n"));
  EXPECT_THAT(script, HasSubstr("\n#SBATCH --output=/shared/runs/Emit_Test.Job/slurm-%j.out\n"));
  EXPECT_THAT(script, HasSubstr("\nMASTER_ADDR=$(hostname -I | cut -d' ' -f1)\n"));
  EXPECT_THAT(script, HasSubstr("\nexport MASTER_PORT=${AIACC_MASTER_PORT:-$(( 29511 + ${SLURM_JOB_ID:-0} % 1000 ))}\n"));
  EXPECT_THAT(script, HasSubstr("\nsrun --kill-on-bad-exit=1 "));
  EXPECT_THAT(script, HasSubstr("cluster.launcher=external"));
}

TEST_F(EmitTest, SlurmScriptPassesArgumentsThroughBothShells) {
  if (testing::run_command("bash -c true").status != 0) GTEST_SKIP() << "no bash";
  const JobOptions job = load_job(config_path_, {});
  // Quotes, spaces and shell syntax must reach aiacc-train as typed.
  const std::string tricky = "train.note=it's \"quoted\" $(not run) `nor this` $HOME";
  const std::string script_path =
      write("job.sbatch", emit_slurm(job, config_path_, {"optimizer.lr=0.05", tricky}));
  const auto parsed = testing::run_command("bash -n " + script_path + " 2>&1");
  ASSERT_EQ(parsed.status, 0) << parsed.output;

  // Stand-ins: srun runs its command once (as one task would), scontrol names two nodes (not
  // used: the store's address is rank 0's), hostname -I gives two addresses, aiacc-train
  // (named by AIACC_TRAIN at sbatch, as on nodes that have it elsewhere) records what it was
  // given.
  const fs::path bin = folder_ / "bin";
  fs::create_directories(bin);
  const std::string args_file = (folder_ / "args.txt").string();
  const std::vector<std::pair<std::string, std::string>> stand_ins = {
      {"srun", "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n"},
      {"scontrol", "#!/bin/sh\nprintf 'node-a\\nnode-b\\n'\n"},
      {"hostname", "#!/bin/sh\necho '10.1.2.3 10.9.9.9 '\n"},
      {"aiacc-train", "#!/bin/sh\nprintf '%s\\n' \"MASTER_ADDR=$MASTER_ADDR\" "
                      "\"MASTER_PORT=$MASTER_PORT\" \"TOKEN_LENGTH=${#AIACC_JOB_TOKEN}\" \"$@\" > " +
                          args_file + "\n"},
  };
  for (const auto& [name, text] : stand_ins) {
    write("bin/" + name, text);
    fs::permissions(bin / name, fs::perms::owner_all);
  }
  // No token exported: the script makes a fresh one (64 hex characters) for every task.
  // Job 4242 takes port 29511 + 242 (two jobs sharing a first node must not collide), whatever
  // MASTER_PORT another tool left in the shell.
  const auto ran = testing::run_command("unset AIACC_JOB_TOKEN AIACC_MASTER_PORT; MASTER_PORT=29500 SLURM_JOB_ID=4242 "
                                        "AIACC_TRAIN=" + (bin / "aiacc-train").string() + " "
                                        "SLURM_JOB_NODELIST='node-[a-b]' "
                                        "PATH=" + bin.string() + ":$PATH bash " + script_path + " 2>&1");
  ASSERT_EQ(ran.status, 0) << ran.output;
  std::ifstream in(args_file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // Rank 0's store is reached at the address it binds on, not at the node's name.
  EXPECT_THAT(lines, ElementsAre("MASTER_ADDR=10.1.2.3", "MASTER_PORT=29753", "TOKEN_LENGTH=64", config_path_, "--set",
                                 "cluster.launcher=external", "--set",
                                 "cluster.ring.interface=10.1.2.3", "--set", "optimizer.lr=0.05",
                                 "--set", tricky));
}

// The script runs the aiacc-train that wrote it, by its absolute path: a build tree's program is
// on no node's PATH (the script used to run a bare "aiacc-train"). AIACC_TRAIN overrides it.
std::string slurm_program_line(const std::string& program) {
  return "\nAIACC_TRAIN=${AIACC_TRAIN:-" + shell_quote(program) + "}\nexport AIACC_TRAIN\n";
}

TEST_F(EmitTest, SlurmScriptRunsTheProgramThatWroteIt) {
  const std::string script = emit_slurm(load_job(config_path_, {}), config_path_, {});
  EXPECT_THAT(script, HasSubstr(slurm_program_line(fs::read_symlink("/proc/self/exe").string())));
  EXPECT_THAT(script, HasSubstr("bash -c 'exec \"$AIACC_TRAIN\" " + config_path_ + " \\\n"));
  EXPECT_THAT(script, ::testing::Not(HasSubstr("exec aiacc-train")));
}

// The same through the program itself, run by a relative path from a build tree (argv[1]: the
// path meson passes, absolute).
TEST_F(EmitTest, SlurmScriptFromTheProgramNamesItsAbsolutePath) {
  const auto& args = ::testing::internal::GetArgvs();
  if (args.size() < 2) GTEST_SKIP() << "give the path of aiacc-train as the first argument";
  const fs::path program = fs::canonical(args[1]);
  const fs::path relative = fs::relative(program, folder_);
  const auto emitted = testing::run_command("cd " + shell_quote(folder_.string()) + " && " +
                                            shell_quote(relative.string()) +
                                            " job.yaml --emit slurm 2>&1");
  ASSERT_EQ(emitted.status, 0) << emitted.output;
  EXPECT_THAT(emitted.output, HasSubstr(slurm_program_line(program.string())));
}

// A pod runs its image's aiacc-train: the manifest keeps the image's name for it, and says
// where to change it, not the emitting program's path (which no pod has).
TEST_F(EmitTest, KubernetesCommandIsTheImagesProgram) {
  const std::string manifest = emit_kubernetes(load_job(config_path_, {}), config_path_, {});
  const auto docs = YAML::LoadAll(manifest);
  const YAML::Node container = docs.at(3)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["command"].as<std::vector<std::string>>(), std::vector<std::string>{"aiacc-train"});
  EXPECT_THAT(manifest, HasSubstr("put its full path here if the image has it elsewhere"));
  EXPECT_THAT(manifest, ::testing::Not(HasSubstr(fs::read_symlink("/proc/self/exe").string())));
}

TEST_F(EmitTest, SlurmRejectsRunDirThatAnSbatchLineCannotHold) {
  JobOptions job = load_job(config_path_, {});
  job.job.run_dir = "/shared/my runs";
  try {
    emit_slurm(job, config_path_, {});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("job.run_dir"));
  }
}

TEST_F(EmitTest, BadJobNameIsAConfigError) {
  JobOptions job = load_job(config_path_, {});
  job.job.name = "___";
  try {
    emit_kubernetes(job, config_path_, {});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("job.name"));
    EXPECT_THAT(e.what(), HasSubstr("'___'"));
  }
}

TEST_F(EmitTest, UnknownTargetAndMissingConfigAreConfigErrors) {
  const JobOptions job = load_job(config_path_, {});
  EXPECT_THROW(emit_cluster_files("pbs", job, config_path_, {}), ConfigError);
  EXPECT_THROW(emit_kubernetes(job, (folder_ / "missing.yaml").string(), {}), ConfigError);
}

// A carried --set comes after the emitter's own and would win: every task a local launcher
// of a whole job, or every rank bound to one node's address.
TEST_F(EmitTest, CarriedSetsOfWhatTheEmitterSetsPerRankAreRefused) {
  const JobOptions job = load_job(config_path_, {});
  for (const std::string target : {"slurm", "kubernetes"}) {
    for (const std::string assignment :
         {"cluster.launcher=local", "cluster.ring.interface=10.0.0.5", "cluster.ring={interface: 10.0.0.5}"}) {
      try {
        (void)emit_cluster_files(target, job, config_path_, {assignment});
        FAIL() << "expected a ConfigError for " << assignment;
      } catch (const ConfigError& e) {
        EXPECT_THAT(e.what(), HasSubstr("--set " + assignment + ": --emit " + target + " sets"));
      }
    }
    EXPECT_NO_THROW((void)emit_cluster_files(target, job, config_path_, {"cluster.ring.streams=2"}));
  }
}

TEST(KubernetesName, IsADnsLabelStartingWithALetter) {
  EXPECT_EQ(kubernetes_name("mlp_fashion_mnist"), "mlp-fashion-mnist");
  EXPECT_EQ(kubernetes_name("  Wide&Deep -- v2!"), "wide-deep-v2");
  EXPECT_EQ(kubernetes_name("2024 run"), "job-2024-run");
  const std::string long_name = kubernetes_name(std::string(40, 'a') + "_" + std::string(40, 'b'));
  EXPECT_LE(long_name.size(), 52u);
  EXPECT_NE(long_name.back(), '-');
  EXPECT_THROW(kubernetes_name("--"), ConfigError);
}

TEST(ShellQuote, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(shell_quote("optimizer.lr=0.05"), "optimizer.lr=0.05");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

}  // namespace
}  // namespace aiacc::trainer
