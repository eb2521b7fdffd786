// Runs the control plane's fuzz target (control_fuzz.cc) over a bounded
// number of deterministic mutations of valid messages of every kind, so CI
// fuzzes every run without clang. FUZZ_ITERATIONS overrides the count.
#include "trainer/elastic/testing/control_fuzz.h"

#include <capnp/schema.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/frame.h"
#include "runtime/fuzz_mutator.h"
#include "trainer/elastic/protocol/control_messages.h"
#include "trainer/elastic/protocol/worker_stats.h"
#include "trainer/elastic/worker/trainer_inbox.h"

namespace elastic::trainer {
namespace {

using runtime::FuzzBytes;

FuzzBytes Seed(int kind, const std::string& payload) {
  const std::string input = ControlFuzzInput(kind, payload);
  return FuzzBytes(input.begin(), input.end());
}

std::string GenerationMessage() {
  return EncodeControl<proto::Generation>([](proto::Generation::Builder m) {
    m.setGeneration(7);
    auto ids = m.initMemberIds(3);
    for (unsigned i = 0; i < 3; ++i) ids.set(i, i + 1);
    auto source = m.initSource();
    source.setKind(proto::StateSource::Kind::CONTROLLER_COPY);
    ToProto(StatePoint{2, 64, 40}, source.initPoint());
    source.setState(runtime::AsData("state bytes"));
    m.setReason("1 joined");
  });
}

// A message of each union with nothing set.
template <typename Union>
std::string Unset() {
  return EncodeMessage<Union>([](typename Union::Builder) {});
}

// One valid message of every member of both unions, and each union unset.
std::vector<FuzzBytes> Seeds() {
  const StatePoint point{1, 32, 12};
  std::vector<FuzzBytes> seeds;
  const auto to_trainer = [&](const std::string& message) {
    seeds.push_back(Seed(kFuzzToTrainer, message));
  };
  const auto to_controller = [&](const std::string& message) {
    seeds.push_back(Seed(kFuzzToController, message));
  };
  to_trainer(GenerationMessage());
  to_trainer(EncodeControl<proto::StopRequest>([](auto m) {
    m.setGeneration(3);
    m.setAtNextCommit(true);
  }));
  to_trainer(EncodeControl<proto::JobOver>([](auto m) { m.setReason("the job is done"); }));
  to_trainer(Unset<proto::ToTrainer>());
  to_controller(SpecRequest());
  to_controller(Tick());
  to_controller(EncodeControl<proto::Hello>([&](auto m) {
    m.setMemberId(4);
    m.setHoldsCommit(true);
    ToProto(point, m.initCommit());
  }));
  to_controller(EncodeControl<proto::Progress>([](auto m) {
    m.setGeneration(2);
    m.setLoss(1.5);
    m.setWorld(2);
  }));
  to_controller(EncodeControl<proto::EpochSummary>([](auto m) {
    m.setEpoch(1);
    m.setTestAccuracy(0.5);
  }));
  to_controller(EncodeControl<proto::Evaluation>([](auto m) {
    m.setStep(250);
    m.setTestLoss(1.88);
  }));
  to_controller(EncodeControl<proto::CommitReport>([&](auto m) {
    m.setGeneration(2);
    ToProto(point, m.initPoint());
    m.setState(runtime::AsData("0123456789abcdef"));
    m.setMemberId(1);
  }));
  to_controller(EncodeControl<proto::Synced>([&](auto m) {
    m.setGeneration(2);
    ToProto(point, m.initPoint());
    m.setChecksum(99);
  }));
  to_controller(EncodeControl<proto::ParamsChecksum>([&](auto m) {
    m.setGeneration(2);
    m.setRank(1);
    m.setWorld(2);
    m.setChecksum(99);
    ToProto(point, m.initPoint());
  }));
  to_controller(EncodeControl<proto::Shares>([&](auto m) {
    m.setGeneration(2);
    ToProto(point, m.initPoint());
    m.setStepSamples(64);
    auto shares = m.initShares(2);
    shares.set(0, 43);
    shares.set(1, 21);
    auto speeds = m.initSpeeds(2);
    speeds.set(0, 1200.5);
    speeds.set(1, 600.25);
    auto slowdowns = m.initSlowdowns(2);
    slowdowns.set(0, 0.67);
    slowdowns.set(1, 1.33);
  }));
  to_controller(EncodeControl<proto::FirstStep>([](auto m) { m.setGeneration(2); }));
  to_controller(EncodeControl<proto::CheckpointWritten>([&](auto m) {
    ToProto(point, m.initPoint());
    m.setPath("/ck/checkpoint.ckpt");
  }));
  to_controller(EncodeControl<proto::Fault>([](auto m) {
    m.setGeneration(2);
    m.setReason("Connection reset by peer");
  }));
  to_controller(EncodeControl<proto::Draining>([](auto m) { m.setMemberId(2); }));
  to_controller(EncodeControl<proto::Done>([](auto m) { m.setEpochs(3); }));
  to_controller(EncodeControl<proto::WorkerStats>([](auto m) {
    m.setMemberId(2);
    auto buckets = m.initAllreduceBuckets(4);
    for (unsigned i = 0; i < 4; ++i) buckets.set(i, i);
  }));
  to_controller(Unset<proto::ToController>());
  return seeds;
}

TEST(ControlFuzzTest, SeedsAreValidMessagesOfEveryMember) {
  const std::vector<FuzzBytes> seeds = Seeds();
  // Every member of both unions, and each one unset.
  ASSERT_EQ(seeds.size(), capnp::Schema::from<proto::ToTrainer>().getUnionFields().size() +
                              capnp::Schema::from<proto::ToController>().getUnionFields().size());
  for (const FuzzBytes& seed : seeds)
    EXPECT_EQ(LLVMFuzzerTestOneInput(seed.data(), seed.size()), 0);
  // The generation seed is an order the trainer actor takes.
  TrainerInbox inbox([](uint64_t) {});
  inbox.Receive(kControlCall, GenerationMessage());
  const std::optional<GenerationOrder> order = inbox.Next(0, std::chrono::milliseconds(0));
  ASSERT_TRUE(order);
  EXPECT_EQ(order->generation, 7u);
  EXPECT_EQ(order->members, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(order->state, "state bytes");
}

TEST(ControlFuzzTest, MutatedMessagesNeverCrashTheirReaders) {
  const long iterations = runtime::FuzzIterations(150000);
  runtime::FuzzSeeds(Seeds(), iterations, LLVMFuzzerTestOneInput);
  SUCCEED() << iterations << " mutated messages read or refused cleanly";
}

}  // namespace
}  // namespace elastic::trainer
