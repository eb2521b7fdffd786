#include "trainer/accumulation.h"

#include <chrono>
#include <stdexcept>
#include <string>

namespace elastic::trainer {
namespace {

collectives::GradientReducerOptions SumOptions() {
  collectives::GradientReducerOptions options;
  // Ranks weight their own losses by their share of the step: the sum over
  // ranks is the step's gradient (an average would be wrong for unequal shares).
  options.op = collectives::ReduceOp::kSum;
  return options;
}

}  // namespace

std::vector<MicroBatch> SplitIntoMicroBatches(const torch::Tensor& images,
                                              const torch::Tensor& labels, int64_t max_batch,
                                              int64_t step_samples) {
  const int64_t n = images.size(0);
  if (n < 1 || labels.size(0) != n) {
    throw std::invalid_argument("SplitIntoMicroBatches: " + std::to_string(n) + " images and " +
                                std::to_string(labels.size(0)) + " labels");
  }
  if (max_batch < 1 || step_samples < n) {
    throw std::invalid_argument("SplitIntoMicroBatches: max_batch " + std::to_string(max_batch) +
                                ", step of " + std::to_string(step_samples) + " samples, share " +
                                std::to_string(n));
  }
  const int64_t count = (n + max_batch - 1) / max_batch;
  std::vector<MicroBatch> micro;
  micro.reserve(static_cast<size_t>(count));
  int64_t begin = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t size = n / count + (i < n % count ? 1 : 0);
    micro.push_back(MicroBatch{images.narrow(0, begin, size), labels.narrow(0, begin, size),
                               static_cast<double>(size) / static_cast<double>(step_samples)});
    begin += size;
  }
  return micro;
}

SummingGradientHook::SummingGradientHook(const std::vector<torch::Tensor>& params,
                                         collectives::Communicator& comm)
    : reducer_(params, &comm, SumOptions()) {}

void SummingGradientHook::BeforeBackward(bool last) { reducer_.SetSync(last); }

void SummingGradientHook::AfterBackward(const std::vector<torch::Tensor>&) {
  const auto start = std::chrono::steady_clock::now();
  reducer_.Finish();
  waited_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double SummingGradientHook::TakeWaitedSeconds() {
  const double waited = waited_seconds_;
  waited_seconds_ = 0;
  return waited;
}

}  // namespace elastic::trainer
