// Kills in quick succession, the shape of a spot fleet losing several nodes
// within a second: rank 0's peers are killed one after another while rank 0
// (and everyone) is mid-allreduce, and joiners replace them. No worker may
// stay in a superseded generation, whatever its collective waits on (a send
// to a dead peer, a receive from one, a peer stuck in an older generation, a
// rendezvous whose member died after publishing its address): each leaves
// within the job's heartbeat timeout (3 s) of learning that a newer
// generation exists. Read from every worker's own event log (WorkerEvent in
// trainer/elastic/protocol/control.capnp, written under --log-samples), not its text.
// The job must finish with every sample once per epoch and one checksum per
// generation.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"
#include "tests/process.h"
#include "trainer/elastic/worker/worker_events.h"

namespace elastic::tests {
namespace {

using trainer::ReadWorkerEvents;
using trainer::WorkerEventRecord;

constexpr int64_t kHeartbeatTimeoutMs = 3000;  // the job's --heartbeat-timeout default
constexpr int kWorkers = 4;
constexpr int kRounds = 4;
// More epochs than the rounds take on any machine: the test stops the job
// (SIGTERM) once the rounds are over, so that how fast it trains never ends
// it before the last round's joiners are in (under load, two survivors
// once trained the last epoch while the joiners were still starting).
constexpr int kEpochs = 1000;

// Every event of every worker of the job so far.
std::vector<WorkerEventRecord> AllEvents(const std::string& dir) {
  std::vector<WorkerEventRecord> events;
  if (!std::filesystem::exists(dir)) return events;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events-", 0) != 0) continue;
    for (auto& event : ReadWorkerEvents(entry.path().string())) events.push_back(event);
  }
  return events;
}

// The members of the newest generation any worker joined: rank -> pid.
std::map<int, pid_t> NewestWorld(const std::vector<WorkerEventRecord>& events,
                                 uint64_t* generation) {
  *generation = 0;
  for (const auto& e : events) {
    if (!e.is_left) *generation = std::max(*generation, e.joined.generation);
  }
  std::map<int, pid_t> world;
  for (const auto& e : events) {
    if (!e.is_left && e.joined.generation == *generation) world[e.joined.rank] = e.joined.pid;
  }
  return world;
}

// Waits until a generation after `after` has formed with at least `world`
// members, all of which joined it.
bool WaitForWorld(const std::string& dir, uint64_t after, int world) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    uint64_t generation = 0;
    const auto members = NewestWorld(AllEvents(dir), &generation);
    if (generation > after && static_cast<int>(members.size()) >= world) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(StuckCollectiveTest, KillsInQuickSuccessionLeaveNoWorkerInASupersededGeneration) {
  const std::string dir = FreshTempDir("stuck-collective");
  const std::string events_dir = dir + "/samples";
  std::vector<std::string> args = JobArgs(dir, kWorkers, kEpochs);
  args.push_back("--token-file=" + dir + "/token");
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForWorld(events_dir, 0, kWorkers)) << WithoutProgress(driver.Output());

  std::mt19937 random(20261128);
  std::vector<std::unique_ptr<Process>> joiners;
  for (int round = 0; round < kRounds; ++round) {
    // Let the world train (and allreduce) for a moment.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 + random() % 1500));
    uint64_t generation = 0;
    const std::map<int, pid_t> world = NewestWorld(AllEvents(events_dir), &generation);
    std::vector<pid_t> peers;  // rank 0's peers, alive
    for (const auto& [rank, pid] : world) {
      if (rank != 0 && IsRunning(pid)) peers.push_back(pid);
    }
    ASSERT_GE(peers.size(), 2u) << "round " << round << ": generation " << generation
                                << " has too few live peers of rank 0\n"
                                << WithoutProgress(driver.Output());
    std::shuffle(peers.begin(), peers.end(), random);
    // Two of them, the second while the survivors are still leaving the
    // generation the first kill ended, or rendezvousing for the next one.
    ASSERT_EQ(::kill(peers[0], SIGKILL), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 400));
    ASSERT_EQ(::kill(peers[1], SIGKILL), 0);
    for (int j = 0; j < 2; ++j) {
      joiners.push_back(JoinNode(port, 1, dir + "/token",
                                 dir + "/join" + std::to_string(2 * round + j) + ".log"));
    }
    ASSERT_TRUE(WaitForWorld(events_dir, generation, kWorkers))
        << "round " << round << ": the world never grew back to " << kWorkers << "\n"
        << WithoutProgress(driver.Output());
  }

  // Stopped at the next epoch boundary, with a checkpoint (exit status 3).
  ASSERT_TRUE(StopAfterAnEpochWithWorld(driver, RunDir(dir), kWorkers, std::chrono::seconds(600)))
      << WithoutProgress(driver.Output());
  ASSERT_EQ(driver.Wait(std::chrono::seconds(600)), 3) << WithoutProgress(driver.Output());
  std::string output = driver.Output();
  for (auto& joiner : joiners) {
    joiner->Wait(std::chrono::seconds(60));
    output += joiner->Output();
  }

  int superseded = 0;
  int64_t longest = 0;
  for (const auto& e : AllEvents(events_dir)) {
    if (!e.is_left || e.left.superseded_for_ms < 0) continue;
    ++superseded;
    longest = std::max(longest, e.left.superseded_for_ms);
    EXPECT_LE(e.left.superseded_for_ms, kHeartbeatTimeoutMs)
        << "member " << e.member_id << " stayed in generation " << e.left.generation << " for "
        << e.left.superseded_for_ms << " ms after a newer one existed (" << e.left.outcome << ")";
  }
  // Every kill supersedes the generation of each survivor at least once.
  EXPECT_GE(superseded, kRounds * (kWorkers - 2)) << WithoutProgress(output);
  std::printf(
      "%d superseded generations left, the longest stay %lld ms after a newer one existed\n",
      superseded, static_cast<long long>(longest));
  const JobEvents job = JobEvents::Read(RunDir(dir));
  ExpectOneChecksumPerGeneration(job);
  CheckSamples(dir, EpochCount(job));
}

}  // namespace
}  // namespace elastic::tests
