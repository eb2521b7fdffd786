// Batch norm's statistics re-estimated at the current weights before an
// evaluation ("precise BN": Wu and Johnson, "Rethinking 'Batch' in BatchNorm").
//
// The running averages that eval mode uses trail the weights by about
// 1 / momentum steps. Early in training the weights move faster than that, so
// a model evaluated with them can look broken while it trains well: ResNet18
// at world 1 on the CIFAR-10 subset printed a test loss of 5.49 after its
// second epoch, and 2.00 with the same weights and statistics recomputed over
// 1,024 training images (docs/training.md). A large world takes few steps an
// epoch and lags further.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "models/net.h"
#include "trainer/data/loader.h"
#include "trainer/precision.h"

namespace elastic::trainer {

// Replaces the running mean and variance of every torch::nn batch norm in
// `model` by the plain average of its batch statistics over `loader`'s pass
// over `indices` (train-mode forwards without gradients; the weights are not
// touched), then averages them over the ranks of `comm` weighted by their
// batches, so every rank ends with the same statistics. Every rank must call
// it, with or without indices of its own. Returns the batches averaged over
// all ranks; 0 when the model has no torch::nn batch norm (a TorchScript
// module from --model-file), whose statistics are left as they were.
int64_t RecomputeBatchNormStatistics(models::Net& model, Loader& loader,
                                     const std::vector<int64_t>& indices,
                                     const torch::Device& device, Precision precision,
                                     collectives::Communicator* comm);

}  // namespace elastic::trainer
