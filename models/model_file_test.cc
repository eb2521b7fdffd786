// Modules written by Python (Debian's python3-torch, the LibTorch of this
// build) opened, trained in place and written back; every refusal names the
// file and the problem.
#include "models/model_file.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "models/torchscript.h"
#include "testing/required_input.h"

namespace elastic::models {
namespace {

namespace fs = std::filesystem;

constexpr char kPython[] = "/usr/bin/python3";

// A small CNN of the Horovod tutorial's kind, with batch norm and dropout.
constexpr char kNetSource[] = R"(
import torch, torch.nn as nn, torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(8 * 16 * 16, 10)
    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.fc(self.drop(x.flatten(1)))
class NoParams(nn.Module):
    def forward(self, x):
        return x * 2
torch.manual_seed(0)
)";

class ModelFileTest : public testing::Test {
 protected:
  void SetUp() override {
    ELASTIC_REQUIRE_INPUT(fs::exists(kPython), kPython << " is missing (tools/setup.sh)");
    dir_ = fs::path(testing::TempDir()) / "model_file_test";
    fs::create_directories(dir_);
  }

  // Runs `body` after kNetSource in Python, in dir_; returns its stdout.
  std::string Python(const std::string& body) {
    const fs::path script = dir_ / "script.py";
    std::ofstream(script) << kNetSource << body;
    const std::string command = "cd " + dir_.string() + " && " + kPython + " " + script.string();
    FILE* pipe = popen(command.c_str(), "r");
    std::string out;
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
    EXPECT_EQ(pclose(pipe), 0) << "python failed: " << body;
    return out;
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // The message OpenModelFile throws for `path`, or "" when it opens.
  static std::string Refusal(const std::string& path) {
    try {
      OpenModelFile(path);
    } catch (const ModelFileError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(ModelFileTest, ScriptedModuleHasPythonsNamesAndOutputs) {
  const std::string expected = Python(R"(
m = Net().eval()
torch.jit.script(m).save("net.pt")
x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32) / 6144
print(" ".join(m.state_dict().keys()))
print("%.6f" % m(x).sum().item())
)");
  std::unique_ptr<ModelFile> file = OpenModelFile(Path("net.pt"));
  EXPECT_EQ(file->format(), "TorchScript");
  EXPECT_TRUE(file->warnings().empty());
  std::shared_ptr<Net> net = file->Create();

  std::string names;
  for (const auto& p : net->named_parameters()) names += (names.empty() ? "" : " ") + p.key();
  for (const auto& b : net->named_buffers()) names += " " + b.key();
  std::istringstream lines(expected);
  std::string python_names, python_sum;
  std::getline(lines, python_names);
  std::getline(lines, python_sum);
  // Python's state_dict interleaves parameters and buffers per module; the
  // sets are what must agree.
  auto sorted = [](const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> v;
    for (std::string w; in >> w;) v.push_back(w);
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(names), sorted(python_names));

  net->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x =
      torch::arange(2 * 3 * 32 * 32, torch::kFloat32).reshape({2, 3, 32, 32}) / 6144;
  EXPECT_NEAR(net->forward(x).sum().item<double>(), std::stod(python_sum), 1e-3);
}

TEST_F(ModelFileTest, TrainAndEvalReachTheModule) {
  Python("torch.jit.script(Net()).save('net.pt')\n");
  std::shared_ptr<Net> net = OpenModelFile(Path("net.pt"))->Create();
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  torch::NoGradGuard no_grad;
  net->eval();
  EXPECT_TRUE(net->forward(x).equal(net->forward(x))) << "dropout ran in eval mode";
  const torch::Tensor mean_before = net->named_buffers()["bn1.running_mean"].clone();
  net->forward(x);
  EXPECT_TRUE(net->named_buffers()["bn1.running_mean"].equal(mean_before));
  net->train();
  EXPECT_FALSE(net->forward(x).equal(net->forward(x))) << "dropout did not run in training mode";
  EXPECT_FALSE(net->named_buffers()["bn1.running_mean"].equal(mean_before))
      << "batch norm statistics did not move in training mode";
}

TEST_F(ModelFileTest, WeightsAreSharedWithTheModuleAndCopiesAreNot) {
  Python("torch.jit.script(Net()).save('net.pt')\n");
  std::unique_ptr<ModelFile> file = OpenModelFile(Path("net.pt"));
  std::shared_ptr<Net> a = file->Create(), b = file->Create();
  a->eval();
  b->eval();
  const torch::Tensor x = torch::randn({2, 3, 32, 32});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(a->forward(x).equal(b->forward(x))) << "two copies of one file differ";
  a->named_parameters()["fc.bias"].add_(1);  // as an optimizer step would
  EXPECT_TRUE(a->forward(x).allclose(b->forward(x) + 1, 1e-5, 1e-5));
  EXPECT_FALSE(b->named_parameters()["fc.bias"].equal(a->named_parameters()["fc.bias"]));
}

// On the CPU the module runs op by op under eager autograd, not through
// LibTorch's optimising executor (TorchScriptNet::set_optimize_on_cpu): the
// same loss and gradients as that executor, and the thread's executor setting
// as it was after each forward.
TEST_F(ModelFileTest, ModuleRunsUnoptimisedOnTheCpuWithTheOptimisingExecutorsGradients) {
  Python(R"(
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)) + out)
        return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))
torch.jit.script(Block()).save("block.pt")
)");
  std::unique_ptr<ModelFile> file = OpenModelFile(Path("block.pt"));
  std::shared_ptr<Net> plain = file->Create(), optimised = file->Create();
  auto* module = dynamic_cast<TorchScriptNet*>(optimised.get());
  ASSERT_NE(module, nullptr);
  EXPECT_FALSE(module->optimize_on_cpu());
  module->set_optimize_on_cpu(true);
  const torch::Tensor x = torch::randn({4, 3, 16, 16});
  const torch::Tensor y = torch::randint(0, 10, {4});
  const bool setting = torch::jit::getGraphExecutorOptimize();
  // The profiling executor optimises from the second run on.
  for (int run = 0; run < 3; ++run) {
    plain->zero_grad();
    optimised->zero_grad();
    const torch::Tensor a = torch::nn::functional::cross_entropy(plain->forward(x), y);
    EXPECT_EQ(torch::jit::getGraphExecutorOptimize(), setting);
    const torch::Tensor b = torch::nn::functional::cross_entropy(optimised->forward(x), y);
    if (run == 2) {
      EXPECT_NE(torch::jit::lastExecutedOptimizedGraph()->toString().find("DifferentiableGraph"),
                std::string::npos)
          << "the optimising executor was not used: the comparison compares nothing";
    }
    a.backward();
    b.backward();
    EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-5) << "run " << run;
    const std::vector<torch::Tensor> pa = plain->parameters(), pb = optimised->parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_TRUE(pa[i].grad().allclose(pb[i].grad(), 1e-4, 1e-6)) << "run " << run << ", " << i;
    }
  }
  EXPECT_TRUE(plain->named_buffers()["bn2.running_mean"].allclose(
      optimised->named_buffers()["bn2.running_mean"]));
}

TEST_F(ModelFileTest, SavedModuleLoadsInPythonWithTheTrainedWeights) {
  Python("torch.jit.script(Net()).save('net.pt')\n");
  std::unique_ptr<ModelFile> file = OpenModelFile(Path("net.pt"));
  std::shared_ptr<Net> net = file->Create();
  {
    torch::NoGradGuard no_grad;
    net->named_parameters()["fc.bias"].fill_(0.25);
    net->named_buffers()["bn1.running_var"].fill_(3);
  }
  net->train();
  std::ofstream out(Path("trained.pt"), std::ios::binary);
  file->Save(*net, out, {{"normalization.json", "{\"mean\": [0.5]}"}});
  out.close();
  EXPECT_TRUE(net->is_training()) << "saving switched the trained model's mode";
  const std::string loaded = Python(R"(
files = {"normalization.json": ""}
m = torch.jit.load("trained.pt", _extra_files=files)
print(m.fc.bias.sum().item(), m.bn1.running_var.mean().item(), m.training, files["normalization.json"].decode())
)");
  EXPECT_EQ(loaded, "2.5 3.0 False {\"mean\": [0.5]}\n");
}

TEST_F(ModelFileTest, TracedModuleIsTrainedWithAWarningNamingTheModules) {
  Python("torch.jit.trace(Net(), torch.randn(2, 3, 32, 32), check_trace=False).save('t.pt')\n");
  std::unique_ptr<ModelFile> file = OpenModelFile(Path("t.pt"));
  ASSERT_EQ(file->warnings().size(), 1u);
  EXPECT_NE(file->warnings()[0].find("bn1, drop"), std::string::npos) << file->warnings()[0];
  EXPECT_NE(file->warnings()[0].find("torch.jit.script"), std::string::npos);
  EXPECT_TRUE(OpenModelFile(Path("t.pt"))->Create() != nullptr);
}

TEST_F(ModelFileTest, StateDictIsRefusedSayingHowToSaveAModule) {
  Python("torch.save(Net().state_dict(), 'sd.pt')\ntorch.save(Net(), 'whole.pt')\n");
  for (const char* name : {"sd.pt", "whole.pt"}) {
    const std::string message = Refusal(Path(name));
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find("pickle from torch.save"), std::string::npos) << message;
    EXPECT_NE(message.find("torch.jit.script(model).save"), std::string::npos) << message;
  }
}

TEST_F(ModelFileTest, FileFromANewerPyTorchIsRefusedNamingTheVersion) {
  // The archive's version record as a PyTorch that writes format 99 would set it.
  Python(R"(
import zipfile
torch.jit.script(Net()).save("net.pt")
with zipfile.ZipFile("net.pt") as src, zipfile.ZipFile("newer.pt", "w") as dst:
    for item in src.infolist():
        data = src.read(item.filename)
        dst.writestr(item, b"99\n" if item.filename.endswith("/version") else data)
)");
  const std::string message = Refusal(Path("newer.pt"));
  EXPECT_NE(message.find("newer PyTorch"), std::string::npos) << message;
  EXPECT_NE(message.find("newer.pt"), std::string::npos) << message;
}

TEST_F(ModelFileTest, ModuleWithoutParametersIsRefused) {
  Python("torch.jit.script(NoParams()).save('none.pt')\n");
  const std::string message = Refusal(Path("none.pt"));
  EXPECT_NE(message.find("no parameters"), std::string::npos) << message;
}

TEST_F(ModelFileTest, OtherFilesAreRefusedNamingThem) {
  std::ofstream(Path("text.pt")) << "not a model\n";
  std::ofstream(Path("empty.pt"));
  EXPECT_NE(Refusal(Path("text.pt")).find("not a zip archive"), std::string::npos);
  EXPECT_NE(Refusal(Path("empty.pt")).find("empty"), std::string::npos);
  EXPECT_NE(Refusal(Path("missing.pt")).find("cannot open"), std::string::npos);
  EXPECT_NE(Refusal(dir_.string()).find("directory"), std::string::npos);
}

}  // namespace
}  // namespace elastic::models
