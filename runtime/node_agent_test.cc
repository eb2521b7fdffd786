// The node agent with real processes: it starts workers that join the head,
// reports their exits, turns SIGTERM into a draining notice, and leaves no
// orphans whether it exits cleanly or is SIGKILLed.
#include "runtime/node_agent.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

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

// --role=worker [EXIT_CODE]: what a node agent starts. Puts the heartbeat
// timeout it was given under heartbeat-timeout/<index>, joins the head as a
// member, then runs until its head connection is lost (or exits with
// EXIT_CODE at once when given).
int WorkerMain(const std::vector<std::string>& args) {
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
