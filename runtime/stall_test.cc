// A process that hosts a head and clients of its own (what the driver does:
// its job controller's session and its node agent) is stopped for longer than
// the heartbeat timeout. Neither end of its own sessions sent anything while
// it was stopped, so no heartbeat waits in their sockets when it runs again;
// each end's heartbeat check finds that it ran far too late and gives the
// other a fresh timeout instead of dropping a live session
// (heartbeat_check.h). The head keeps the member and the actor its own client
// registered.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
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
using testing::Subprocess;
using testing::WaitUntil;

// Generous: the machine running the tests may be very busy.
constexpr seconds kPatience{60};
const Endpoint kOwnActor{"127.0.0.1", 4242};

// --role=host PORT: a head on PORT and, in the same process, a client that
// registers a member and an actor; says "host/ready" = the member id, then idles.
int HostMain(const std::vector<std::string>& args) {
  HeadOptions options;  // heartbeats every 100 ms, a timeout of 1 s
  options.port = static_cast<uint16_t>(std::stoi(args.at(0)));
  options.token = std::getenv(kTokenEnvironmentVariable);
  Head head(options);
  HeadClientOptions client_options;
  client_options.port = head.port();
  client_options.token = head.token();
  client_options.name = "own";
  HeadClient own(client_options);
  own.RegisterActor("own-actor", kOwnActor);
  const uint64_t id = own.RegisterMember("own-member", 0, kOwnActor);
  own.Put("host/ready", std::to_string(id));
  while (true) std::this_thread::sleep_for(seconds(1));
}

const bool kRoles = testing::RegisterRole("host", HostMain);

HeadClientOptions ObserverOf(uint16_t port, const std::string& token) {
  HeadClientOptions options;
  options.port = port;
  options.token = token;
  options.name = "observer";
  return options;
}

TEST(StallTest, AProcessStoppedPastTheHeartbeatTimeoutKeepsItsOwnSessions) {
  const uint16_t port = testing::FreeLocalPort();
  const std::string token = GenerateToken();
  auto host =
      Subprocess::SpawnRole("host", {std::to_string(port)}, {{kTokenEnvironmentVariable, token}});
  ASSERT_TRUE(WaitUntil([&] { return testing::CanConnect(port); }, kPatience));
  uint64_t id = 0;
  {
    HeadClient observer(ObserverOf(port, token));
    id = std::stoull(observer.Wait("host/ready", kPatience));
  }
  ASSERT_EQ(kill(host.pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] { return testing::ProcessStopped(host.pid()); }, kPatience));
  std::this_thread::sleep_for(milliseconds(2500));  // 2.5 timeouts
  ASSERT_EQ(kill(host.pid(), SIGCONT), 0);
  // Time for a wrong verdict to take effect: a timeout and more.
  std::this_thread::sleep_for(milliseconds(1500));

  HeadClient observer(ObserverOf(port, token));
  const MembershipUpdate membership = observer.GetMembership();
  EXPECT_GE(membership.view.RankOf(id), 0) << "the host's own member was dropped";
  const Endpoint actor = observer.LookupActor("own-actor", milliseconds(100));
  EXPECT_EQ(actor.ToString(), kOwnActor.ToString());
  host.Signal(SIGKILL);
}

}  // namespace
}  // namespace elastic::runtime

int main(int argc, char** argv) { return elastic::runtime::testing::TestMain(argc, argv); }
