// Batch norm followed by an optional residual add and ReLU, as one autograd
// node over channels-last data (models/batch_norm_kernels.h says why).
//
// BatchNormAct(bn, x, Activation::kRelu, shortcut) computes
// relu(bn(x) + shortcut) with bn's parameters and running statistics, exactly
// what the module and the two ops would compute, so state dicts, optimisers
// and checkpoints do not see the difference. The fused kernels run for 4-D
// channels-last float or bfloat16 inputs to a module with affine parameters
// and running statistics, in training (an autograd node) and in evaluation
// without autograd (one pass with the running statistics); anything else
// (contiguous tensors, other dtypes, evaluation with autograd on) takes the
// module and ATen's ops.
#ifndef ELASTIC_MODELS_BATCH_NORM_ACT_H_
#define ELASTIC_MODELS_BATCH_NORM_ACT_H_

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

namespace elastic::models {

enum class Activation { kIdentity, kRelu };

torch::Tensor BatchNormAct(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                           Activation activation, const torch::Tensor& residual = {});

// Whether BatchNormAct takes the fused kernel for these arguments.
bool FusedBatchNormApplies(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                           const torch::Tensor& residual = {});

// Process-wide switch, on by default: benchmarks and tests compare the fused
// kernel against ATen's ops in one process.
void EnableFusedBatchNorm(bool enabled);
bool FusedBatchNormEnabled();

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_BATCH_NORM_ACT_H_
