// The GPT example (examples/gpt) trains a language model elastically: real
// driver, node agents and workers of the example's own binary over real
// sockets, on tiny Shakespeare prepared as nanoGPT prepares it, through a
// kill -9 of a worker mid-epoch and a node that joins. After it, the
// invariants every elastic job keeps (tests/job_checks.h) and a validation
// loss that only a model that learnt the text reaches.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
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
using elastic::tests::ExpectRolledBackToACommit;
using elastic::tests::FreshTempDir;
using elastic::tests::HeadPort;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::LastValidationLoss;
using elastic::tests::PrepareTinyShakespeare;
using elastic::tests::Process;
using elastic::tests::RunDir;
using elastic::tests::TinyShakespeareText;
using elastic::tests::WaitForStep;
using elastic::tests::WithoutProgress;
using elastic::tests::WorkerPid;

constexpr char kExample[] = "examples/gpt/gpt";
constexpr char kPython[] = "/usr/bin/python3";
// 1,200 windows of 64 characters: 100 steps of 12 an epoch, two epochs.
constexpr int kTrainWindows = 1200;
constexpr int kEpochs = 2;
// A uniform guess over the 65 characters scores ln 65 = 4.17 and their own
// frequencies about 3.3.
constexpr double kValLossBound = 3.0;

TEST(GptExampleTest, TrainsThroughAKillAndAJoin) {
  ELASTIC_REQUIRE_INPUT(!TinyShakespeareText().empty(),
                        "ELASTIC_TINYSHAKESPEARE does not name ../shared/data/tinyshakespeare");
  ELASTIC_REQUIRE_INPUT(std::filesystem::exists(kPython), kPython << " (tools/setup.sh)");
  const std::string dir = FreshTempDir("gpt-example");
  const std::string data = PrepareTinyShakespeare(dir);
  ASSERT_FALSE(data.empty());

  Process driver({kExample, "--workers=2", "--data-dir=" + data,
                  "--train-samples=" + std::to_string(kTrainWindows), "--test-samples=200",
                  "--epochs=" + std::to_string(kEpochs), "--max-steps=0", "--warmup-steps=20",
                  "--decay-steps=" + std::to_string(kEpochs * kTrainWindows / 12),
                  "--commit-every=5", "--log-every=1", "--loader-threads=1",
                  "--log-samples=" + dir + "/samples", "--checkpoint-dir=" + dir + "/checkpoint",
                  "--token-file=" + dir + "/token", "--run-dir=" + RunDir(dir)},
                 dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 30)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  Process joiner(
      {kExample, "--join=127.0.0.1:" + port, "--workers=1", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(900)), 0)
      << WithoutProgress(driver.Output()) << WithoutProgress(joiner.Output());
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  const JobEvents events = JobEvents::Read(RunDir(dir));
  ExpectRolledBackToACommit(events);
  // The joiner trained: a generation after the kill's had two members again.
  bool two_again = false;
  for (const JobEvent& p : events.Of("params"))
    if (p["generation"].get<int>() >= 3 && p["rank"] == 1 && p["world"] == 2) two_again = true;
  EXPECT_TRUE(two_again) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  ExpectEverySampleOnce(dir + "/samples", kTrainWindows, kEpochs);
  const double logged = LastValidationLoss(events);
  ASSERT_GT(logged, 0) << events.Text();
  EXPECT_LT(logged, kValLossBound) << events.Text();
  std::printf("gpt example: validation loss %.4f after %d epochs of %d windows\n", logged, kEpochs,
              kTrainWindows);
}

}  // namespace
