// Ready-to-submit cluster files for a job (`aiacc-train JOB.yaml --emit slurm|kubernetes`): an
// sbatch script, or a Kubernetes manifest (ConfigMap + headless Service + Indexed Job). Both start
// cluster.workers + cluster.servers copies of the same `aiacc-train CONFIG [--set ...]` command,
// one per rank, which learn their rank from the launcher's environment (tools/trainer/launch.h).
#pragma once

#include <string>
#include <vector>

#include "tools/trainer/job_options.h"

namespace aiacc::trainer {

// The sbatch script for `job`, read from `config_path` (written into the script as given, so
// relative paths are relative to the folder sbatch is run from) with `overrides` ("key=value",
// passed on as --set). Throws ConfigError when job.name or job.run_dir cannot appear on an
// #SBATCH line (whitespace, quotes, backslashes), naming the key. The ranks run this program by
// its absolute path (/proc/self/exe), or $AIACC_TRAIN where it is set at sbatch.
std::string emit_slurm(const JobOptions& job, const std::string& config_path,
                       const std::vector<std::string>& overrides);

// The Kubernetes manifest (YAML, three documents) for `job`: the text of `config_path` goes into
// a ConfigMap that every pod mounts at /config/job.yaml. Every pod gets the job token in
// AIACC_JOB_TOKEN from the Secret <name>-token: a fresh one the manifest holds or, with
// cluster.security.token_file, one the user makes from that file (kubectl create secret, in the
// header), and then runs with token_file cleared. Throws ConfigError when the config file cannot
// be read, job.name gives no valid Kubernetes name, or the token file's path has a line break.
std::string emit_kubernetes(const JobOptions& job, const std::string& config_path,
                            const std::vector<std::string>& overrides);

// Dispatches on `target`: "slurm" or "kubernetes"; anything else is a ConfigError.
std::string emit_cluster_files(const std::string& target, const JobOptions& job,
                               const std::string& config_path,
                               const std::vector<std::string>& overrides);

// The name of the job's Kubernetes objects: job.name lower-cased, every run of other characters
// than [a-z0-9] turned into one '-', trimmed of '-', prefixed "job-" when it does not start with
// a letter (Service names must), at most 52 characters so that pod host names
// "<name>-<index>" and "<name>-config" stay valid DNS labels. Throws ConfigError naming job.name
// when nothing is left.
std::string kubernetes_name(const std::string& job_name);

// `text` as one POSIX shell word: unchanged when it is made only of characters no shell treats
// specially, else in single quotes.
std::string shell_quote(const std::string& text);

}  // namespace aiacc::trainer
