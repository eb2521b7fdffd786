// Runs the frame decoder's fuzz target (frame_fuzz.cc) over a bounded number
// of deterministic mutations of valid frames, so CI fuzzes every run without
// clang. FUZZ_ITERATIONS overrides the count.
#include "runtime/frame_fuzz.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "runtime/frame.h"
#include "runtime/membership.h"

namespace elastic::runtime {
namespace {

using Bytes = std::vector<uint8_t>;

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

void Mutate(Bytes& bytes, std::mt19937& random) {
  static const uint32_t kInteresting[] = {
      0, 1, 2, 511, 512, 513, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff, 0x1fffffff, 1 << 17};
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(random); };
  switch (pick(6)) {
    case 0:  // flip a bit
      if (!bytes.empty()) bytes[pick(bytes.size())] ^= static_cast<uint8_t>(1u << pick(8));
      break;
    case 1:  // an interesting 32-bit value at a word boundary (sizes, counts, pointers)
      if (bytes.size() >= 4) {
        const size_t at = pick(bytes.size() / 4) * 4;
        const uint32_t value = kInteresting[pick(std::size(kInteresting))];
        for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
      }
      break;
    case 2:  // truncate
      if (!bytes.empty()) bytes.resize(pick(bytes.size()));
      break;
    case 3:  // insert random bytes
      for (size_t i = 0, n = 1 + pick(16); i < n; ++i) {
        bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(pick(bytes.size() + 1)),
                     static_cast<uint8_t>(pick(256)));
      }
      break;
    case 4:  // random byte
      if (!bytes.empty()) bytes[pick(bytes.size())] = static_cast<uint8_t>(pick(256));
      break;
    case 5:  // duplicate a tail (two frames back to back, or a partial second one)
      if (!bytes.empty()) {
        const size_t from = pick(bytes.size());
        Bytes tail(bytes.begin() + static_cast<ptrdiff_t>(from), bytes.end());
        bytes.insert(bytes.end(), tail.begin(), tail.end());
      }
      break;
  }
}

TEST(FrameFuzzTest, SeedsAreValidFrames) {
  for (const Bytes& seed : Seeds()) {
    auto frame = DecodeSingleFrame(seed.data(), seed.size(), 1 << 20);
    EXPECT_GT(frame->Envelope().totalSize().wordCount, 0u);
    EXPECT_EQ(LLVMFuzzerTestOneInput(seed.data(), seed.size()), 0);
  }
}

TEST(FrameFuzzTest, MutatedFramesNeverCrashTheDecoder) {
  const char* configured = std::getenv("FUZZ_ITERATIONS");
  const long iterations = configured != nullptr ? std::atol(configured) : 200000;
  const std::vector<Bytes> seeds = Seeds();
  std::mt19937 random(20261122);  // deterministic: a failure reproduces
  for (long i = 0; i < iterations; ++i) {
    Bytes input = seeds[static_cast<size_t>(i) % seeds.size()];
    const int mutations = 1 + static_cast<int>(random() % 4);
    for (int m = 0; m < mutations; ++m) Mutate(input, random);
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  SUCCEED() << iterations << " mutated inputs decoded or rejected cleanly";
}

}  // namespace
}  // namespace elastic::runtime
