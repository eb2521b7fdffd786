// The node agent with real processes: it starts workers that join the head,
// reports their exits, turns SIGTERM into a draining notice, and leaves no
// orphans whether it exits cleanly or is SIGKILLed. Its workers inherit no
// descriptor of the agent's process, and it outlives the loss and restart of
// its head.
#include "runtime/node_agent.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime/actor.h"
#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ProcessAlive;
using testing::Subprocess;
using testing::WaitUntil;

constexpr seconds kPatience{60};
// What a sleeping worker calls itself (/proc/PID/comm), once it runs its main.
constexpr const char kSleeperName[] = "sleeping-worker";

// --role=worker [EXIT_CODE]: what a node agent starts. Puts the heartbeat
// timeout it was given under heartbeat-timeout/<index>, joins the head as a
// member, then runs until its head connection is lost (or exits with
// EXIT_CODE at once when given).
// --role=worker sleep: never talks to the head; renames itself kSleeperName
// and sleeps until a signal ends it (a worker that outlives its head).
int WorkerMain(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "sleep") {
    prctl(PR_SET_NAME, kSleeperName);
    for (;;) pause();
  }
  const WorkerEnvironment environment = WorkerEnvironment::FromEnvironment();
  const HeadClientOptions client =
      environment.ClientOptions("worker-" + std::to_string(environment.worker_index));
  HeadClient head(client);
  head.Put("heartbeat-timeout/" + std::to_string(environment.worker_index),
           std::to_string(client.transport.heartbeat_timeout.count()));
  head.RegisterMember("worker-" + std::to_string(environment.worker_index), environment.node_id,
                      Endpoint{"127.0.0.1", 0});
  if (!args.empty()) return std::stoi(args[0]);
  while (head.connected()) std::this_thread::sleep_for(milliseconds(50));
  return 0;
}

// --role=agent PORT WORKERS [WORKER_ARGS...]: a process that is only a node agent.
int AgentMain(const std::vector<std::string>& args) {
  NodeAgent::BlockTerminationSignals();
  NodeAgentOptions options;
  options.head_port = static_cast<uint16_t>(std::stoi(args.at(0)));
  options.token = std::getenv(kTokenEnvironmentVariable);
  options.name = "agent-under-test";
  options.worker_args.assign(args.begin() + 2, args.end());
  options.grace = seconds(20);
  if (const char* timeout = std::getenv("TEST_AGENT_HEARTBEAT_TIMEOUT_MS"))
    options.transport.heartbeat_timeout = milliseconds(std::stoll(timeout));
  NodeAgent agent(options);
  agent.SpawnWorkers(static_cast<uint32_t>(std::stoi(args.at(1))));
  return agent.RunUntilSignalled();
}

const bool kRoles =
    testing::RegisterRole("worker", WorkerMain) && testing::RegisterRole("agent", AgentMain);

class UpdateLog {
 public:
  HeadClient::UpdateCallback Callback() {
    return [this](const MembershipUpdate& update) {
      std::lock_guard<std::mutex> lock(mutex_);
      updates_.push_back(update);
    };
  }
  size_t Count(MembershipEventKind kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t count = 0;
    for (const auto& update : updates_) count += update.kind == kind ? 1 : 0;
    return count;
  }
  std::vector<MembershipUpdate> All(MembershipEventKind kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<MembershipUpdate> found;
    for (const auto& update : updates_) {
      if (update.kind == kind) found.push_back(update);
    }
    return found;
  }

 private:
  std::mutex mutex_;
  std::vector<MembershipUpdate> updates_;
};

class NodeAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HeadClientOptions options;
    options.port = head_.port();
    options.token = head_.token();
    options.name = "observer";
    observer_ = std::make_unique<HeadClient>(options);
    observer_->Subscribe(log_.Callback());
  }

  Subprocess StartAgent(int workers, const std::vector<std::string>& worker_args = {},
                        std::map<std::string, std::string> environment = {}) {
    std::vector<std::string> args = {std::to_string(head_.port()), std::to_string(workers)};
    args.insert(args.end(), worker_args.begin(), worker_args.end());
    environment[kTokenEnvironmentVariable] = head_.token();
    return Subprocess::SpawnRole("agent", args, environment);
  }

  // Waits until count members are live and returns them.
  std::vector<MemberInfo> WaitForMembers(size_t count) {
    std::vector<MemberInfo> members;
    WaitUntil(
        [&] {
          members = head_.Membership().view.members;
          return members.size() == count;
        },
        kPatience);
    return members;
  }

  Head head_{HeadOptions{}};
  std::unique_ptr<HeadClient> observer_;
  UpdateLog log_;
};

TEST_F(NodeAgentTest, SigtermDrainsAndTheWorkersExitWithTheAgent) {
  Subprocess agent = StartAgent(2);
  const std::vector<MemberInfo> members = WaitForMembers(2);
  ASSERT_EQ(members.size(), 2u);
  const uint64_t node_id = members[0].node_id;
  EXPECT_NE(node_id, 0u);
  EXPECT_EQ(members[1].node_id, node_id);
  for (const auto& member : members) {
    EXPECT_TRUE(ProcessAlive(member.pid));
    EXPECT_NE(member.pid, agent.pid());
  }

  agent.Signal(SIGTERM);

  ASSERT_TRUE(
      WaitUntil([&] { return log_.Count(MembershipEventKind::kDraining) == 1; }, kPatience));
  const MembershipUpdate draining = log_.All(MembershipEventKind::kDraining)[0];
  EXPECT_EQ(draining.node_id, node_id);
  EXPECT_NE(draining.detail.find("SIGTERM"), std::string::npos) << draining.detail;
  EXPECT_EQ(agent.WaitExitCode(kPatience), 0);
  for (const auto& member : members) {
    EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(member.pid); }, kPatience))
        << "worker " << member.pid << " outlived its agent";
  }
  // The agent reported both exits before it exited itself.
  EXPECT_TRUE(WaitUntil([&] { return log_.Count(MembershipEventKind::kExited) == 2; }, kPatience));
  EXPECT_TRUE(WaitUntil([&] { return head_.Membership().view.members.empty(); }, kPatience));
}

TEST_F(NodeAgentTest, SigkilledAgentLeavesNoOrphans) {
  Subprocess agent = StartAgent(2);
  const std::vector<MemberInfo> members = WaitForMembers(2);
  ASSERT_EQ(members.size(), 2u);
  agent.Signal(SIGKILL);
  agent.Wait(kPatience);
  for (const auto& member : members) {
    EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(member.pid); }, kPatience))
        << "worker " << member.pid << " outlived its SIGKILLed agent";
  }
  EXPECT_TRUE(WaitUntil([&] { return log_.Count(MembershipEventKind::kFailed) == 2; }, kPatience));
}

TEST_F(NodeAgentTest, WorkerExitIsReportedWithItsStatus) {
  Subprocess agent = StartAgent(1, {"3"});
  ASSERT_TRUE(WaitUntil([&] { return log_.Count(MembershipEventKind::kExited) == 1; }, kPatience));
  const MembershipUpdate exited = log_.All(MembershipEventKind::kExited)[0];
  EXPECT_NE(exited.detail.find("exited with code 3"), std::string::npos) << exited.detail;
  EXPECT_NE(exited.member_id, 0u);              // the head knows which member that process was
  EXPECT_EQ(agent.WaitExitCode(kPatience), 1);  // a worker failed
}

// Both ends of a connection judge silence by their own timeout: the workers
// of an agent configured for a lossy network must not drop their head sooner.
TEST_F(NodeAgentTest, WorkersTakeTheAgentsHeartbeatTimeout) {
  Subprocess agent = StartAgent(2, {}, {{"TEST_AGENT_HEARTBEAT_TIMEOUT_MS", "4321"}});
  for (const char* key : {"heartbeat-timeout/0", "heartbeat-timeout/1"}) {
    EXPECT_EQ(observer_->Wait(key, kPatience), "4321") << key;
  }
  agent.Signal(SIGTERM);
  EXPECT_EQ(agent.WaitExitCode(kPatience), 0);
}

// Waits until pid is a sleeping worker in its main (so it has exec'd).
bool WaitForSleeper(pid_t pid) {
  return WaitUntil([&] { return testing::ProcessName(pid) == kSleeperName; }, kPatience);
}

// A worker must hold nothing of the agent's process: not the head's listening
// socket (which would keep the head's port open after the driver is gone), not
// the agent's connection to the head, no other descriptor beyond stdio.
TEST(NodeAgentDescriptorTest, WorkersInheritNoDescriptorOfTheAgentsProcess) {
  auto head = std::make_unique<Head>(HeadOptions{});
  const uint16_t port = head->port();
  NodeAgentOptions options;
  options.head_port = port;
  options.token = head->token();
  options.name = "descriptor-test";
  options.worker_args = {"sleep"};
  options.grace = seconds(20);
  NodeAgent agent(options);
  const pid_t worker = agent.SpawnWorkers(1).at(0);
  ASSERT_TRUE(WaitForSleeper(worker));

  const std::set<uint64_t> ours = testing::OpenSockets(getpid());
  ASSERT_GE(ours.size(), 3u);  // at least the head's listener and both ends of the agent's link
  for (uint64_t inode : testing::OpenSockets(worker)) {
    EXPECT_EQ(ours.count(inode), 0u) << "worker holds socket inode " << inode << " of its agent";
  }
  for (int fd : testing::OpenDescriptors(worker)) {
    EXPECT_LT(fd, 3) << "worker inherited descriptor " << fd;
  }

  // The head is gone: its port refuses connections although the worker runs.
  head.reset();
  EXPECT_FALSE(testing::CanConnect(port));
  EXPECT_TRUE(ProcessAlive(worker));
}

class Echo : public Actor {
 public:
  std::string Receive(const std::string&, const std::string& payload) override { return payload; }
};

// Every socket the runtime opens is close-on-exec, so a child that some other
// code forks and execs (without the agent's descriptor sweep) inherits none.
TEST(NodeAgentDescriptorTest, RuntimeSocketsAreCloseOnExec) {
  const std::set<uint64_t> before = testing::OpenSockets(getpid());
  Head head(HeadOptions{});
  HeadClientOptions client_options;
  client_options.port = head.port();
  client_options.token = head.token();
  HeadClient client(client_options);
  ActorSystemOptions served_options;
  served_options.token = head.token();
  served_options.head = &client;
  ActorSystem served(served_options);
  served.Spawn("echo", std::make_shared<Echo>());
  ActorSystemOptions caller_options;
  caller_options.token = head.token();
  ActorSystem caller(caller_options);
  ASSERT_EQ(caller.Remote("echo", served.endpoint()).Ask("echo", "hi", kPatience).get(), "hi");

  std::set<uint64_t> runtime_sockets;
  for (uint64_t inode : testing::OpenSockets(getpid())) {
    if (before.count(inode) == 0) runtime_sockets.insert(inode);
  }
  // Two listeners, the client's connection to the head (both ends) and the
  // caller's connection to the served system (both ends).
  ASSERT_GE(runtime_sockets.size(), 6u);

  Subprocess child = Subprocess::SpawnRole("worker", {"sleep"});
  ASSERT_TRUE(WaitForSleeper(child.pid()));
  for (uint64_t inode : testing::OpenSockets(child.pid())) {
    EXPECT_EQ(runtime_sockets.count(inode), 0u)
        << "a child process inherited runtime socket inode " << inode;
  }
}

NodeAgentOptions AgentOfHeadAt(uint16_t port, const std::string& token) {
  NodeAgentOptions options;
  options.head_port = port;
  options.token = token;
  options.name = "restart-test";
  options.worker_args = {"sleep"};
  options.grace = seconds(20);
  return options;
}

// The head's process dies and a new head comes up on the same address with
// the same token: the agent registers again (as a new node), keeps the same
// worker processes, gives the new node id to workers it starts later, and
// reports exits to the new head.
TEST(NodeAgentHeadRestartTest, AgentReregistersWithARestartedHeadAndKeepsItsWorkers) {
  HeadOptions head_options;
  head_options.port = testing::FreeLocalPort();
  head_options.token = GenerateToken();
  auto head = std::make_unique<Head>(head_options);
  NodeAgentOptions options = AgentOfHeadAt(head_options.port, head_options.token);
  options.head_reconnect_timeout = kPatience;
  NodeAgent agent(options);
  const uint64_t first_node_id = agent.node_id();
  const pid_t worker = agent.SpawnWorkers(1).at(0);
  ASSERT_TRUE(WaitForSleeper(worker));
  EXPECT_EQ(head->stats().nodes_connected, 1u);

  head.reset();
  ASSERT_TRUE(WaitUntil([&] { return !agent.head_connected(); }, kPatience));
  EXPECT_TRUE(ProcessAlive(worker));

  head_options.first_node_id = first_node_id + 100;  // a restarted head continues the numbering
  head = std::make_unique<Head>(head_options);
  HeadClientOptions observer_options;
  observer_options.port = head->port();
  observer_options.token = head->token();
  observer_options.name = "observer";
  HeadClient observer(observer_options);
  UpdateLog log;
  observer.Subscribe(log.Callback());

  ASSERT_TRUE(WaitUntil([&] { return head->stats().nodes_connected == 1; }, kPatience));
  EXPECT_TRUE(WaitUntil([&] { return agent.head_connected(); }, kPatience));
  // It keeps its id (what its workers registered under), not the new head's next.
  EXPECT_EQ(agent.node_id(), first_node_id);
  EXPECT_EQ(agent.running_workers(), std::vector<pid_t>{worker});
  EXPECT_TRUE(ProcessAlive(worker));
  EXPECT_TRUE(agent.exits().empty());

  const pid_t second = agent.SpawnWorkers(1).at(0);
  ASSERT_TRUE(WaitForSleeper(second));
  EXPECT_EQ(testing::ProcessEnvironment(second)["ELASTIC_NODE_ID"], std::to_string(first_node_id));

  kill(worker, SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return log.Count(MembershipEventKind::kExited) == 1; }, kPatience));
  const MembershipUpdate exited = log.All(MembershipEventKind::kExited)[0];
  EXPECT_NE(exited.detail.find("(pid " + std::to_string(worker) + ") killed by signal 9"),
            std::string::npos)
      << exited.detail;
  // The agent reports an exit before it forgets the worker.
  EXPECT_TRUE(
      WaitUntil([&] { return agent.running_workers() == std::vector<pid_t>{second}; }, kPatience));
}

// A worker that exits while no head listens is reported to the head the
// agent reconnects to.
TEST(NodeAgentHeadRestartTest, ExitWhileTheHeadIsAwayIsReportedToTheNextHead) {
  HeadOptions head_options;
  head_options.port = testing::FreeLocalPort();
  head_options.token = GenerateToken();
  auto head = std::make_unique<Head>(head_options);
  NodeAgentOptions options = AgentOfHeadAt(head_options.port, head_options.token);
  options.head_reconnect_timeout = kPatience;
  NodeAgent agent(options);
  const pid_t worker = agent.SpawnWorkers(1).at(0);
  ASSERT_TRUE(WaitForSleeper(worker));

  head.reset();
  ASSERT_TRUE(WaitUntil([&] { return !agent.head_connected(); }, kPatience));
  kill(worker, SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return agent.exits().size() == 1; }, kPatience));

  head = std::make_unique<Head>(head_options);
  // Nobody else talks to this head: the agent's registration and its report
  // of the exit are the two messages it receives.
  EXPECT_TRUE(WaitUntil([&] { return head->stats().messages_received == 2; }, kPatience))
      << head->stats().messages_received;
  EXPECT_TRUE(agent.head_connected());
}

// No head comes back within head_reconnect_timeout: the agent stops its
// workers and RunUntilSignalled fails, naming the head and the timeout.
TEST(NodeAgentHeadRestartTest, AgentStopsItsWorkersWhenTheHeadStaysAway) {
  auto head = std::make_unique<Head>(HeadOptions{});
  NodeAgentOptions options = AgentOfHeadAt(head->port(), head->token());
  options.head_reconnect_timeout = milliseconds(1000);
  NodeAgent agent(options);
  const std::vector<pid_t> workers = agent.SpawnWorkers(2);
  for (pid_t worker : workers) ASSERT_TRUE(WaitForSleeper(worker));
  auto run = std::async(std::launch::async, [&] { return agent.RunUntilSignalled(); });

  head.reset();
  if (run.wait_for(kPatience) != std::future_status::ready) {
    ADD_FAILURE() << "RunUntilSignalled did not return after the head was lost";
    agent.StopWorkers();  // so that it returns and the test ends
  }
  EXPECT_NE(run.get(), 0);
  for (pid_t worker : workers) EXPECT_FALSE(ProcessAlive(worker)) << worker;
  const std::vector<WorkerExit> exits = agent.exits();
  ASSERT_EQ(exits.size(), 2u);
  for (const WorkerExit& exit : exits) EXPECT_EQ(exit.signal, SIGTERM);
  const std::string failure = agent.head_failure();
  EXPECT_NE(failure.find("127.0.0.1:" + std::to_string(options.head_port)), std::string::npos)
      << failure;
  EXPECT_NE(failure.find("1000 ms"), std::string::npos) << failure;
  EXPECT_THROW(agent.SpawnWorkers(1), std::logic_error);
}

// Restores one environment variable when it goes out of scope.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(WorkerEnvironmentTest, HeartbeatSettingsAreOptionalAndChecked) {
  ScopedEnvironment head("ELASTIC_HEAD_ADDRESS", "127.0.0.1:6380");
  ScopedEnvironment token(kTokenEnvironmentVariable, "t");
  ScopedEnvironment node("ELASTIC_NODE_ID", "7");
  ScopedEnvironment index("ELASTIC_WORKER_INDEX", "1");
  EXPECT_EQ(WorkerEnvironment::FromEnvironment().transport.heartbeat_timeout,
            TransportOptions().heartbeat_timeout);
  {
    ScopedEnvironment timeout("ELASTIC_HEARTBEAT_TIMEOUT_MS", "2500");
    const HeadClientOptions client = WorkerEnvironment::FromEnvironment().ClientOptions("w");
    EXPECT_EQ(client.transport.heartbeat_timeout, milliseconds(2500));
  }
  for (const char* bad : {"abc", "-5", "0", "12ms"}) {
    ScopedEnvironment timeout("ELASTIC_HEARTBEAT_TIMEOUT_MS", bad);
    try {
      WorkerEnvironment::FromEnvironment();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("ELASTIC_HEARTBEAT_TIMEOUT_MS"), std::string::npos)
          << e.what();
    }
  }
  ScopedEnvironment interval("ELASTIC_HEARTBEAT_MS", "1000");  // not below the 1 s default
  EXPECT_THROW(WorkerEnvironment::FromEnvironment(), std::runtime_error);
}

}  // namespace
}  // namespace elastic::runtime

int main(int argc, char** argv) { return elastic::runtime::testing::TestMain(argc, argv); }
