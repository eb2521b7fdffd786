// Every model of the zoo against its PyTorch original.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "models/registry.h"

namespace elastic::models {
namespace {

// Trainable parameter counts for 10 classes of the PyTorch originals. Each
// number was printed by Debian's python3-torch 1.13.1 (`/usr/bin/python3`) as
// sum(p.numel() for p in net.parameters() if p.requires_grad) for the network
// built by the named function of github.com/kuangliu/pytorch-cifar (master),
// file models/<file>:
const std::map<std::string, int64_t>& ExpectedParameterCounts() {
  static const std::map<std::string, int64_t> counts = {
      // Not in pytorch-cifar: the same computation over an equivalent PyTorch
      // definition (conv3x3 3->16 + BN, one pytorch-cifar BasicBlock per stage
      // at 16/32/64 channels, strides 1/2/2, Linear(64, 10)).
      {"resnet8", 78042},
  };
  return counts;
}

class ZooTest : public testing::TestWithParam<std::string> {};

TEST_P(ZooTest, ParameterCountEqualsThePyTorchOriginal) {
  auto it = ExpectedParameterCounts().find(GetParam());
  ASSERT_NE(it, ExpectedParameterCounts().end()) << "no expected count for " << GetParam();
  EXPECT_EQ(CountParameters(*CreateModel(GetParam(), 10)), it->second);
}

TEST_P(ZooTest, ForwardGivesTenLogitsPerImage) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  auto net = CreateModel(GetParam(), 10);
  net->eval();
  torch::Tensor y = net->forward(torch::randn({2, 3, 32, 32}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
}

std::vector<std::string> AllNames() {
  std::vector<std::string> names;
  for (const ModelInfo& m : AvailableModels()) names.push_back(m.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllModels, ZooTest, testing::ValuesIn(AllNames()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The table above and the registry list the same models.
TEST(ZooCoverageTest, EveryExpectedModelIsRegistered) {
  std::vector<std::string> names = AllNames();
  for (const auto& [name, count] : ExpectedParameterCounts()) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

}  // namespace
}  // namespace elastic::models
