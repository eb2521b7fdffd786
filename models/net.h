// The one interface every model of the zoo implements.
#ifndef ELASTIC_MODELS_NET_H_
#define ELASTIC_MODELS_NET_H_

#include <torch/nn/module.h>
#include <torch/types.h>

namespace elastic::models {

// Base of every model: one input [N,3,32,32] float -> logits [N,num_classes].
// Callers hold models as Net so the trainer never names a concrete model.
class Net : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_NET_H_
