// The registry by name and the small CPU model.
#include "models/registry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <stdexcept>
#include <string>

namespace elastic::models {
namespace {

TEST(RegistryTest, ListsResNet8FirstAndNamesAreUnique) {
  const std::vector<ModelInfo>& models = AvailableModels();
  ASSERT_FALSE(models.empty());
  EXPECT_EQ(models.front().name, "resnet8");
  std::set<std::string> names;
  for (const ModelInfo& m : models) {
    EXPECT_TRUE(names.insert(m.name).second) << "duplicate " << m.name;
    EXPECT_FALSE(m.paper.empty()) << m.name;
  }
}

TEST(RegistryTest, UnknownNameNamesItAndListsTheValidOnes) {
  try {
    CreateModel("resnet9000");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'resnet9000'"), std::string::npos) << what;
    for (const ModelInfo& m : AvailableModels()) {
      EXPECT_NE(what.find(m.name), std::string::npos) << what;
    }
  }
}

TEST(RegistryTest, RejectsImpossibleClassCount) {
  EXPECT_THROW(CreateModel("resnet8", 0), std::invalid_argument);
}

TEST(RegistryTest, CountParametersSkipsFrozenOnes) {
  torch::nn::Linear fc(4, 3);  // 12 weights + 3 biases
  EXPECT_EQ(CountParameters(*fc), 15);
  fc->bias.set_requires_grad(false);
  EXPECT_EQ(CountParameters(*fc), 12);
}

TEST(ResNet8Test, HasTheExpectedParameterCount) {
  // 78042 = count of an equivalent PyTorch ResNet-8 (conv3x3 3->16 + BN, one
  // pytorch-cifar BasicBlock per stage at 16/32/64 channels, strides 1/2/2,
  // Linear(64, 10)) built with Debian python3-torch 1.13.1 and summed with
  // sum(p.numel() for p in net.parameters()). By hand: 432+32 (stem)
  // + 4672 + 14528 + 57728 (blocks) + 650 (linear).
  EXPECT_EQ(CountParameters(*CreateModel("resnet8")), 78042);
}

TEST(ResNet8Test, ForwardGivesOneLogitPerClass) {
  torch::NoGradGuard no_grad;
  auto net = CreateModel("resnet8", 100);
  net->eval();
  torch::Tensor y = net->forward(torch::randn({2, 3, 32, 32}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 100}));
}

// Gradients reach every parameter and SGD drives the loss on a fixed batch
// down: the model can learn at all.
TEST(ResNet8Test, OverfitsATinyRandomBatch) {
  torch::manual_seed(0);
  auto net = CreateModel("resnet8");
  net->train();
  torch::Tensor x = torch::randn({8, 3, 32, 32});
  torch::Tensor y = torch::randint(0, 10, {8}, torch::kLong);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    sgd.zero_grad();
    torch::Tensor loss = torch::cross_entropy_loss(net->forward(x), y);
    loss.backward();
    if (step == 0) {
      for (const auto& p : net->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_GT(p.value().grad().abs().sum().item<float>(), 0) << p.key();
      }
      first = loss.item<float>();
    }
    last = loss.item<float>();
    sgd.step();
  }
  EXPECT_LT(last, 0.2f * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace elastic::models

namespace elastic::models {
namespace {

// A program's own model, registered from outside models/.
class Tiny : public Net {
 public:
  explicit Tiny(int64_t classes) : fc_(register_module("fc", torch::nn::Linear(4, classes))) {}
  torch::Tensor forward(torch::Tensor x) override { return fc_->forward(x); }

 private:
  torch::nn::Linear fc_;
};

TEST(RegistryTest, AModelRegisteredFromOutsideIsListedAndBuilt) {
  RegisterModel({"tiny-outside", "a test's own"},
                [](int64_t classes) { return std::make_shared<Tiny>(classes); });
  const std::vector<ModelInfo> models = AvailableModels();
  EXPECT_EQ(models.front().name, "resnet8");
  EXPECT_EQ(models.back().name, "tiny-outside");
  EXPECT_EQ(CreateModel("tiny-outside", 3)->forward(torch::zeros({2, 4})).size(1), 3);
  // A taken name, an empty one or no factory is refused, naming the problem.
  EXPECT_THROW(RegisterModel({"resnet8", ""}, [](int64_t c) { return std::make_shared<Tiny>(c); }),
               std::invalid_argument);
  EXPECT_THROW(RegisterModel({"", ""}, [](int64_t c) { return std::make_shared<Tiny>(c); }),
               std::invalid_argument);
  EXPECT_THROW(RegisterModel({"no-factory", ""}, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace elastic::models
