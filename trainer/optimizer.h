// Optimizers behind one small interface: SGD (momentum, Nesterov, weight
// decay) and Adam (L2 decay coupled into the gradient) from LibTorch, AdamW
// (decoupled decay, of matrices and embeddings only) as LibTorch's with its
// update fused (fused_adamw.h), and Lookahead, which wraps any of them.
//
// The learning rate is set from outside before every step (the schedule owns
// it), and the whole state saves to and loads from a LibTorch archive so it
// travels in checkpoints and elastic commits.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace elastic::trainer {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd", "adam" or "adamw"
  double lr = 0.1;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  bool lookahead = false;
  int64_t lookahead_k = 5;
  double lookahead_alpha = 0.5;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void ZeroGrad() = 0;
  // One update from the gradients now in the parameters' .grad().
  virtual void Step() = 0;
  virtual void SetLearningRate(double lr) = 0;
  virtual void Save(torch::serialize::OutputArchive& archive) const = 0;
  // Throws if the archive holds another optimizer's state.
  virtual void Load(torch::serialize::InputArchive& archive) = 0;
  // The state this optimizer keeps for `param`, by name ("momentum"; Adam's
  // "exp_avg" and "exp_avg_sq"; Lookahead's "slow"): empty before its first step.
  virtual std::map<std::string, torch::Tensor> StateOf(const torch::Tensor& param) const = 0;
};

// SGD, Adam or AdamW over `params`, wrapped in Lookahead when
// options.lookahead. AdamW decays the parameters of two dimensions or more
// (matrices, convolutions, embeddings) and not the others (biases, norms'
// gains), as nanoGPT's optimizer groups do.
std::unique_ptr<Optimizer> MakeOptimizer(const std::vector<torch::Tensor>& params,
                                         const OptimizerOptions& options);

// Lookahead (Zhang et al. 2019, arXiv:1907.08610): the inner optimizer takes
// k fast steps; then the slow weights move alpha of the way towards the fast
// weights, and the fast weights restart from the slow ones.
class Lookahead : public Optimizer {
 public:
  Lookahead(std::unique_ptr<Optimizer> inner, std::vector<torch::Tensor> params, int64_t k,
            double alpha);

  void ZeroGrad() override { inner_->ZeroGrad(); }
  void Step() override;
  void SetLearningRate(double lr) override { inner_->SetLearningRate(lr); }
  void Save(torch::serialize::OutputArchive& archive) const override;
  void Load(torch::serialize::InputArchive& archive) override;
  std::map<std::string, torch::Tensor> StateOf(const torch::Tensor& param) const override;

  int64_t fast_steps() const { return fast_steps_; }
  const std::vector<torch::Tensor>& slow_weights() const { return slow_; }

 private:
  std::unique_ptr<Optimizer> inner_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> slow_;
  int64_t k_;
  double alpha_;
  int64_t fast_steps_ = 0;
};

}  // namespace elastic::trainer
