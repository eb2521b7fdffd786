// Runs the control plane's fuzz target (control_fuzz.cc) over a bounded
// number of deterministic mutations of valid messages of every kind, so CI
// fuzzes every run without clang. FUZZ_ITERATIONS overrides the count.
#include "trainer/elastic/control_fuzz.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/fuzz_mutator.h"
#include "trainer/elastic/control_messages.h"
#include "trainer/elastic/trainer_inbox.h"
#include "trainer/elastic/worker_stats.h"

namespace elastic::trainer {
namespace {

using runtime::FuzzBytes;

FuzzBytes Seed(int kind, const std::string& payload) {
  const std::string input = ControlFuzzInput(kind, payload);
  return FuzzBytes(input.begin(), input.end());
}

std::string GenerationMessage() {
  return EncodeMessage<proto::Generation>([](proto::Generation::Builder m) {
    m.setGeneration(7);
    auto ids = m.initMemberIds(3);
    for (unsigned i = 0; i < 3; ++i) ids.set(i, i + 1);
    auto source = m.initSource();
    source.setKind(proto::StateSource::Kind::CONTROLLER_COPY);
    ToProto(StatePoint{2, 64, 40}, source.initPoint());
    source.setState(capnp::Data::Reader(reinterpret_cast<const kj::byte*>("state bytes"), 11));
    m.setReason("1 joined");
  });
}

// One valid message of each kind, in the order of the target's switch.
std::vector<FuzzBytes> Seeds() {
  const StatePoint point{1, 32, 12};
  std::vector<FuzzBytes> seeds;
  seeds.push_back(Seed(0, GenerationMessage()));
  seeds.push_back(Seed(1, EncodeMessage<proto::StopRequest>([](auto m) {
                         m.setGeneration(3);
                         m.setAtNextCommit(true);
                       })));
  seeds.push_back(
      Seed(2, EncodeMessage<proto::JobOver>([](auto m) { m.setReason("the job is done"); })));
  seeds.push_back(Seed(3, EncodeMessage<proto::JobSpec>([](auto m) {
                         auto args = m.initArgs(2);
                         args.set(0, "--model=resnet8");
                         args.set(1, "--epochs=3");
                         m.setJobId("0123456789abcdef");
                       })));
  seeds.push_back(Seed(4, EncodeMessage<proto::Hello>([&](auto m) {
                         m.setMemberId(4);
                         m.setHoldsCommit(true);
                         ToProto(point, m.initCommit());
                       })));
  seeds.push_back(Seed(5, EncodeMessage<proto::Progress>([](auto m) {
                         m.setGeneration(2);
                         m.setLoss(1.5);
                         m.setWorld(2);
                       })));
  seeds.push_back(Seed(6, EncodeMessage<proto::EpochSummary>([](auto m) {
                         m.setEpoch(1);
                         m.setTestAccuracy(0.5);
                       })));
  seeds.push_back(Seed(7, EncodeMessage<proto::CommitReport>([&](auto m) {
                         m.setGeneration(2);
                         ToProto(point, m.initPoint());
                         m.setState(capnp::Data::Reader(
                             reinterpret_cast<const kj::byte*>("0123456789abcdef"), 16));
                         m.setMemberId(1);
                       })));
  seeds.push_back(Seed(8, EncodeMessage<proto::Synced>([&](auto m) {
                         m.setGeneration(2);
                         ToProto(point, m.initPoint());
                         m.setChecksum(99);
                       })));
  seeds.push_back(Seed(9, EncodeMessage<proto::FirstStep>([](auto m) { m.setGeneration(2); })));
  seeds.push_back(Seed(10, EncodeMessage<proto::CheckpointWritten>([&](auto m) {
                         ToProto(point, m.initPoint());
                         m.setPath("/ck/checkpoint.ckpt");
                       })));
  seeds.push_back(Seed(11, EncodeMessage<proto::Fault>([](auto m) {
                         m.setGeneration(2);
                         m.setReason("Connection reset by peer");
                       })));
  seeds.push_back(Seed(12, EncodeMessage<proto::Draining>([](auto m) { m.setMemberId(2); })));
  seeds.push_back(Seed(13, EncodeMessage<proto::Done>([](auto m) { m.setEpochs(3); })));
  seeds.push_back(Seed(14, EncodeMessage<proto::WorkerStats>([](auto m) {
                         m.setMemberId(2);
                         auto buckets = m.initAllreduceBuckets(4);
                         for (unsigned i = 0; i < 4; ++i) buckets.set(i, i);
                       })));
  return seeds;
}

TEST(ControlFuzzTest, SeedsAreValidMessagesOfEveryKind) {
  const std::vector<FuzzBytes> seeds = Seeds();
  ASSERT_EQ(seeds.size(), static_cast<size_t>(kControlFuzzKinds));
  for (const FuzzBytes& seed : seeds)
    EXPECT_EQ(LLVMFuzzerTestOneInput(seed.data(), seed.size()), 0);
  // The generation seed is an order the trainer actor takes.
  TrainerInbox inbox([](uint64_t) {});
  inbox.Receive(kMethodGeneration, GenerationMessage());
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
