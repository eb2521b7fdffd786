// A head restarted in place of another (a job controller recovered from its
// journal): it continues the generation and id numbering it is given, and
// clients of the head that vanished fail cleanly, are destroyed without a
// hang, and new clients register with the new head on the same port.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::seconds;
using testing::ClientOf;
using testing::WaitUntil;

constexpr seconds kPatience{60};
const Endpoint kSomewhere{"127.0.0.1", 1};

TEST(HeadNumberingTest, ContinuesFromTheFirstGenerationAndIdsItIsGiven) {
  HeadOptions options;
  options.first_generation = 41;
  options.first_member_id = 500;
  options.first_node_id = 70;
  Head head(options);
  EXPECT_EQ(head.Membership().view.generation, 41u);

  HeadClient agent(ClientOf(head, "agent"));
  EXPECT_EQ(agent.RegisterNode("node", 0), 70u);
  HeadClient other_agent(ClientOf(head, "other-agent"));
  EXPECT_EQ(other_agent.RegisterNode("other-node", 0), 71u);

  HeadClient first(ClientOf(head, "first"));
  EXPECT_EQ(first.RegisterMember("first", 70, kSomewhere), 500u);
  EXPECT_EQ(head.Membership().view.generation, 42u);  // the join published 41 + 1
  HeadClient second(ClientOf(head, "second"));
  EXPECT_EQ(second.RegisterMember("second", 70, kSomewhere), 501u);
  EXPECT_EQ(head.PublishView({501}).generation, 44u);
}

TEST(HeadNumberingTest, FirstPublishedViewIsFirstGenerationPlusOne) {
  HeadOptions options;
  options.admit_joins = false;
  options.first_generation = 7;
  Head head(options);
  HeadClient member(ClientOf(head, "member"));
  const uint64_t id = member.RegisterMember("member", 0, kSomewhere);
  EXPECT_EQ(id, 1u);  // the default first member id
  EXPECT_EQ(head.Membership().view.generation, 7u);
  const MembershipView view = head.PublishView({id});
  EXPECT_EQ(view.generation, 8u);
  ASSERT_EQ(view.members.size(), 1u);
  EXPECT_EQ(view.members[0].id, id);
}

TEST(HeadNumberingTest, RejectsIdsBelowOneNamingTheField) {
  for (const std::string field : {"first_member_id", "first_node_id"}) {
    HeadOptions options;
    if (field == "first_member_id") options.first_member_id = 0;
    if (field == "first_node_id") options.first_node_id = 0;
    try {
      Head head(options);
      ADD_FAILURE() << "accepted " << field << " = 0";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

// A worker whose head went away destroys its old client: calls on it fail
// with the reason, and destroying it neither hangs nor crashes, whether or
// not it has noticed the loss yet.
TEST(HeadClientRestartTest, ClientOfAVanishedHeadFailsAndIsDestroyedCleanly) {
  auto head = std::make_unique<Head>(HeadOptions{});
  auto noticed = std::make_unique<HeadClient>(ClientOf(*head, "noticed"));
  auto unnoticed = std::make_unique<HeadClient>(ClientOf(*head, "unnoticed"));
  noticed->RegisterMember("noticed", 0, kSomewhere);
  unnoticed->Subscribe([](const MembershipUpdate&) {});
  head.reset();
  unnoticed.reset();
  ASSERT_TRUE(WaitUntil([&] { return !noticed->connected(); }, kPatience));
  EXPECT_THROW(noticed->Put("key", "value"), std::runtime_error);
  EXPECT_THROW(noticed->GetMembership(), std::runtime_error);
  noticed.reset();
}

// The head restarts on the same port with the same token: a new client (what
// a worker builds to reconnect) registers again and gets an id from the new
// head's numbering, after the old client is destroyed.
TEST(HeadClientRestartTest, NewClientRegistersWithAHeadRestartedOnTheSamePort) {
  HeadOptions options;
  options.port = testing::FreeLocalPort();
  options.token = GenerateToken();
  auto head = std::make_unique<Head>(options);
  auto old_client = std::make_unique<HeadClient>(ClientOf(*head, "worker"));
  const uint64_t old_id = old_client->RegisterMember("worker", 0, kSomewhere);
  const uint64_t old_generation = head->Membership().view.generation;
  head.reset();
  ASSERT_TRUE(WaitUntil([&] { return !old_client->connected(); }, kPatience));

  options.first_generation = old_generation;
  options.first_member_id = old_id + 1;
  head = std::make_unique<Head>(options);
  ASSERT_EQ(head->port(), options.port);
  old_client.reset();
  HeadClient new_client(ClientOf(*head, "worker"));
  const uint64_t new_id = new_client.RegisterMember("worker", 0, kSomewhere);
  EXPECT_GE(new_id, options.first_member_id);
  EXPECT_EQ(new_client.member_id(), new_id);
  const MembershipUpdate membership = new_client.GetMembership();
  EXPECT_EQ(membership.view.generation, old_generation + 1);
  ASSERT_EQ(membership.view.members.size(), 1u);
  EXPECT_EQ(membership.view.members[0].id, new_id);
}

// After a restart, a node and a member claim the ids they had: granted when
// free and issued by an earlier head; an id this head gave someone else, or
// one in use, is not handed out twice.
TEST(HeadNumberingTest, ARestartedProcessGetsItsPreviousIdBackWhenFree) {
  HeadOptions options;
  options.first_member_id = 10;
  options.first_node_id = 5;
  Head head(options);
  HeadClient agent(ClientOf(head, "agent"));
  EXPECT_EQ(agent.RegisterNode("node", 0, 3), 3u);  // from the head before
  HeadClient rival_agent(ClientOf(head, "rival-agent"));
  EXPECT_EQ(rival_agent.RegisterNode("rival", 0, 3), 5u);  // 3 is taken

  HeadClient back(ClientOf(head, "back"));
  EXPECT_EQ(back.RegisterMember("back", 3, kSomewhere, 7), 7u);
  HeadClient rival(ClientOf(head, "rival"));
  EXPECT_EQ(rival.RegisterMember("rival", 3, kSomewhere, 7), 10u);  // 7 is in use
  HeadClient issued(ClientOf(head, "issued"));
  EXPECT_EQ(issued.RegisterMember("issued", 3, kSomewhere, 10), 11u);  // this head's own id
  HeadClient unknown(ClientOf(head, "unknown"));
  EXPECT_EQ(unknown.RegisterMember("unknown", 3, kSomewhere, 40), 40u);  // never issued here
  HeadClient next(ClientOf(head, "next"));
  EXPECT_EQ(next.RegisterMember("next", 3, kSomewhere), 41u);  // numbering went past it
}

}  // namespace
}  // namespace elastic::runtime
