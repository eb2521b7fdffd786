// A control message that comes off the network malformed (truncated, bytes
// flipped, not a message at all) is refused with std::invalid_argument naming
// the message, or with another std::exception on reading a field: the actor
// system answers either as an error to the sender, and the driver goes on. No
// field read may end the process.
#include "trainer/elastic/control_messages.h"

#include <gtest/gtest.h>

#include <string>

namespace elastic::trainer {
namespace {

std::string ValidFault() {
  return EncodeMessage<proto::Fault>([](proto::Fault::Builder fault) {
    fault.setGeneration(7);
    fault.setMemberId(3);
    fault.setReason("collective timed out waiting for rank 2");
  });
}

std::string ValidCommit() {
  return EncodeMessage<proto::CommitReport>([](proto::CommitReport::Builder commit) {
    commit.setGeneration(7);
    commit.initPoint().setStep(42);
    commit.setState(capnp::Data::Reader(reinterpret_cast<const kj::byte*>("state bytes"), 11));
  });
}

// Reads every field the driver reads; returns the error, "" when it read fine.
std::string ReadFault(const std::string& bytes) {
  try {
    MessageBytes message(bytes, "fault");
    const proto::Fault::Reader fault = message.Get<proto::Fault>();
    const std::string reason = fault.getReason().cStr();
    (void)fault.getGeneration();
    (void)fault.getMemberId();
    (void)fault.getStateUnavailable();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string ReadCommit(const std::string& bytes) {
  try {
    MessageBytes message(bytes, "commit report");
    const proto::CommitReport::Reader commit = message.Get<proto::CommitReport>();
    const std::string state(reinterpret_cast<const char*>(commit.getState().begin()),
                            commit.getState().size());
    (void)FromProto(commit.getPoint());
    (void)commit.getGeneration();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ControlMessagesTest, BytesThatAreNoMessageAreRefusedNamingTheMessage) {
  for (const std::string& bytes :
       {std::string(), std::string("garbage"), std::string(8, '\xff'), std::string(16, '\xff')}) {
    const std::string error = ReadFault(bytes);
    EXPECT_NE(error.find("malformed fault message"), std::string::npos)
        << "bytes of size " << bytes.size() << ": '" << error << "'";
  }
  EXPECT_EQ(ReadFault(ValidFault()), "");
  EXPECT_EQ(ReadCommit(ValidCommit()), "");
}

// Every single-byte corruption and every truncation of valid messages: each
// is read or refused with a std::exception, never anything that ends the
// process (a crash or an exception of another type fails this test).
TEST(ControlMessagesTest, CorruptedAndTruncatedMessagesNeverEndTheReader) {
  int refused = 0;
  for (const std::string& valid : {ValidFault(), ValidCommit()}) {
    const bool fault = valid == ValidFault();
    for (size_t at = 0; at < valid.size(); ++at) {
      for (const char flip : {'\xff', '\x80', '\x01'}) {
        std::string bytes = valid;
        bytes[at] ^= flip;
        refused += !(fault ? ReadFault(bytes) : ReadCommit(bytes)).empty();
      }
    }
    for (size_t size = 0; size < valid.size(); size += 8) {
      refused +=
          !(fault ? ReadFault(valid.substr(0, size)) : ReadCommit(valid.substr(0, size))).empty();
    }
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace elastic::trainer
