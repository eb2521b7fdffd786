// End-to-end tests of the elastic trainer: real driver, node agent and worker
// processes over real sockets, training resnet8 on a subset of Fashion-MNIST.
//
// After every scenario the invariants of docs/elastic.md are checked from the
// job's event log (--run-dir/events.jsonl, docs/events.md) and the workers'
// sample logs:
// - in every generation, every rank reported the same parameter checksum
//   after the sync from rank 0;
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

using elastic::tests::EpochCount;
using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::ExpectRolledBackToACommit;
using elastic::tests::ExpectStepsWithinTheirEpoch;
using elastic::tests::FreshTempDir;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::LastTestAccuracy;
using elastic::tests::RunDir;
using elastic::tests::StopAfterAnEpochWithWorld;
using elastic::tests::WaitForEvent;
using elastic::tests::WithoutProgress;

using Clock = std::chrono::steady_clock;

using elastic::tests::CheckSamples;
using elastic::tests::ExpectEverySampleOnce;
using elastic::tests::HeadPort;
using elastic::tests::IsRunning;
using elastic::tests::JobArgs;
using elastic::tests::kBinary;
using elastic::tests::kTrainSamples;
using elastic::tests::Process;
using elastic::tests::ReadFile;
using elastic::tests::ResetConnectionsOf;
using elastic::tests::RestartablePort;
using elastic::tests::StepRestoredAfter;
using elastic::tests::WaitForStep;
using elastic::tests::WorkerPid;

JobEvents Events(const std::string& dir) { return JobEvents::Read(RunDir(dir)); }

// The test accuracy (percent) the job ended with (its "done" event), or -1.
double FinalAccuracy(const JobEvents& events) {
  const JobEvent done = events.Last("done");
  return done.is_null() ? -1 : 100 * done["test_metric"].get<double>();
}

// Whether an epoch summary says epoch `epoch` (1-based) ended at `world`.
bool HasEpoch(const JobEvents& events, int epoch, int world) {
  for (const JobEvent& e : events.Of("epoch"))
    if (e["epoch"] == epoch && e["world"] == world) return true;
  return false;
}

// Whether a generation of `world` members was started.
bool HasGenerationOf(const JobEvents& events, size_t world) {
  for (const JobEvent& g : events.Of("generation"))
    if (g["members"].size() == world) return true;
  return false;
}

bool AnyFailure(const JobEvents& events) {
  for (const JobEvent& e : events.all())
    if (e["event"] == "fault" || (e["event"] == "leave" && e["reason"] == "failed")) return true;
  return false;
}

// The first generation event whose source is `source`, or null.
JobEvent FirstGenerationFrom(const JobEvents& events, const std::string& source) {
  for (const JobEvent& g : events.Of("generation"))
    if (g["source"] == source) return g;
  return nullptr;
}

// `args` with its --run-dir replaced by `run_dir` (a second job in the same
// scenario directory keeps a log of its own).
std::vector<std::string> WithRunDir(std::vector<std::string> args, const std::string& run_dir) {
  for (std::string& arg : args)
    if (arg.rfind("--run-dir=", 0) == 0) arg = "--run-dir=" + run_dir;
  return args;
}

// The fault-free run's final accuracy, for the runs with a failure and the
// same flags and seed (tests run in the order of this file).
double g_fault_free_accuracy = -1;

TEST(ElasticTest, FourWorkersTrainToAccuracy) {
  const std::string dir = FreshTempDir("four");
  Process driver(JobArgs(dir, 4, 2), dir + "/driver.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const JobEvents events = Events(dir);
  // resnet8 after 2 epochs of 3072 samples: ~60% on the first 2000 test images.
  g_fault_free_accuracy = FinalAccuracy(events);
  EXPECT_GE(g_fault_free_accuracy, 45.0) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 2, 4)) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 2);
  struct stat info;
  EXPECT_EQ(::stat((dir + "/checkpoint/checkpoint.ckpt").c_str(), &info), 0);
}

void KillMidEpoch(int rank) {
  const std::string dir = FreshTempDir("kill" + std::to_string(rank));
  Process driver(JobArgs(dir, 4, 2), dir + "/driver.log");
  const pid_t victim = WorkerPid(RunDir(dir), 1, rank);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  // Mid-epoch and between commits (every 8 steps): uncommitted steps are redone.
  ASSERT_TRUE(WaitForStep(driver, 2, 5)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const JobEvents events = Events(dir);
  ExpectRolledBackToACommit(events);
  bool rescaled = false;  // a later generation's first step
  for (const JobEvent& first : events.Of("first_step")) rescaled |= first["generation"] > 1;
  EXPECT_TRUE(rescaled) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 2, 3)) << events.Text();
  EXPECT_GE(FinalAccuracy(events), 45.0) << events.Text();
  // Lost progress would show as a lower accuracy. A higher one is expected:
  // the survivors' epochs take more, smaller steps (3 x 32 images, not 4 x 32;
  // 58.9% fault-free against 65% after a kill, seed 1, bf16), and seeds alone
  // move the fault-free figure from 58.1% to 61.8%.
  if (g_fault_free_accuracy >= 0) {
    EXPECT_GE(FinalAccuracy(events), g_fault_free_accuracy - 2.0)
        << "final accuracy is more than 2 points below the fault-free run's\n"
        << events.Text();
  }
  ExpectOneChecksumPerGeneration(events);
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
  const JobEvents events = Events(dir);
  const JobEvent done = events.Last("done");
  ASSERT_FALSE(done.is_null()) << events.Text();
  EXPECT_EQ(done["steps"], 5) << events.Text();
  EXPECT_EQ(done["epochs"], 0) << events.Text();
  for (const JobEvent& commit : events.Of("commit"))
    EXPECT_LE(commit["point"]["step"].get<int>(), 5) << events.Text();
  const std::vector<JobEvent> epochs = events.Of("epoch");
  ASSERT_EQ(epochs.size(), 1u) << events.Text();
  EXPECT_EQ(epochs[0]["epoch"], 1);
  EXPECT_EQ(epochs[0]["world"], 2);
  EXPECT_GT(epochs[0]["test_metric"].get<double>(), 0.0) << events.Text();
  EXPECT_EQ(done["test_metric"], epochs[0]["test_metric"]) << events.Text();
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
  const JobEvents events = Events(dir);
  EXPECT_TRUE(events.Of("join").empty()) << "no worker started\n" << events.Text();
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
  const JobEvents events = Events(dir);
  EXPECT_TRUE(events.Of("join").empty()) << "no worker started\n" << events.Text();
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
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 2, 5)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  const JobEvents events = Events(dir);
  ExpectRolledBackToACommit(events);
  EXPECT_TRUE(HasEpoch(events, 1, 3)) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 2, 2)) << events.Text();
  // The step count of an epoch does not depend on the world: ceil(3072 / 100).
  bool first_boundary = false;
  for (const JobEvent& commit : events.Of("commit"))
    first_boundary |= commit["point"] == JobEvent({{"epoch", 1}, {"position", 0}, {"step", 31}});
  EXPECT_TRUE(first_boundary) << events.Text();
  ASSERT_FALSE(events.Last("done").is_null()) << events.Text();
  EXPECT_EQ(events.Last("done")["steps"], 62) << events.Text();
  // Ten classes: chance is 10%; 62 steps of 100 samples reach far above it.
  EXPECT_GE(FinalAccuracy(events), 40.0) << events.Text();
  // Each worker says what it computes in; the epochs carry rank 0's.
  EXPECT_NE(output.find("precision " + precision + " (--precision=" + precision), std::string::npos)
      << WithoutProgress(output);
  const JobEvent last_epoch = events.Last("epoch");
  ASSERT_FALSE(last_epoch.is_null()) << events.Text();
  EXPECT_EQ(last_epoch["arithmetic"].get<std::string>().rfind(precision + ", ", 0), 0u)
      << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 2);
}

// SIGSTOPs rank 1 of a 2-worker job of `epochs` epochs for 3 s mid-epoch
// under --heartbeat-timeout=`timeout` and returns the job's events.
JobEvents HangRankOneForThreeSeconds(const std::string& name, const std::string& timeout,
                                     int epochs) {
  const std::string dir = FreshTempDir(name);
  std::vector<std::string> args = JobArgs(dir, 2, epochs);
  args.push_back("--heartbeat-timeout=" + timeout);
  // Collectives time out at half of it: a rank left in one by its peer's
  // abort waits at most 5 s, not 60 (docs/operations.md).
  args.push_back("--step-timeout=10");
  Process driver(args, dir + "/driver.log");
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  EXPECT_GT(victim, 0) << WithoutProgress(driver.Output());
  EXPECT_TRUE(WaitForStep(driver, 1, 5)) << WithoutProgress(driver.Output());
  if (victim > 0) {
    ::kill(victim, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    ::kill(victim, SIGCONT);
  }
  EXPECT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const JobEvents events = Events(dir);
  ExpectOneChecksumPerGeneration(events);
  ExpectStepsWithinTheirEpoch(driver.Output());
  CheckSamples(dir, epochs);
  return events;
}

// A pause shorter than --heartbeat-timeout (a lossy link, a stalled machine)
// is not a failure: nothing is rolled back and the world stays 2.
TEST(ElasticTest, PauseWithinTheHeartbeatTimeoutIsNotAFailure) {
  const JobEvents events = HangRankOneForThreeSeconds("pause", "30", 2);
  EXPECT_FALSE(AnyFailure(events)) << events.Text();
  EXPECT_EQ(events.Of("generation").size(), 1u) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 2, 2)) << events.Text();
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
  const JobEvents events = HangRankOneForThreeSeconds("hang", "0.5", 10);
  ExpectRolledBackToACommit(events);
  bool alone = false;  // the survivor's view of one
  for (const JobEvent& view : events.Of("view")) alone |= view["members"].size() == 1;
  EXPECT_TRUE(alone) << events.Text();
  // The woken process came back as a new member with the commit it holds.
  bool came_back = false;
  for (const JobEvent& join : events.Of("join")) came_back |= !join["holds"].is_null();
  EXPECT_TRUE(came_back) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 10, 2)) << events.Text();
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
  ASSERT_FALSE(WaitForEvent(RunDir(dir), std::chrono::seconds(400),
                            [](const JobEvent& e) {
                              return e["event"] == "epoch" && e["epoch"] == 1 && e["world"] == 2;
                            })
                   .is_null())
      << WithoutProgress(driver.Output());
  Process joiner(
      {kBinary, "--join=127.0.0.1:" + port, "--workers=2", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_TRUE(StopAfterAnEpochWithWorld(driver, RunDir(dir), 4, std::chrono::seconds(400)))
      << WithoutProgress(driver.Output()) << WithoutProgress(joiner.Output());
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 3) << WithoutProgress(driver.Output());
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  const JobEvents events = Events(dir);
  EXPECT_TRUE(HasGenerationOf(events, 4)) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 1, 2)) << events.Text();
  EXPECT_GE(LastTestAccuracy(events), 45.0) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, EpochCount(events));
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
  const JobEvents events = Events(dir);
  const JobEvent end = events.Last("end");
  ASSERT_FALSE(end.is_null()) << events.Text();
  EXPECT_EQ(end["reason"], "stopped by SIGTERM to the driver") << events.Text();
  EXPECT_FALSE(AnyFailure(events)) << events.Text();
  // One checkpoint of the point the job stopped at: the epoch boundary wrote
  // it, and the stop generation at rank 0's own commit does not write it again.
  const std::vector<JobEvent> checkpoints = events.Of("checkpoint");
  ASSERT_FALSE(checkpoints.empty()) << events.Text();
  const JobEvent& last = checkpoints.back();
  EXPECT_EQ(std::count_if(checkpoints.begin(), checkpoints.end(),
                          [&](const JobEvent& c) { return c["point"] == last["point"]; }),
            1)
      << events.Text();
  // What the user is told to do next.
  EXPECT_NE(stopped.find("(continue with --resume)"), std::string::npos) << stopped;
  const int epochs_run = EpochCount(events);
  ASSERT_GE(epochs_run, 1) << events.Text();
  struct stat info;
  ASSERT_EQ(::stat((dir + "/checkpoint/checkpoint.ckpt").c_str(), &info), 0) << stopped;
  ASSERT_FALSE(events.Last("checkpoint").is_null()) << events.Text();
  EXPECT_EQ(events.Last("checkpoint")["point"]["epoch"], epochs_run) << events.Text();
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  for (const JobEvent& g : events.Of("generation"))
    EXPECT_LE(g["members"].size(), 2u) << "admitted beyond --max-workers=2\n" << events.Text();
  ExpectOneChecksumPerGeneration(events);

  // The resumed job starts where the checkpoint stopped.
  const int steps_per_epoch = static_cast<int>(kTrainSamples / 64);
  const std::string resumed_run = dir + "/run-resumed";
  args = WithRunDir(JobArgs(dir, 2, 30), resumed_run);
  args.push_back("--resume");
  Process resumed(args, dir + "/resumed.log");
  const JobEvent sync = WaitForEvent(resumed_run, std::chrono::seconds(120), [](const JobEvent& e) {
    return e["event"] == "params" && e["generation"] == 1 && e["rank"] == 0;
  });
  ASSERT_FALSE(sync.is_null()) << WithoutProgress(resumed.Output());
  EXPECT_EQ(
      sync["point"],
      JobEvent({{"epoch", epochs_run}, {"position", 0}, {"step", steps_per_epoch * epochs_run}}))
      << sync.dump();
  ASSERT_TRUE(StopAfterAnEpochWithWorld(resumed, resumed_run, 2, std::chrono::seconds(300)))
      << WithoutProgress(resumed.Output());
  ASSERT_EQ(resumed.Wait(std::chrono::seconds(300)), 3) << WithoutProgress(resumed.Output());
  const JobEvents after = JobEvents::Read(resumed_run);
  EXPECT_FALSE(FirstGenerationFrom(after, "resume").is_null()) << after.Text();
  EXPECT_TRUE(HasEpoch(after, epochs_run + 1, 2)) << after.Text();
  for (const JobEvent& epoch : after.Of("epoch"))
    EXPECT_GT(epoch["epoch"].get<int>(), epochs_run) << "an epoch ran again\n" << after.Text();
}

TEST(ElasticTest, ScaleDownFourToTwoBySigterm) {
  const std::string dir = FreshTempDir("leave");
  Process driver(JobArgs(dir, 4, 3), dir + "/driver.log");
  const pid_t third = WorkerPid(RunDir(dir), 1, 2);
  const pid_t fourth = WorkerPid(RunDir(dir), 1, 3);
  ASSERT_GT(third, 0);
  ASSERT_GT(fourth, 0);
  ASSERT_TRUE(WaitForStep(driver, 1, 3)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(third, SIGTERM), 0);
  ASSERT_EQ(::kill(fourth, SIGTERM), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const JobEvents events = Events(dir);
  EXPECT_TRUE(HasGenerationOf(events, 2)) << events.Text();
  bool epoch_of_two = false;
  for (const JobEvent& epoch : events.Of("epoch")) epoch_of_two |= epoch["world"] == 2;
  EXPECT_TRUE(epoch_of_two) << events.Text();
  // A graceful leave is not a failure: nothing was rolled back.
  EXPECT_FALSE(AnyFailure(events)) << events.Text();
  for (const pid_t pid : {third, fourth}) {
    uint64_t member = 0;
    for (const JobEvent& p : events.Of("params"))
      if (p["pid"] == pid) member = p["member"];
    bool left = false;
    for (const JobEvent& leave : events.Of("leave"))
      left |= leave["member"] == member && leave["reason"] == "left";
    EXPECT_TRUE(member > 0 && left) << "pid " << pid << " did not leave gracefully\n"
                                    << events.Text();
  }
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 3);
}

TEST(ElasticTest, BelowMinWorkersStopsWithCheckpoint) {
  const std::string dir = FreshTempDir("min");
  std::vector<std::string> args = JobArgs(dir, 2, 3);
  args.push_back("--min-workers=2");
  args.push_back("--rendezvous-timeout=10");
  Process driver(args, dir + "/driver.log");
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 3)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(driver.Wait(std::chrono::seconds(300)), 3) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  const JobEvents events = Events(dir);
  const JobEvent end = events.Last("end");
  ASSERT_FALSE(end.is_null()) << events.Text();
  EXPECT_EQ(end["outcome"], "stopped");
  EXPECT_NE(end["reason"].get<std::string>().find("below --min-workers=2"), std::string::npos)
      << events.Text();
  // It waited below --min-workers with the one worker left, then stopped on that error.
  const JobEvent below = events.Last("below_min_workers");
  ASSERT_FALSE(below.is_null()) << events.Text();
  EXPECT_EQ(below["workers"], 1) << events.Text();
  EXPECT_EQ(below["min_workers"], 2) << events.Text();
  const JobEvent error = events.Last("error");
  ASSERT_FALSE(error.is_null()) << events.Text();
  EXPECT_EQ(error["kind"], "below_min_workers") << events.Text();
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
  // The joined node is blacklisted after its two failures (not the driver's
  // own node 1, whose workers train on).
  const JobEvent blacklisted = WaitForEvent(
      RunDir(dir), std::chrono::seconds(120),
      [](const JobEvent& e) { return e["event"] == "blacklisted" && e["failures"] == 2; });
  ASSERT_FALSE(blacklisted.is_null()) << Events(dir).Text() << WithoutProgress(driver.Output());
  EXPECT_NE(blacklisted["node"], 1) << Events(dir).Text();
  EXPECT_EQ(blacklisted["seconds"], 300.0) << Events(dir).Text();
  ASSERT_EQ(::kill(driver.pid(), SIGTERM), 0);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 3) << WithoutProgress(driver.Output());
  const JobEvents events = Events(dir);
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, EpochCount(events));
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
    // Live workers: every pid that reported a sync and was not hit yet.
    std::vector<pid_t> live;
    for (const JobEvent& params : Events(dir).Of("params")) {
      const pid_t pid = params["pid"].get<pid_t>();
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
  const JobEvents events = Events(dir);
  std::set<pid_t> trained;
  for (const JobEvent& params : events.Of("params")) trained.insert(params["pid"].get<pid_t>());
  for (auto& joiner : joiners) {
    // A joiner whose worker trained leaves cleanly with the job. (One started
    // late may find the job over and the head gone: that is an error exit.)
    const int code = joiner->Wait(std::chrono::seconds(60));
    for (const pid_t pid : elastic::tests::WorkersStartedBy(joiner->Output()))
      if (trained.count(pid) > 0) {
        EXPECT_EQ(code, 0) << joiner->Output();
      }
  }
  EXPECT_GE(FinalAccuracy(events), 45.0) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 4);
}

// --- The job survives what a spot cluster does to it (docs/elastic.md, "Where
// a generation's state comes from").

// A 2-worker job of 3 epochs (48 steps each, commits every 8 steps) whose
// workers are all killed at once in epoch 2 after its step 12 (the last commit
// is then at step 56, the last checkpoint at the epoch boundary, step 48);
// with `join`, one worker joins afterwards. Returns the driver's exit code.
int EveryWorkerKilled(const std::string& dir, const std::vector<std::string>& extra, bool join,
                      std::string* output, JobEvents* events) {
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
  const pid_t first = WorkerPid(RunDir(dir), 1, 0);
  const pid_t second = WorkerPid(RunDir(dir), 1, 1);
  EXPECT_TRUE(first > 0 && second > 0 && WaitForStep(driver, 2, 12))
      << WithoutProgress(driver.Output());
  ::kill(first, SIGKILL);
  ::kill(second, SIGKILL);
  std::unique_ptr<Process> joiner;
  if (join) {
    EXPECT_FALSE(
        WaitForEvent(RunDir(dir), std::chrono::seconds(60),
                     [](const JobEvent& e) { return e["event"] == "view" && e["members"].empty(); })
            .is_null())
        << WithoutProgress(driver.Output());
    joiner = std::make_unique<Process>(
        std::vector<std::string>{kBinary, "--join=127.0.0.1:" + port, "--workers=1",
                                 "--token-file=" + dir + "/token"},
        dir + "/join.log");
  }
  const int code = driver.Wait(std::chrono::seconds(400));
  *output = driver.Output() + (joiner ? joiner->Output() : "");
  *events = Events(dir);
  return code;
}

// The common spot event: every worker reclaimed at once. The next worker to
// join continues from the controller's copy of the last commit (no disk read).
TEST(ElasticTest, EveryWorkerKilledThenAJoinContinuesFromTheControllersCopy) {
  const std::string dir = FreshTempDir("massloss-copy");
  std::string output;
  JobEvents events;
  ASSERT_EQ(EveryWorkerKilled(dir, {}, true, &output, &events), 0) << WithoutProgress(output);
  EXPECT_FALSE(FirstGenerationFrom(events, "controller_copy").is_null()) << events.Text();
  EXPECT_GE(StepRestoredAfter(events, 2), 56) << "at least the last commit before the kill\n"
                                              << events.Text();
  EXPECT_TRUE(HasEpoch(events, 3, 1)) << events.Text();
  ASSERT_FALSE(events.Last("done").is_null()) << events.Text();
  EXPECT_EQ(events.Last("done")["epochs"], 3) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 3);
}

// Without the copy, the newest checkpoint (written at the epoch boundary).
TEST(ElasticTest, EveryWorkerKilledWithoutACopyContinuesFromTheCheckpoint) {
  const std::string dir = FreshTempDir("massloss-checkpoint");
  std::string output;
  JobEvents events;
  ASSERT_EQ(EveryWorkerKilled(dir, {"--state-copy-every=0"}, true, &output, &events), 0)
      << WithoutProgress(output);
  const JobEvent restore = FirstGenerationFrom(events, "checkpoint");
  ASSERT_FALSE(restore.is_null()) << events.Text();
  EXPECT_EQ(restore["restores"], JobEvent({{"epoch", 1}, {"position", 0}, {"step", 48}}))
      << events.Text();
  EXPECT_EQ(StepRestoredAfter(events, 2), 48) << events.Text();
  ASSERT_FALSE(events.Last("done").is_null()) << events.Text();
  EXPECT_EQ(events.Last("done")["epochs"], 3) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 3);
}

// With neither, the job stops (exit 3) and says what was lost; it never
// restarts from a fresh model, and no checkpoint is written over anything.
TEST(ElasticTest, EveryWorkerKilledWithNoSourceLeftStopsAndSaysSo) {
  const std::string dir = FreshTempDir("massloss-none");
  std::string output;
  JobEvents events;
  ASSERT_EQ(EveryWorkerKilled(dir, {"--state-copy-every=0", "--checkpoint-every=100"}, false,
                              &output, &events),
            3)
      << WithoutProgress(output);
  const JobEvent end = events.Last("end");
  ASSERT_FALSE(end.is_null()) << events.Text();
  EXPECT_EQ(end["reason"], "the job's state was lost") << events.Text();
  // What the user is told was lost, and that nothing was overwritten.
  EXPECT_NE(output.find("every worker was lost at epoch 2"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("no other copy of the job's state exists"), std::string::npos)
      << WithoutProgress(output);
  // Only generation 1 started from a fresh model.
  for (const JobEvent& g : events.Of("generation"))
    EXPECT_TRUE(g["generation"] == 1 || g["source"] != "fresh") << events.Text();
  for (const JobEvent& p : events.Of("params"))
    EXPECT_TRUE(p["generation"] == 1 || p["point"]["step"] != 0) << events.Text();
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
  JobEvents events;
  ASSERT_EQ(EveryWorkerKilled(dir, {"--rendezvous-timeout=3"}, false, &output, &events), 3)
      << WithoutProgress(output);
  const JobEvent wrote = events.Last("checkpoint");
  ASSERT_FALSE(wrote.is_null()) << events.Text();
  EXPECT_EQ(wrote["writer"], "controller") << events.Text();
  EXPECT_EQ(wrote["path"], dir + "/checkpoint/checkpoint.ckpt") << events.Text();
  EXPECT_EQ(wrote["point"]["epoch"], 1) << events.Text();
  const int64_t written = wrote["point"]["step"].get<int64_t>();
  EXPECT_GE(written, 56) << events.Text();

  const std::string resumed_run = dir + "/run-resumed";
  std::vector<std::string> args = WithRunDir(JobArgs(dir, 2, 3), resumed_run);
  args.push_back("--resume");
  Process resumed(args, dir + "/resumed.log");
  ASSERT_EQ(resumed.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(resumed.Output());
  const JobEvents again = JobEvents::Read(resumed_run);
  EXPECT_FALSE(FirstGenerationFrom(again, "resume").is_null()) << again.Text();
  EXPECT_EQ(StepRestoredAfter(again, 0), written) << again.Text();
  ASSERT_FALSE(again.Last("done").is_null()) << again.Text();
  EXPECT_EQ(again.Last("done")["epochs"], 3) << again.Text();
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
  const pid_t first = WorkerPid(RunDir(dir), 1, 0);
  const pid_t second = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_TRUE(first > 0 && second > 0 && WaitForStep(driver, 2, 12))
      << WithoutProgress(driver.Output());
  ::kill(first, SIGTERM);
  ::kill(second, SIGTERM);
  ASSERT_FALSE(
      WaitForEvent(RunDir(dir), std::chrono::seconds(120),
                   [](const JobEvent& e) { return e["event"] == "view" && e["members"].empty(); })
          .is_null())
      << WithoutProgress(driver.Output());
  Process joiner(
      {kBinary, "--join=127.0.0.1:" + port, "--workers=1", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const JobEvents events = Events(dir);
  // Both left on purpose: nothing failed, and the joiner restored the commit
  // they stopped at from the controller's copy.
  EXPECT_FALSE(AnyFailure(events)) << events.Text();
  EXPECT_EQ(events.Of("draining").size(), 2u) << events.Text();
  const JobEvent restore = FirstGenerationFrom(events, "controller_copy");
  ASSERT_FALSE(restore.is_null()) << events.Text();
  const int64_t left_at = restore["restores"]["step"].get<int64_t>();
  EXPECT_EQ(restore["restores"]["epoch"], 1) << events.Text();
  EXPECT_GE(left_at, 60) << "SIGTERM came 12 steps into epoch 2 (step 60)";
  EXPECT_LT(left_at, 96) << "the next commit, not the epoch boundary";
  EXPECT_EQ(StepRestoredAfter(events, 2), left_at) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 3, 1)) << events.Text();
  ASSERT_FALSE(events.Last("done").is_null()) << events.Text();
  EXPECT_EQ(events.Last("done")["epochs"], 3) << events.Text();
  ExpectOneChecksumPerGeneration(events);
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
  const std::string output = driver.Output();
  const JobEvents events = Events(dir);
  // The driver says it runs no workers, and starts none: its job has no
  // workers of its own, and every worker that joined came from the two nodes.
  EXPECT_NE(output.find("controller only"), std::string::npos) << WithoutProgress(output);
  ASSERT_FALSE(events.Last("start").is_null()) << events.Text();
  EXPECT_EQ(events.Last("start")["workers"], 0) << events.Text();
  std::set<uint64_t> nodes_joined;
  for (const JobEvent& join : events.Of("join")) nodes_joined.insert(join["node"].get<uint64_t>());
  EXPECT_EQ(nodes_joined.size(), 2u) << "one worker from each joining node\n" << events.Text();
  EXPECT_TRUE(HasEpoch(events, 2, 2)) << events.Text();
  ExpectOneChecksumPerGeneration(events);
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
  const JobEvents events = Events(dir);
  EXPECT_NE(output.find("wedging the training thread at step 40"), std::string::npos)
      << WithoutProgress(output);
  // What the watchdog tells the user.
  EXPECT_NE(output.find("made no progress for 8.0 s (--step-timeout)"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_TRUE(HasGenerationOf(events, 2)) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 2, 2)) << events.Text();
  ExpectOneChecksumPerGeneration(events);
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
  const JobEvents first_events = Events(dir);
  int last_generation = 0;
  std::set<pid_t> pids_before;
  for (const JobEvent& view : first_events.Of("view"))
    last_generation = std::max(last_generation, view["generation"].get<int>());
  for (const JobEvent& params : first_events.Of("params"))
    pids_before.insert(params["pid"].get<pid_t>());
  ASSERT_GT(last_generation, 0) << first_events.Text();

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
  // One log for the job: the second driver appended to the first one's.
  const std::vector<JobEvents> drivers = Events(dir).ByStart();
  ASSERT_EQ(drivers.size(), 2u) << Events(dir).Text();
  const JobEvents& taken = drivers[1];
  EXPECT_EQ(taken.all()[0]["taken_over"], true) << taken.Text();
  EXPECT_EQ(taken.all()[0]["job_id"], drivers[0].all()[0]["job_id"]) << taken.Text();
  // --port is this process's own; --lr is the job's, which keeps its 0.1:
  // what the user is told.
  EXPECT_NE(after.find("driver: warning: --lr=0.2 does not apply: the job taken over keeps "
                       "--lr=0.1"),
            std::string::npos)
      << WithoutProgress(after);
  EXPECT_EQ(after.find("--port=" + port + " does not apply"), std::string::npos)
      << WithoutProgress(after);
  EXPECT_FALSE(taken.Last("controller_copy").is_null()) << taken.Text();
  for (const JobEvent& view : taken.Of("view"))
    EXPECT_FALSE(view["members"].empty()) << "nobody trained a while\n" << taken.Text();
  // Both workers came back holding their commits: the same processes.
  int came_back = 0;
  for (const JobEvent& join : taken.Of("join")) came_back += !join["holds"].is_null();
  EXPECT_EQ(came_back, 2) << taken.Text();
  std::set<pid_t> pids_after;
  for (const JobEvent& params : taken.Of("params")) pids_after.insert(params["pid"].get<pid_t>());
  EXPECT_EQ(pids_after, pids_before) << taken.Text();
  EXPECT_TRUE(HasEpoch(taken, 3, 2)) << taken.Text();
  for (const JobEvent& epoch : taken.Of("epoch"))
    EXPECT_NE(epoch["epoch"], 1) << "an epoch summarised twice\n" << taken.Text();
  // The first generation of the new controller restored what the workers
  // held: epoch 2 (0-based 1), past its start.
  int64_t taken_over_step = -1;
  for (const JobEvent& params : taken.Of("params")) {
    if (params["generation"].get<int>() <= last_generation || params["rank"] != 0) continue;
    EXPECT_EQ(params["point"]["epoch"], 1) << params.dump();
    taken_over_step = params["point"]["step"].get<int64_t>();
    break;
  }
  // 48 steps in epoch 1 at world 2, then commits every 8 steps.
  EXPECT_GE(taken_over_step, 48 + 8) << taken.Text();
  ExpectOneChecksumPerGeneration(Events(dir));
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
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 2, 12)) << WithoutProgress(driver.Output());
  const int reset = ResetConnectionsOf(victim);
  ASSERT_GE(reset, 2) << "connections of worker pid " << victim << " reset: " << reset;
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const JobEvents events = Events(dir);
  // The head counted the victim failed; the same process came back as a new
  // member with its commit and trained in the generation that finished.
  uint64_t first_member = 0;
  for (const JobEvent& p : events.Of("params"))
    if (p["pid"] == victim && first_member == 0) first_member = p["member"];
  bool failed = false;
  for (const JobEvent& leave : events.Of("leave"))
    failed |= leave["member"] == first_member && leave["reason"] == "failed";
  EXPECT_TRUE(failed) << events.Text();
  const JobEvent done = events.Last("done");
  ASSERT_FALSE(done.is_null()) << events.Text();
  bool back_at_the_end = false;
  for (const JobEvent& p : events.Of("params"))
    back_at_the_end |=
        p["pid"] == victim && p["member"] != first_member && p["generation"] == done["generation"];
  EXPECT_TRUE(back_at_the_end) << events.Text();
  EXPECT_TRUE(HasEpoch(events, 3, 2)) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 3);
}

}  // namespace
