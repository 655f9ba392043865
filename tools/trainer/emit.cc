// Emitted sbatch scripts and Kubernetes manifests. They are written as text (not through a YAML
// emitter) so that they keep the comments a person reads before submitting them.
#include "tools/trainer/emit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "core/config/node.h"
#include "core/error.h"
#include "core/net/security.h"

namespace aiacc::trainer {

namespace {

// Host names are DNS labels (63 characters); this leaves room for "-<index>" and "-config".
constexpr std::size_t kMaxKubernetesName = 52;
// Where the pods find the config: the ConfigMap's volume.
constexpr const char* kPodConfigFolder = "/config";
constexpr const char* kPodConfigPath = "/config/job.yaml";
constexpr const char* kPodWorkingFolder = "/workspace";

// Set on every emitted rank, before the user's --set (which come last, so they win): ranks take
// their rank from the cluster's launcher and must never start local processes.
constexpr const char* kExternalLauncher = "cluster.launcher=external";

// A pod takes the user's token from AIACC_JOB_TOKEN, which wins over cluster.security.token_file
// (net::job_token_from_environment); the file's path is the emitting machine's and names
// nothing in a pod, so the pods run with it cleared. Set after the user's --set, which may
// carry the path.
constexpr const char* kNoTokenFile = "cluster.security.token_file=''";

// The batch script's job token: a fresh one per submission unless the submitter exported one;
// srun hands the environment to every task.
constexpr const char* kSlurmToken = R"(# The job token (cluster.security): every rank must hold the same one. A fresh one for
# this run unless AIACC_JOB_TOKEN is already set; srun passes it to every task.
if [ -z "${AIACC_JOB_TOKEN:-}" ]; then
  AIACC_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
fi
export AIACC_JOB_TOKEN

)";

// The emitting program's absolute path, which the Slurm script runs: a bare name would need
// aiacc-train on every node's PATH, which a build tree does not give. "aiacc-train" (PATH's)
// where the kernel cannot say.
std::string this_program() {
  std::error_code error;
  const std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error || path.empty() ? "aiacc-train" : path.string();
}

std::string join(const std::vector<std::string>& words, const std::string& separator) {
  std::string out;
  for (const auto& word : words) {
    if (!out.empty()) out += separator;
    out += word;
  }
  return out;
}

// "ranks 0-1 are workers, rank 2 a parameter-server shard": how the comments name the world.
std::string describe_ranks(const ClusterOptions& cluster) {
  auto range = [](int first, int count) {
    return count == 1 ? fmt::format("rank {}", first)
                      : fmt::format("ranks {}-{}", first, first + count - 1);
  };
  std::string text = fmt::format("{} {}", range(0, cluster.workers),
                                 cluster.workers == 1 ? "is the worker" : "are workers");
  if (cluster.servers > 0) {
    text += fmt::format(", {} {}", range(cluster.workers, cluster.servers),
                        cluster.servers == 1 ? "the parameter-server shard"
                                             : "parameter-server shards");
  }
  return text;
}

// An #SBATCH line ends at whitespace and takes no shell quoting, so values must not need any.
void check_sbatch_value(const std::string& key, const std::string& value) {
  const bool bad = std::any_of(value.begin(), value.end(), [](unsigned char c) {
    return std::isspace(c) || c == '"' || c == '\'' || c == '\\';
  });
  if (bad) {
    throw ConfigError(fmt::format(
        "{}: '{}' has whitespace, a quote or a backslash, which an #SBATCH line cannot carry; "
        "choose one without them for --emit slurm", key, value));
  }
}

// Slurm expands %j, %x, ... in --output; a literal '%' is written "%%".
std::string escape_slurm_pattern(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

// A double-quoted YAML scalar (JSON strings are valid YAML): safe for any text.
std::string yaml_quote(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Kubernetes expands $(VAR) in command and args and reads "$$" as "$": doubling every '$'
// passes the user's text through unchanged.
std::string escape_kubernetes_expansion(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '$') out += '$';
  }
  return out;
}

std::string read_config_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot open the config file", path));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(fmt::format("{}: cannot read the config file", path));
  // A YAML literal block cannot carry '\r'; CRLF files load the same without it.
  std::string out;
  for (char c : text.str()) {
    if (c != '\r') out += c;
  }
  return out;
}

// `text` as the value of a key at `indent` columns: a literal block whose explicit indentation
// indicator keeps lines that start with spaces intact.
std::string yaml_literal_block(const std::string& text, int indent) {
  if (text.empty()) return "\"\"\n";
  std::string out = "|2\n";
  const std::string margin(static_cast<std::size_t>(indent + 2), ' ');
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) out += line.empty() ? "\n" : margin + line + "\n";
  return out;
}

// The manifest's header with cluster.security.token_file: how to make the Secret <name>-token
// from the file (the token is the user's: the manifest does not hold it), which every pod
// reads into AIACC_JOB_TOKEN.
std::string token_file_header(const std::string& token_file, const std::string& name) {
  if (token_file.find_first_of("\r\n") != std::string::npos) {
    throw ConfigError("cluster.security.token_file: the path has a line break, which the "
                      "manifest's comments and kubectl command cannot carry");
  }
  return fmt::format(
      "# The job token is the file cluster.security.token_file ({file}): before applying this,\n"
      "# put it in the Secret every pod reads into {variable} (and keep the Secret private):\n"
      "#   kubectl create secret generic {name}-token --from-file=token={file}\n"
      "# The pods run with cluster.security.token_file cleared: the path is this machine's.\n",
      fmt::arg("file", shell_quote(token_file)), fmt::arg("name", name),
      fmt::arg("variable", net::kJobTokenVariable));
}

}  // namespace

std::string shell_quote(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("_@%+=:,./-").find(static_cast<char>(c)) !=
                                  std::string_view::npos;
  });
  if (plain) return text;
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string kubernetes_name(const std::string& job_name) {
  std::string name;
  for (unsigned char c : job_name) {
    if (std::isalnum(c) && c < 0x80) {
      name += static_cast<char>(std::tolower(c));
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.empty()) {
    throw ConfigError(fmt::format(
        "job.name: '{}' has no letter or digit to name the job's Kubernetes objects after",
        job_name));
  }
  if (!std::isalpha(static_cast<unsigned char>(name.front()))) name = "job-" + name;
  if (name.size() > kMaxKubernetesName) name.resize(kMaxKubernetesName);
  while (name.back() == '-') name.pop_back();
  return name;
}

std::string emit_slurm(const JobOptions& job, const std::string& config_path,
                       const std::vector<std::string>& overrides) {
  check_sbatch_value("job.name", job.job.name);
  check_sbatch_value("job.run_dir", job.job.run_dir);
  const auto& cluster = job.cluster;
  const std::string job_folder = job.job.run_dir + "/" + job.job.name;

  // The rank's command runs in a shell of its own inside each task, because only there is the
  // node's address known; the user's arguments are quoted for that shell, and the whole
  // command once more for the batch script's. One --set a line, continued with '\'.
  std::vector<std::string> rank_command = {"exec \"$AIACC_TRAIN\" " + shell_quote(config_path)};
  rank_command.push_back(std::string("--set ") + kExternalLauncher);
  rank_command.push_back("--set cluster.ring.interface=\"$(hostname -I | cut -d\" \" -f1)\"");
  for (const auto& assignment : overrides) {
    rank_command.push_back("--set " + shell_quote(assignment));
  }

  return fmt::format(
      R"(#!/bin/bash
# Slurm batch script of job '{name}'; submit it with sbatch.
# Written by: aiacc-train {config} --emit slurm
# {world} tasks, one rank each: {ranks}.
# Rank 0 serves the rendezvous store on the allocation's first node.
# job.run_dir ({run_dir}) must be on a filesystem every node shares: checkpoints and
# metrics go to {folder}.
# Slurm does not create the --output folder: mkdir -p {folder} first.
#SBATCH --job-name={name}
#SBATCH --ntasks={world}
#SBATCH --output={output}/slurm-%j.out
{signal}# Slurm packs the tasks onto as few nodes as fit; to give every rank a node of its own,
# enable these (drop one '#'). Add --time, --partition, --cpus-per-task, --gres=gpu:N.
##SBATCH --nodes={world}
##SBATCH --ntasks-per-node=1

set -eu
# This script and task 0 (rank 0) run on the allocation's first node, and rank 0 binds its
# store on the node's first address (hostname -I): the others reach it there. (The node's
# name may resolve to another address, e.g. Debian's 127.0.1.1.)
MASTER_ADDR=$(hostname -I | cut -d' ' -f1)
export MASTER_ADDR
# Two jobs whose first node is the same would collide on one port: each takes
# cluster.master_port ({port}) plus its job id modulo {span}, unless AIACC_MASTER_PORT is set
# when sbatch runs (sbatch passes the environment on; a MASTER_PORT left in the shell from
# other tools is not used).
export MASTER_PORT=${{AIACC_MASTER_PORT:-$(( {port} + ${{SLURM_JOB_ID:-0}} % {span} ))}}

{token}# The program every task runs: the aiacc-train that wrote this script. It must be at this
# path on every node (a shared filesystem, or the same install on each); else set
# AIACC_TRAIN to its path on the nodes when sbatch runs (sbatch passes the environment on).
AIACC_TRAIN=${{AIACC_TRAIN:-{program}}}
export AIACC_TRAIN

# Every task is one rank (SLURM_PROCID). It binds its ring and parameter-server listeners
# on its node's first address (hostname -I): name another one if the ranks must use a
# particular network. Relative paths are relative to the folder sbatch was run from. One
# failed rank ends the job.
# shellcheck disable=SC2016  # $AIACC_TRAIN, $(hostname -I) are for each task's shell
srun --kill-on-bad-exit=1 bash -c {command}
)",
      fmt::arg("name", job.job.name), fmt::arg("config", config_path),
      fmt::arg("world", cluster.world_size()), fmt::arg("ranks", describe_ranks(cluster)),
      fmt::arg("run_dir", job.job.run_dir), fmt::arg("folder", job_folder),
      fmt::arg("output", escape_slurm_pattern(job_folder)), fmt::arg("port", cluster.master_port),
      fmt::arg("span", std::min(1000, 65536 - cluster.master_port)),
      fmt::arg("command", shell_quote(join(rank_command, " \\\n  "))),
      fmt::arg("program", shell_quote(this_program())),
      // A configured token file is the job's token: do not shadow it with a generated one.
      fmt::arg("token", cluster.security.curve && cluster.security.token_file.empty() ? kSlurmToken : ""),
      fmt::arg("signal", job.train.checkpoint.on_signal
                             ? "# At the time limit Slurm sends SIGTERM and, KillWait (often 30 s) later, SIGKILL: the\n"
                               "# SIGTERM comes 120 s early instead, so the workers stop at a step with a checkpoint\n"
                               "# (train.checkpoint.on_signal) that the next submission resumes from.\n"
                               "#SBATCH --signal=TERM@120\n"
                             : ""));
}

std::string emit_kubernetes(const JobOptions& job, const std::string& config_path,
                            const std::vector<std::string>& overrides) {
  const std::string name = kubernetes_name(job.job.name);
  const auto& cluster = job.cluster;

  const std::string run_dir_in_pod = job.job.run_dir.front() == '/'
                                         ? job.job.run_dir
                                         : std::string(kPodWorkingFolder) + "/" + job.job.run_dir;

  // The job token (cluster.security.curve), from the Secret <name>-token into every pod's
  // AIACC_JOB_TOKEN: a fresh one this manifest holds, or the user's, made from the token file.
  // The variable, not a mounted file: a Secret's files are root's, and aiacc-train takes only a
  // token file of its own user, which would make the ranks run as root.
  std::string secret, token_env, token_header;
  if (cluster.security.curve) {
    token_env = fmt::format(R"(            - name: {variable}
              valueFrom:
                secretKeyRef: {{name: {name}-token, key: token}}
)",
                            fmt::arg("variable", net::kJobTokenVariable), fmt::arg("name", name));
    if (cluster.security.token_file.empty()) {
      secret = fmt::format(R"(---
# The job token: every pod of this job, and nothing else, can join it. This file holds it:
# keep it private (or drop this Secret and create {name}-token yourself).
apiVersion: v1
kind: Secret
metadata:
  name: {name}-token
  labels: {{aiacc-train/job: {name}}}
type: Opaque
stringData:
  token: {token}
)",
                           fmt::arg("name", name), fmt::arg("token", net::generate_job_token()));
    } else {
      token_header = token_file_header(cluster.security.token_file, name);
    }
  }

  // $(POD_IP) is expanded by Kubernetes from the env below: listeners bind on the pod's address.
  std::vector<std::string> args = {kPodConfigPath, "--set", kExternalLauncher, "--set",
                                   "cluster.ring.interface=$(POD_IP)"};
  for (const auto& assignment : overrides) {
    args.insert(args.end(), {"--set", escape_kubernetes_expansion(assignment)});
  }
  if (!token_header.empty()) args.insert(args.end(), {"--set", kNoTokenFile});
  std::string args_lines;
  for (const auto& arg : args) args_lines += "            - " + yaml_quote(arg) + "\n";

  // Kubernetes' default 30 s between SIGTERM and SIGKILL may not cover a checkpoint's save.
  const std::string grace =
      job.train.checkpoint.on_signal
          ? "      # A deleted or preempted pod gets SIGTERM: the workers stop at a step they agree on and\n"
            "      # save a checkpoint there (train.checkpoint.on_signal) before SIGKILL comes.\n"
            "      terminationGracePeriodSeconds: 300\n"
          : "";

  // Job, Service and pods share the label aiacc-train/job, so the Service selects exactly this
  // job's pods.
  return fmt::format(
      R"(# Kubernetes manifest of job '{job_name}'; submit it with kubectl apply -f.
# Written by: aiacc-train {config} --emit kubernetes
# Pod i runs rank i of {world}: {ranks}.
# Rank 0 (pod host {name}-0) serves the rendezvous store on port {port}.
# job.run_dir ({run_dir}) must be on a volume every pod shares (a ReadWriteMany
# PersistentVolumeClaim, see volumeMounts below): checkpoints and metrics go there,
# and resuming needs them after the pods are gone.
{token_header}---
# The job's config as given; every pod reads it from {pod_config}.
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}-config
  labels: {{aiacc-train/job: {name}}}
data:
  job.yaml: {config_text}{secret}---
# Headless: gives every pod the DNS name <pod host>.<service>, so MASTER_ADDR finds rank 0.
apiVersion: v1
kind: Service
metadata:
  name: {name}
  labels: {{aiacc-train/job: {name}}}
spec:
  clusterIP: None
  selector: {{aiacc-train/job: {name}}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels: {{aiacc-train/job: {name}}}
spec:
  # Indexed: pod i gets completion index i (its rank) and the host name {name}-<i>.
  completionMode: Indexed
  completions: {world}
  parallelism: {world}
  # A failed rank fails the whole job: the others cannot go on without it.
  backoffLimit: 0
  template:
    metadata:
      labels: {{aiacc-train/job: {name}}}
    spec:
      subdomain: {name}
      restartPolicy: Never
{grace}      containers:
        - name: aiacc-train
          # Placeholder: an image with aiacc-train on its PATH and the data the config reads.
          image: aiacc-train:latest
          # Relative paths in the config (job.run_dir, data files) are relative to this.
          workingDir: {pod_workdir}
          # The image's aiacc-train, found on its PATH (pods run the image's copy, not the one that
          # wrote this manifest): put its full path here if the image has it elsewhere.
          command: ["aiacc-train"]
          args:
{args}          env:
            - name: RANK
              valueFrom:
                fieldRef:
                  fieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            - name: WORLD_SIZE
              value: "{world}"
            - name: LOCAL_RANK
              value: "0"
            - name: MASTER_ADDR
              value: {name}-0.{name}
            - name: MASTER_PORT
              value: "{port}"
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
{token_env}          # job.threads 0 runs as many compute threads as limits.cpu allows (rounded up):
          # resources: {{limits: {{cpu: "8", memory: 32Gi, nvidia.com/gpu: 1}}}}
          volumeMounts:
            - {{name: config, mountPath: {pod_config_folder}, readOnly: true}}
            # - {{name: runs, mountPath: {pod_run_dir}}}
      volumes:
        - {{name: config, configMap: {{name: {name}-config}}}}
        # - {{name: runs, persistentVolumeClaim: {{claimName: aiacc-runs}}}}
)",
      fmt::arg("job_name", job.job.name), fmt::arg("config", config_path), fmt::arg("name", name),
      fmt::arg("world", cluster.world_size()), fmt::arg("ranks", describe_ranks(cluster)),
      fmt::arg("port", cluster.master_port), fmt::arg("run_dir", job.job.run_dir),
      fmt::arg("pod_config", kPodConfigPath), fmt::arg("pod_config_folder", kPodConfigFolder),
      fmt::arg("pod_workdir", kPodWorkingFolder),
      fmt::arg("pod_run_dir", yaml_quote(run_dir_in_pod)),
      fmt::arg("config_text", yaml_literal_block(read_config_text(config_path), 2)),
      fmt::arg("args", args_lines), fmt::arg("secret", secret), fmt::arg("token_env", token_env),
      fmt::arg("token_header", token_header),
      fmt::arg("grace", grace));
}

std::string emit_cluster_files(const std::string& target, const JobOptions& job,
                               const std::string& config_path,
                               const std::vector<std::string>& overrides) {
  // The emitted command sets these per rank; a carried --set comes after it and would win:
  // every task its own local launcher (a whole job each), every rank bound to one address.
  for (const auto& assignment : overrides) {
    const std::string key = assignment.substr(0, assignment.find('='));
    for (const std::string_view owned : {"cluster.launcher", "cluster.ring.interface"}) {
      if (config::is_key_or_section_holding(key, std::string(owned))) {
        throw ConfigError(fmt::format("--set {}: --emit {} sets {} for every rank itself (external; each node's "
                                      "own address); leave it out",
                                      assignment, target, owned));
      }
    }
  }
  if (target == "slurm") return emit_slurm(job, config_path, overrides);
  if (target == "kubernetes") return emit_kubernetes(job, config_path, overrides);
  throw ConfigError(fmt::format("--emit {}: unknown target; known: slurm, kubernetes", target));
}

}  // namespace aiacc::trainer
