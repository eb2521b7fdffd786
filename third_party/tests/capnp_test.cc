// Cap'n Proto is wired in: a message survives a round trip through a byte buffer
// using the standard segment framing, and the code generator rule works.
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include "third_party/tests/smoke.capnp.h"

TEST(CapnpTest, MessageRoundTripsThroughFlatArray) {
  capnp::MallocMessageBuilder builder;
  Point::Builder point = builder.initRoot<Point>();
  point.setX(-7);
  point.setY(42);
  point.setLabel("corner");
  auto tags = point.initTags(2);
  tags.set(0, "a");
  tags.set(1, "bc");

  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  ASSERT_EQ(bytes.size() % sizeof(capnp::word), 0u);

  capnp::FlatArrayMessageReader reader(words);
  Point::Reader read = reader.getRoot<Point>();
  EXPECT_EQ(read.getX(), -7);
  EXPECT_EQ(read.getY(), 42);
  EXPECT_EQ(std::string(read.getLabel().cStr()), "corner");
  ASSERT_EQ(read.getTags().size(), 2u);
  EXPECT_EQ(std::string(read.getTags()[1].cStr()), "bc");
}
