// The decisions of a worker's epoch loop (worker.cc, Worker::Train) that need
// no model, no communicator and no clock: how a step is split across the
// world, which samples a rank trains for the rest of an epoch, when a step is
// followed by a commit, and what the epoch boundary does. Kept apart from the
// worker so that they are tested as tables (epoch_plan_test.cc) rather than
// through multi-process jobs, and without LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "trainer/sampler.h"
#include "trainer/state_point.h"

namespace elastic::trainer {

// The flags that bound training, as the plan needs them.
struct TrainingLimits {
  int64_t train_size = 0;        // samples of an epoch (the data set, cut by --train-samples)
  int64_t epochs = 0;            // --epochs
  int64_t max_steps = 0;         // --max-steps; 0: no limit
  int64_t commit_every = 1;      // --commit-every (>= 1)
  int64_t checkpoint_every = 1;  // --checkpoint-every (>= 1)
  int64_t eval_every = 0;        // --eval-every: steps; 0: only at epoch boundaries
};

// How the optimizer steps of one generation are split across its world.
struct StepShape {
  int world = 1;
  int rank = 0;
  int64_t step_samples = 1;     // samples of a full step, all ranks together
  int64_t share = 0;            // this rank's samples of a full step (0 when world > step_samples)
  std::vector<int64_t> shares;  // every rank's, summing to step_samples
};

// --global-batch samples a step whatever the world, else --batch-size per
// rank (the mean share once shares are sized by speed); split evenly.
StepShape ShapeSteps(int64_t global_batch, int64_t batch_size, int world, int rank);

// `shape` with its full steps split as `shares` (a rank each, summing to its step_samples).
StepShape WithShares(StepShape shape, const std::vector<int64_t>& shares);

// Every sample this rank trains on from `position` to the end of the epoch
// whose permutation is `permutation`, step after step: what its loader is
// started on, so that each loader batch is exactly one step's share.
std::vector<int64_t> RankSamples(const ElasticSampler& sampler,
                                 const std::vector<int64_t>& permutation, int64_t position,
                                 const StepShape& shape);

// --max-steps is set and `step` steps have been taken.
bool StepLimitReached(const TrainingLimits& limits, int64_t step);

// Nothing is left to train: --epochs done, an early stop, or --max-steps.
bool TrainingFinished(const TrainingLimits& limits, const StatePoint& at, bool stopped_early);

// Every sample of the epoch has been trained on: the epoch boundary is next.
bool EpochTrained(const TrainingLimits& limits, int64_t position);

// Another step of this epoch follows the one that left training at `at`: the
// epoch has samples left and --max-steps is not reached.
bool StepsRemain(const TrainingLimits& limits, const StatePoint& at);

// Whether the step that left training at `at` is followed by an evaluation
// inside the epoch: every --eval-every optimizer steps (counted over the whole
// job, so a job that resumes evaluates where it would have), except after an
// epoch's or the job's last step, whose boundary evaluates anyway.
bool EvaluationDue(const TrainingLimits& limits, const StatePoint& at);

// Whether the step that left training at `at`, `steps_since_commit` steps
// after the last commit, is followed by a commit: every --commit-every steps,
// and after the last step of the epoch or of the job (--max-steps), because
// only a commit sums the ranks' loss and accuracy (the epoch summary must count
// every step) and a failure in the evaluation that follows should lose none.
bool CommitDue(const TrainingLimits& limits, const StatePoint& at, int64_t steps_since_commit);

// Where a commit is taken, for the stop requests it honours.
enum class CommitAt {
  kStep,           // after a step: only a request for the next commit
  kEpochBoundary,  // at a boundary training goes on from: any request
  kLastBoundary,   // at the boundary that ends the job: none (it finishes anyway)
};

// Whether rank 0 stops the generation at this commit, given the controller's
// request (true: at the next commit; false: at the next epoch boundary;
// nullopt: none). A stop at the last boundary would make the controller
// publish a view that never trains.
bool StopsHere(std::optional<bool> request, CommitAt at);

// What an epoch boundary does once the epoch is ended and committed.
struct EpochEnd {
  // Rank 0 writes a checkpoint of the boundary commit. Never at the last
  // boundary: the loop then ends and rank 0 writes the final checkpoint.
  bool checkpoint = false;
  // The generation ends for a membership change the boundary commit asked for.
  bool leave = false;
  // Training is over: the loop ends, rank 0 writes the final checkpoint and reports Done.
  bool finish = false;
};

// The boundary's decision. `next` is where training stands after it (the
// next epoch, position 0), `stopped_early` what ending the epoch said, and
// `stop_requested` whether the boundary commit asked everyone to stop. A stop
// at the last boundary finishes the job instead of leaving the generation.
EpochEnd PlanEpochEnd(const TrainingLimits& limits, const StatePoint& next, bool stopped_early,
                      bool stop_requested);

}  // namespace elastic::trainer
