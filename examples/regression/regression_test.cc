// The regression example (examples/regression) trains elastically: real
// driver, node agents and workers of the example's own binary over real
// sockets, through a kill -9 of a worker mid-epoch and a node that joins.
// After it, the invariants every elastic job keeps (tests/job_checks.h): one
// parameter checksum per generation, every sample exactly once per epoch.
#include <signal.h>

#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
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
using elastic::tests::Process;
using elastic::tests::RunDir;
using elastic::tests::WaitForStep;
using elastic::tests::WithoutProgress;
using elastic::tests::WorkerPid;

constexpr char kExample[] = "examples/regression/regression";
constexpr int64_t kTrainSamples = 3072;  // the example's generated training set
// Enough epochs (each a fraction of a second) for the joiners to arrive and train.
constexpr int kEpochs = 40;

// The test mean abs error of a job (in one process or elastic): its "done"
// event's metric, or -1.
double FinalError(const JobEvents& events) {
  const JobEvent done = events.Last("done");
  return done.is_null() ? -1 : done["test_metric"].get<double>();
}

// Predicting the mean of the targets (y = sin(x0) + x1 x2 / 2 - 0.3 x3^2 +
// noise, x ~ N(0, 1)) is off by about 0.75 on average; a model that learnt
// nothing is no better.
constexpr double kMeanPredictorError = 0.75;

TEST(RegressionExampleTest, TrainsOnItsOwnInOneProcess) {
  const std::string dir = FreshTempDir("regression-one");
  Process run({kExample, "--epochs=4", "--checkpoint-dir=" + dir + "/checkpoint",
               "--run-dir=" + RunDir(dir)},
              dir + "/run.log");
  ASSERT_EQ(run.Wait(std::chrono::seconds(300)), 0) << run.Output();
  const JobEvents events = JobEvents::Read(RunDir(dir));
  // The program's own metric, and its defaults (--precision=fp32), not cifar's.
  const JobEvent start = events.Last("start");
  ASSERT_FALSE(start.is_null()) << run.Output();
  EXPECT_EQ(start["metric"], "mean abs error") << events.Text();
  EXPECT_EQ(start["workers"], 1) << events.Text();
  const std::vector<JobEvent> epochs = events.Of("epoch");
  EXPECT_EQ(epochs.size(), 4u) << events.Text();
  for (const JobEvent& e : epochs)
    EXPECT_EQ(e["arithmetic"].get<std::string>().rfind("fp32,", 0), 0u) << e.dump();
  const JobEvent done = events.Last("done");
  ASSERT_FALSE(done.is_null()) << events.Text();
  EXPECT_EQ(done["epochs"], 4) << events.Text();
  EXPECT_EQ(events.all().back()["event"], "end") << events.Text();
  EXPECT_EQ(events.all().back()["exit_code"], 0) << events.Text();
  const double error = FinalError(events);
  EXPECT_GT(error, 0) << events.Text();
  EXPECT_LT(error, 0.6 * kMeanPredictorError) << events.Text();
}

TEST(RegressionExampleTest, SurvivesAKillAndAJoinWithEverySampleOnce) {
  const std::string dir = FreshTempDir("regression-elastic");
  Process driver({kExample, "--workers=2", "--epochs=" + std::to_string(kEpochs),
                  "--commit-every=8", "--log-every=1", "--loader-threads=1",
                  "--log-samples=" + dir + "/samples", "--checkpoint-dir=" + dir + "/checkpoint",
                  "--token-file=" + dir + "/token", "--run-dir=" + RunDir(dir)},
                 dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  // Mid-epoch and between commits (every 8 steps): uncommitted steps are redone.
  ASSERT_TRUE(WaitForStep(driver, 1, 13)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  // A node of two joins while the job goes on.
  Process joiner(
      {kExample, "--join=127.0.0.1:" + port, "--workers=2", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0)
      << WithoutProgress(driver.Output()) << WithoutProgress(joiner.Output());
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  const std::string output = driver.Output() + joiner.Output();
  const JobEvents events = JobEvents::Read(RunDir(dir));
  ExpectRolledBackToACommit(events);
  // The workers, this same binary started by the node agents, train with the
  // program's defaults (--precision=fp32 among them), not cifar's: rank 0's
  // arithmetic in every epoch. (On which device is in their own lines only.)
  const std::vector<JobEvent> epochs = events.Of("epoch");
  EXPECT_FALSE(epochs.empty()) << events.Text();
  for (const JobEvent& e : epochs)
    EXPECT_EQ(e["arithmetic"].get<std::string>().rfind("fp32,", 0), 0u) << e.dump();
  EXPECT_TRUE(std::regex_search(
      output, std::regex("\\[worker \\d+ pid \\d+\\] training on cpu: precision fp32")))
      << WithoutProgress(output);
  // The joiners trained: some epoch had 3 workers (the survivor and two).
  bool three = false;
  for (const JobEvent& e : epochs)
    if (e["world"] == 3) three = true;
  EXPECT_TRUE(three) << events.Text();
  const double error = FinalError(events);
  EXPECT_GT(error, 0) << events.Text();
  EXPECT_LT(error, 0.6 * kMeanPredictorError) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  ExpectEverySampleOnce(dir + "/samples", kTrainSamples, kEpochs);
}

}  // namespace
