// Evaluation: a model's loss and metric (and, for a classifier, per-class
// accuracy) over some samples, as sums (EvalResult, objective.h) that the
// ranks' shards add up to exactly.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "models/net.h"
#include "trainer/data/loader.h"
#include "trainer/objective.h"
#include "trainer/precision.h"

namespace elastic::trainer {

// Runs the model in eval mode without gradients over every batch of
// `loader`'s pass over `indices` (autocast to `precision`), measured by `objective`.
EvalResult Evaluate(models::Net& model, Loader& loader, const std::vector<int64_t>& indices,
                    const Objective& objective, const torch::Device& device, Precision precision);

}  // namespace elastic::trainer
