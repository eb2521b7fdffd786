// A fingerprint of a model's parameters, to check that data-parallel ranks
// hold the same model without sending it.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace elastic::trainer {

// FNV-1a over the bytes of every parameter, in order: equal on two ranks
// exactly when their parameters are bit-identical (up to a 2^-64 collision).
uint64_t ParameterChecksum(const std::vector<torch::Tensor>& parameters);

}  // namespace elastic::trainer
