// Every notice the controller gives, rendered: the exact lines users see.
#include "trainer/elastic/controller/notices.h"

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

StatePoint At(int64_t epoch, int64_t position, int64_t step) { return {epoch, position, step}; }

// One case a line: the notice, and the line it renders (no newline).
std::vector<std::pair<Notice, std::string>> EveryNotice() {
  return {
      {notice::NodeBlacklisted{2, 300000, 3},
       "driver: node 2 blacklisted for 300 s after 3 worker failures; its workers are not "
       "admitted"},
      {notice::NodeForgiven{2}, "driver: node 2 is no longer blacklisted"},
      {notice::AdmittingBlacklisted{2},
       "driver: admitting workers of blacklisted nodes: without them the job has fewer than "
       "--min-workers=2"},
      {notice::EveryWorkerGone{{SourceKind::kControllerCopy, 0, At(1, 512, 40)}},
       "driver: every worker is gone; the job waits up to --rendezvous-timeout for a worker to "
       "join and continues from the controller's copy (epoch 2 position 512 step 40)"},
      {notice::RestoresOlder{7, {SourceKind::kCheckpoint, 0, At(1, 0, 24)}, At(1, 512, 40)},
       "driver: warning: generation 7 restores epoch 2 position 0 step 24 from the newest "
       "checkpoint; the "
       "newer commit (epoch 2 position 512 step 40) was held only by workers that are gone: 16 "
       "steps are trained again"},
      {notice::StartsFromSeed{3},
       "driver: warning: generation 3 starts again from the seeded model: every worker was lost "
       "before the job's first commit, so the steps since the start are trained again"},
      {notice::WorkerLeaving{4, true},
       "driver: worker 4 is leaving (preemption notice); it leaves at the next commit"},
      {notice::WorkerLeaving{4, false},
       "driver: worker 4 is leaving (preemption notice); it leaves at the next epoch boundary"},
      {notice::EveryoneLeavingWithCopy{At(1, 0, 32)},
       "driver: every worker is leaving; the controller's copy keeps their last commit (epoch 2 "
       "position 0 step 32)"},
      {notice::EveryoneLeavingWithoutCopy{},
       "driver: every worker is leaving and the controller keeps no copy of their last commit "
       "(--state-copy-every=0); stopping with a checkpoint"},
      {notice::StateUnavailable{5, "no such file"},
       "driver: rank 0 of generation 5 could not load its state: no such file"},
      {notice::ResumeUnreadable{},
       "driver: error: --resume cannot continue without its checkpoint; stopping"},
      {notice::CollectivesKeptFailing{361500, 3, "timeout"},
       "driver: error: the workers' collectives kept failing for 361 s without a commit (last: "
       "worker 3: timeout); stopping. Can the workers' machines reach each other? "
       "(docs/operations.md)"},
      {notice::FaultReported{3, 5, "connection reset"},
       "driver: worker 3 reported a fault in generation 5 (connection reset); re-forming the "
       "generation"},
      {notice::StopAtEpochBoundary{"SIGTERM"},
       "driver: SIGTERM: stopping the job at the next epoch boundary with a checkpoint (again: at "
       "the next commit; a third time: at once, losing the work since the last commit)"},
      {notice::StopAtNextCommit{"SIGINT"},
       "driver: SIGINT again: stopping at the next commit (--commit-every)"},
      {notice::StoppedBeforeTraining{},
       "driver: stopped before training started; nothing to checkpoint"},
      {notice::WorkersExitedBeforeJoining{2},
       "driver: error: all 2 workers exited before joining the job; their errors are above"},
      {notice::StartTimedOut{1, 3, 120000},
       "driver: error: only 1 of 3 workers registered within 120 s"},
      {notice::TooFewCameBack{1, 2},
       "driver: error: only 1 workers came back after the controller restarted, below "
       "--min-workers=2; stopping"},
      {notice::NewestNotBack{At(3, 768, 130), 20000},
       "driver: no worker holding the newest commit (epoch 4 position 768 step 130) came back "
       "within 20 s; going on from the newest source left"},
      {notice::WorkersCameBack{2}, "driver: 2 workers came back after the controller restarted"},
      {notice::BelowMinimum{1, 2},
       "driver: 1 workers, below --min-workers=2; waiting up to --rendezvous-timeout for joins"},
      {notice::BelowMinimumTooLong{1, 10000, 2},
       "driver: error: only 1 workers for 10 s (--rendezvous-timeout), below --min-workers=2; "
       "stopping"},
      {notice::JoinWindowOpened{2, 2500, 4},
       "driver: 2 workers can train again; waiting for more that join together until none came "
       "for 2.5 s (--join-window; the job trained with up to 4)"},
      {notice::NoWorkerForCheckpoint{At(1, 512, 40)},
       "driver: no worker is left to write a checkpoint from the last commit; the newest "
       "checkpoint (epoch 2 position 512 step 40) is in --checkpoint-dir"},
      {notice::NoWorkerForCheckpoint{std::nullopt},
       "driver: no worker is left to write a checkpoint from the last commit; there is no "
       "checkpoint"},
      {notice::StateLost{StateLoss::kEveryWorkerLost, At(1, 512, 40), 60000},
       "driver: error: every worker was lost at epoch 2 position 512 step 40, and no other copy "
       "of the job's state exists: no worker holds a commit, the controller keeps no copy "
       "(--state-copy-every=0 or none sent yet) and no checkpoint was written. The job's "
       "progress is lost; nothing was overwritten. Start it again (with --resume if "
       "--checkpoint-dir holds an older checkpoint of this job)."},
      {notice::StateLost{StateLoss::kEveryHolderLost, std::nullopt, 60000},
       "driver: error: every holder of the state was lost, and no other copy of the job's state "
       "exists: no worker holds a commit, the controller keeps no copy (--state-copy-every=0 or "
       "none sent yet) and no checkpoint was written. The job's progress is lost; nothing was "
       "overwritten. Start it again (with --resume if --checkpoint-dir holds an older "
       "checkpoint of this job)."},
      {notice::StateLost{StateLoss::kLastSourceFailed, At(0, 256, 8), 60000},
       "driver: error: the last source of the state failed at epoch 1 position 256 step 8, and "
       "no other copy of the job's state exists: no worker holds a commit, the controller keeps "
       "no copy (--state-copy-every=0 or none sent yet) and no checkpoint was written. The job's "
       "progress is lost; nothing was overwritten. Start it again (with --resume if "
       "--checkpoint-dir holds an older checkpoint of this job)."},
      {notice::StateLost{StateLoss::kNoneBackAfterStall, At(0, 512, 16), 60000},
       "driver: error: every worker was lost while this process stalled, and none came back "
       "with its commit within 60 s at epoch 1 position 512 step 16, and no other copy of the "
       "job's state exists: no worker holds a commit, the controller keeps no copy "
       "(--state-copy-every=0 or none sent yet) and no checkpoint was written. The job's "
       "progress is lost; nothing was overwritten. Start it again (with --resume if "
       "--checkpoint-dir holds an older checkpoint of this job)."},
      {notice::StallNoticed{5040},
       "driver: this process stalled: no tick for 5.0 s (stopped or starved of CPU); workers "
       "lost now may only have lost the head meanwhile"},
      {notice::WaitingAfterStall{StateLoss::kEveryWorkerLost, 60000},
       "driver: every worker was lost right after this process stalled; waiting up to 60 s "
       "(--reconnect-timeout) for the workers to reconnect with their commits (they saw the "
       "head silent, and may only have lost it)"},
  };
}

TEST(NoticesTest, EveryNoticeRendersTheLineUsersSee) {
  for (const auto& [notice, line] : EveryNotice()) EXPECT_EQ(RenderNotice(notice), line);
}

TEST(NoticesTest, EveryKindHasACase) {
  std::vector<bool> seen(std::variant_size_v<Notice>, false);
  for (const auto& [notice, line] : EveryNotice()) seen[notice.index()] = true;
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "no case of alternative " << i;
}

TEST(NoticesTest, AStopsReasonIsItsErrorLineWithoutPrefixAndStopping) {
  EXPECT_EQ(StopReason(notice::BelowMinimumTooLong{1, 10000, 2}),
            "only 1 workers for 10 s (--rendezvous-timeout), below --min-workers=2");
  EXPECT_EQ(StopReason(notice::TooFewCameBack{0, 2}),
            "only 0 workers came back after the controller restarted, below --min-workers=2");
}

}  // namespace
}  // namespace elastic::trainer
