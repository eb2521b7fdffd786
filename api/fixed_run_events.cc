#include "api/fixed_run_events.h"

#include <unistd.h>

#include <utility>

namespace elastic {

namespace run_event = trainer::run_event;

// The one generation of a fixed world.
constexpr uint64_t kFixedGeneration = 0;

run_event::Epoch EpochEvent(const trainer::EpochSummary& s, const trainer::MetricLabel& metric) {
  run_event::Epoch e;
  e.epoch = s.epoch;
  e.epochs = s.epochs;
  e.world = s.world;
  e.train_loss = s.train_loss;
  e.train_metric = s.train_accuracy;
  e.test_loss = s.test_loss;
  e.test_metric = s.test_accuracy;
  e.samples_per_second = s.images_per_second;
  e.tokens_per_second = metric.unit == "tok" ? metric.Rate(s.images_per_second) : 0;
  e.seconds = s.seconds;
  e.arithmetic = s.arithmetic;
  e.learning_rate = s.lr;
  return e;
}

run_event::Done DoneEvent(const trainer::StatePoint& at, double metric, bool early_stopped) {
  run_event::Done e;
  e.generation = kFixedGeneration;
  e.epochs = at.epoch;
  e.steps = at.step;
  e.test_metric = metric;
  e.early_stop = early_stopped;
  return e;
}

FixedRunEvents::FixedRunEvents(trainer::EventLog& log, trainer::MetricLabel metric)
    : log_(log), metric_(std::move(metric)) {}

void FixedRunEvents::Start(const std::string& job_id, const trainer::TrainOptions& options,
                           int world) {
  run_event::Start e;
  e.job_id = job_id;
  e.model = options.model_file.empty() ? options.model : options.model_file;
  e.dataset = options.dataset;
  e.epochs = options.epochs;
  e.workers = world;
  e.metric = metric_.long_name;
  log_.Append(e);
}

void FixedRunEvents::End(int exit_code, const std::string& reason) {
  log_.Append(run_event::End{exit_code, reason});
}

void FixedRunEvents::OnParams(int rank, int world, const trainer::StatePoint& at, uint64_t checksum,
                              bool) {
  run_event::Params e;
  e.generation = kFixedGeneration;
  e.member = static_cast<uint64_t>(rank);
  e.rank = rank;
  e.world = world;
  e.checksum = checksum;
  e.point = at;
  e.pid = static_cast<int>(::getpid());
  log_.Append(e);
}

void FixedRunEvents::OnEpochEnd(const trainer::EpochSummary& summary) {
  log_.Append(EpochEvent(summary, metric_));
}

void FixedRunEvents::OnEvaluation(const trainer::EvaluationSummary& s) {
  run_event::Evaluation e;
  e.step = s.step;
  e.epoch = s.epoch;
  e.epoch_fraction = s.epoch_fraction;
  e.world = s.world;
  e.test_loss = s.test_loss;
  e.test_metric = s.test_accuracy;
  e.seconds = s.seconds;
  log_.Append(e);
}

void FixedRunEvents::OnCheckpoint(const trainer::StatePoint& at, const std::string& path) {
  run_event::Checkpoint e;
  e.point = at;
  e.path = path;
  log_.Append(e);
}

void FixedRunEvents::OnFinished(const trainer::StatePoint& at, double metric, bool early_stopped) {
  log_.Append(DoneEvent(at, metric, early_stopped));
}

}  // namespace elastic
