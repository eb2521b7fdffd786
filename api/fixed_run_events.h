// The event log of a run in a fixed world: one process, or one rank of an
// mpirun job (trainer/fixed_world.h). The same events.jsonl as an elastic
// job's (docs/events.md), through the same EventLog and rendering: rank 0
// writes `start`, `epoch`, `evaluation`, `checkpoint`, `done` and `end`;
// every rank appends its own `params` lines (after the start's sync and at
// the end) to the one file. A fixed world is one generation, 0, whose member
// ids are the ranks.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/elastic/controller/run_events.h"
#include "trainer/progress.h"
#include "trainer/run_observer.h"
#include "trainer/train_options.h"

namespace elastic {

// The events of a run, as RunObserver is told them; `log` must outlive it.
class FixedRunEvents : public trainer::RunObserver {
 public:
  FixedRunEvents(trainer::EventLog& log, trainer::MetricLabel metric);

  // Rank 0, first: the job of `world` ranks started (`start`, job id `job_id`).
  void Start(const std::string& job_id, const trainer::TrainOptions& options, int world);
  // Rank 0, last: the process exits with `exit_code` (`end`, `reason` its words).
  void End(int exit_code, const std::string& reason);

  void OnParams(int rank, int world, const trainer::StatePoint& at, uint64_t checksum,
                bool end) override;
  void OnEpochEnd(const trainer::EpochSummary& summary) override;
  void OnEvaluation(const trainer::EvaluationSummary& summary) override;
  void OnCheckpoint(const trainer::StatePoint& at, const std::string& path) override;
  void OnFinished(const trainer::StatePoint& at, double metric, bool early_stopped) override;

 private:
  trainer::EventLog& log_;
  trainer::MetricLabel metric_;
};

// The events of a fixed world as docs/events.md names them.
trainer::run_event::Epoch EpochEvent(const trainer::EpochSummary& summary,
                                     const trainer::MetricLabel& metric);
trainer::run_event::Done DoneEvent(const trainer::StatePoint& at, double metric,
                                   bool early_stopped);

}  // namespace elastic
