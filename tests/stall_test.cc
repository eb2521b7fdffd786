// A process of a job that stops running for longer than --heartbeat-timeout
// (3 s): SIGSTOP for 5 s, as a starved machine or a debugger would
// (docs/operations.md, "A stalled driver or worker"), and the session of the
// driver's own job controller with its head lost outright. Real processes over
// real sockets; every job must finish with exit 0, every sample trained on
// once per epoch and one parameter checksum per generation.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"

namespace elastic::tests {
namespace {

constexpr std::chrono::seconds kStopped{5};  // the trainer's heartbeat timeout is 3 s

// Whether the log has an event named `name` that satisfies `accept`.
bool Has(const JobEvents& events, const std::string& name,
         const std::function<bool(const JobEvent&)>& accept) {
  for (const JobEvent& e : events.Of(name))
    if (accept(e)) return true;
  return false;
}

// The job finished every one of its `epochs` epochs: its "done" event.
void ExpectDone(const JobEvents& events, int epochs) {
  EXPECT_TRUE(Has(events, "done", [&](const JobEvent& e) { return e["epochs"] == epochs; }))
      << "no \"done\" event of " << epochs << " epochs\n"
      << events.Text();
}

// SIGSTOP, kStopped, SIGCONT.
void StopFor(pid_t pid, std::chrono::seconds how_long) {
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::this_thread::sleep_for(how_long);
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
}

// The driver stops past the heartbeat timeout. Its own sessions with its
// in-process head (the job controller's, the node agent's) sent nothing
// either: both ends find that they stalled and keep them. The workers saw the
// head silent, dropped their sessions and reconnect holding their commit; the
// head reports them failed, and the controller, knowing it stalled, waits for
// them instead of declaring the state lost. The job goes on from their commit.
TEST(StallTest, DriverStoppedPastTheHeartbeatTimeoutKeepsTheJob) {
  const std::string dir = FreshTempDir("driver-stopped");
  Process driver(JobArgs(dir, 2, 3), dir + "/driver.log");
  ASSERT_GT(WorkerPid(RunDir(dir), 1, 1), 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 10)) << WithoutProgress(driver.Output());
  StopFor(driver.pid(), kStopped);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("transport] this process stalled"), std::string::npos)
      << WithoutProgress(output);
  // Nothing in the driver's process lost its session with the head.
  EXPECT_EQ(output.find("(driver) closed"), std::string::npos) << WithoutProgress(output);
  EXPECT_EQ(output.find("session with the head was lost"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_EQ(output.find("node-agent] lost the connection to the head"), std::string::npos)
      << WithoutProgress(output);
  const JobEvents events = JobEvents::Read(RunDir(dir));
  // The workers came back after the stall: a join of a process that trained
  // in generation 1, holding its commit.
  std::set<int> first_pids;
  for (const JobEvent& p : events.Of("params"))
    if (p["generation"] == 1) first_pids.insert(p["pid"].get<int>());
  EXPECT_TRUE(Has(events, "join",
                  [&](const JobEvent& e) {
                    return first_pids.count(e["pid"].get<int>()) == 1 && !e["holds"].is_null();
                  }))
      << "no worker reconnected with its commit\n"
      << events.Text();
  // The controller knew its own process stalled (for about kStopped), and
  // no error ended the job: the state was not declared lost.
  EXPECT_TRUE(Has(events, "stalled", [](const JobEvent& e) { return e["seconds"] >= 3.0; }))
      << events.Text();
  EXPECT_TRUE(events.Of("error").empty()) << events.Text();
  ExpectDone(events, 3);
  ExpectOneChecksumPerGeneration(events);
  ExpectStepsWithinTheirEpoch(output);
  CheckSamples(dir, 3);
}

// One worker stops past the heartbeat timeout: the head declares it failed
// (it was silent, and the head was not), the other restores the last commit
// and trains alone; the stopped process, when it runs again, finds its
// sessions closed, reconnects as a new member with its commit and is admitted
// at the next commit. Five epochs: the survivor trains an epoch alone in about
// 2 s here, and the returning worker must find the job still running. As in
// elastic_test's HangRankOneForThreeSeconds, --step-timeout=10 bounds the time
// the woken process may stay in its old collective before it notices (its
// collectives time out at 5 s, not 60).
TEST(StallTest, WorkerStoppedPastTheHeartbeatTimeoutIsFailedAndComesBack) {
  const std::string dir = FreshTempDir("worker-stopped");
  std::vector<std::string> args = JobArgs(dir, 2, 5);
  args.push_back("--step-timeout=10");
  Process driver(args, dir + "/driver.log");
  const pid_t victim = WorkerPid(RunDir(dir), 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 10)) << WithoutProgress(driver.Output());
  StopFor(victim, kStopped);
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  const JobEvents events = JobEvents::Read(RunDir(dir));
  // The member the victim was in generation 1.
  uint64_t member = 0;
  for (const JobEvent& p : events.Of("params"))
    if (p["generation"] == 1 && p["rank"] == 1) member = p["member"].get<uint64_t>();
  ASSERT_NE(member, 0u) << events.Text();
  EXPECT_TRUE(
      Has(events, "leave",
          [&](const JobEvent& e) { return e["member"] == member && e["reason"] == "failed"; }))
      << "member " << member << " was not failed\n"
      << events.Text();
  // Why the head failed it: it was silent past the heartbeat timeout.
  const std::string silent = "connection lost: no heartbeat for";
  EXPECT_TRUE(Has(events, "leave",
                  [&](const JobEvent& e) {
                    return e["member"] == member &&
                           e["detail"].get<std::string>().rfind(silent, 0) == 0;
                  }))
      << "member " << member << " was not failed for its missing heartbeats\n"
      << events.Text();
  // The survivor alone restores the last commit.
  EXPECT_TRUE(Has(events, "generation",
                  [](const JobEvent& e) {
                    return e["generation"] == 2 && e["world"] == 1 &&
                           (e["source"] == "member" || e["source"] == "controller_copy" ||
                            e["source"] == "checkpoint");
                  }))
      << "no generation 2 of 1 worker restoring the last commit\n"
      << events.Text();
  // The stopped process came back: its join as a new member, holding its commit.
  EXPECT_TRUE(Has(events, "join",
                  [&](const JobEvent& e) {
                    return e["pid"] == victim && e["member"] != member && !e["holds"].is_null();
                  }))
      << "pid " << victim << " did not reconnect with its commit\n"
      << events.Text();
  // The same process trains again, at world 2.
  EXPECT_TRUE(Has(events, "params",
                  [&](const JobEvent& e) {
                    return e["pid"] == victim && e["generation"] >= 3 && e["world"] == 2;
                  }))
      << "pid " << victim << " never trained again at world 2\n"
      << events.Text();
  ExpectDone(events, 5);
  ExpectOneChecksumPerGeneration(events);
  ExpectStepsWithinTheirEpoch(output);
  CheckSamples(dir, 5);
}

// The driver's own connections to its head (the job controller's session and
// the node agent's) are reset mid-epoch: the head forgets the controller's
// name and subscription with the session. The controller's HeadSession
// registers both again and the node agent reconnects; the workers, whose
// sessions were not touched, train on.
TEST(StallTest, TheDriversOwnSessionsWithItsHeadResetAreEstablishedAgain) {
  const std::string dir = FreshTempDir("driver-sessions-reset");
  Process driver(JobArgs(dir, 2, 3), dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 10)) << WithoutProgress(driver.Output());
  const int reset = ResetConnectionsOf(driver.pid(), std::stoi(port));
  ASSERT_EQ(reset, 2) << "connections of the driver to its head reset: " << reset;
  ASSERT_EQ(driver.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(driver.Output());
  const std::string output = driver.Output();
  EXPECT_NE(output.find("driver: the job controller's session with the head was lost; "
                        "registered 'job-controller' again"),
            std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("head-session] established the session with the head"), std::string::npos)
      << WithoutProgress(output);
  EXPECT_NE(output.find("node-agent] reconnected to the head"), std::string::npos)
      << WithoutProgress(output);
  const JobEvents events = JobEvents::Read(RunDir(dir));
  // The workers never lost the head: none failed, none came back holding a commit.
  EXPECT_FALSE(Has(events, "leave", [](const JobEvent& e) { return e["reason"] != "left"; }))
      << events.Text();
  EXPECT_FALSE(Has(events, "join", [](const JobEvent& e) { return !e["holds"].is_null(); }))
      << events.Text();
  EXPECT_TRUE(
      Has(events, "epoch",
          [](const JobEvent& e) { return e["epoch"] == 3 && e["epochs"] == 3 && e["world"] == 2; }))
      << "no epoch 3/3 at world 2\n"
      << events.Text();
  ExpectOneChecksumPerGeneration(events);
  ExpectStepsWithinTheirEpoch(output);
  CheckSamples(dir, 3);
}

}  // namespace
}  // namespace elastic::tests
