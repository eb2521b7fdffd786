// The World of a fixed group of ranks: one process (no communicator) or one
// rank of an MPI job. Nobody joins or leaves, nothing stops it at a commit;
// rank 0 prints the progress (progress.h) and each rank logs its parameter
// checksum to stderr at the start and the end. What happened also goes to a
// RunObserver (run_observer.h), the job's event log: each rank's checksums,
// and rank 0's epochs, evaluations, checkpoints and end.
#pragma once

#include <cstdio>
#include <string>

#include "trainer/progress.h"
#include "trainer/run_observer.h"
#include "trainer/world.h"

namespace elastic::trainer {

class FixedWorld : public World {
 public:
  // `comm` (null: a world of one) and `observer` (null: none) must outlive
  // the world; rank 0 prints to `out`.
  FixedWorld(collectives::Communicator* comm, std::FILE* out, int64_t epochs, int64_t log_every,
             MetricLabel metric, RunObserver* observer = nullptr);
  ~FixedWorld() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  collectives::Communicator* control() override { return comm_; }
  collectives::Communicator* data() override { return comm_; }
  const std::string& token() const override { return token_; }
  bool keeps_commits() const override { return false; }

  void OnSynced(const StatePoint& at, uint64_t checksum) override;
  void OnRanksAgreeAtEnd(uint64_t checksum) override;
  void OnEpochStart(int64_t epoch, int64_t steps_in_epoch) override;
  void OnProgress(const StepReport& report) override;
  void OnCommit(const CommitReport& report) override;
  void OnEpochEnd(const EpochSummary& summary) override;
  void OnEvaluation(const EvaluationSummary& summary) override;
  void OnShares(const ShareReport& report) override;
  void OnCheckpoint(const StatePoint& at, const std::string& path) override;
  void OnFinished(const StatePoint& at, double metric, bool early_stopped) override;

  // Where rank 0's lines go (a null sink on the other ranks).
  std::FILE* out() const { return out_; }
  // Training samples per second of training time (evaluation excluded) so far.
  double train_images_per_second() const;

 private:
  void LogChecksum(const char* when, uint64_t checksum) const;

  collectives::Communicator* comm_;
  int rank_;
  int size_;
  const std::string token_;  // empty: MPI's ranks are one job's, no peer to prove it to
  std::FILE* quiet_ = nullptr;
  std::FILE* out_;
  RunObserver* observer_;
  RunObserver none_;  // observer_ when none was given
  StatePoint at_;     // the newest point the ranks are at (for the end's checksum)
  int64_t epochs_;
  ProgressReporter reporter_;
  // The current epoch's samples and training seconds at its last step, and
  // the finished epochs' sums.
  double epoch_images_ = 0, epoch_seconds_ = 0;
  double epoch_eval_seconds_ = 0;  // --eval-every's evaluations of this epoch: not training
  double images_ = 0, seconds_ = 0;
};

}  // namespace elastic::trainer
