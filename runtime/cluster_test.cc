// A small cluster of real processes over real sockets: members join through
// the head, actors talk across processes with ask and tell, and failures
// (kill -9, a silent process) reach the head, every subscriber and every
// pending ask.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
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
using testing::Subprocess;
using testing::WaitUntil;

// Generous: the machine running the tests may be very busy.
constexpr seconds kPatience{60};

// Transport for connections whose heartbeat timeout is not what a test is
// about: a loaded machine (or a sanitizer build) must not fail healthy peers.
TransportOptions Relaxed() {
  TransportOptions options;
  options.heartbeat_timeout = seconds(20);
  return options;
}

class EchoActor : public Actor {
 public:
  explicit EchoActor(ActorSystem* system) : system_(system) {}

  std::string Receive(const std::string& method, const std::string& payload) override {
    if (method == "echo") return payload;
    if (method == "add") {
      total_ += std::stoll(payload);
      return "";
    }
    if (method == "get") return std::to_string(total_);
    if (method == "sleep") {
      std::this_thread::sleep_for(milliseconds(std::stoi(payload)));
      return "slept";
    }
    if (method == "relay") {  // ask another actor from inside this one
      ActorRef other = system_->Lookup(payload, kPatience);
      return "via:" + other.Ask("echo", "hi", kPatience).get();
    }
    if (method == "fail") throw std::runtime_error("asked to fail");
    throw std::invalid_argument("unknown method " + method);
  }

 private:
  ActorSystem* system_;
  long long total_ = 0;
};

// --role=member PORT INDEX: joins, serves actor echo-INDEX, reports the
// failures it is told about under saw-failed/INDEX/ID, leaves on "shutdown".
int MemberMain(const std::vector<std::string>& args) {
  const std::string index = args.at(1);
  HeadClientOptions options;
  options.port = static_cast<uint16_t>(std::stoi(args.at(0)));
  options.token = std::getenv(kTokenEnvironmentVariable);
  options.name = "member-" + index;
  options.transport = Relaxed();
  HeadClient head(options);

  std::mutex mutex;
  std::vector<uint64_t> failures;
  head.Subscribe([&](const MembershipUpdate& update) {
    if (update.kind != MembershipEventKind::kFailed) return;
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(update.member_id);
  });

  ActorSystemOptions system_options;
  system_options.token = options.token;
  system_options.head = &head;
  system_options.name = "member-" + index;
  system_options.transport = Relaxed();
  ActorSystem system(system_options);
  system.Spawn("echo-" + index, std::make_shared<EchoActor>(&system));
  const uint64_t id = head.RegisterMember("member-" + index, 0, system.endpoint());
  head.Put("member/" + index, std::to_string(id));

  for (;;) {
    std::vector<uint64_t> seen;
    {
      std::lock_guard<std::mutex> lock(mutex);
      seen.swap(failures);
    }
    for (uint64_t failed : seen)
      head.Put("saw-failed/" + index + "/" + std::to_string(failed), "1");
    try {
      head.Wait("shutdown", milliseconds(200));
      break;
    } catch (const TimeoutError&) {
    }
  }
  head.Leave();
  return 0;
}

const bool kRoles = testing::RegisterRole("member", MemberMain);

// Records every membership update a subscriber gets.
class UpdateLog {
 public:
  HeadClient::UpdateCallback Callback() {
    return [this](const MembershipUpdate& update) {
      std::lock_guard<std::mutex> lock(mutex_);
      updates_.push_back(update);
    };
  }
  bool Has(MembershipEventKind kind, uint64_t member_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& update : updates_) {
      if (update.kind == kind && update.member_id == member_id) return true;
    }
    return false;
  }
  std::optional<MembershipUpdate> Find(MembershipEventKind kind, uint64_t member_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& update : updates_) {
      if (update.kind == kind && update.member_id == member_id) return update;
    }
    return std::nullopt;
  }

 private:
  std::mutex mutex_;
  std::vector<MembershipUpdate> updates_;
};

class ClusterTest : public ::testing::Test {
 protected:
  // The transport of the head and of this process's clients and actors.
  virtual TransportOptions Transport() { return Relaxed(); }

  void SetUp() override {
    HeadOptions head_options;
    head_options.transport = Transport();
    head_ = std::make_unique<Head>(head_options);
    HeadClientOptions options;
    options.port = head_->port();
    options.token = head_->token();
    options.name = "observer";
    options.transport = Transport();
    observer_ = std::make_unique<HeadClient>(options);
    observer_->Subscribe(log_.Callback());
    ActorSystemOptions system_options;
    system_options.token = head_->token();
    system_options.head = observer_.get();
    system_options.name = "test-actors";
    system_options.transport = Transport();
    actors_ = std::make_unique<ActorSystem>(system_options);
  }

  void TearDown() override {
    actors_.reset();
    observer_.reset();
    members_.clear();
    head_.reset();
  }

  // Starts members 0..count-1 and waits until all are in the view.
  std::vector<uint64_t> StartMembers(int count) {
    for (int i = 0; i < count; ++i) {
      members_.push_back(Subprocess::SpawnRole("member",
                                               {std::to_string(head_->port()), std::to_string(i)},
                                               {{kTokenEnvironmentVariable, head_->token()}}));
    }
    std::vector<uint64_t> ids;
    for (int i = 0; i < count; ++i) {
      ids.push_back(std::stoull(observer_->Wait("member/" + std::to_string(i), kPatience)));
    }
    return ids;
  }

  pid_t PidOf(uint64_t member_id) {
    for (const auto& member : head_->Membership().view.members) {
      if (member.id == member_id) return member.pid;
    }
    return -1;
  }

  std::unique_ptr<Head> head_;
  std::unique_ptr<HeadClient> observer_;
  std::unique_ptr<ActorSystem> actors_;
  std::vector<Subprocess> members_;
  UpdateLog log_;
};

TEST_F(ClusterTest, MembersJoinAndActorsTalkAcrossProcesses) {
  const std::vector<uint64_t> ids = StartMembers(3);
  const MembershipUpdate membership = head_->Membership();
  ASSERT_EQ(membership.view.members.size(), 3u);
  EXPECT_GE(membership.view.generation, 3u);  // one generation per join
  for (uint64_t id : ids) {
    EXPECT_GE(membership.view.RankOf(id), 0);
    EXPECT_TRUE(log_.Has(MembershipEventKind::kJoined, id));
    EXPECT_NE(PidOf(id), getpid());
  }

  for (int i = 0; i < 3; ++i) {
    ActorRef echo = actors_->Lookup("echo-" + std::to_string(i), kPatience);
    EXPECT_FALSE(echo.is_local());
    EXPECT_EQ(echo.Ask("echo", "ping-" + std::to_string(i), kPatience).get(),
              "ping-" + std::to_string(i));
  }

  // Tells from one sender arrive in order and one at a time.
  ActorRef counter = actors_->Lookup("echo-0", kPatience);
  for (int i = 1; i <= 10; ++i) counter.Tell("add", std::to_string(i));
  EXPECT_EQ(counter.Ask("get", "", kPatience).get(), "55");

  // Actor to actor across processes, and a 1 MiB payload both ways.
  EXPECT_EQ(counter.Ask("relay", "echo-2", kPatience).get(), "via:hi");
  const std::string big(1 << 20, 'z');
  EXPECT_EQ(actors_->Lookup("echo-1", kPatience).Ask("echo", big, kPatience).get(), big);

  // An actor's exception comes back as AskError naming it.
  try {
    counter.Ask("fail", "", kPatience).get();
    FAIL() << "ask to a throwing actor succeeded";
  } catch (const AskError& e) {
    EXPECT_NE(std::string(e.what()).find("asked to fail"), std::string::npos) << e.what();
  }

  observer_->Put("shutdown", "1");
  for (auto& member : members_) EXPECT_EQ(member.WaitExitCode(kPatience), 0);
  for (uint64_t id : ids) {
    EXPECT_TRUE(WaitUntil([&] { return log_.Has(MembershipEventKind::kLeft, id); }, kPatience));
    EXPECT_FALSE(log_.Has(MembershipEventKind::kFailed, id));
  }
  EXPECT_TRUE(head_->Membership().view.members.empty());
}

// Collects the membership updates forwarded to it.
class MembershipWatcher : public Actor {
 public:
  std::string Receive(const std::string& method, const std::string& payload) override {
    if (method == kMembershipMethod) {
      const MembershipUpdate update = DecodeMembershipUpdate(payload);
      generations_ += std::to_string(update.view.generation) + ":" +
                      std::to_string(update.view.members.size()) + ",";
      return "";
    }
    return generations_;  // "seen"
  }

 private:
  std::string generations_;
};

TEST_F(ClusterTest, ActorIsToldOfMembershipChanges) {
  ActorRef watcher = actors_->Spawn("watcher", std::make_shared<MembershipWatcher>());
  HeadClientOptions options;
  options.port = head_->port();
  options.token = head_->token();
  HeadClient client(options);
  ForwardMembershipTo(client, watcher);
  StartMembers(2);
  // Two joins: generation 1 with one member, generation 2 with two.
  std::string seen;
  EXPECT_TRUE(WaitUntil(
      [&] {
        seen = watcher.Ask("seen", "", kPatience).get();
        return seen == "1:1,2:2,";
      },
      kPatience))
      << seen;
}

TEST_F(ClusterTest, LocalActorsAnswerAndTimeOut) {
  actors_->Spawn("local-echo", std::make_shared<EchoActor>(actors_.get()));
  ActorRef echo = actors_->Lookup("local-echo", kPatience);
  EXPECT_TRUE(echo.is_local());
  EXPECT_EQ(echo.Ask("echo", "x", kPatience).get(), "x");
  auto slow = echo.Ask("sleep", "3000", milliseconds(100));
  EXPECT_THROW(slow.get(), TimeoutError);
  EXPECT_THROW(actors_->Spawn("local-echo", std::make_shared<EchoActor>(actors_.get())),
               std::invalid_argument);
  EXPECT_THROW(actors_->Lookup("nobody", milliseconds(100)), TimeoutError);
}

TEST_F(ClusterTest, KilledMemberIsFailedEverywhereAndItsAsksFail) {
  const std::vector<uint64_t> ids = StartMembers(2);
  const uint64_t victim = ids[0];
  const pid_t victim_pid = PidOf(victim);
  ASSERT_GT(victim_pid, 0);
  const uint64_t generation = head_->Membership().view.generation;

  ActorRef sleeper = actors_->Lookup("echo-0", kPatience);
  ASSERT_EQ(sleeper.Ask("echo", "warm", kPatience).get(), "warm");  // connection is open
  auto pending = sleeper.Ask("sleep", "600000", seconds(600));

  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(victim_pid, SIGKILL), 0);

  // The pending ask fails with a clear error, not its (long) timeout.
  ASSERT_EQ(pending.wait_for(kPatience), std::future_status::ready);
  try {
    pending.get();
    FAIL() << "ask to a killed process succeeded";
  } catch (const AskError& e) {
    EXPECT_NE(std::string(e.what()).find("lost"), std::string::npos) << e.what();
  }
  // The head, this subscriber and the other member's subscription all learn it.
  // A dropped connection is noticed at once, long before any heartbeat
  // timeout (20 s here); 10 s is the margin for a loaded machine.
  EXPECT_TRUE(WaitUntil([&] { return log_.Has(MembershipEventKind::kFailed, victim); }, kPatience));
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, seconds(10));
  EXPECT_EQ(observer_->Wait("saw-failed/1/" + std::to_string(victim), kPatience), "1");
  const MembershipUpdate after = head_->Membership();
  EXPECT_EQ(after.view.RankOf(victim), -1);
  EXPECT_EQ(after.view.RankOf(ids[1]), 0);
  EXPECT_GT(after.view.generation, generation);
  // Its actor is gone from the directory; new asks to it fail at once.
  EXPECT_THROW(actors_->Lookup("echo-0", milliseconds(200)), TimeoutError);
  EXPECT_THROW(sleeper.Ask("echo", "again", kPatience).get(), AskError);
}

// The head and this process's actor system use the default heartbeat
// (100 ms) and timeout (1 s), which is what this test is about.
class HeartbeatTest : public ClusterTest {
 protected:
  TransportOptions Transport() override { return TransportOptions{}; }
};

TEST_F(HeartbeatTest, SilentMemberIsFailedAfterHeartbeatTimeout) {
  const std::vector<uint64_t> ids = StartMembers(2);
  const uint64_t victim = ids[0];
  ActorRef frozen = actors_->Lookup("echo-0", kPatience);
  ASSERT_EQ(frozen.Ask("echo", "warm", kPatience).get(), "warm");

  // SIGSTOP keeps its sockets open: only the missing heartbeats tell.
  const pid_t victim_pid = PidOf(victim);
  ASSERT_EQ(kill(victim_pid, SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] { return testing::ProcessStopped(victim_pid); }, kPatience));
  const auto stopped_at = std::chrono::steady_clock::now();
  auto pending = frozen.Ask("echo", "anyone?", seconds(600));

  EXPECT_TRUE(WaitUntil([&] { return log_.Has(MembershipEventKind::kFailed, victim); }, kPatience));
  // Within the 1 s heartbeat timeout, plus a 10 s margin for a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at,
            TransportOptions{}.heartbeat_timeout + seconds(10));
  auto failure = log_.Find(MembershipEventKind::kFailed, victim);
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->detail.find("no heartbeat"), std::string::npos) << failure->detail;
  EXPECT_EQ(observer_->Wait("saw-failed/1/" + std::to_string(victim), kPatience), "1");
  ASSERT_EQ(pending.wait_for(kPatience), std::future_status::ready);
  EXPECT_THROW(pending.get(), AskError);
  members_[0].Signal(SIGKILL);
}

TEST_F(ClusterTest, WildcardListenNeedsAnAdvertisedAddress) {
  ActorSystemOptions options;
  options.token = head_->token();
  options.listen_host = "0.0.0.0";
  EXPECT_THROW(ActorSystem system(options), std::invalid_argument);
  options.advertise_host = "127.0.0.1";
  ActorSystem system(options);
  EXPECT_EQ(system.endpoint().host, "127.0.0.1");
  system.Spawn("wide", std::make_shared<EchoActor>(&system));
  ActorRef remote = actors_->Remote("wide", system.endpoint());
  EXPECT_FALSE(remote.is_local());
  EXPECT_EQ(remote.Ask("echo", "reachable", kPatience).get(), "reachable");
  ActorSystemOptions no_token;
  EXPECT_THROW(ActorSystem tokenless(no_token), std::invalid_argument);
}

}  // namespace
}  // namespace elastic::runtime

int main(int argc, char** argv) { return elastic::runtime::testing::TestMain(argc, argv); }
