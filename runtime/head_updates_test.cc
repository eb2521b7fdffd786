// Membership updates through a real head over real sockets: after its
// snapshot a subscriber is sent deltas (member ids, and only the records that
// changed), and every update it reads is the head's state, whether it
// subscribed first or in the middle of the changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::seconds;
using testing::ClientOf;
using testing::WaitUntil;

// What a subscriber read last.
class Subscriber {
 public:
  explicit Subscriber(const Head& head) : client_(ClientOf(head)) {
    const MembershipUpdate snapshot = client_.Subscribe([this](const MembershipUpdate& update) {
      std::lock_guard<std::mutex> lock(mutex_);
      last_ = update;
      ++updates_;
    });
    std::lock_guard<std::mutex> lock(mutex_);
    if (updates_ == 0) last_ = snapshot;
  }
  MembershipUpdate last() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }
  int updates() {
    std::lock_guard<std::mutex> lock(mutex_);
    return updates_;
  }

 private:
  HeadClient client_;
  std::mutex mutex_;
  MembershipUpdate last_;
  int updates_ = 0;
};

// (id, draining) of the view then of the pending members.
std::vector<std::pair<uint64_t, bool>> Members(const MembershipUpdate& update) {
  std::vector<std::pair<uint64_t, bool>> members;
  for (const auto* list : {&update.view.members, &update.pending})
    for (const MemberInfo& member : *list) members.emplace_back(member.id, member.draining);
  return members;
}

// The names of the members the head lists, view then pending.
std::vector<std::string> Names(const MembershipUpdate& update) {
  std::vector<std::string> names;
  for (const auto* list : {&update.view.members, &update.pending})
    for (const MemberInfo& member : *list) names.push_back(member.name);
  std::sort(names.begin(), names.end());
  return names;
}

// Both subscribers' last update is the head's state (generation, members in
// order, draining flags, names and endpoints). The head's state is read once it
// lists exactly `names`: a client's disconnect reaches the head's loop after
// the client is gone, and a snapshot taken before would be a state the head
// is about to leave (the subscribers would rightly show the next one).
void ExpectSubscribersSeeTheHead(Head& head, Subscriber& a, Subscriber& b,
                                 std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  ASSERT_TRUE(WaitUntil([&] { return Names(head.Membership()) == names; }, seconds(30)))
      << "the head never listed the expected members";
  const MembershipUpdate now = head.Membership();
  for (Subscriber* subscriber : {&a, &b}) {
    ASSERT_TRUE(WaitUntil(
        [&] {
          const MembershipUpdate last = subscriber->last();
          return last.view.generation == now.view.generation && Members(last) == Members(now);
        },
        seconds(30)))
        << "generation " << now.view.generation;
    const MembershipUpdate last = subscriber->last();
    for (size_t i = 0; i < now.view.members.size(); ++i) {
      EXPECT_EQ(last.view.members[i].name, now.view.members[i].name);
      EXPECT_EQ(last.view.members[i].endpoint.ToString(), now.view.members[i].endpoint.ToString());
    }
  }
}

TEST(HeadUpdatesTest, EarlyAndLateSubscribersReadEveryChangeAsTheHeadHasIt) {
  Head head(HeadOptions{});
  Subscriber early(head);
  HeadClient agent(ClientOf(head));
  const uint64_t node = agent.RegisterNode("node-a", 2);
  std::vector<std::unique_ptr<HeadClient>> members;
  auto join = [&](uint64_t node_id, uint16_t port) {
    members.push_back(std::make_unique<HeadClient>(ClientOf(head)));
    members.back()->RegisterMember("m" + std::to_string(port), node_id,
                                   Endpoint{"127.0.0.1", port});
  };
  join(node, 7001);
  join(node, 7002);
  join(0, 7003);
  Subscriber late(head);  // its snapshot comes in the middle
  ExpectSubscribersSeeTheHead(head, early, late, {"m7001", "m7002", "m7003"});

  agent.ReportDraining(node, "spot notice");  // two records change (the head replied: done)
  ExpectSubscribersSeeTheHead(head, early, late, {"m7001", "m7002", "m7003"});
  EXPECT_TRUE(late.last().view.members.at(0).draining);
  EXPECT_FALSE(late.last().view.members.at(2).draining);

  members.erase(members.begin() + 1);  // a member goes: ids only
  ExpectSubscribersSeeTheHead(head, early, late, {"m7001", "m7003"});
  join(0, 7004);
  ExpectSubscribersSeeTheHead(head, early, late, {"m7001", "m7003", "m7004"});

  // A view in another order, published by the controller.
  std::vector<uint64_t> reversed;
  for (const MemberInfo& member : head.Membership().view.members) reversed.push_back(member.id);
  std::reverse(reversed.begin(), reversed.end());
  head.PublishView(reversed);
  ExpectSubscribersSeeTheHead(head, early, late, {"m7001", "m7003", "m7004"});
  EXPECT_GE(early.updates(), 6);
}

}  // namespace
}  // namespace elastic::runtime
