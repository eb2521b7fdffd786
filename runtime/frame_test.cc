// The frame codec: round trips, streams split anywhere, and rejection of
// oversized, truncated and garbage frames with a reason that names them.
#include "runtime/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace elastic::runtime {
namespace {

std::vector<uint8_t> EncodeKvPut(const std::string& key, const std::string& value) {
  capnp::MallocMessageBuilder message;
  auto envelope = message.initRoot<proto::Envelope>();
  envelope.setRequestId(42);
  auto put = envelope.initKvPut();
  put.setKey(key);
  put.setValue(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(value.data()), value.size()));
  auto words = EncodeFrame(message);
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

TEST(FrameDecoderTest, RoundTripsOneFrame) {
  const auto bytes = EncodeKvPut("g3/rank0", "payload");
  auto frame = DecodeSingleFrame(bytes.data(), bytes.size(), 1 << 20);
  auto envelope = frame->Envelope();
  EXPECT_EQ(envelope.getRequestId(), 42u);
  ASSERT_EQ(envelope.which(), proto::Envelope::KV_PUT);
  EXPECT_EQ(std::string(envelope.getKvPut().getKey().cStr()), "g3/rank0");
}

TEST(FrameDecoderTest, ReassemblesFramesSplitAtEveryByte) {
  std::vector<uint8_t> stream;
  for (int i = 0; i < 3; ++i) {
    const auto bytes = EncodeKvPut("key" + std::to_string(i), std::string(100 * i, 'x'));
    stream.insert(stream.end(), bytes.begin(), bytes.end());
  }
  FrameDecoder decoder(1 << 20);
  std::vector<std::string> keys;
  for (uint8_t byte : stream) {
    decoder.Append(&byte, 1);
    while (auto frame = decoder.Next())
      keys.push_back(frame->Envelope().getKvPut().getKey().cStr());
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"key0", "key1", "key2"}));
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
}

TEST(FrameDecoderTest, RejectsFrameOverTheLimitBeforeReadingIt) {
  const auto bytes = EncodeKvPut("k", std::string(8192, 'v'));
  FrameDecoder decoder(4096);
  // Only the header is given (two segments: 16 bytes): the size is known and
  // refused before the body arrives.
  ASSERT_EQ(bytes[0], 1) << "expected a two-segment message";
  decoder.Append(bytes.data(), 16);
  try {
    decoder.Next();
    FAIL() << "oversized frame accepted";
  } catch (const FrameError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
  }
}

TEST(FrameDecoderTest, DeclaredHugeFrameIsRefusedWithoutAllocating) {
  // One segment of 2^32-1 words: 32 GiB declared in 8 bytes.
  const uint8_t header[8] = {0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  FrameDecoder decoder(size_t{256} << 20);
  decoder.Append(header, sizeof(header));
  EXPECT_THROW(decoder.Next(), FrameError);
}

TEST(FrameDecoderTest, RejectsTooManySegments) {
  const uint8_t header[4] = {0x00, 0x10, 0x00, 0x00};  // 4097 segments
  FrameDecoder decoder(1 << 20);
  decoder.Append(header, sizeof(header));
  EXPECT_THROW(decoder.Next(), FrameError);
}

TEST(FrameDecoderTest, TruncatedFrameIsNotAFrame) {
  const auto bytes = EncodeKvPut("key", "value");
  try {
    DecodeSingleFrame(bytes.data(), bytes.size() - 3, 1 << 20);
    FAIL() << "truncated frame accepted";
  } catch (const FrameError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST(FrameDecoderTest, GarbageBodyFailsWhenRead) {
  // A valid header announcing one 2-word segment, then a root pointer that
  // points far outside the segment.
  uint8_t bytes[24] = {0, 0, 0, 0, 2, 0, 0, 0};
  const uint8_t bad_pointer[8] = {0xfc, 0xff, 0xff, 0x7f, 0x01, 0x00, 0x01, 0x00};
  std::memcpy(bytes + 8, bad_pointer, 8);
  auto frame = DecodeSingleFrame(bytes, sizeof(bytes), 1 << 20);
  EXPECT_THROW(frame->Envelope(), FrameError);
}

TEST(FrameDecoderTest, EmptyFrameIsRejected) {
  const uint8_t bytes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_THROW(DecodeSingleFrame(bytes, sizeof(bytes), 1 << 20), FrameError);
}

}  // namespace
}  // namespace elastic::runtime
