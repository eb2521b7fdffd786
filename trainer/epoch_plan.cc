#include "trainer/epoch_plan.h"

#include <numeric>
#include <stdexcept>

#include "trainer/shares.h"

namespace elastic::trainer {

StepShape ShapeSteps(int64_t global_batch, int64_t batch_size, int world, int rank) {
  StepShape shape;
  shape.world = world;
  shape.rank = rank;
  shape.step_samples = global_batch > 0 ? global_batch : world * batch_size;
  return WithShares(shape, EvenShares(shape.step_samples, world));
}

StepShape WithShares(StepShape shape, const std::vector<int64_t>& shares) {
  if (shares.size() != static_cast<size_t>(shape.world) ||
      std::accumulate(shares.begin(), shares.end(), int64_t{0}) != shape.step_samples)
    throw std::invalid_argument("epoch plan: shares that are not a split of the step");
  shape.shares = shares;
  shape.share = shares[static_cast<size_t>(shape.rank)];
  return shape;
}

std::vector<int64_t> RankSamples(const ElasticSampler& sampler,
                                 const std::vector<int64_t>& permutation, int64_t position,
                                 const StepShape& shape) {
  std::vector<int64_t> mine;
  for (int64_t pos = position; pos < sampler.dataset_size();
       pos = sampler.NextPosition(pos, shape.step_samples)) {
    const std::vector<int64_t> step =
        sampler.StepIndices(permutation, pos, shape.rank, shape.shares);
    mine.insert(mine.end(), step.begin(), step.end());
  }
  return mine;
}

bool StepLimitReached(const TrainingLimits& limits, int64_t step) {
  return limits.max_steps > 0 && step >= limits.max_steps;
}

bool TrainingFinished(const TrainingLimits& limits, const StatePoint& at, bool stopped_early) {
  return at.epoch >= limits.epochs || stopped_early || StepLimitReached(limits, at.step);
}

bool EpochTrained(const TrainingLimits& limits, int64_t position) {
  return position >= limits.train_size;
}

bool StepsRemain(const TrainingLimits& limits, const StatePoint& at) {
  return !EpochTrained(limits, at.position) && !StepLimitReached(limits, at.step);
}

bool EvaluationDue(const TrainingLimits& limits, const StatePoint& at) {
  return limits.eval_every > 0 && at.step % limits.eval_every == 0 && StepsRemain(limits, at);
}

bool CommitDue(const TrainingLimits& limits, const StatePoint& at, int64_t steps_since_commit) {
  return steps_since_commit >= limits.commit_every || !StepsRemain(limits, at);
}

bool StopsHere(std::optional<bool> request, CommitAt at) {
  if (!request || at == CommitAt::kLastBoundary) return false;
  return *request || at == CommitAt::kEpochBoundary;
}

EpochEnd PlanEpochEnd(const TrainingLimits& limits, const StatePoint& next, bool stopped_early,
                      bool stop_requested) {
  EpochEnd end;
  end.finish = TrainingFinished(limits, next, stopped_early);
  end.checkpoint = !end.finish && next.epoch % limits.checkpoint_every == 0;
  end.leave = stop_requested && !end.finish;
  return end;
}

}  // namespace elastic::trainer
