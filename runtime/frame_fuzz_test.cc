// Runs the frame decoder's fuzz target (frame_fuzz.cc) over a bounded number
// of deterministic mutations of valid frames, so CI fuzzes every run without
// clang. FUZZ_ITERATIONS overrides the count.
#include "runtime/frame_fuzz.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/frame.h"
#include "runtime/fuzz_mutator.h"
#include "runtime/membership.h"

namespace elastic::runtime {
namespace {

using Bytes = FuzzBytes;

Bytes Encode(capnp::MessageBuilder& message) {
  auto words = EncodeFrame(message);
  auto bytes = words.asBytes();
  return Bytes(bytes.begin(), bytes.end());
}

// Valid frames of the message kinds with the most structure.
std::vector<Bytes> Seeds() {
  std::vector<Bytes> seeds;
  {
    capnp::MallocMessageBuilder message;
    auto hello = message.initRoot<proto::Envelope>().initHello();
    hello.setProtocolVersion(1);
    hello.setNonce(AsData(std::string(32, 'n')));
    seeds.push_back(Encode(message));
  }
  {
    capnp::MallocMessageBuilder message;
    auto envelope = message.initRoot<proto::Envelope>();
    envelope.setRequestId(7);
    auto put = envelope.initKvPut();
    put.setKey("g1/rank0");
    put.setValue(AsData("127.0.0.1:4242"));
    seeds.push_back(Encode(message));
  }
  {
    MembershipUpdate update;
    update.kind = MembershipEventKind::kFailed;
    update.member_id = 3;
    update.detail = "connection lost";
    update.view.generation = 9;
    update.view.members.push_back(MemberInfo{1, "a", 1, Endpoint{"127.0.0.1", 1}, 10, false});
    update.view.members.push_back(MemberInfo{2, "b", 1, Endpoint{"127.0.0.1", 2}, 11, true});
    capnp::MallocMessageBuilder message;
    ToProto(update, message.initRoot<proto::Envelope>().initMembershipUpdate());
    seeds.push_back(Encode(message));
  }
  {
    // Multi-segment: the first segment is small, the payload spills over.
    capnp::MallocMessageBuilder message(16, capnp::AllocationStrategy::FIXED_SIZE);
    auto call = message.initRoot<proto::Envelope>().initActorCall();
    call.setActor("echo");
    call.setMethod("m");
    call.setPayload(AsData(std::string(300, 'p')));
    seeds.push_back(Encode(message));
  }
  return seeds;
}

TEST(FrameFuzzTest, SeedsAreValidFrames) {
  for (const Bytes& seed : Seeds()) {
    auto frame = DecodeSingleFrame(seed.data(), seed.size(), 1 << 20);
    EXPECT_GT(frame->Envelope().totalSize().wordCount, 0u);
    EXPECT_EQ(LLVMFuzzerTestOneInput(seed.data(), seed.size()), 0);
  }
}

TEST(FrameFuzzTest, MutatedFramesNeverCrashTheDecoder) {
  const long iterations = FuzzIterations(200000);
  FuzzSeeds(Seeds(), iterations, LLVMFuzzerTestOneInput);
  SUCCEED() << iterations << " mutated inputs decoded or rejected cleanly";
}

}  // namespace
}  // namespace elastic::runtime
