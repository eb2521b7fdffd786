// The trainer actor's dispatch (TrainerInbox::Receive): every ToTrainer
// member reaches its handler, and a message it does not implement (the union
// unset, a member a newer controller added, another method) is refused as
// unimplemented while the actor goes on with the next order.
#include "trainer/elastic/worker/trainer_inbox.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/actor.h"
#include "trainer/elastic/protocol/control_messages.h"

namespace elastic::trainer {
namespace {

using std::chrono::milliseconds;

std::string GenerationMessage(uint64_t generation) {
  return EncodeControl<proto::Generation>([&](proto::Generation::Builder m) {
    m.setGeneration(generation);
    auto ids = m.initMemberIds(2);
    ids.set(0, 5);
    ids.set(1, 9);
    m.setReason("test");
  });
}

// A ToTrainer message whose member is `which`, a number this build may not
// know: the union's discriminant is the first 16 bits of its data section.
std::string WithMember(uint16_t which) {
  std::string bytes = EncodeMessage<proto::ToTrainer>([](proto::ToTrainer::Builder) {});
  // One segment: its table (8 bytes), the root pointer (8), then the data section.
  constexpr size_t kDiscriminant = 16;
  std::memcpy(&bytes[kDiscriminant], &which, sizeof(which));
  return bytes;
}

TEST(TrainerInboxTest, TakesEveryMember) {
  std::vector<uint64_t> newer;
  TrainerInbox inbox([&](uint64_t generation) { newer.push_back(generation); });
  EXPECT_EQ(inbox.Receive(kControlCall, GenerationMessage(4)), "");
  const std::optional<GenerationOrder> order = inbox.Next(0, milliseconds(0));
  ASSERT_TRUE(order);
  EXPECT_EQ(order->generation, 4u);
  EXPECT_EQ(order->RankOf(9), 1);
  EXPECT_EQ(newer, (std::vector<uint64_t>{4}));

  inbox.Receive(kControlCall, EncodeControl<proto::StopRequest>([](proto::StopRequest::Builder m) {
                  m.setGeneration(4);
                  m.setAtNextCommit(true);
                }));
  EXPECT_EQ(inbox.Request(4), std::optional<bool>(true));

  inbox.Receive(kControlCall, EncodeControl<proto::JobOver>(
                                  [](proto::JobOver::Builder m) { m.setReason("done"); }));
  EXPECT_EQ(inbox.Over(), std::optional<std::string>("done"));
}

TEST(TrainerInboxTest, RefusesWhatItDoesNotImplementAndTakesTheNextOrder) {
  TrainerInbox inbox([](uint64_t) {});
  const std::string unset = EncodeMessage<proto::ToTrainer>([](proto::ToTrainer::Builder) {});
  try {
    inbox.Receive(kControlCall, unset);
    FAIL() << "an unset message was taken";
  } catch (const Unimplemented& e) {
    EXPECT_NE(std::string(e.what()).find("unimplemented message ToTrainer.unset"),
              std::string::npos)
        << e.what();
  }

  const std::string unknown = WithMember(77);
  {
    MessageBytes bytes(unknown, "test");
    ASSERT_EQ(static_cast<int>(bytes.Get<proto::ToTrainer>().which()), 77);
  }
  try {
    inbox.Receive(kControlCall, unknown);
    FAIL() << "an unknown member was taken";
  } catch (const Unimplemented& e) {
    EXPECT_NE(std::string(e.what()).find("ToTrainer.#77"), std::string::npos) << e.what();
  }
  EXPECT_THROW(inbox.Receive("generation", GenerationMessage(3)), Unimplemented);
  EXPECT_FALSE(inbox.Next(0, milliseconds(0)));

  inbox.Receive(kControlCall, GenerationMessage(3));
  const std::optional<GenerationOrder> order = inbox.Next(0, milliseconds(0));
  ASSERT_TRUE(order);
  EXPECT_EQ(order->generation, 3u);
}

// Through an actor system, as the controller reaches it: an ask with an
// unimplemented message fails with an AskError naming it, and the actor
// answers the next one.
TEST(TrainerInboxTest, AnAskItDoesNotImplementFailsAndTheActorGoesOn) {
  runtime::ActorSystemOptions options;
  options.token = "trainer-inbox-test-token";
  runtime::ActorSystem actors(options);
  auto inbox = std::make_shared<TrainerInbox>([](uint64_t) {});
  const runtime::ActorRef ref = actors.Spawn(kTrainerActor, inbox);
  try {
    ref.Ask(kControlCall, WithMember(200), milliseconds(5000)).get();
    FAIL() << "an unknown member was answered";
  } catch (const runtime::AskError& e) {
    EXPECT_NE(std::string(e.what()).find("unimplemented message ToTrainer.#200"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ref.Ask(kControlCall, GenerationMessage(6), milliseconds(5000)).get(), "");
  const std::optional<GenerationOrder> order = inbox->Next(0, milliseconds(0));
  ASSERT_TRUE(order);
  EXPECT_EQ(order->generation, 6u);
}

}  // namespace
}  // namespace elastic::trainer
