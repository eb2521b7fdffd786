// batch_norm_bench: batch norm + residual add + ReLU, forward and backward,
// on the activations of resnet8 and ResNet18 at batch 128: the fused node
// (models/batch_norm_act.h) against ATen's ops as the models called them
// before, in one process, with the bytes each pass must move at the least.
// Not a test: it prints a table; the last line is the headline.
//
//   bazel run -c opt //bench:batch_norm_bench -- [THREADS] [bf16|fp32] [KERNELS]
//
// KERNELS: widest (default), avx512, avx2 or baseline: which compiled version
// of the fused loops runs (models/batch_norm_kernels.h), so that each one can
// be timed on one machine.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/batch_norm_act.h"
#include "models/batch_norm_kernels.h"
#include "trainer/allocator.h"

namespace {

using elastic::models::Activation;
using elastic::models::BatchNormAct;
using elastic::models::EnableFusedBatchNorm;

struct Shape {
  const char* where;
  int64_t channels, size;
  bool residual;
};

// Milliseconds per forward + backward: the median of 7 rounds of 10.
double Time(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual,
            const torch::Tensor& upstream, bool fused) {
  EnableFusedBatchNorm(fused);
  auto once = [&] {
    torch::Tensor y = BatchNormAct(*bn, x, Activation::kRelu, residual);
    // grad, not backward: no accumulation into x.grad, which is not the node's work.
    std::vector<torch::Tensor> inputs = {x, bn->weight, bn->bias};
    if (residual.defined()) inputs.push_back(residual);
    torch::autograd::grad({y}, inputs, {upstream});
  };
  for (int i = 0; i < 3; ++i) once();
  std::vector<double> rounds;
  for (int round = 0; round < 7; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) once();
    rounds.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        10);
  }
  EnableFusedBatchNorm(true);
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace

int Usage(const char* problem) {
  std::fprintf(stderr,
               "batch_norm_bench: %s\nusage: batch_norm_bench [THREADS >= 1] [bf16|fp32] "
               "[widest|avx512|avx2|baseline]\n",
               problem);
  return 2;
}

int main(int argc, char** argv) {
  namespace kernels = elastic::models::kernels;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const std::string dtype_name = argc > 2 ? argv[2] : "bf16";
  const std::string kernels_name = argc > 3 ? argv[3] : "widest";
  if (argc > 4) return Usage("too many arguments");
  if (threads < 1) return Usage("THREADS must be a number >= 1");
  if (dtype_name != "bf16" && dtype_name != "fp32") return Usage("the dtype is bf16 or fp32");
  std::optional<kernels::InstructionSet> set;
  if (kernels_name == "avx512") {
    set = kernels::InstructionSet::kAvx512;
  } else if (kernels_name == "avx2") {
    set = kernels::InstructionSet::kAvx2;
  } else if (kernels_name == "baseline") {
    set = kernels::InstructionSet::kBaseline;
  } else if (kernels_name != "widest") {
    return Usage("KERNELS is widest, avx512, avx2 or baseline");
  }
  try {
    kernels::UseInstructionSet(set);
  } catch (const std::invalid_argument& e) {
    return Usage(e.what());
  }
  const auto dtype = dtype_name == "fp32" ? torch::kFloat32 : torch::kBFloat16;
  torch::set_num_threads(threads);
  elastic::trainer::KeepFreedMemoryForReuse();  // as the trainer does
  const std::vector<Shape> shapes = {
      {"resnet8 stem, stage 1", 16, 32, false}, {"resnet8 stage 1 (add)", 16, 32, true},
      {"resnet8 stage 2 (add)", 32, 16, true},  {"resnet8 stage 3 (add)", 64, 8, true},
      {"resnet18 stage 1 (add)", 64, 32, true}, {"resnet18 stage 4 (add)", 512, 4, true},
  };
  const size_t element = dtype == torch::kFloat32 ? 4 : 2;
  std::printf(
      "batch norm + add + ReLU, forward + backward, batch 128, %s channels-last, %d thread(s), "
      "%s kernels\n\n"
      "| activation | C x H x W | ATen ms | fused ms | fused / ATen | fused GB/s (least "
      "traffic) |\n| --- | --- | --- | --- | --- | --- |\n",
      dtype_name.c_str(), threads, kernels::InstructionSetName(kernels::ActiveInstructionSet()));
  double product = 1;
  for (const Shape& s : shapes) {
    torch::nn::BatchNorm2d bn(s.channels);
    const auto make = [&](bool grad) {
      return torch::randn({128, s.channels, s.size, s.size})
          .to(dtype)
          .contiguous(at::MemoryFormat::ChannelsLast)
          .requires_grad_(grad);
    };
    const torch::Tensor x = make(true);
    const torch::Tensor residual = s.residual ? make(true) : torch::Tensor();
    const torch::Tensor upstream = make(false);
    const double aten = Time(bn, x, residual, upstream, false);
    const double fused = Time(bn, x, residual, upstream, true);
    // Least traffic: forward reads x twice (+ residual) and writes y; backward
    // reads dy, y, x twice, writes dx (+ the add's gradient).
    const double elements = static_cast<double>(x.numel());
    const double bytes = elements * element * (s.residual ? 11 : 9);
    product *= aten / fused;
    std::printf("| %s | %lld x %lld x %lld | %.3f | %.3f | %.2fx | %.1f |\n", s.where,
                static_cast<long long>(s.channels), static_cast<long long>(s.size),
                static_cast<long long>(s.size), aten, fused, aten / fused,
                bytes / (fused / 1e3) / 1e9);
  }
  std::printf("\nheadline: fused / ATen = %.2fx faster (geometric mean over %zu activations)\n",
              std::pow(product, 1.0 / shapes.size()), shapes.size());
  return 0;
}
