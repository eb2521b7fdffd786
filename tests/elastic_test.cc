// End-to-end tests of the elastic trainer: real driver, node agent and worker
// processes over real sockets, training resnet8 on a subset of Fashion-MNIST.
//
// After every scenario the invariants of docs/elastic.md are checked from the
// processes' own logs:
// - in every generation, every rank logged the same parameter checksum after
//   the sync from rank 0;
// - with --log-samples, every training sample of every epoch was used exactly
//   once, counting only the steps that no later restore rolled back.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/process.h"

namespace {

using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::ExpectStepsWithinTheirEpoch;
using elastic::tests::FreshTempDir;
using elastic::tests::LastTestAccuracy;
using elastic::tests::PrintedEpochCount;
using elastic::tests::StopAfterAnEpochWithWorld;
using elastic::tests::WithoutProgress;

using Clock = std::chrono::steady_clock;

using elastic::tests::CheckSamples;
using elastic::tests::ExpectEverySampleOnce;
using elastic::tests::HeadPort;
using elastic::tests::IsRunning;
using elastic::tests::JobArgs;
using elastic::tests::kBinary;
using elastic::tests::kTrainSamples;
using elastic::tests::LastPrintedEpoch;
using elastic::tests::Process;
using elastic::tests::ReadFile;
using elastic::tests::ResetConnectionsOf;
using elastic::tests::RestartablePort;
using elastic::tests::StepRestoredAfter;
using elastic::tests::WaitForStep;
using elastic::tests::WorkerPid;

double FinalAccuracy(const std::string& output) {
  std::smatch m;
  const std::regex re("done: \\d+ epochs, \\d+ steps, test accuracy ([0-9.]+)%");
  if (!std::regex_search(output, m, re)) return -1;
  return std::stod(m[1]);
}

// The fault-free run's final accuracy, for the runs with a failure and the
// same flags and seed (tests run in the order of this file).
double g_fault_free_accuracy = -1;

TEST(ElasticTest, FourWorkersTrainToAccuracy) {
  const std::string dir = FreshTempDir("four");
  Process driver(JobArgs(dir, 4, 2), dir + "/driver.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  // resnet8 after 2 epochs of 3072 samples: ~60% on the first 2000 test images.
  g_fault_free_accuracy = FinalAccuracy(output);
  EXPECT_GE(g_fault_free_accuracy, 45.0) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 world 4"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 2);
  struct stat info;
  EXPECT_EQ(::stat((dir + "/checkpoint/checkpoint.ckpt").c_str(), &info), 0);
}

void KillMidEpoch(int rank) {
  const std::string dir = FreshTempDir("kill" + std::to_string(rank));
  Process driver(JobArgs(dir, 4, 2), dir + "/driver.log");
  const pid_t victim = WorkerPid(driver, 1, rank);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  // Mid-epoch and between commits (every 8 steps): uncommitted steps are redone.
  ASSERT_TRUE(WaitForStep(driver, 2, 5)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("restoring the last commit"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("rescale: generation"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 world 3"), std::string::npos) << WithoutProgress(output);
  EXPECT_GE(FinalAccuracy(output), 45.0) << WithoutProgress(output);
  // Lost progress would show as a lower accuracy. A higher one is expected:
  // the survivors' epochs take more, smaller steps (3 x 32 images, not 4 x 32;
  // 58.9% fault-free against 65% after a kill, seed 1, bf16), and seeds alone
  // move the fault-free figure from 58.1% to 61.8%.
  if (g_fault_free_accuracy >= 0) {
    EXPECT_GE(FinalAccuracy(output), g_fault_free_accuracy - 2.0)
        << "final accuracy is more than 2 points below the fault-free run's\n"
        << WithoutProgress(output);
  }
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 2);
}

// A bad --data-dir is one clear error from the driver, before any worker is
// started (not the same error once per worker).
// --max-steps inside an epoch: the job ends there, and that epoch is evaluated
// and summarised (--help says so), not left with no test accuracy at all.
TEST(ElasticTest, MaxStepsInsideAnEpochEvaluatesThatEpoch) {
  const std::string dir = FreshTempDir("max-steps");
  std::vector<std::string> args = JobArgs(dir, 2, 3);
  args.push_back("--max-steps=5");
  Process driver(args, dir + "/driver.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(240)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("epoch 1/3 step 5/"), std::string::npos) << WithoutProgress(output);
  EXPECT_EQ(output.find("epoch 1/3 step 6/"), std::string::npos) << WithoutProgress(output);
  const std::regex summary(
      "epoch 1/3 world 2 \\| train loss [0-9.]+ acc [0-9.]+% \\| test loss "
      "[0-9.]+ acc ([0-9.]+)%");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(output, m, summary)) << WithoutProgress(output);
  EXPECT_GT(std::stod(m[1]), 0.0) << m[0];
  EXPECT_NE(output.find("done: 0 epochs, 5 steps, test accuracy " + m[1].str() + "%"),
            std::string::npos)
      << WithoutProgress(output);
}

TEST(ElasticTest, ABadDataDirIsOneErrorBeforeAnyWorkerStarts) {
  const std::string dir = FreshTempDir("nodata");
  std::vector<std::string> args = JobArgs(dir, 3, 1);
  for (std::string& arg : args)
    if (arg == "--dataset=fashion-mnist") arg = "--dataset=cifar10";
  args.push_back("--data-dir=" + dir + "/missing");
  Process driver(args, dir + "/driver.log");
  EXPECT_EQ(driver.Wait(std::chrono::seconds(120)), 1) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  const std::string error = "cifar: error: no CIFAR-10 train data in '" + dir + "/missing'";
  const size_t first = output.find(error);
  ASSERT_NE(first, std::string::npos) << WithoutProgress(output);
  EXPECT_EQ(output.find(error, first + 1), std::string::npos) << "said once\n"
                                                              << WithoutProgress(output);
  EXPECT_EQ(output.find("[worker"), std::string::npos) << "no worker started\n"
                                                       << WithoutProgress(output);
}

// A new job (no --resume) in a --checkpoint-dir that holds an earlier run's
// checkpoint would replace it with a fresh model's: one error, no worker
// started, the checkpoint untouched.
TEST(ElasticTest, ANewJobDoesNotReplaceAnEarlierCheckpoint) {
  const std::string dir = FreshTempDir("keep");
  ::mkdir((dir + "/checkpoint").c_str(), 0755);
  const std::string checkpoint = dir + "/checkpoint/checkpoint.ckpt";
  std::FILE* file = std::fopen(checkpoint.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("an earlier run's state", file);
  std::fclose(file);
  Process driver(JobArgs(dir, 2, 1), dir + "/driver.log");
  EXPECT_EQ(driver.Wait(std::chrono::seconds(120)), 1) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find(checkpoint + " holds the checkpoint of an earlier run"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_EQ(output.find("[worker"), std::string::npos) << "no worker started\n"
                                                       << WithoutProgress(output);
  EXPECT_EQ(ReadFile(checkpoint), "an earlier run's state");
}

TEST(ElasticTest, KillNonZeroRankMidEpoch) { KillMidEpoch(1); }
TEST(ElasticTest, KillRankZeroMidEpoch) { KillMidEpoch(0); }

// Whether /proc/cpuinfo lists bf16 instructions (AVX512-BF16 or AMX-BF16).
// Where it does not, LibTorch's bf16 is emulated and, on AVX2-only CPUs,
// wrong, so --precision=bf16 is refused there (docs/training.md).
bool CpuHasNativeBf16() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const std::string flags = " " + line.substr(line.find(':') + 1) + " ";
    return flags.find(" avx512_bf16 ") != std::string::npos ||
           flags.find(" amx_bf16 ") != std::string::npos;
  }
  return false;
}

// --global-batch with --precision=bf16 (fp32 on a CPU without bf16
// instructions, said in the log): every step takes 100 samples whatever the
// world (31 steps an epoch), split 34/33/33 over three workers and 50/50 over
// two after a kill, each share trained in micro-batches of at most
// --batch-size=32 with one allreduce per step. The job learns and the
// invariants hold across the failure.
TEST(ElasticTest, GlobalBatchWithBf16SurvivesAKill) {
  const std::string precision = CpuHasNativeBf16() ? "bf16" : "fp32";
  if (precision != "bf16") {
    std::printf(
        "this CPU has no bf16 instructions: the job runs in fp32 (bf16 is refused or "
        "emulated here; trainer:training_test covers that)\n");
  }
  const std::string dir = FreshTempDir("global");
  std::vector<std::string> args = JobArgs(dir, 3, 2);
  std::replace(args.begin(), args.end(), std::string("--batch-size=64"),
               std::string("--batch-size=32"));
  args.push_back("--global-batch=100");
  args.push_back("--precision=" + precision);
  Process driver(args, dir + "/driver.log");
  const pid_t victim = WorkerPid(driver, 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 2, 5)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("restoring the last commit"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 1/2 world 3"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 world 2"), std::string::npos) << WithoutProgress(output);
  // The step count of an epoch does not depend on the world: ceil(3072 / 100).
  EXPECT_NE(output.find("epoch 1/2 step 31/31"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 step 31/31"), std::string::npos) << WithoutProgress(output);
  // Ten classes: chance is 10%; 62 steps of 100 samples reach far above it.
  EXPECT_GE(FinalAccuracy(output), 40.0) << WithoutProgress(output);
  // Each worker says what it computes in; the epoch lines end with rank 0's.
  EXPECT_NE(output.find("precision " + precision + " (--precision=" + precision), std::string::npos)
      << WithoutProgress(output);
  EXPECT_TRUE(
      std::regex_search(output, std::regex("epoch 2/2 world 2 \\|.*\\| " + precision + ", ")))
      << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 2);
}

// SIGSTOPs rank 1 of a 2-worker job of `epochs` epochs for 3 s mid-epoch
// under --heartbeat-timeout=`timeout` and returns the driver's output.
std::string HangRankOneForThreeSeconds(const std::string& name, const std::string& timeout,
                                       int epochs) {
  const std::string dir = FreshTempDir(name);
  std::vector<std::string> args = JobArgs(dir, 2, epochs);
  args.push_back("--heartbeat-timeout=" + timeout);
  // Collectives time out at half of it: a rank left in one by its peer's
  // abort waits at most 5 s, not 60 (docs/operations.md).
  args.push_back("--step-timeout=10");
  Process driver(args, dir + "/driver.log");
  const pid_t victim = WorkerPid(driver, 1, 1);
  EXPECT_GT(victim, 0) << WithoutProgress(driver.Output());
  EXPECT_TRUE(WaitForStep(driver, 1, 5)) << WithoutProgress(driver.Output());
  if (victim > 0) {
    ::kill(victim, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    ::kill(victim, SIGCONT);
  }
  EXPECT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  ExpectOneChecksumPerGeneration(driver.Output());
  ExpectStepsWithinTheirEpoch(driver.Output());
  CheckSamples(dir, epochs);
  return driver.Output();
}

// A pause shorter than --heartbeat-timeout (a lossy link, a stalled machine)
// is not a failure: nothing is rolled back and the world stays 2.
TEST(ElasticTest, PauseWithinTheHeartbeatTimeoutIsNotAFailure) {
  const std::string output = HangRankOneForThreeSeconds("pause", "30", 2);
  EXPECT_EQ(output.find("restoring the last commit"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 world 2"), std::string::npos) << WithoutProgress(output);
}

// A worker silent for longer is declared failed by the head; the survivor
// restores the last commit and goes on alone (a generation of one, which may
// end at the next commit, before any epoch ends at world 1). The silent
// process, when it wakes up, finds its connection closed, reconnects as a new
// member with its commit and is admitted again at the next commit. Ten epochs and
// --step-timeout=10 (collectives time out after 5 s): the woken process
// sometimes (1 run in 8 to 16 here) stays in its old collective until that
// timeout before it notices, and bf16 trains an epoch alone in about 1.6 s.
TEST(ElasticTest, WorkerSilentPastTheHeartbeatTimeoutIsAFailure) {
  const std::string output = HangRankOneForThreeSeconds("hang", "0.5", 10);
  EXPECT_NE(output.find("restoring the last commit"), std::string::npos) << WithoutProgress(output);
  EXPECT_TRUE(std::regex_search(output, std::regex("driver: generation \\d+: 1 workers \\[")))
      << WithoutProgress(output);
  EXPECT_NE(output.find("reconnected to the head after"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 10/10 world 2"), std::string::npos) << WithoutProgress(output);
}

// The job stops (SIGTERM to the driver) one epoch after the joiners took
// effect, however long they took to load the data set and register. They are
// started once epoch 1 ended at world 2: joiners enter at the next commit, so
// started earlier they may enter within epoch 1 on a fast machine.
TEST(ElasticTest, ScaleUpTwoToFourByJoin) {
  const std::string dir = FreshTempDir("join");
  std::vector<std::string> args = JobArgs(dir, 2, 30);
  args.push_back("--token-file=" + dir + "/token");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  ASSERT_FALSE(driver.WaitFor("epoch 1/30 world 2 \\|", std::chrono::seconds(400)).empty())
      << WithoutProgress(driver.Output());
  Process joiner(
      {kBinary, "--join=127.0.0.1:" + port, "--workers=2", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_TRUE(StopAfterAnEpochWithWorld(driver, 4, std::chrono::seconds(400)))
      << WithoutProgress(driver.Output()) << WithoutProgress(joiner.Output());
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 3) << WithoutProgress(driver.Output());
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  const std::string output = driver.Output() + joiner.Output();
  EXPECT_NE(output.find("with 4 workers"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 1/30 world 2 |"), std::string::npos) << WithoutProgress(output);
  EXPECT_GE(LastTestAccuracy(output), 45.0) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, PrintedEpochCount(driver.Output()));
}

// SIGTERM (or Ctrl-C) to the driver stops the job at the next epoch boundary
// with a checkpoint; a joiner kept out by --max-workers leaves cleanly; and
// --resume continues at the epoch after the last one that ran.
TEST(ElasticTest, DriverSigtermStopsWithACheckpointThatResumeContinues) {
  const std::string dir = FreshTempDir("stop");
  std::vector<std::string> args = JobArgs(dir, 2, 30);
  args.push_back("--token-file=" + dir + "/token");
  args.push_back("--max-workers=2");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 3)) << WithoutProgress(driver.Output());
  Process joiner(
      {kBinary, "--join=127.0.0.1:" + port, "--workers=1", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_FALSE(joiner.WaitFor("\\] registered \\(node", std::chrono::seconds(120)).empty())
      << WithoutProgress(joiner.Output());
  ASSERT_EQ(::kill(driver.pid(), SIGTERM), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(300)), 3) << WithoutProgress(driver.Output());
  const std::string stopped = driver.Output();
  EXPECT_NE(stopped.find("driver: SIGTERM: stopping the job at the next epoch boundary"),
            std::string::npos)
      << stopped;
  EXPECT_EQ(stopped.find("restoring the last commit"), std::string::npos) << stopped;
  EXPECT_NE(stopped.find("(continue with --resume)"), std::string::npos) << stopped;
  const int epochs_run = PrintedEpochCount(stopped);
  ASSERT_GE(epochs_run, 1) << stopped;
  struct stat info;
  ASSERT_EQ(::stat((dir + "/checkpoint/checkpoint.ckpt").c_str(), &info), 0) << stopped;
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  EXPECT_NE(joiner.Output().find("leaving the job"), std::string::npos)
      << WithoutProgress(joiner.Output());
  EXPECT_EQ(joiner.Output().find("params generation="), std::string::npos)
      << "admitted beyond --max-workers=2\n"
      << WithoutProgress(joiner.Output());
  ExpectOneChecksumPerGeneration(stopped);

  // The resumed job starts where the checkpoint stopped.
  const int steps_per_epoch = static_cast<int>(kTrainSamples / 64);
  args = JobArgs(dir, 2, 30);
  args.push_back("--resume");
  Process resumed(args, dir + "/resumed.log");
  const std::smatch sync = resumed.WaitFor(
      "params generation=1 rank=0 world=2 checksum=\\S+ epoch=(\\d+) "
      "position=0 step=(\\d+)",
      std::chrono::seconds(120));
  ASSERT_FALSE(sync.empty()) << WithoutProgress(resumed.Output());
  EXPECT_EQ(std::stoi(sync[1]), epochs_run) << WithoutProgress(resumed.Output());
  EXPECT_EQ(std::stoi(sync[2]), steps_per_epoch * epochs_run) << WithoutProgress(resumed.Output());
  ASSERT_TRUE(StopAfterAnEpochWithWorld(resumed, 2, std::chrono::seconds(300)))
      << WithoutProgress(resumed.Output());
  ASSERT_EQ(resumed.Wait(std::chrono::seconds(300)), 3) << WithoutProgress(resumed.Output());
  const std::string output = resumed.Output();
  EXPECT_NE(output.find("resuming from"), std::string::npos) << WithoutProgress(output);
  const std::string next = "epoch " + std::to_string(epochs_run + 1) + "/30 world 2 |";
  EXPECT_NE(output.find(next), std::string::npos) << WithoutProgress(output);
  EXPECT_EQ(output.find("epoch " + std::to_string(epochs_run) + "/30 "), std::string::npos)
      << "epoch " << epochs_run << " ran again\n"
      << WithoutProgress(output);
}

TEST(ElasticTest, ScaleDownFourToTwoBySigterm) {
  const std::string dir = FreshTempDir("leave");
  Process driver(JobArgs(dir, 4, 3), dir + "/driver.log");
  const pid_t third = WorkerPid(driver, 1, 2);
  const pid_t fourth = WorkerPid(driver, 1, 3);
  ASSERT_GT(third, 0);
  ASSERT_GT(fourth, 0);
  ASSERT_TRUE(WaitForStep(driver, 1, 3)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(third, SIGTERM), 0);
  ASSERT_EQ(::kill(fourth, SIGTERM), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("with 2 workers"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("world 2 |"), std::string::npos) << WithoutProgress(output);
  // A graceful leave is not a failure: nothing was rolled back.
  EXPECT_EQ(output.find("restoring the last commit"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("(pid " + std::to_string(third) + ") exited with code 0"),
            std::string::npos)
      << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 3);
}

TEST(ElasticTest, BelowMinWorkersStopsWithCheckpoint) {
  const std::string dir = FreshTempDir("min");
  std::vector<std::string> args = JobArgs(dir, 2, 3);
  args.push_back("--min-workers=2");
  args.push_back("--rendezvous-timeout=10");
  Process driver(args, dir + "/driver.log");
  const pid_t victim = WorkerPid(driver, 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 3)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(driver.Wait(std::chrono::seconds(300)), 3) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("below --min-workers=2; stopping"), std::string::npos)
      << WithoutProgress(output);
  struct stat info;
  EXPECT_EQ(::stat((dir + "/checkpoint/checkpoint.ckpt").c_str(), &info), 0)
      << WithoutProgress(output);
}

// A node whose workers fail repeatedly is excluded (and the job goes on).
TEST(ElasticTest, NodeWithRepeatedFailuresIsBlacklisted) {
  const std::string dir = FreshTempDir("blacklist");
  // Up to 30 epochs: the job outlasts the joiner's start however slow; the
  // test stops it once the node is blacklisted.
  std::vector<std::string> args = JobArgs(dir, 2, 30);
  args.push_back("--token-file=" + dir + "/token");
  args.push_back("--blacklist-after=2");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 2)) << WithoutProgress(driver.Output());
  Process joiner({kBinary, "--join=127.0.0.1:" + std::string(port), "--workers=2",
                  "--token-file=" + dir + "/token"},
                 dir + "/join.log");
  // Both of the node's workers die (pending or admitted, it does not matter).
  for (int i = 0; i < 2; ++i) {
    const std::smatch m = joiner.WaitFor(
        "\\[worker \\d+ pid (\\d+)\\] registered \\(node (\\d+)\\)", std::chrono::seconds(120),
        [](const std::smatch& match) { return IsRunning(std::stoi(match[1])); });
    ASSERT_FALSE(m.empty()) << WithoutProgress(joiner.Output());
    const pid_t victim = std::stoi(m[1]);
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    // Until it is gone: the next search must not find it running and kill it again.
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
    while (IsRunning(victim) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_FALSE(IsRunning(victim)) << "worker pid " << victim << " outlived SIGKILL";
  }
  ASSERT_FALSE(driver
                   .WaitFor("driver: node \\d+ blacklisted for \\d+ s after 2 worker failures",
                            std::chrono::seconds(120))
                   .empty())
      << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(driver.pid(), SIGTERM), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 3) << WithoutProgress(driver.Output());
  ExpectOneChecksumPerGeneration(driver.Output());
  CheckSamples(dir, PrintedEpochCount(driver.Output()));
}

// Random kills, graceful leaves and joins for a bounded time (seeded, so a
// failure replays), then the job must finish with the invariants intact.
TEST(ElasticTest, ChaosThenInvariants) {
  const std::string dir = FreshTempDir("chaos");
  std::vector<std::string> args = JobArgs(dir, 4, 4);
  args.push_back("--token-file=" + dir + "/token");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 2)) << WithoutProgress(driver.Output());

  std::mt19937 random(20261122);
  std::vector<std::unique_ptr<Process>> joiners;
  std::set<pid_t> hit;
  for (int event = 0; event < 5; ++event) {
    std::this_thread::sleep_for(std::chrono::seconds(4 + random() % 6));
    // Live workers: every pid that logged a sync and was not hit yet.
    const std::string output = driver.Output();
    std::vector<pid_t> live;
    const std::regex re("\\[worker \\d+ pid (\\d+)\\] params generation=");
    for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
         it != std::sregex_iterator(); ++it) {
      const pid_t pid = static_cast<pid_t>(std::stol((*it)[1]));
      if (hit.count(pid) == 0 && std::find(live.begin(), live.end(), pid) == live.end() &&
          IsRunning(pid))
        live.push_back(pid);
    }
    const int action = static_cast<int>(random() % 3);
    if (action == 2 || live.size() <= 2) {
      joiners.push_back(std::make_unique<Process>(
          std::vector<std::string>{kBinary, "--join=127.0.0.1:" + port, "--workers=1",
                                   "--token-file=" + dir + "/token"},
          dir + "/join" + std::to_string(event) + ".log"));
    } else {
      const pid_t victim = live[random() % live.size()];
      hit.insert(victim);
      ASSERT_EQ(::kill(victim, action == 0 ? SIGKILL : SIGTERM), 0);
    }
  }
  ASSERT_EQ(driver.Wait(std::chrono::seconds(500)), 0) << WithoutProgress(driver.Output());
  std::string output = driver.Output();
  for (auto& joiner : joiners) {
    // A joiner whose worker trained leaves cleanly with the job. (One started
    // late may find the job over and the head gone: that is an error exit.)
    const int code = joiner->Wait(std::chrono::seconds(60));
    const std::string joined = joiner->Output();
    if (joined.find("params generation=") != std::string::npos) {
      EXPECT_EQ(code, 0) << joined;
    }
    output += joined;
  }
  EXPECT_GE(FinalAccuracy(output), 45.0) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 4);
}

// --- The job survives what a spot cluster does to it (docs/elastic.md, "Where
// a generation's state comes from").

// A 2-worker job of 3 epochs (48 steps each, commits every 8 steps) whose
// workers are all killed at once in epoch 2 after its step 12 (the last commit
// is then at step 56, the last checkpoint at the epoch boundary, step 48);
// with `join`, one worker joins afterwards. Returns the driver's exit code.
int EveryWorkerKilled(const std::string& dir, const std::vector<std::string>& extra, bool join,
                      std::string* output) {
  std::vector<std::string> args = JobArgs(dir, 2, 3);
  args.push_back("--token-file=" + dir + "/token");
  // A copy at every commit unless the case sets its own.
  if (std::none_of(extra.begin(), extra.end(), [](const std::string& flag) {
        return flag.rfind("--state-copy-every", 0) == 0;
      }))
    args.push_back("--state-copy-every=1");
  args.insert(args.end(), extra.begin(), extra.end());
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  const pid_t first = WorkerPid(driver, 1, 0);
  const pid_t second = WorkerPid(driver, 1, 1);
  EXPECT_TRUE(first > 0 && second > 0 && WaitForStep(driver, 2, 12))
      << WithoutProgress(driver.Output());
  ::kill(first, SIGKILL);
  ::kill(second, SIGKILL);
  std::unique_ptr<Process> joiner;
  if (join) {
    EXPECT_FALSE(
        driver.WaitFor("driver: generation \\d+: 0 workers", std::chrono::seconds(60)).empty())
        << WithoutProgress(driver.Output());
    joiner = std::make_unique<Process>(
        std::vector<std::string>{kBinary, "--join=127.0.0.1:" + port, "--workers=1",
                                 "--token-file=" + dir + "/token"},
        dir + "/join.log");
  }
  const int code = driver.Wait(std::chrono::seconds(400));
  *output = driver.Output() + (joiner ? joiner->Output() : "");
  return code;
}

// The common spot event: every worker reclaimed at once. The next worker to
// join continues from the controller's copy of the last commit (no disk read).
TEST(ElasticTest, EveryWorkerKilledThenAJoinContinuesFromTheControllersCopy) {
  const std::string dir = FreshTempDir("massloss-copy");
  std::string output;
  ASSERT_EQ(EveryWorkerKilled(dir, {}, true, &output), 0) << WithoutProgress(output);
  EXPECT_NE(output.find("restores the controller's copy"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_GE(StepRestoredAfter(output, 2), 56) << "at least the last commit before the kill\n"
                                              << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 3/3 world 1"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("done: 3 epochs"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 3);
}

// Without the copy, the newest checkpoint (written at the epoch boundary).
TEST(ElasticTest, EveryWorkerKilledWithoutACopyContinuesFromTheCheckpoint) {
  const std::string dir = FreshTempDir("massloss-checkpoint");
  std::string output;
  ASSERT_EQ(EveryWorkerKilled(dir, {"--state-copy-every=0"}, true, &output), 0)
      << WithoutProgress(output);
  EXPECT_NE(output.find("restores the newest checkpoint (epoch 2 position 0 step 48)"),
            std::string::npos)
      << WithoutProgress(output);
  EXPECT_EQ(StepRestoredAfter(output, 2), 48) << WithoutProgress(output);
  EXPECT_NE(output.find("done: 3 epochs"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 3);
}

// With neither, the job stops (exit 3) and says what was lost; it never
// restarts from a fresh model, and no checkpoint is written over anything.
TEST(ElasticTest, EveryWorkerKilledWithNoSourceLeftStopsAndSaysSo) {
  const std::string dir = FreshTempDir("massloss-none");
  std::string output;
  ASSERT_EQ(
      EveryWorkerKilled(dir, {"--state-copy-every=0", "--checkpoint-every=100"}, false, &output), 3)
      << WithoutProgress(output);
  EXPECT_NE(output.find("every worker was lost at epoch 2"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("no other copy of the job's state exists"), std::string::npos)
      << WithoutProgress(output);
  // Only generation 1 started from a fresh model.
  EXPECT_FALSE(
      std::regex_search(output, std::regex("params generation=([2-9]|\\d\\d+) rank=\\d+ world=\\d+ "
                                           "checksum=[0-9a-f]+ epoch=0 position=0 step=0\\n")))
      << WithoutProgress(output);
  struct stat info;
  EXPECT_NE(::stat((dir + "/checkpoint/checkpoint.ckpt").c_str(), &info), 0)
      << WithoutProgress(output);
}

// Every worker lost and nobody joins within --rendezvous-timeout: the job
// stops (exit 3) and the controller writes its copy, the newest state left,
// as the checkpoint; --resume continues from that commit, not the older
// epoch-boundary checkpoint.
TEST(ElasticTest, NobodyJoinsAfterAMassLossTheControllersCopyIsTheCheckpoint) {
  const std::string dir = FreshTempDir("massloss-nobody");
  std::string output;
  ASSERT_EQ(EveryWorkerKilled(dir, {"--rendezvous-timeout=3"}, false, &output), 3)
      << WithoutProgress(output);
  std::smatch wrote;
  ASSERT_TRUE(std::regex_search(
      output, wrote,
      std::regex("driver: no worker is left; wrote the controller's copy of the last commit "
                 "\\(epoch 2 position \\d+ step (\\d+)\\) to \\S+checkpoint.ckpt")))
      << WithoutProgress(output);
  const int64_t written = std::stoll(wrote[1]);
  EXPECT_GE(written, 56) << WithoutProgress(output);

  std::vector<std::string> args = JobArgs(dir, 2, 3);
  args.push_back("--resume");
  Process resumed(args, dir + "/resumed.log");
  ASSERT_EQ(resumed.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(resumed.Output());
  const std::string again = resumed.Output();
  EXPECT_NE(again.find("resuming from"), std::string::npos) << again;
  EXPECT_EQ(StepRestoredAfter(again, 0), written) << again;
  EXPECT_NE(again.find("done: 3 epochs"), std::string::npos) << again;
  ExpectOneChecksumPerGeneration(again);
}

// A spot pool taken back with notice: every worker gets SIGTERM at once and
// leaves at the next commit (--admit-at=commit), sending its stop commit to
// the controller. The job outlives them: a worker joining later continues
// from that commit (in epoch 2, before its boundary at step 96), not from a
// checkpoint or a fresh model.
TEST(ElasticTest, EveryWorkerLeavingAtOnceThenAJoinContinuesFromTheStopCommit) {
  const std::string dir = FreshTempDir("allleave");
  std::vector<std::string> args = JobArgs(dir, 2, 3);
  args.push_back("--token-file=" + dir + "/token");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  const pid_t first = WorkerPid(driver, 1, 0);
  const pid_t second = WorkerPid(driver, 1, 1);
  ASSERT_TRUE(first > 0 && second > 0 && WaitForStep(driver, 2, 12))
      << WithoutProgress(driver.Output());
  ::kill(first, SIGTERM);
  ::kill(second, SIGTERM);
  ASSERT_FALSE(
      driver.WaitFor("driver: generation \\d+: 0 workers", std::chrono::seconds(120)).empty())
      << WithoutProgress(driver.Output());
  Process joiner(
      {kBinary, "--join=127.0.0.1:" + port, "--workers=1", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output() + joiner.Output();
  std::smatch kept;
  ASSERT_TRUE(std::regex_search(output, kept,
                                std::regex("every worker is leaving; the controller's copy keeps "
                                           "their last commit \\(epoch 2 position \\d+ step "
                                           "(\\d+)\\)")))
      << WithoutProgress(output);
  const int64_t left_at = std::stoll(kept[1]);
  EXPECT_GE(left_at, 60) << "SIGTERM came 12 steps into epoch 2 (step 60)";
  EXPECT_LT(left_at, 96) << "the next commit, not the epoch boundary";
  EXPECT_NE(output.find("restores the controller's copy"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_EQ(StepRestoredAfter(output, 2), left_at) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 3/3 world 1"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("done: 3 epochs"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 3);
}

// The spot layout: a controller with no workers on a safe machine, every
// worker joining from elsewhere.
TEST(ElasticTest, ControllerWithoutWorkersAndTwoJoiningNodes) {
  const std::string dir = FreshTempDir("controller-only");
  std::vector<std::string> args = JobArgs(dir, 2, 2);
  args.erase(std::remove(args.begin(), args.end(), std::string("--workers=2")), args.end());
  args.push_back("--controller-only");
  args.push_back("--min-workers=2");
  args.push_back("--token-file=" + dir + "/token");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  std::vector<std::unique_ptr<Process>> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<Process>(
        std::vector<std::string>{kBinary, "--join=127.0.0.1:" + port, "--workers=1",
                                 "--token-file=" + dir + "/token"},
        dir + "/join" + std::to_string(i) + ".log"));
  }
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output() + nodes[0]->Output() + nodes[1]->Output();
  EXPECT_NE(output.find("controller only"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 world 2"), std::string::npos) << WithoutProgress(output);
  EXPECT_EQ(output.find("started 2 workers"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 2);
  for (auto& node : nodes)
    EXPECT_EQ(node->Wait(std::chrono::seconds(60)), 0) << WithoutProgress(node->Output());
}

// A worker whose training thread is stuck keeps heartbeating from its other
// threads; the step watchdog drops it and the others go on.
TEST(ElasticTest, AWedgedStepIsDroppedByTheStepWatchdog) {
  const std::string dir = FreshTempDir("wedge");
  std::vector<std::string> args = JobArgs(dir, 3, 2);
  args.push_back("--step-timeout=8");
  ::setenv("ELASTIC_TEST_WEDGE_STEP", "1:40", 1);  // worker index 1, global step 40 (epoch 2)
  Process driver(args, dir + "/driver.log");
  ::unsetenv("ELASTIC_TEST_WEDGE_STEP");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("wedging the training thread at step 40"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("made no progress for 8.0 s (--step-timeout)"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 world 2"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 2);
}

// The controller's machine is lost mid-epoch (kill -9 of a controller-only
// driver) and the driver is started again with the same --state-dir, port and
// token: it takes the job over from its journal, the same worker processes
// reconnect and continue from the commit they hold (not a fresh model, not
// the checkpoint), and the job finishes with its invariants.
TEST(ElasticTest, ControllerKilledMidEpochAndRestartedTakesTheJobOver) {
  const std::string dir = FreshTempDir("controller-restart");
  std::vector<std::string> args = JobArgs(dir, 2, 3);
  args.erase(std::remove(args.begin(), args.end(), std::string("--workers=2")), args.end());
  // No checkpoint: the workers' memory is the only copy of the state.
  args.erase(std::remove(args.begin(), args.end(), "--checkpoint-dir=" + dir + "/checkpoint"),
             args.end());
  args.push_back("--controller-only");
  args.push_back("--min-workers=2");
  args.push_back("--token-file=" + dir + "/token");
  args.push_back("--state-dir=" + dir + "/state");
  // No copy before the restart either: the new controller's first generation
  // restores from the workers and sends it the state it restored.
  args.push_back("--state-copy-every=1000");
  std::vector<std::string> first_args = args;
  first_args.push_back("--port=" + RestartablePort());
  auto first = std::make_unique<Process>(first_args, dir + "/driver1.log");
  const std::string port = HeadPort(*first);
  ASSERT_FALSE(port.empty()) << WithoutProgress(first->Output());
  std::vector<std::unique_ptr<Process>> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<Process>(
        std::vector<std::string>{kBinary, "--join=127.0.0.1:" + port, "--workers=1",
                                 "--token-file=" + dir + "/token"},
        dir + "/join" + std::to_string(i) + ".log"));
  }
  ASSERT_TRUE(WaitForStep(*first, 2, 12)) << WithoutProgress(first->Output());
  ASSERT_EQ(::kill(first->pid(), SIGKILL), 0);
  first->Wait(std::chrono::seconds(30));
  const std::string before = first->Output();
  int last_generation = 0;
  const std::regex generation_line("driver: generation (\\d+):");
  for (auto it = std::sregex_iterator(before.begin(), before.end(), generation_line);
       it != std::sregex_iterator(); ++it)
    last_generation = std::max(last_generation, std::stoi((*it)[1]));
  ASSERT_GT(last_generation, 0) << WithoutProgress(before);

  // A restart that names another model is another job (most likely the
  // wrong --state-dir): refused before anything of the job changes.
  std::vector<std::string> wrong_args = args;
  wrong_args.push_back("--port=" + port);
  wrong_args.push_back("--model=resnet18");
  Process wrong(wrong_args, dir + "/driver-wrong.log");
  EXPECT_NE(wrong.Wait(std::chrono::seconds(120)), 0) << WithoutProgress(wrong.Output());
  EXPECT_NE(wrong.Output().find("--model=resnet18 is not the job's (--model=resnet8)"),
            std::string::npos)
      << WithoutProgress(wrong.Output());

  // Another --lr is said and not applied: the job keeps its settings.
  std::vector<std::string> second_args = args;
  second_args.push_back("--port=" + port);
  second_args.push_back("--lr=0.2");
  Process second(second_args, dir + "/driver2.log");
  ASSERT_EQ(second.Wait(std::chrono::seconds(400)), 0)
      << WithoutProgress(before) << WithoutProgress(second.Output())
      << WithoutProgress(nodes[0]->Output()) << WithoutProgress(nodes[1]->Output());
  for (auto& node : nodes)
    EXPECT_EQ(node->Wait(std::chrono::seconds(60)), 0) << WithoutProgress(node->Output());
  const std::string after = second.Output();
  const std::string workers = nodes[0]->Output() + nodes[1]->Output();
  EXPECT_NE(after.find("driver: taking over job "), std::string::npos) << WithoutProgress(after);
  // --port is this process's own; --lr is the job's, which keeps its 0.1.
  EXPECT_NE(after.find("driver: warning: --lr=0.2 does not apply: the job taken over keeps "
                       "--lr=0.1"),
            std::string::npos)
      << WithoutProgress(after);
  EXPECT_EQ(after.find("--port=" + port + " does not apply"), std::string::npos)
      << WithoutProgress(after);
  EXPECT_NE(after.find("driver: the controller's copy is now the state generation"),
            std::string::npos)
      << WithoutProgress(after);
  EXPECT_EQ(after.find(": 0 workers"), std::string::npos) << WithoutProgress(after);
  EXPECT_NE(after.find("2 workers came back after the controller restarted"), std::string::npos)
      << WithoutProgress(after);
  EXPECT_NE(after.find("epoch 3/3 world 2"), std::string::npos) << WithoutProgress(after);
  EXPECT_EQ(after.find("epoch 1/3 world"), std::string::npos) << "an epoch printed twice\n"
                                                              << WithoutProgress(after);
  // The same processes: each node started one worker, and both reconnected.
  const std::regex started("started worker \\d+ as pid");
  for (auto& node : nodes) {
    const std::string out = node->Output();
    EXPECT_EQ(std::distance(std::sregex_iterator(out.begin(), out.end(), started),
                            std::sregex_iterator()),
              1)
        << WithoutProgress(out);
    EXPECT_NE(out.find("reconnected to the head after"), std::string::npos) << WithoutProgress(out);
  }
  // The first generation of the new controller restored what the workers
  // held: epoch 2 (0-based 1), past its start.
  const std::regex params(
      "params generation=(\\d+) rank=0 world=2 checksum=[0-9a-f]+ epoch=(\\d+) position=(\\d+) "
      "step=(\\d+)");
  int64_t taken_over_step = -1;
  for (auto it = std::sregex_iterator(workers.begin(), workers.end(), params);
       it != std::sregex_iterator(); ++it) {
    if (std::stoi((*it)[1]) <= last_generation) continue;
    EXPECT_EQ((*it)[2], "1") << (*it)[0];
    taken_over_step = std::stoll((*it)[4]);
    break;
  }
  // 48 steps in epoch 1 at world 2, then commits every 8 steps.
  EXPECT_GE(taken_over_step, 48 + 8) << WithoutProgress(workers);
  ExpectOneChecksumPerGeneration(workers);
  CheckSamples(dir, 3);
}

// A fault that kills no process: every TCP connection of one worker (to the
// head, to the controller, to its Gloo peers) is reset mid-epoch. The head
// counts it failed and the other worker goes on; the same process notices,
// aborts its generation, reconnects with the commit it holds and is admitted
// again; the job finishes with both workers and its invariants.
TEST(ElasticTest, EveryConnectionOfAWorkerResetMidEpoch) {
  const std::string dir = FreshTempDir("reset");
  Process driver(JobArgs(dir, 2, 3), dir + "/driver.log");
  const pid_t victim = WorkerPid(driver, 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 2, 12)) << WithoutProgress(driver.Output());
  const int reset = ResetConnectionsOf(victim);
  ASSERT_GE(reset, 2) << "connections of worker pid " << victim << " reset: " << reset;
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  const std::string tag = "pid " + std::to_string(victim) + "] ";
  EXPECT_NE(output.find(tag + "lost the head"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find(tag + "reconnected to the head after"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 3/3 world 2"), std::string::npos) << WithoutProgress(output);
  EXPECT_TRUE(IsRunning(victim) || output.find(tag + "training finished") != std::string::npos)
      << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 3);
}

}  // namespace
