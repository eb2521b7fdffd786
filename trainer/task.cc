#include "trainer/task.h"

#include <torch/torch.h>

#include <sstream>
#include <stdexcept>

namespace elastic::trainer {
namespace {

std::string Shape(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

void Task::Check() const {
  const std::string what = "task '" + name + "'";
  if (name.empty()) throw std::invalid_argument("a task needs a name");
  if (!model) throw std::invalid_argument(what + " has no model");
  if (!train || train->size() == 0) throw std::invalid_argument(what + " has no training data");
  if (!test) throw std::invalid_argument(what + " has no test data");
  if (!objective) throw std::invalid_argument(what + " has no objective");
  CheckModelFitsData();
}

void Task::CheckModelFitsData() const {
  const std::string what = "model '" + model_name + "'";
  std::shared_ptr<models::Net> net = model();
  net->eval();
  const int64_t n = std::min<int64_t>(2, train->size());
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < n; ++i) indices.push_back(i);
  const Batch batch = train->Get(indices, BatchRequest{});
  torch::NoGradGuard no_grad;
  torch::Tensor output;
  try {
    output = net->forward(batch.inputs);
  } catch (const std::exception& e) {
    throw std::invalid_argument(what + " cannot run on the inputs of " + train->name() + " " +
                                Shape(batch.inputs) + ": " + e.what());
  }
  const int64_t classes = objective->num_classes();
  if (classes > 0 && (output.dim() != 2 || output.size(0) != n || output.size(1) != classes)) {
    throw std::invalid_argument(
        what + " outputs " + Shape(output) + " for " + std::to_string(n) + " inputs of " +
        train->name() + ", which has " + std::to_string(classes) + " classes: it must output [" +
        std::to_string(n) + ", " + std::to_string(classes) + "] (one score per class)");
  }
  try {
    objective->Loss(output.to(torch::kFloat32), batch.targets);
  } catch (const std::exception& e) {
    throw std::invalid_argument(what + "'s output " + Shape(output) + " does not fit the targets " +
                                Shape(batch.targets) + " of " + train->name() + ": " + e.what());
  }
}

}  // namespace elastic::trainer
