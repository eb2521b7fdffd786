#include "trainer/epoch_plan.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

// An epoch of 100 samples, 3 epochs, a commit every 4 steps, a checkpoint every 2 epochs.
TrainingLimits Limits(int64_t max_steps = 0) {
  TrainingLimits limits;
  limits.train_size = 100;
  limits.epochs = 3;
  limits.max_steps = max_steps;
  limits.commit_every = 4;
  limits.checkpoint_every = 2;
  return limits;
}

TEST(EpochPlanTest, ShapeSteps) {
  struct Case {
    int64_t global_batch, batch_size;
    int world, rank;
    int64_t step_samples, share;
  };
  const Case cases[] = {
      {0, 32, 1, 0, 32, 32},   // one worker: its --batch-size
      {0, 32, 4, 3, 128, 32},  // --batch-size per worker
      {20, 32, 3, 0, 20, 7},   // --global-batch whatever the world: 7/7/6
      {20, 32, 3, 2, 20, 6},
      {20, 8, 1, 0, 20, 20},  // one rank's share may exceed --batch-size (micro-batches)
      {2, 32, 3, 1, 2, 1},    // more ranks than samples: the last takes none
      {2, 32, 3, 2, 2, 0},
  };
  for (const Case& c : cases) {
    const StepShape shape = ShapeSteps(c.global_batch, c.batch_size, c.world, c.rank);
    SCOPED_TRACE(testing::Message() << "global_batch=" << c.global_batch << " batch_size="
                                    << c.batch_size << " world=" << c.world << " rank=" << c.rank);
    EXPECT_EQ(shape.world, c.world);
    EXPECT_EQ(shape.rank, c.rank);
    EXPECT_EQ(shape.step_samples, c.step_samples);
    EXPECT_EQ(shape.share, c.share);
  }
}

TEST(EpochPlanTest, RankSamplesAreTheRanksStepSharesInOrder) {
  struct Case {
    int64_t size, position, step_samples;
    int world;
  };
  const Case cases[] = {
      {100, 0, 20, 3},   // uneven shares, whole epoch
      {103, 0, 20, 3},   // a short last step
      {103, 60, 20, 3},  // restored in the middle of the epoch
      {10, 0, 2, 3},     // more ranks than samples a step
      {10, 10, 4, 2},    // at the end of the epoch: nothing left
      {10, 9, 4, 4},     // one sample left: rank 0 takes it
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "size=" << c.size << " position=" << c.position
                                    << " step_samples=" << c.step_samples << " world=" << c.world);
    const ElasticSampler sampler(c.size, 5);
    const std::vector<int64_t> perm = sampler.Permutation(2);
    std::multiset<int64_t> all;
    for (int rank = 0; rank < c.world; ++rank) {
      const StepShape shape = ShapeSteps(c.step_samples, 1, c.world, rank);
      std::vector<int64_t> expected;
      for (int64_t pos = c.position; pos < c.size; pos += c.step_samples) {
        const std::vector<int64_t> step =
            sampler.StepIndices(perm, pos, rank, c.world, c.step_samples);
        expected.insert(expected.end(), step.begin(), step.end());
      }
      const std::vector<int64_t> mine = RankSamples(sampler, perm, c.position, shape);
      EXPECT_EQ(mine, expected) << "rank " << rank;
      all.insert(mine.begin(), mine.end());
    }
    // The ranks together train the rest of the epoch, each sample once.
    EXPECT_EQ(all, std::multiset<int64_t>(perm.begin() + c.position, perm.end()));
  }
}

// Shares sized by speed change at commits, worlds change at faults and
// joins: whatever the split, the ranks together train every sample of the
// epoch exactly once, the short last step included.
TEST(EpochPlanTest, EverySampleOnceThroughRePlansAndResizes) {
  struct Segment {
    int world;
    std::vector<int64_t> shares;  // empty: the even split
    int steps;                    // then a commit re-plans or the world changes
  };
  const int64_t size = 1003, global_batch = 24;
  const Segment segments[] = {
      {2, {}, 3},           {2, {16, 8}, 5},       {2, {20, 4}, 4}, {3, {}, 2},
      {3, {12, 4, 8}, 6},   {4, {1, 1, 1, 21}, 3}, {1, {}, 2},      {4, {6, 6, 6, 6}, 2},
      {3, {22, 1, 1}, 100},  // to the end of the epoch (a short last step of 19)
  };
  const ElasticSampler sampler(size, 11);
  const std::vector<int64_t> perm = sampler.Permutation(4);
  std::multiset<int64_t> trained;
  int64_t position = 0;
  for (const Segment& segment : segments) {
    for (int step = 0; step < segment.steps && position < size; ++step) {
      for (int rank = 0; rank < segment.world; ++rank) {
        StepShape shape = ShapeSteps(global_batch, 8, segment.world, rank);
        if (!segment.shares.empty()) shape = WithShares(shape, segment.shares);
        const std::vector<int64_t> mine = sampler.StepIndices(perm, position, rank, shape.shares);
        if (position + global_batch <= size) {
          EXPECT_EQ(static_cast<int64_t>(mine.size()), shape.share);
        }
        trained.insert(mine.begin(), mine.end());
        // The loader's view of the rest of the epoch starts with this step's share.
        const std::vector<int64_t> rest = RankSamples(sampler, perm, position, shape);
        ASSERT_GE(rest.size(), mine.size());
        EXPECT_TRUE(std::equal(mine.begin(), mine.end(), rest.begin()));
      }
      position = sampler.NextPosition(position, global_batch);
    }
  }
  ASSERT_EQ(position, size);
  EXPECT_EQ(trained, std::multiset<int64_t>(perm.begin(), perm.end()));
}

TEST(EpochPlanTest, AShortLastStepIsSplitInProportionToTheShares) {
  const ElasticSampler sampler(30, 1);
  const std::vector<int64_t> perm = sampler.Permutation(0);
  // 24 a step as 18 + 6: the last 6 samples go 4.5 : 1.5, rounded 5 + 1.
  EXPECT_EQ(sampler.StepIndices(perm, 24, 0, {18, 6}).size(), 5u);
  EXPECT_EQ(sampler.StepIndices(perm, 24, 1, {18, 6}).size(), 1u);
  // Even shares split it evenly, as before shares were sized.
  EXPECT_EQ(sampler.StepIndices(perm, 24, 0, {12, 12}).size(), 3u);
  EXPECT_EQ(sampler.StepIndices(perm, 24, 1, {12, 12}), sampler.StepIndices(perm, 24, 1, 2, 24));
}

TEST(EpochPlanTest, WithSharesRefusesWhatIsNotASplitOfTheStep) {
  const StepShape shape = ShapeSteps(24, 8, 2, 1);
  EXPECT_EQ(WithShares(shape, {20, 4}).share, 4);
  EXPECT_THROW(WithShares(shape, {20, 5}), std::invalid_argument);
  EXPECT_THROW(WithShares(shape, {24}), std::invalid_argument);
}

TEST(EpochPlanTest, TrainingFinished) {
  struct Case {
    int64_t max_steps;
    StatePoint at;
    bool stopped_early, finished;
  };
  const Case cases[] = {
      {0, {0, 0, 0}, false, false},     // the start
      {0, {2, 99, 70}, false, false},   // inside the last epoch
      {0, {3, 0, 75}, false, true},     // --epochs done
      {0, {1, 0, 25}, true, true},      // an early stop
      {30, {1, 20, 29}, false, false},  // below --max-steps
      {30, {1, 24, 30}, false, true},   // --max-steps reached in the middle of an epoch
      {30, {1, 0, 31}, false, true},    // past it (a commit from a run with a larger limit)
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "max_steps=" << c.max_steps << " at " << ToString(c.at)
                                    << " stopped_early=" << c.stopped_early);
    EXPECT_EQ(TrainingFinished(Limits(c.max_steps), c.at, c.stopped_early), c.finished);
  }
}

TEST(EpochPlanTest, StepsRemainAndEpochTrained) {
  struct Case {
    int64_t max_steps;
    StatePoint at;
    bool remain, trained;
  };
  const Case cases[] = {
      {0, {0, 0, 0}, true, false},      // the start of an epoch
      {0, {0, 96, 24}, true, false},    // one short step left
      {0, {0, 100, 25}, false, true},   // the epoch is trained
      {0, {0, 120, 25}, false, true},   // a position past the end counts as trained
      {25, {0, 96, 24}, true, false},   // one step below --max-steps
      {25, {1, 4, 25}, false, false},   // --max-steps cuts the epoch
      {25, {0, 100, 25}, false, true},  // both at once
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "max_steps=" << c.max_steps << " at " << ToString(c.at));
    EXPECT_EQ(StepsRemain(Limits(c.max_steps), c.at), c.remain);
    EXPECT_EQ(EpochTrained(Limits(c.max_steps), c.at.position), c.trained);
  }
}

TEST(EpochPlanTest, EvaluationDueEveryEvalEverySteps) {
  struct Case {
    int64_t eval_every, max_steps;
    StatePoint at;
    bool due;
  };
  const Case cases[] = {
      {0, 0, {0, 40, 10}, false},   // --eval-every=0: epoch boundaries only
      {5, 0, {0, 40, 10}, true},    // every --eval-every steps
      {5, 0, {0, 44, 11}, false},   // between them
      {5, 0, {1, 20, 30}, true},    // counted over the job, not the epoch
      {5, 0, {0, 100, 25}, false},  // the epoch's last step: its boundary evaluates
      {5, 30, {1, 20, 30}, false},  // --max-steps' last step: the same
      {5, 35, {1, 20, 30}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "eval_every=" << c.eval_every << " max_steps=" << c.max_steps
                                    << " at " << ToString(c.at));
    TrainingLimits limits = Limits(c.max_steps);
    limits.eval_every = c.eval_every;
    EXPECT_EQ(EvaluationDue(limits, c.at), c.due);
  }
}

TEST(EpochPlanTest, CommitDueAfterAStep) {
  struct Case {
    int64_t commit_every, max_steps;
    StatePoint at;
    int64_t steps_since_commit;
    bool due;
  };
  const Case cases[] = {
      {4, 0, {0, 12, 3}, 3, false},   // between commits
      {4, 0, {0, 16, 4}, 4, true},    // every --commit-every steps
      {4, 0, {0, 100, 25}, 1, true},  // the end of the epoch, whatever the count
      {4, 0, {1, 8, 27}, 2, false},   // counted from the last commit, not the epoch's start
      {1, 0, {0, 4, 1}, 1, true},     // --commit-every=1: after every step
      {100, 0, {0, 60, 15}, 15, false},
      {100, 0, {0, 100, 25}, 25, true},  // a commit interval longer than the epoch
      {4, 10, {0, 40, 10}, 2, true},     // --max-steps reached: the job's last commit
      {4, 10, {0, 36, 9}, 1, false},     // one step before it
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "commit_every=" << c.commit_every << " max_steps=" << c.max_steps << " at "
                 << ToString(c.at) << " steps_since_commit=" << c.steps_since_commit);
    TrainingLimits limits = Limits(c.max_steps);
    limits.commit_every = c.commit_every;
    EXPECT_EQ(CommitDue(limits, c.at, c.steps_since_commit), c.due);
  }
}

TEST(EpochPlanTest, StopsHere) {
  const std::optional<bool> none, at_boundary = false, at_commit = true;
  EXPECT_FALSE(StopsHere(none, CommitAt::kStep));
  EXPECT_FALSE(StopsHere(none, CommitAt::kEpochBoundary));
  EXPECT_FALSE(StopsHere(at_boundary, CommitAt::kStep));
  EXPECT_TRUE(StopsHere(at_boundary, CommitAt::kEpochBoundary));
  EXPECT_TRUE(StopsHere(at_commit, CommitAt::kStep));
  EXPECT_TRUE(StopsHere(at_commit, CommitAt::kEpochBoundary));
  // The job ends at its last boundary whatever was asked.
  EXPECT_FALSE(StopsHere(at_boundary, CommitAt::kLastBoundary));
  EXPECT_FALSE(StopsHere(at_commit, CommitAt::kLastBoundary));
}

TEST(EpochPlanTest, EpochBoundary) {
  struct Case {
    int64_t checkpoint_every, max_steps;
    int64_t next_epoch;  // the epoch the boundary enters, at position 0
    bool stopped_early, stop_requested;
    bool checkpoint, leave, finish;
  };
  const Case cases[] = {
      // --checkpoint-every=2 over 3 epochs: after epoch 2 only; after epoch 3
      // the final checkpoint (written once the loop ends) takes its place.
      {2, 0, 1, false, false, false, false, false},
      {2, 0, 2, false, false, true, false, false},
      {2, 0, 3, false, false, false, false, true},
      // A stop requested at the boundary commit: the checkpoint that is due is
      // written before the generation ends.
      {2, 0, 1, false, true, false, true, false},
      {2, 0, 2, false, true, true, true, false},
      // A stop at the last boundary finishes the job rather than leaving it.
      {2, 0, 3, false, true, false, false, true},
      // An early stop makes this the last boundary.
      {2, 0, 2, true, false, false, false, true},
      {2, 0, 2, true, true, false, false, true},
      // --checkpoint-every=1: every boundary but the last.
      {1, 0, 1, false, false, true, false, false},
      {1, 0, 3, false, false, false, false, true},
      // --max-steps counts as finished here too, though Train's loop ends
      // before a boundary that --max-steps reached.
      {1, 50, 2, false, false, false, false, true},
      {1, 60, 2, false, true, true, true, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "checkpoint_every=" << c.checkpoint_every << " max_steps=" << c.max_steps
                 << " next_epoch=" << c.next_epoch << " stopped_early=" << c.stopped_early
                 << " stop_requested=" << c.stop_requested);
    TrainingLimits limits = Limits(c.max_steps);
    limits.checkpoint_every = c.checkpoint_every;
    const StatePoint next{c.next_epoch, 0, 50};  // step 50: at --max-steps=50, below 60
    const EpochEnd end = PlanEpochEnd(limits, next, c.stopped_early, c.stop_requested);
    EXPECT_EQ(end.checkpoint, c.checkpoint);
    EXPECT_EQ(end.leave, c.leave);
    EXPECT_EQ(end.finish, c.finish);
  }
}

}  // namespace
}  // namespace elastic::trainer
