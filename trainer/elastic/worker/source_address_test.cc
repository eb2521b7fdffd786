#include "trainer/elastic/worker/source_address.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace elastic::trainer {
namespace {

TEST(SourceAddressTest, LoopbackIsReachedFromLoopback) {
  EXPECT_EQ(SourceAddressToward("127.0.0.1", 6380), "127.0.0.1");
  // Any 127/8 address is on lo, whose primary address the kernel sends from.
  EXPECT_EQ(SourceAddressToward("127.0.0.2", 6380).rfind("127.", 0), 0u);
  EXPECT_EQ(SourceAddressToward("localhost", 6380).rfind("127.", 0), 0u);
}

TEST(SourceAddressTest, AnUnresolvableHostIsAClearError) {
  try {
    SourceAddressToward("no-such-host.invalid", 6380);
    FAIL() << "resolved a .invalid name";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-host.invalid:6380"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace elastic::trainer
