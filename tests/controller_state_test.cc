// Faults that come together, end to end (docs/elastic.md, "Where a
// generation's state comes from"): the controller's copy of the job's state
// outlives the controller through --state-dir, so that losing every worker
// and then the controller loses nothing; and a --state-dir that cannot take
// the copy costs a warning, never the job or a half-written copy.
//
// Real processes over real sockets: a controller-only driver with a journal,
// node agents that join, resnet8 on Fashion-MNIST. The invariants of
// elastic_test hold after each scenario.
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"
#include "trainer/elastic/controller/copy_store.h"
#include "trainer/elastic/controller/journal.h"

namespace elastic::tests {
namespace {

using trainer::CopyStore;
using trainer::JournalRecord;
using trainer::ReadJournal;

constexpr int kEpochs = 3;

// A controller-only driver's flags: a journal and a copy at every commit in
// dir/state, the token in dir/token, no checkpoint (the copy is the only
// state outside the workers).
std::vector<std::string> ControllerArgs(const std::string& dir) {
  std::vector<std::string> args = JobArgs(dir, 0, kEpochs);
  args.erase(std::remove(args.begin(), args.end(), std::string("--workers=0")), args.end());
  args.erase(std::remove(args.begin(), args.end(), "--checkpoint-dir=" + dir + "/checkpoint"),
             args.end());
  args.insert(args.end(), {"--controller-only", "--min-workers=1", "--state-copy-every=1",
                           "--token-file=" + dir + "/token", "--state-dir=" + dir + "/state"});
  return args;
}

// Whether the log has an event named `name` that satisfies `accept`.
bool Has(const std::vector<JobEvent>& events, const std::string& name,
         const std::function<bool(const JobEvent&)>& accept) {
  for (const JobEvent& e : events)
    if (e["event"] == name && accept(e)) return true;
  return false;
}

// Kills `node`'s agent and every worker it started at once, as when its
// machine is lost.
void KillNode(Process& node) {
  const std::vector<pid_t> workers = WorkersStartedBy(node.Output());
  ::kill(node.pid(), SIGKILL);
  for (pid_t worker : workers) ::kill(worker, SIGKILL);
  node.Wait(std::chrono::seconds(30));
}

// After the first controller was killed: a second one started with the same
// flags takes the job over, a node of one worker joins, and the job finishes
// from the copy on disk (at least `copy_step`) with its invariants. `before`
// is what the first controller and node said.
void RestartJoinAndFinish(const std::string& dir, const std::string& port, int64_t copy_step,
                          const std::string& before) {
  std::vector<std::string> args = ControllerArgs(dir);
  args.push_back("--port=" + port);
  Process second(args, dir + "/driver2.log");
  // The second driver appends to the first one's log (the journal names its run directory).
  ASSERT_FALSE(WaitForEvent(RunDir(dir), std::chrono::seconds(60),
                            [](const JobEvent& e) {
                              return e["event"] == "start" && e["taken_over"] == true;
                            })
                   .is_null())
      << WithoutProgress(second.Output()) << JobEvents::Read(RunDir(dir)).Text();
  const std::unique_ptr<Process> joiner = JoinNode(port, 1, dir + "/token", dir + "/join2.log");
  ASSERT_EQ(second.Wait(std::chrono::seconds(400)), 0)
      << WithoutProgress(before) << WithoutProgress(second.Output())
      << WithoutProgress(joiner->Output());
  EXPECT_EQ(joiner->Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner->Output());
  const std::string after = second.Output();
  const JobEvents events = JobEvents::Read(RunDir(dir));
  // The log is the job's: the first driver's events, then those of the one that took over.
  const std::vector<JobEvents> drivers = events.ByStart();
  ASSERT_EQ(drivers.size(), 2u) << events.Text();
  const JobEvents& first = drivers.front();
  const JobEvents& taken_over = drivers.back();
  EXPECT_EQ(taken_over.all().front()["taken_over"], true) << events.Text();
  // The copy on disk is back: a generation after the take-over restores it
  // (the new driver's memory held none).
  EXPECT_TRUE(Has(taken_over.all(), "generation",
                  [](const JobEvent& e) { return e["source"] == "controller_copy"; }))
      << "no generation after the take-over restores the controller's copy\n"
      << events.Text();
  EXPECT_FALSE(
      Has(taken_over.all(), "error", [](const JobEvent& e) { return e["kind"] == "state_lost"; }))
      << WithoutProgress(after) << events.Text();
  int last_generation = 0;  // of the first driver
  for (const JobEvent& e : first.all())
    if (e.contains("generation"))
      last_generation = std::max(last_generation, e["generation"].get<int>());
  EXPECT_GE(StepRestoredAfter(events, last_generation), copy_step)
      << "the first generation after the restart restores at least the last copy\n"
      << events.Text();
  EXPECT_TRUE(Has(taken_over.all(), "done", [](const JobEvent& e) {
    return e["epochs"] == kEpochs;
  })) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, kEpochs);
}

// A controller-only job in epoch 2 (past its step 12): its first controller
// and its node of two workers. `port` is empty if the controller never listened.
struct JobInEpochTwo {
  std::unique_ptr<Process> controller;
  std::unique_ptr<Process> node;
  std::string port;
};

JobInEpochTwo StartJob(const std::string& dir) {
  std::vector<std::string> args = ControllerArgs(dir);
  args.push_back("--port=" + RestartablePort());
  JobInEpochTwo job;
  job.controller = std::make_unique<Process>(args, dir + "/driver1.log");
  job.port = HeadPort(*job.controller);
  if (job.port.empty()) return job;
  job.node = JoinNode(job.port, 2, dir + "/token", dir + "/join1.log");
  if (!WaitForStep(*job.controller, 2, 12)) job.port.clear();
  return job;
}

// Once the controller logs that every worker is gone (its no_workers
// event), kills it; returns the step of the copy it would continue from (-1
// if it never logged that, or would continue from anything but its copy),
// which is the last copy the log has it write to --state-dir.
int64_t KillTheControllerOnceEveryWorkerIsGone(Process& controller, const std::string& dir) {
  const JobEvent gone = WaitForEvent(RunDir(dir), std::chrono::seconds(60),
                                     [](const JobEvent& e) { return e["event"] == "no_workers"; });
  EXPECT_FALSE(gone.is_null()) << JobEvents::Read(RunDir(dir)).Text();
  if (gone.is_null()) return -1;
  EXPECT_EQ(gone["source"], "controller_copy") << JobEvents::Read(RunDir(dir)).Text();
  const int64_t copy_step =
      gone["source"] == "controller_copy" ? gone["restores"]["step"].get<int64_t>() : -1;
  ::kill(controller.pid(), SIGKILL);
  controller.Wait(std::chrono::seconds(30));
  const JobEvents events = JobEvents::Read(RunDir(dir));
  const JobEvent copy = events.Last("controller_copy");
  EXPECT_FALSE(copy.is_null()) << events.Text();
  if (copy.is_null()) return -1;
  EXPECT_EQ(copy["point"]["step"], copy_step) << events.Text();
  EXPECT_EQ(copy["file"].get<std::string>().rfind(dir + "/state/", 0), 0u)
      << "the copy is in --state-dir\n"
      << events.Text();
  return copy_step;
}

// Every worker killed, then the controller killed and started again, then a
// join: the copy the first controller held in memory is on disk, and the job
// continues from it and finishes.
TEST(ControllerStateTest, EveryWorkerKilledThenTheControllerThenAJoinContinuesFromTheCopyOnDisk) {
  const std::string dir = FreshTempDir("workers-then-controller");
  JobInEpochTwo job = StartJob(dir);
  ASSERT_FALSE(job.port.empty()) << job.controller->Output();
  for (pid_t worker : WorkersStartedBy(job.node->Output())) ::kill(worker, SIGKILL);
  const int64_t copy_step = KillTheControllerOnceEveryWorkerIsGone(*job.controller, dir);
  const std::string before = job.controller->Output() + job.node->Output();
  EXPECT_GE(copy_step, 48 + 8) << WithoutProgress(before);  // epoch 1 is 48 steps at world 2
  RestartJoinAndFinish(dir, job.port, copy_step, before);
}

// The sequence that lost a job by hand: every connection of a worker reset
// (its generation ends, the controller holds the copy), the node with both
// workers lost with its agent, then the controller killed and started again.
TEST(ControllerStateTest, AResetThenTheNodeLostThenTheControllerRestartedLosesNothing) {
  const std::string dir = FreshTempDir("reset-node-controller");
  JobInEpochTwo job = StartJob(dir);
  ASSERT_FALSE(job.port.empty()) << job.controller->Output();
  const std::vector<pid_t> workers = WorkersStartedBy(job.node->Output());
  ASSERT_EQ(workers.size(), 2u) << job.node->Output();
  ASSERT_GE(ResetConnectionsOf(workers[1]), 2) << "connections of worker pid " << workers[1];
  ASSERT_FALSE(WaitForEvent(RunDir(dir), std::chrono::seconds(60),
                            [](const JobEvent& e) {
                              return e["event"] == "view" && e["members"].size() == 1;
                            })
                   .is_null())
      << job.controller->Output() << JobEvents::Read(RunDir(dir)).Text();
  KillNode(*job.node);
  const int64_t copy_step = KillTheControllerOnceEveryWorkerIsGone(*job.controller, dir);
  const std::string before = job.controller->Output() + job.node->Output();
  EXPECT_GE(copy_step, 48 + 8) << WithoutProgress(before);
  RestartJoinAndFinish(dir, job.port, copy_step, before);
}

// Mounts a tmpfs of `bytes` at `dir` in a mount namespace of this test
// process's own (its children see it, nothing else does, and it goes with
// the process). Empty on success, else what failed.
std::string MountSmallFileSystem(const std::string& dir, size_t bytes) {
  if (::unshare(CLONE_NEWNS) != 0)
    return std::string("unshare(CLONE_NEWNS) (this test needs root): ") + std::strerror(errno);
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("making / private: ") + std::strerror(errno);
  const std::string options = "size=" + std::to_string(bytes) + ",mode=0700";
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0)
    return "mounting a tmpfs at " + dir + ": " + std::strerror(errno);
  return "";
}

// --state-dir fills up: the first copy fits, no later one does (the complete
// copy is kept until the next one is). The driver says so once, training
// goes on to the end, and the journal names the complete copy, whose digest
// matches; no temporary file is left.
TEST(ControllerStateTest, AFullStateDirIsAWarningAndTheJournalNamesOnlyACompleteCopy) {
  const std::string dir = FreshTempDir("full-state-dir");
  const std::string state = dir + "/state";
  std::filesystem::create_directories(state);
  // resnet8's copy is about 0.7 MB: room for one and a journal, not for two.
  const std::string mounted = MountSmallFileSystem(state, 1200 * 1024);
  ASSERT_EQ(mounted, "") << mounted;
  std::vector<std::string> args = JobArgs(dir, 2, 2);
  args.push_back("--state-copy-every=1");
  args.push_back("--state-dir=" + state);
  Process driver(args, dir + "/driver.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  const std::regex warning(
      "driver: warning: the controller's copy of epoch \\d+ position \\d+ step \\d+ was not "
      "written to --state-dir: .*No space left on device; training goes on, but a controller "
      "restarted now would go on from its older copy \\(epoch 1 position 512 step 8\\)");
  EXPECT_TRUE(std::regex_search(output, warning)) << WithoutProgress(output);
  const std::regex not_written("was not written to --state-dir");
  EXPECT_EQ(std::distance(std::sregex_iterator(output.begin(), output.end(), not_written),
                          std::sregex_iterator()),
            1)
      << "said once\n"
      << WithoutProgress(output);
  const JobEvents events = JobEvents::Read(RunDir(dir));
  EXPECT_TRUE(
      Has(events.all(), "epoch",
          [](const JobEvent& e) { return e["epoch"] == 2 && e["epochs"] == 2 && e["world"] == 2; }))
      << "no epoch 2/2 at world 2\n"
      << events.Text();
  // Only the first copy was written to --state-dir.
  const std::vector<JobEvent> copies = events.Of("controller_copy");
  ASSERT_EQ(copies.size(), 1u) << events.Text();
  EXPECT_EQ(copies[0]["point"]["step"], 8) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  CheckSamples(dir, 2);

  const std::optional<JournalRecord> journal = ReadJournal(state);
  ASSERT_TRUE(journal.has_value());
  ASSERT_TRUE(journal->copy.has_value()) << "the first copy fitted";
  EXPECT_EQ(journal->copy->point.step, 8);
  const std::string bytes = CopyStore(state).Read(*journal->copy);  // throws if incomplete
  EXPECT_GT(bytes.size(), 100000u);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(state))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{journal->copy->file, "journal"}));
}

}  // namespace
}  // namespace elastic::tests
