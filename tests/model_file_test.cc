// PyTorch modules written in Python (tests/pytorch_models.py: a small CNN of
// the Horovod tutorial's kind and pytorch-cifar's ResNet18), scripted, and
// trained by `cifar --model-file` on the CIFAR-10 subset: elastically through
// a kill -9 and a join (real driver, node agent and workers over real
// sockets), and side by side with the zoo's ResNet18. What comes back
// (model.pt, state_dict.pt) is loaded in Python and evaluated there.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/required_input.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/process.h"

namespace {

using elastic::tests::ExpectEverySampleOnce;
using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::FreshTempDir;
using elastic::tests::HeadPort;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::Process;
using elastic::tests::RunDir;
using elastic::tests::RunShell;
using elastic::tests::WaitForStep;
using elastic::tests::WithoutProgress;
using elastic::tests::WorkerPid;

constexpr char kCifar[] = "examples/cifar/cifar";
constexpr char kPython[] = "/usr/bin/python3";
constexpr char kModels[] = "tests/pytorch_models.py";

std::string CifarDir() {
  const char* dir = std::getenv("ELASTIC_CIFAR10_SUBSET");
  return dir != nullptr && std::filesystem::exists(dir) ? dir : "";
}

// Scripts tests/pytorch_models.py's `arch` into `out`.
void Script(const std::string& arch, const std::string& out, const std::string& init = "") {
  bool ok = false;
  const std::string output = RunShell(std::string(kPython) + " " + kModels + " script " + arch +
                                          " " + out + (init.empty() ? "" : " --init " + init),
                                      &ok);
  ASSERT_TRUE(ok) << output;
}

// The accuracy (percent) Python measures for a model file on the first
// `samples` test images, or -1.
double PythonAccuracy(const std::string& model, const std::string& arch, int samples) {
  bool ok = false;
  const std::string output =
      RunShell(std::string(kPython) + " " + kModels + " evaluate " + model + " " + CifarDir() +
                   " --arch " + arch + " --samples " + std::to_string(samples),
               &ok);
  std::smatch m;
  if (!ok || !std::regex_search(output, m, std::regex("accuracy ([0-9.]+)"))) {
    ADD_FAILURE() << "evaluating " << model << " in Python failed: " << output;
    return -1;
  }
  return std::stod(m[1]);
}

// The final test accuracy (percent) of a job: its "done" event's, or -1.
double FinalAccuracy(const JobEvents& events) {
  const JobEvent done = events.Last("done");
  return done.is_null() ? -1 : 100 * done["test_metric"].get<double>();
}

// One test image of 100 is 1 point: Python's float32 evaluation may differ
// from the trainer's by a near-tie or two.
double OneOrTwoImages(int samples) { return 2 * 100.0 / samples + 1e-6; }

struct Recipe {
  std::string arch;
  int train_samples;
  int test_samples;
  int epochs;
  int batch_size;
  std::string lr;
  int kill_at_step;  // of epoch 1, on rank 1 of the first generation
};

class ModelFileJobTest : public testing::TestWithParam<Recipe> {
 protected:
  void SetUp() override {
    ELASTIC_REQUIRE_INPUT(!CifarDir().empty(), "ELASTIC_CIFAR10_SUBSET does not name the subset");
    ELASTIC_REQUIRE_INPUT(std::filesystem::exists(kPython), kPython << " (tools/setup.sh)");
  }
};

TEST_P(ModelFileJobTest, TrainsThroughAKillAndAJoinAndComesBackToPython) {
  const Recipe& r = GetParam();
  const std::string dir = FreshTempDir("model-file-" + r.arch);
  Script(r.arch, dir + "/" + r.arch + ".pt");
  Process driver(
      {kCifar, "--workers=2", "--model-file=" + dir + "/" + r.arch + ".pt",
       "--data-dir=" + CifarDir(), "--train-samples=" + std::to_string(r.train_samples),
       "--test-samples=" + std::to_string(r.test_samples), "--epochs=" + std::to_string(r.epochs),
       "--batch-size=" + std::to_string(r.batch_size), "--lr=" + r.lr, "--warmup-epochs=0",
       "--precision=fp32", "--commit-every=4", "--log-every=1", "--loader-threads=1",
       // The kill leaves one worker: training waits for the joiner rather than
       // race it to the job's end.
       "--min-workers=2", "--rendezvous-timeout=300", "--log-samples=" + dir + "/samples",
       "--checkpoint-dir=" + dir + "/checkpoint", "--token-file=" + dir + "/token",
       "--run-dir=" + RunDir(dir)},
      dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, r.kill_at_step)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  Process joiner(
      {kCifar, "--join=127.0.0.1:" + port, "--workers=1", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(600)), 0)
      << WithoutProgress(driver.Output()) << WithoutProgress(joiner.Output());
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  const JobEvents events = JobEvents::Read(RunDir(dir));
  // The joiner trained: a generation after the kill's had two members again.
  bool two_again = false;
  for (const JobEvent& p : events.Of("params"))
    if (p["generation"].get<int>() >= 3 && p["rank"] == 1 && p["world"] == 2) two_again = true;
  EXPECT_TRUE(two_again) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  ExpectEverySampleOnce(dir + "/samples", r.train_samples, r.epochs);

  const double logged = FinalAccuracy(events);
  ASSERT_GT(logged, 0) << events.Text();
  const double back = PythonAccuracy(dir + "/checkpoint/model.pt", r.arch, r.test_samples);
  EXPECT_NEAR(back, logged, OneOrTwoImages(r.test_samples)) << "torch.jit.load of model.pt";
  const double dict = PythonAccuracy(dir + "/checkpoint/state_dict.pt", r.arch, r.test_samples);
  EXPECT_NEAR(dict, logged, OneOrTwoImages(r.test_samples)) << "load_state_dict of state_dict.pt";
}

INSTANTIATE_TEST_SUITE_P(Models, ModelFileJobTest,
                         testing::Values(Recipe{"cnn", 3072, 1017, 3, 64, "0.05", 10},
                                         Recipe{"resnet18", 192, 64, 2, 32, "0.02", 2}),
                         [](const testing::TestParamInfo<Recipe>& info) {
                           return info.param.arch;
                         });

// The training loss of epoch `epoch` (from 1) as the run's log has it, or -1.
// With epochs of one step, the loss of step `epoch`.
double EpochLoss(const JobEvents& events, int epoch) {
  for (const JobEvent& e : events.Of("epoch"))
    if (e["epoch"] == epoch && e["train_loss"].is_number()) return e["train_loss"].get<double>();
  return -1;
}

// pytorch-cifar's ResNet18 from Python and the zoo's, both from the zoo's
// initial weights (through state_dict.pt and load_state_dict), on the same
// recipe and seed: the same step, loss for loss. The first step's loss is the
// same forward of the same weights on the same batch in training mode; the
// second's follows one update, so the gradients, weight decay and momentum
// agree too. From then on float noise (the zoo's fused batch norm sums in
// another order) grows step by step, so the accuracy after the short runs a
// test can afford differs by the noise of near-ties on 1,017 test images
// (about 2 points); bench/model_file_accuracy.py compares accuracy over seeds.
// Each epoch is one step over the same 64 samples (in another order, with
// other augmentations), so that the event log's epoch loss is the step's.
TEST(ScriptedResNet18Test, TakesTheZoosStepsFromTheSameWeights) {
  ELASTIC_REQUIRE_INPUT(!CifarDir().empty(), "ELASTIC_CIFAR10_SUBSET does not name the subset");
  const std::string dir = FreshTempDir("model-file-vs-zoo");
  // float32: the zoo's fused batch norm and LibTorch's then differ in the
  // order of their sums only.
  const std::vector<std::string> recipe = {"--data-dir=" + CifarDir(),
                                           "--train-samples=64",
                                           "--test-samples=64",
                                           "--epochs=3",
                                           "--batch-size=64",
                                           "--lr=0.02",
                                           "--warmup-epochs=0",
                                           "--precision=fp32",
                                           "--log-every=1",
                                           "--memory-format=channels-last",
                                           "--loader-threads=1",
                                           "--seed=3"};
  auto run = [&](const std::string& model, const std::string& name,
                 std::vector<std::string> extra) {
    std::vector<std::string> args = {kCifar, model, "--checkpoint-dir=" + dir + "/" + name,
                                     "--run-dir=" + dir + "/" + name + "-run"};
    args.insert(args.end(), recipe.begin(), recipe.end());
    args.insert(args.end(), extra.begin(), extra.end());
    Process p(args, dir + "/" + name + ".log");
    EXPECT_EQ(p.Wait(std::chrono::seconds(600)), 0) << WithoutProgress(p.Output());
    return JobEvents::Read(dir + "/" + name + "-run");
  };
  // The zoo's initial weights: one step at a learning rate of 1e-9.
  run("--model=resnet18", "init", {"--max-steps=1", "--lr=1e-9"});
  Script("resnet18", dir + "/resnet18.pt", dir + "/init/state_dict.pt");

  const JobEvents zoo = run("--model=resnet18", "zoo", {});
  const JobEvents scripted = run("--model-file=" + dir + "/resnet18.pt", "scripted", {});
  for (int step = 1; step <= 3; ++step) {
    const double a = EpochLoss(zoo, step), b = EpochLoss(scripted, step);
    std::printf("step %d: loss zoo %.6f, scripted %.6f\n", step, a, b);
    ASSERT_GT(a, 0) << zoo.Text();
    ASSERT_GT(b, 0) << scripted.Text();
    // Measured (seed 3): step 1 equal to 7e-7, step 2 to 2.0e-4 (the
    // printed lines' running mean of steps 1-2 differed by 1e-4 in the fourth
    // decimal), step 3 to 1.4e-3. The bounds: float noise of one forward, of
    // one update, then growing.
    const double bound = step == 1 ? 1e-5 : step == 2 ? 4e-4 : 5e-3;
    EXPECT_NEAR(a, b, bound) << "step " << step;
  }
}

}  // namespace
