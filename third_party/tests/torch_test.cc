// LibTorch is wired in: a tensor op and autograd give known values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

TEST(TorchTest, MatmulGivesKnownProduct) {
  torch::Tensor a = torch::tensor({{1.0f, 2.0f}, {3.0f, 4.0f}});
  torch::Tensor b = torch::tensor({{5.0f, 6.0f}, {7.0f, 8.0f}});
  torch::Tensor c = torch::matmul(a, b);
  EXPECT_TRUE(torch::equal(c, torch::tensor({{19.0f, 22.0f}, {43.0f, 50.0f}})));
}

TEST(TorchTest, AutogradOfCubeIsThreeXSquared) {
  torch::Tensor x = torch::tensor({1.0, 2.0, 3.0}, torch::requires_grad());
  torch::Tensor y = (x * x * x).sum();
  y.backward();
  EXPECT_TRUE(torch::allclose(x.grad(), torch::tensor({3.0f, 12.0f, 27.0f})));
}

TEST(TorchTest, LinearLayerTrainsOnALine) {
  torch::manual_seed(0);
  torch::nn::Linear fc(1, 1);
  torch::optim::SGD sgd(fc->parameters(), 0.1);
  torch::Tensor x = torch::linspace(-1, 1, 32).unsqueeze(1);
  torch::Tensor y = 3 * x + 1;
  for (int i = 0; i < 300; ++i) {
    sgd.zero_grad();
    torch::Tensor loss = torch::mse_loss(fc(x), y);
    loss.backward();
    sgd.step();
  }
  EXPECT_NEAR(fc->weight.item<float>(), 3.0f, 1e-2);
  EXPECT_NEAR(fc->bias.item<float>(), 1.0f, 1e-2);
}

// tools/setup.sh points libblas.so.3 at OpenBLAS; the reference BLAS is ~10x
// slower at matmul (docs/build.md). After a matmul, OpenBLAS must be mapped.
TEST(TorchTest, MatmulRunsOnOpenBlas) {
  torch::Tensor a = torch::rand({256, 256});
  torch::Tensor c = torch::mm(a, a);
  ASSERT_EQ(c.size(0), 256);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool openblas = false;
  while (std::getline(maps, line))
    openblas = openblas || line.find("openblas") != std::string::npos;
  EXPECT_TRUE(openblas) << "libblas.so.3 does not resolve to OpenBLAS; run tools/setup.sh";
}
