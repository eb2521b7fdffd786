// When new workers enter a running job (docs/elastic.md, "Joins and leaves"),
// with real processes over real sockets:
// - --admit-at=commit (the default): a node that joins in the middle of a
//   long epoch trains from the next commit on, not from the epoch boundary;
//   the rest of the epoch is shared with it and every sample is still trained
//   on once;
// - --admit-at=epoch: the same join waits for the epoch boundary;
// - every worker killed, then two nodes of two workers joining within a
//   second: the join window forms one generation at world 4 from the
//   controller's copy, not one per node.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"

namespace elastic::tests {
namespace {

constexpr int kCommitEvery = 5;
// Fashion-MNIST has 60,000 training images: an epoch of 469 steps of 2 x 32,
// long enough that a join lands well inside it.
constexpr int kLongEpochSamples = 30000;

// A job of two local workers with one long epoch (or two), committing every
// kCommitEvery steps.
std::vector<std::string> LongEpochJob(const std::string& dir, int epochs) {
  std::vector<std::string> args = JobArgs(dir, 2, epochs);
  for (std::string& arg : args) {
    if (arg.rfind("--train-samples=", 0) == 0)
      arg = "--train-samples=" + std::to_string(kLongEpochSamples);
    if (arg.rfind("--commit-every=", 0) == 0)
      arg = "--commit-every=" + std::to_string(kCommitEvery);
  }
  args.push_back("--test-samples=500");
  args.push_back("--token-file=" + dir + "/token");
  return args;
}

// A worker's sync line: where a generation of `world` workers started.
struct Sync {
  int generation = 0;
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t step = 0;
};

std::vector<Sync> SyncsAtWorld(const std::string& output, int world) {
  static const std::regex line(
      "params generation=(\\d+) rank=0 world=(\\d+) checksum=\\w+ epoch=(\\d+) "
      "position=(\\d+) step=(\\d+)");
  std::vector<Sync> syncs;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    if (std::stoi((*it)[2]) != world) continue;
    syncs.push_back(
        {std::stoi((*it)[1]), std::stoll((*it)[3]), std::stoll((*it)[4]), std::stoll((*it)[5])});
  }
  return syncs;
}

// The last global step the job printed before the head's line that member
// `member` joined: where training was when the joiner registered.
int64_t StepWhenMemberJoined(const std::string& output, int member) {
  const size_t joined = output.find("] member " + std::to_string(member) + " (");
  if (joined == std::string::npos) return -1;
  static const std::regex step("\\(global (\\d+)\\)");
  const std::string before = output.substr(0, joined);
  int64_t last = -1;
  for (auto it = std::sregex_iterator(before.begin(), before.end(), step);
       it != std::sregex_iterator(); ++it)
    last = std::stoll((*it)[1]);
  return last;
}

// Two workers train a long epoch; a node of one worker joins some 100 steps
// into it. Returns the job's output (driver and joiner).
std::string JoinMidEpoch(const std::string& dir, const std::vector<std::string>& extra,
                         int epochs) {
  std::vector<std::string> args = LongEpochJob(dir, epochs);
  args.insert(args.end(), extra.begin(), extra.end());
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  EXPECT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  EXPECT_TRUE(WaitForStep(driver, 1, 40)) << WithoutProgress(driver.Output());
  const std::unique_ptr<Process> joiner = JoinNode(port, 1, dir + "/token", dir + "/join.log");
  EXPECT_EQ(driver.Wait(std::chrono::seconds(600)), 0) << WithoutProgress(driver.Output());
  EXPECT_EQ(joiner->Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner->Output());
  return driver.Output() + joiner->Output();
}

TEST(AdmissionTest, AJoinMidEpochTrainsFromTheNextCommit) {
  const std::string dir = FreshTempDir("admit-commit");
  const std::string output = JoinMidEpoch(dir, {}, 1);
  const std::vector<Sync> three = SyncsAtWorld(output, 3);
  ASSERT_FALSE(three.empty()) << "the joiner never trained\n" << WithoutProgress(output);
  const Sync& entered = three.front();
  const int64_t registered_at = StepWhenMemberJoined(output, 3);
  std::cout << "joiner registered at step " << registered_at << ", trained from step "
            << entered.step << " (epoch " << entered.epoch + 1 << " position " << entered.position
            << " of " << kLongEpochSamples << ")" << std::endl;
  EXPECT_EQ(entered.epoch, 0) << WithoutProgress(output);
  EXPECT_GT(entered.position, 0) << "entered at the boundary\n" << WithoutProgress(output);
  EXPECT_LT(entered.position, kLongEpochSamples) << WithoutProgress(output);
  // The next commit after the registration: at most kCommitEvery steps later,
  // and a few more for the progress lines that rank 0's agent relays behind
  // the head's own line.
  ASSERT_GE(registered_at, 0) << WithoutProgress(output);
  EXPECT_LE(entered.step, registered_at + kCommitEvery + 3) << WithoutProgress(output);
  EXPECT_EQ(entered.step % kCommitEvery, 0) << "a commit point" << WithoutProgress(output);
  EXPECT_NE(output.find("done: 1 epochs"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  ExpectEverySampleOnce(dir + "/samples", kLongEpochSamples, 1);
}

TEST(AdmissionTest, AdmitAtEpochJoinWaitsForTheEpochBoundary) {
  const std::string dir = FreshTempDir("admit-epoch");
  const std::string output = JoinMidEpoch(dir, {"--admit-at=epoch"}, 2);
  const std::vector<Sync> three = SyncsAtWorld(output, 3);
  ASSERT_FALSE(three.empty()) << "the joiner never trained\n" << WithoutProgress(output);
  EXPECT_EQ(three.front().epoch, 1) << WithoutProgress(output);
  EXPECT_EQ(three.front().position, 0) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 1/2 world 2 |"), std::string::npos) << WithoutProgress(output);
  EXPECT_NE(output.find("epoch 2/2 world 3 |"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  ExpectEverySampleOnce(dir + "/samples", kLongEpochSamples, 2);
}

// The spot pattern: the pool is taken back, and replacement machines come up
// together. Both nodes' workers enter one generation at world 4, restored
// from the controller's copy of the last commit.
TEST(AdmissionTest, EveryWorkerKilledThenTwoNodesOfTwoFormOneGenerationAtWorldFour) {
  const std::string dir = FreshTempDir("admit-massloss");
  std::vector<std::string> args = JobArgs(dir, 4, 3);
  args.push_back("--token-file=" + dir + "/token");
  args.push_back("--state-copy-every=1");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  std::vector<pid_t> workers;
  for (int rank = 0; rank < 4; ++rank) workers.push_back(WorkerPid(driver, 1, rank));
  ASSERT_TRUE(WaitForStep(driver, 1, 10)) << WithoutProgress(driver.Output());
  for (pid_t pid : workers) {
    ASSERT_GT(pid, 0) << WithoutProgress(driver.Output());
    ::kill(pid, SIGKILL);
  }
  ASSERT_FALSE(
      driver.WaitFor("driver: generation \\d+: 0 workers", std::chrono::seconds(60)).empty())
      << WithoutProgress(driver.Output());
  const std::unique_ptr<Process> first = JoinNode(port, 2, dir + "/token", dir + "/join0.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::unique_ptr<Process> second = JoinNode(port, 2, dir + "/token", dir + "/join1.log");
  EXPECT_EQ(driver.Wait(std::chrono::seconds(600)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output() + first->Output() + second->Output();

  // Generation 1 trained at world 4; after the loss, the first generation that
  // trains is at world 4 again, and none trains at a smaller world.
  const std::vector<Sync> four = SyncsAtWorld(output, 4);
  ASSERT_GE(four.size(), 2u) << WithoutProgress(output);
  EXPECT_TRUE(SyncsAtWorld(output, 2).empty()) << WithoutProgress(output);
  EXPECT_TRUE(SyncsAtWorld(output, 1).empty()) << WithoutProgress(output);
  EXPECT_TRUE(SyncsAtWorld(output, 3).empty()) << WithoutProgress(output);
  EXPECT_GT(four[1].step, 0) << WithoutProgress(output);
  EXPECT_NE(output.find("restores the controller's copy"), std::string::npos)
      << WithoutProgress(output);
  const std::smatch rescale = driver.WaitFor(
      "rescale: generation \\d+ \\(4 workers, [^)]*\\): first step ([0-9.]+) s",
      std::chrono::seconds(1),
      [](const std::smatch& m) { return m.str().find("start") == std::string::npos; });
  std::cout << "after the loss: " << (rescale.empty() ? "?" : rescale.str()) << std::endl;
  // The head's own clock: when each joiner registered, and when the view with
  // all four was published.
  static const std::regex head_line(
      "I (\\d+\\.\\d+) \\d+ head\\] (member \\d+ \\([^)]*\\) joined|published view of 4 "
      "members)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), head_line);
       it != std::sregex_iterator(); ++it)
    std::cout << (*it)[1] << " " << (*it)[2] << std::endl;
  EXPECT_NE(output.find("done: 3 epochs"), std::string::npos) << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  CheckSamples(dir, 3);
  EXPECT_EQ(first->Wait(std::chrono::seconds(60)), 0) << WithoutProgress(first->Output());
  EXPECT_EQ(second->Wait(std::chrono::seconds(60)), 0) << WithoutProgress(second->Output());
}

}  // namespace
}  // namespace elastic::tests
