// Where a training job is: after `step` optimizer steps, at `position`
// samples into (0-based) `epoch`. A commit, a checkpoint and the state a
// generation restores are each named by one; the loop (epoch_plan.h) and the
// elastic controller (elastic/job_controller.h) both speak of them.
#pragma once

#include <cstdint>
#include <string>

namespace elastic::trainer {

struct StatePoint {
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t step = 0;
};
// Commits of one job are ordered by (step, epoch, position).
bool operator<(const StatePoint& a, const StatePoint& b);
bool operator==(const StatePoint& a, const StatePoint& b);
std::string ToString(const StatePoint& point);  // "epoch 3 position 128 step 40" (epoch 1-based)

}  // namespace elastic::trainer
