// The World of one generation of an elastic job (world.h): its ranks are the
// generation's members, its communicators the generation's Gloo one (and NCCL
// for gradients on GPUs), and what the training loop reports goes to the job's
// controller as typed messages. Rank 0 stops the generation at a commit when
// the controller asked it to (a join or a leave); every commit keeps the state
// in memory, and every --state-copy-every-th is sent to the controller.
//
// What outlives the generation (the copy schedule, the stats, the watchdog,
// the sample log) belongs to the worker process and is lent here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "trainer/elastic/protocol/worker_stats.h"
#include "trainer/elastic/worker/controller_link.h"
#include "trainer/elastic/worker/step_watchdog.h"
#include "trainer/elastic/worker/trainer_inbox.h"
#include "trainer/elastic/worker/worker_policy.h"
#include "trainer/world.h"

namespace elastic::trainer {

// What a generation borrows from its worker process (all outlive it).
struct WorkerServices {
  ControllerLink* controller = nullptr;
  TrainerInbox* inbox = nullptr;
  WorkerStats* stats = nullptr;
  WorkerStatsPublisher* stats_publisher = nullptr;
  StepWatchdog* watchdog = nullptr;
  CopySchedule* copies = nullptr;
  CopyFrameCheck* frame_check = nullptr;
  std::FILE* sample_log = nullptr;      // --log-samples (null: off)
  std::function<void()> poll_draining;  // before each step: SIGTERM reported once
  // This worker is too slow to be worth keeping (World::OnLetGo): it leaves
  // as a graceful leave does, saying why.
  std::function<void(const std::string& why)> let_go;
  // Rank 0 wrote the checkpoint of a point (the worker remembers the last).
  std::function<void(const StatePoint& at)> checkpointed;
  std::string token;           // the cluster token: seals every state
  int64_t wedge_at_step = -1;  // ELASTIC_TEST_WEDGE_STEP
};

// The commit sealed for the controller's copy; empty (said once) when one
// frame cannot carry it.
std::string SealedCopy(const Commit& commit, const WorkerServices& services);

// Says that the checkpoint at `path` now holds `at`: in the worker's log and
// to the controller (which then never replaces it with an older state).
void ReportCheckpoint(const ControllerLink& controller, const StatePoint& at,
                      const std::string& path);

// The worker's allreduce and step-time record to the controller: when one is
// due, or `always` (a generation's last counts, before the worker may leave).
void PublishStats(const WorkerServices& services, bool always);

class GenerationWorld : public World {
 public:
  // `control` and `data` (the same on a CPU) must outlive the world.
  GenerationWorld(const WorkerServices& services, uint64_t generation, int rank, int size,
                  collectives::Communicator* control, collectives::Communicator* data);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  collectives::Communicator* control() override { return control_; }
  collectives::Communicator* data() override { return data_; }
  const std::string& token() const override { return services_.token; }
  bool keeps_commits() const override { return true; }

  bool StopRequested(CommitAt at) override;
  void OnSynced(const StatePoint& at, uint64_t checksum) override;
  void BeforeStep(const StatePoint& at, const std::vector<int64_t>& indices) override;
  void AfterStep(double seconds) override;
  void OnProgress(const StepReport& report) override;
  void OnCommit(const CommitReport& report) override;
  void OnShares(const ShareReport& report) override;
  void OnLetGo(int rank, const std::string& why) override;
  void OnEpochEnd(const EpochSummary& summary) override;
  void OnEvaluation(const EvaluationSummary& summary) override;
  void OnCheckpoint(const StatePoint& at, const std::string& path) override;
  void OnFinished(const StatePoint& at, double metric, bool early_stopped) override;

 private:
  const WorkerServices& services_;
  const uint64_t generation_;
  const int rank_;
  const int size_;
  collectives::Communicator* control_;
  collectives::Communicator* data_;
};

}  // namespace elastic::trainer
