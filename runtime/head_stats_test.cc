// The head's counters (HeadStats) over real sockets: every envelope a client
// sends and every reply is counted once, and a member process that is frozen
// (SIGSTOP: its socket stays open, only its heartbeats stop) shows up as
// missed heartbeats before the head fails it.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::seconds;
using testing::ClientOf;
using testing::Subprocess;
using testing::WaitUntil;

// Generous: the machine running the tests may be very busy.
constexpr seconds kPatience{60};

// --role=member PORT: joins as a member, says so under member/ready, then idles
// (its connection heartbeats on its own) until killed.
int MemberMain(const std::vector<std::string>& args) {
  HeadClientOptions options;
  options.port = static_cast<uint16_t>(std::stoi(args.at(0)));
  options.token = std::getenv(kTokenEnvironmentVariable);
  options.name = "member";
  HeadClient client(options);
  const uint64_t id = client.RegisterMember("member", 0, Endpoint{"127.0.0.1", 0});
  client.Put("member/ready", std::to_string(id));
  while (true) std::this_thread::sleep_for(seconds(1));
}

const bool kRoles = testing::RegisterRole("member", MemberMain);

TEST(HeadStatsTest, CountsEachRequestAndReplyOnce) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  const HeadStats before = head.stats();
  client.Put("a", "1");
  EXPECT_EQ(client.Get("a").value(), "1");
  EXPECT_FALSE(client.Get("absent").has_value());
  const HeadStats after = head.stats();
  // Three requests, three replies; the handshake and heartbeats are not messages.
  EXPECT_EQ(after.messages_received - before.messages_received, 3u);
  EXPECT_EQ(after.messages_sent - before.messages_sent, 3u);
}

TEST(HeadStatsTest, CountsConnectedNodes) {
  Head head(HeadOptions{});
  EXPECT_EQ(head.stats().nodes_connected, 0u);
  {
    HeadClient agent(ClientOf(head));
    agent.RegisterNode("machine-a", 2);
    EXPECT_EQ(head.stats().nodes_connected, 1u);
    HeadClient other(ClientOf(head));
    other.Put("not-a-node", "1");  // a plain client is not a node
    EXPECT_EQ(head.stats().nodes_connected, 1u);
  }
  // The head learns of the closed connection on its own thread.
  EXPECT_TRUE(WaitUntil([&] { return head.stats().nodes_connected == 0; }, kPatience));
}

TEST(HeadStatsTest, AFrozenMemberMissesHeartbeatsBeforeItIsFailed) {
  HeadOptions options;  // the default heartbeat (100 ms) and timeout (1 s)
  Head head(options);
  HeadClient observer(ClientOf(head));
  auto member = Subprocess::SpawnRole("member", {std::to_string(head.port())},
                                      {{kTokenEnvironmentVariable, head.token()}});
  const uint64_t id = std::stoull(observer.Wait("member/ready", kPatience));
  ASSERT_TRUE(WaitUntil([&] { return head.Membership().view.RankOf(id) >= 0; }, kPatience));

  ASSERT_EQ(kill(member.pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] { return testing::ProcessStopped(member.pid()); }, kPatience));
  // The head fails it after 1 s of silence: by then at least the 9 heartbeats
  // due after the first interval of that silence were missed. (Counted since
  // the head started: a loaded machine may have delayed some before SIGSTOP,
  // and those may have been reported as part of the same silence.)
  ASSERT_TRUE(WaitUntil([&] { return head.Membership().view.RankOf(id) < 0; }, kPatience));
  const TransportOptions transport;
  const uint64_t due =
      static_cast<uint64_t>(transport.heartbeat_timeout / transport.heartbeat_interval) - 1;
  EXPECT_GE(head.stats().heartbeats_missed, due);
  // The observer is no member: its silence would not count, and it was not silent.
  member.Signal(SIGKILL);
}

}  // namespace
}  // namespace elastic::runtime

int main(int argc, char** argv) { return elastic::runtime::testing::TestMain(argc, argv); }
