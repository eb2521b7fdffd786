// Which device a process trains on: the --device flag resolved against what
// this LibTorch build and this machine actually have.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace elastic::trainer {

// auto: a CUDA device when one is usable, else the CPU. cuda: device
// `local_index` modulo the number of devices, so that the workers of one
// machine spread over its GPUs (NCCL allows one rank per GPU). cuda:N: device N.
// Throws std::runtime_error, naming what is missing, when CUDA is asked for and
// this build or machine has none, or N is out of range.
torch::Device ResolveDevice(const std::string& spec, int64_t local_index);

}  // namespace elastic::trainer
