// Single-process training loop. Distributed synchronisation (ring, parameter servers) plugs in
// through the parameters' grad-ready hooks in later work; here every gradient is local.
#include "tools/trainer/trainer.h"

#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "tools/trainer/metrics.h"

namespace aiacc::trainer {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

data::LoaderOptions loader_options(const JobOptions& o, bool training) {
  return data::loader_options(o.data, training, o.job.seed);
}

}  // namespace

struct Trainer::State {
  JobOptions options;
  std::shared_ptr<spdlog::logger> log = log::get("trainer");
  std::unique_ptr<data::Dataset> train_data;
  std::unique_ptr<data::Dataset> test_data;
  std::unique_ptr<models::Model> model;
  std::vector<Parameter*> dense_params;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::filesystem::path run_path;
  std::ofstream metrics;
  std::int64_t steps_per_epoch = 0;
  std::int64_t total_steps = 0;

  void write_metrics(const nlohmann::json& record) {
    metrics << record.dump() << '\n';
    metrics.flush();
  }
};

Trainer::Trainer(const JobOptions& options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = options;
  if (options.job.threads > 0) omp_set_num_threads(options.job.threads);

  s.train_data = data::make_dataset(options.data.train, data::DatasetContext{"train", options.job.seed});
  s.test_data = data::make_dataset(options.data.test, data::DatasetContext{"test", options.job.seed});

  models::ModelContext context;
  context.input = s.train_data->spec();
  context.seed = options.job.seed;
  s.model = models::make_model(options.model, context);
  for (Parameter* p : s.model->parameters()) {
    if (p->kind() != ParamKind::dense) {
      throw ConfigError(fmt::format(
          "model.type '{}' has the sparse parameter '{}', which needs an embedding store "
          "(local sparse updates or parameter servers); this build trains dense models only",
          options.model.type, p->name()));
    }
    s.dense_params.push_back(p);
  }
  s.optimizer = std::make_unique<optim::Optimizer>(options.optimizer, s.dense_params);

  data::Loader probe(*s.train_data, loader_options(options, true), 0, 1);
  s.steps_per_epoch = probe.batches_per_epoch();
  s.total_steps = options.train.epochs * s.steps_per_epoch;
  if (options.train.max_steps > 0) s.total_steps = std::min(s.total_steps, options.train.max_steps);
  if (s.total_steps == 0) {
    throw ConfigError(fmt::format("data.batch_size {} leaves no full batch in {} training examples",
                                  options.data.batch_size, s.train_data->size()));
  }
}

Trainer::~Trainer() = default;

void Trainer::describe(std::ostream& out) const {
  const State& s = *state_;
  out << fmt::format("data: {} training and {} test examples, batch {} -> {} steps per epoch, "
                     "{} steps in all\n",
                     s.train_data->size(), s.test_data->size(), s.options.data.batch_size,
                     s.steps_per_epoch, s.total_steps);
  out << fmt::format("model: {}, example shape {}\n", s.options.model.type,
                     s.train_data->spec().example_shape.str());
  out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", "parameter", "shape", "elements", "kind",
                     "synchronisation");
  std::int64_t total = 0;
  for (Parameter* p : s.model->parameters()) {
    total += p->value().numel();
    out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", p->name(), p->value().shape().str(),
                       p->value().numel(), p->kind() == ParamKind::dense ? "dense" : "sparse",
                       "local (1 process)");
  }
  out << fmt::format("{} parameters, {:.1f} MiB in f32\n", total, total * 4.0 / (1 << 20));
}

EvalResult Trainer::evaluate() {
  State& s = *state_;
  data::Loader loader(*s.test_data, loader_options(s.options, false), 0, 1);
  loader.start_epoch(0);
  MetricMeter meter(s.test_data->spec().task);
  while (auto batch = loader.next()) {
    double loss = s.model->forward(*batch, /*training=*/false);
    meter.add(loss, s.model->outputs(), batch->labels);
  }
  return EvalResult{meter.mean_loss(), meter.accuracy(), meter.examples()};
}

TrainResult Trainer::run() {
  State& s = *state_;
  const JobOptions& o = s.options;
  s.run_path = std::filesystem::path(o.job.run_dir) / o.job.name;
  std::error_code ec;
  std::filesystem::create_directories(s.run_path, ec);
  if (ec) throw IoError(fmt::format("cannot create the run folder {}: {}", s.run_path.string(), ec.message()));
  s.metrics.open(s.run_path / "metrics.jsonl", std::ios::app);
  if (!s.metrics) throw IoError(fmt::format("cannot write {}", (s.run_path / "metrics.jsonl").string()));
  std::ofstream(s.run_path / "config.yaml") << resolved_yaml(o);

  optim::LrSchedule schedule(o.optimizer.schedule, o.optimizer.lr, s.total_steps);
  data::Loader loader(*s.train_data, loader_options(o, true), 0, 1);
  const Task task = s.train_data->spec().task;
  MetricMeter interval(task);
  TrainResult result;
  const auto start = Clock::now();
  auto interval_start = start;
  double eval_seconds = 0;
  std::int64_t step = 0;
  const std::int64_t epochs = (s.total_steps + s.steps_per_epoch - 1) / s.steps_per_epoch;
  s.log->info("training {} for {} steps ({} epochs of {}), run folder {}", o.model.type,
              s.total_steps, epochs, s.steps_per_epoch, s.run_path.string());

  for (std::int64_t epoch = 0; epoch < epochs && step < s.total_steps; ++epoch) {
    loader.start_epoch(epoch);
    while (step < s.total_steps) {
      auto batch = loader.next();
      if (!batch) break;
      const double lr = schedule.lr_at(step);
      const double loss = s.model->forward(*batch, /*training=*/true);
      if (!std::isfinite(loss)) {
        throw Error(fmt::format("the training loss became {} at step {} (epoch {}); lower "
                                "optimizer.lr or check the data", loss, step, epoch));
      }
      s.model->backward();
      s.optimizer->step(lr);
      interval.add(loss, s.model->outputs(), batch->labels);
      ++step;
      if (step % o.train.log_every_steps == 0 || step == s.total_steps) {
        const double elapsed = seconds_since(interval_start);
        const double rate = static_cast<double>(interval.examples()) / std::max(elapsed, 1e-9);
        s.log->info("epoch {}/{} step {}/{} loss {:.4f} {} {:.4f} lr {:.5f} samples/s {:.1f}",
                    epoch + 1, epochs, step, s.total_steps, interval.mean_loss(),
                    task == Task::classification ? "acc" : "acc@0.5", interval.accuracy(), lr, rate);
        s.write_metrics({{"kind", "train"}, {"step", step}, {"epoch", epoch + 1},
                         {"loss", interval.mean_loss()}, {"accuracy", interval.accuracy()},
                         {"lr", lr}, {"samples_per_s", rate}});
        if (result.first_train_loss == 0) result.first_train_loss = interval.mean_loss();
        result.last_train_loss = interval.mean_loss();
        interval.reset();
        interval_start = Clock::now();
      }
    }
    if (o.train.eval_each_epoch) {
      const auto eval_start = Clock::now();
      EvalResult eval = evaluate();
      s.log->info("epoch {}/{} test loss {:.4f} accuracy {:.4f} ({} examples)", epoch + 1, epochs,
                  eval.loss, eval.accuracy, eval.examples);
      s.write_metrics({{"kind", "eval"}, {"step", step}, {"epoch", epoch + 1}, {"loss", eval.loss},
                       {"accuracy", eval.accuracy}, {"examples", eval.examples}});
      result.last_eval = eval;
      // Evaluation time is not training time: shift the interval's start past it.
      interval_start += Clock::now() - eval_start;
      eval_seconds += seconds_since(eval_start);
    }
  }
  result.steps = step;
  result.seconds = seconds_since(start) - eval_seconds;
  result.samples_per_second =
      static_cast<double>(step * o.data.batch_size) / std::max(result.seconds, 1e-9);
  s.log->info("done: {} steps in {:.1f} s of training ({:.1f} samples/s){}", step, result.seconds,
              result.samples_per_second,
              result.last_eval ? fmt::format(", test accuracy {:.4f}", result.last_eval->accuracy) : "");
  return result;
}

}  // namespace aiacc::trainer
