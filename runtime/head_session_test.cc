// HeadSession: a session that registers again what the head forgot when the
// session was lost (here: the head restarted on the same port), and gives up
// saying why when the head does not come back.
#include "runtime/head_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/actor.h"
#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::WaitUntil;

constexpr seconds kPatience{60};
const Endpoint kSomewhere{"127.0.0.1", 1};

// Records the membership updates it is told: "kind:generation:members" each.
class Recorder : public Actor {
 public:
  std::string Receive(const std::string& method, const std::string& payload) override {
    if (method != kMembershipMethod) return "";
    const MembershipUpdate update = DecodeMembershipUpdate(payload);
    std::string line = std::string(ToString(update.kind)) + ":" +
                       std::to_string(update.view.generation) + ":" +
                       std::to_string(update.view.members.size());
    std::lock_guard<std::mutex> lock(mutex_);
    seen_.push_back(line);
    return "";
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> seen_;
};

HeadClientOptions ClientOf(uint16_t port, const std::string& token, const std::string& name) {
  HeadClientOptions options;
  options.port = port;
  options.token = token;
  options.name = name;
  return options;
}

class HeadSessionTest : public ::testing::Test {
 protected:
  HeadSessionTest() {
    head_options_.port = testing::FreeLocalPort();
    head_options_.token = GenerateToken();
    head_ = std::make_unique<Head>(head_options_);
    ActorSystemOptions actor_options;
    actor_options.token = head_options_.token;
    actor_options.threads = 1;
    actors_ = std::make_unique<ActorSystem>(actor_options);
    recorder_ = std::make_shared<Recorder>();
    ref_ = actors_->Spawn("recorder", recorder_);  // no head: the session registers it
  }
  ~HeadSessionTest() override {
    session_.reset();
    actors_.reset();
  }

  void StartSession(milliseconds reconnect_timeout) {
    HeadSessionOptions options;
    options.client = ClientOf(head_options_.port, head_options_.token, "session");
    options.reconnect_timeout = reconnect_timeout;
    session_ = std::make_unique<HeadSession>(options, [this](HeadClient& client, bool again) {
      client.RegisterActor("recorder", actors_->endpoint());
      if (again) {
        ForwardMembershipWithSnapshotTo(client, ref_);
      } else {
        ForwardMembershipTo(client, ref_);
      }
    });
  }

  HeadOptions head_options_;
  std::unique_ptr<Head> head_;
  std::unique_ptr<ActorSystem> actors_;
  std::shared_ptr<Recorder> recorder_;
  ActorRef ref_;
  std::unique_ptr<HeadSession> session_;
};

TEST_F(HeadSessionTest, RegistersAgainWithAHeadRestartedOnTheSamePort) {
  StartSession(milliseconds(60000));
  EXPECT_TRUE(session_->established());
  {
    HeadClient lookup(ClientOf(head_->port(), head_->token(), "lookup"));
    EXPECT_EQ(lookup.LookupActor("recorder", milliseconds(100)).port, actors_->endpoint().port);
  }
  head_.reset();
  head_options_.first_generation = 10;
  head_ = std::make_unique<Head>(head_options_);
  ASSERT_TRUE(WaitUntil([&] { return session_->reestablished() == 1; }, kPatience));
  EXPECT_TRUE(session_->established());
  EXPECT_EQ(session_->failure(), "");

  // The new head knows the actor, and the actor hears the new head: the
  // snapshot first, then the join.
  HeadClient member(ClientOf(head_->port(), head_->token(), "member"));
  EXPECT_EQ(member.LookupActor("recorder", milliseconds(100)).port, actors_->endpoint().port);
  member.RegisterMember("member", 0, kSomewhere);
  ASSERT_TRUE(WaitUntil([&] { return recorder_->seen().size() >= 2; }, kPatience));
  const std::vector<std::string> seen = recorder_->seen();
  EXPECT_EQ(seen[0], "snapshot:10:0");
  EXPECT_EQ(seen[1], "joined:11:1");
}

TEST_F(HeadSessionTest, GivesUpAfterTheReconnectTimeoutAndSaysWhy) {
  StartSession(milliseconds(1000));
  head_.reset();
  ASSERT_TRUE(WaitUntil([&] { return !session_->failure().empty(); }, kPatience));
  const std::string failure = session_->failure();
  EXPECT_NE(failure.find("could not establish it again within 1000 ms"), std::string::npos)
      << failure;
  EXPECT_NE(failure.find("last attempt: "), std::string::npos) << failure;
  EXPECT_FALSE(session_->established());
  EXPECT_EQ(session_->reestablished(), 0u);
}

}  // namespace
}  // namespace elastic::runtime
