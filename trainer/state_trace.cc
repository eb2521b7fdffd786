#include "trainer/state_trace.h"

#include <torch/serialize.h>

#include <stdexcept>
#include <string_view>
#include <system_error>
#include <vector>

#include "runtime/atomic_file.h"

namespace elastic::trainer {
namespace {

using TensorDict = c10::Dict<std::string, torch::Tensor>;

torch::Tensor Scalar(double value) { return torch::tensor(value, torch::kDouble); }

// A copy of `t` that owns contiguous CPU memory: pickle_save writes storages
// whole, and a view would carry its base's.
torch::Tensor Own(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU).contiguous().clone();
}

void Write(const std::filesystem::path& path, const TensorDict& dict) {
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  runtime::WriteFileAtomically(path.string(), std::string_view(bytes.data(), bytes.size()));
}

}  // namespace

StateTrace::StateTrace(const std::string& dir, int rank)
    : dir_(std::filesystem::path(dir) / ("rank" + std::to_string(rank))) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) {
    throw std::runtime_error("--trace-dir: cannot create " + dir_.string() + ": " +
                             error.message());
  }
}

void StateTrace::AfterStep(int64_t step, const StepStats& stats, const Learner& learner) {
  TensorDict dict;
  dict.insert("loss",
              Scalar(stats.count > 0 ? stats.loss_sum / static_cast<double>(stats.count) : 0.0));
  dict.insert("lr", Scalar(stats.lr));
  const models::Net& model = *learner.shared_model();
  for (const auto& item : model.named_parameters()) {
    dict.insert("param/" + item.key(), Own(item.value()));
    for (const auto& [kind, tensor] : learner.optimizer().StateOf(item.value())) {
      if (tensor.defined()) dict.insert(kind + "/" + item.key(), Own(tensor));
    }
  }
  for (const auto& item : model.named_buffers())
    dict.insert("buffer/" + item.key(), Own(item.value()));
  Write(dir_ / ("step" + std::to_string(step) + ".pt"), dict);
}

void StateTrace::AfterEvaluation(int64_t epoch, const EvalResult& world_result) {
  TensorDict dict;
  dict.insert("loss_sum", Scalar(world_result.loss_sum));
  dict.insert("hits", Scalar(world_result.metric_sum));
  dict.insert("count", Scalar(static_cast<double>(world_result.count)));
  Write(dir_ / ("eval" + std::to_string(epoch) + ".pt"), dict);
}

}  // namespace elastic::trainer
