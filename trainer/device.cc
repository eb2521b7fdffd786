#include "trainer/device.h"

#include <torch/cuda.h>

#include <stdexcept>

#include "trainer/train_options.h"

namespace elastic::trainer {

torch::Device ResolveDevice(const std::string& spec, int64_t local_index) {
  if (!IsDeviceSpec(spec)) {
    throw std::runtime_error("--device=" + spec + ": expected auto, cpu, cuda or cuda:N");
  }
  if (spec == "cpu") return torch::Device(torch::kCPU);
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (spec == "auto") {
    if (count == 0) return torch::Device(torch::kCPU);
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_index % count));
  }
  if (count == 0) {
    throw std::runtime_error(
        "--device=" + spec +
        ": no CUDA device is usable here (a CPU-only LibTorch, no GPU, or no driver); build "
        "with --config=cuda on a GPU machine (docs/operations.md) or use --device=cpu");
  }
  int64_t index = local_index % count;
  if (spec.size() > 5) {
    index = std::stoll(spec.substr(5));
    if (index >= count) {
      throw std::runtime_error("--device=" + spec + ": this machine has " + std::to_string(count) +
                               " CUDA device(s)");
    }
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace elastic::trainer
