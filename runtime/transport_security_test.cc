// Hostile peers against a live head over raw sockets: garbage, truncated,
// oversized frames, messages before authentication, a wrong token and a peer
// that never reads. Each closes only the offending connection; the head keeps
// serving a well-behaved client throughout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "runtime/auth.h"
#include "runtime/connection.h"
#include "runtime/head.h"
#include "runtime/head_client.h"

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr seconds kPatience{60};

std::vector<uint8_t> Encode(capnp::MessageBuilder& message) {
  auto words = EncodeFrame(message);
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// A blocking POSIX socket speaking the wire format by hand.
class RawPeer {
 public:
  explicit RawPeer(uint16_t port) : decoder_(size_t{1} << 30) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::runtime_error("connect failed");
    }
  }
  ~RawPeer() { close(fd_); }

  void Write(const std::vector<uint8_t>& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;  // the head closed on us; the caller checks for that
      sent += static_cast<size_t>(n);
    }
  }
  void Write(capnp::MessageBuilder& message) { Write(Encode(message)); }
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }

  // The next frame, or null when the head closed the connection (EOF or reset).
  std::shared_ptr<IncomingFrame> Read() {
    for (;;) {
      if (auto frame = decoder_.Next()) return frame;
      pollfd poll_fd{fd_, POLLIN, 0};
      if (poll(&poll_fd, 1, static_cast<int>(milliseconds(kPatience).count())) <= 0) {
        throw std::runtime_error("no data and no close from the head");
      }
      uint8_t buffer[65536];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return nullptr;
      decoder_.Append(buffer, static_cast<size_t>(n));
    }
  }

  // True when the head closes the connection (anything it sends first is skipped).
  bool ClosedByHead() {
    while (Read() != nullptr) {
    }
    return true;
  }

  // Does the client side of the handshake with token.
  proto::Envelope::Which Authenticate(const std::string& token) {
    auto hello = Read();
    if (hello == nullptr || hello->Envelope().which() != proto::Envelope::HELLO) {
      throw std::runtime_error("no hello from the head");
    }
    const auto nonce = hello->Envelope().getHello().getNonce();
    const std::string server_nonce(reinterpret_cast<const char*>(nonce.begin()), nonce.size());
    capnp::MallocMessageBuilder message;
    auto auth = message.initRoot<proto::Envelope>().initAuthenticate();
    auth.setProtocolVersion(kProtocolVersion);
    auth.setMac(AsData(ClientProof(token, server_nonce)));
    auth.setNonce(AsData(RandomNonce()));
    auth.setPeerName("raw");
    Write(message);
    auto answer = Read();
    if (answer == nullptr) throw std::runtime_error("closed during the handshake");
    last_ = answer;
    return answer->Envelope().which();
  }

  std::shared_ptr<IncomingFrame> last_;

 private:
  int fd_;
  FrameDecoder decoder_;
};

class TransportSecurityTest : public ::testing::Test {
 protected:
  // Heartbeat timing is not what these tests are about: a slow machine or a
  // sanitizer build must not fail the well-behaved client by heartbeat timeout.
  void StartHead(HeadOptions options = HeadOptions{}) {
    options.transport.heartbeat_timeout = heartbeat_timeout_;
    head_ = std::make_unique<Head>(options);
    good_ = std::make_unique<HeadClient>(Options());
    good_->Put("before", "1");
  }

  HeadClientOptions Options() {
    HeadClientOptions options;
    options.port = head_->port();
    options.token = head_->token();
    options.name = "good";
    options.transport.heartbeat_timeout = heartbeat_timeout_;
    return options;
  }

  // The well-behaved client, and a new one, are still served.
  void ExpectHeadStillServes() {
    good_->Put("after", "2");
    EXPECT_EQ(good_->Get("before").value(), "1");
    EXPECT_EQ(good_->Get("after").value(), "2");
    HeadClient fresh(Options());
    EXPECT_EQ(fresh.Get("after").value(), "2");
  }

  std::unique_ptr<Head> head_;
  std::unique_ptr<HeadClient> good_;
  std::chrono::milliseconds heartbeat_timeout_ = std::chrono::seconds(30);
};

TEST_F(TransportSecurityTest, GarbageBeforeAuthenticationClosesThatConnection) {
  StartHead();
  RawPeer raw(head_->port());
  raw.Write(std::vector<uint8_t>(64, 0xff));
  EXPECT_TRUE(raw.ClosedByHead());
  ExpectHeadStillServes();
}

TEST_F(TransportSecurityTest, GarbageAfterAuthenticationClosesThatConnection) {
  StartHead();
  RawPeer raw(head_->port());
  ASSERT_EQ(raw.Authenticate(head_->token()), proto::Envelope::WELCOME);
  // A header that claims a sane size, then a body of random bytes.
  std::vector<uint8_t> bytes = {0, 0, 0, 0, 4, 0, 0, 0};
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(i * 37 + 11));
  raw.Write(bytes);
  EXPECT_TRUE(raw.ClosedByHead());
  ExpectHeadStillServes();
}

TEST_F(TransportSecurityTest, OversizedFrameIsRefusedFromItsHeader) {
  StartHead();
  RawPeer raw(head_->port());
  // One segment of 1 Mi words (8 MiB), far over the pre-authentication limit;
  // only the header is sent.
  raw.Write(std::vector<uint8_t>{0, 0, 0, 0, 0x00, 0x00, 0x10, 0x00});
  EXPECT_TRUE(raw.ClosedByHead());
  ExpectHeadStillServes();
}

TEST_F(TransportSecurityTest, OversizedFrameAfterAuthenticationClosesOnlyThatClient) {
  HeadOptions options;
  options.transport.max_frame_bytes = 64 * 1024;
  StartHead(options);
  HeadClient greedy(Options());
  EXPECT_THROW(greedy.Put("huge", std::string(1 << 20, 'x')), std::runtime_error);
  EXPECT_FALSE(greedy.connected());
  ExpectHeadStillServes();
  EXPECT_FALSE(good_->Get("huge").has_value());
}

TEST_F(TransportSecurityTest, FrameLargerThanTheSendQueueStillGoesThrough) {
  StartHead();
  HeadClientOptions options = Options();
  options.transport.max_send_queue_bytes = 16 * 1024;
  HeadClient small_queue(options);
  // 4 MiB, 256 times the queue bound: sent alone, with heartbeats behind it.
  const std::string big(4 << 20, 'q');
  for (int i = 0; i < 3; ++i) small_queue.Put("big" + std::to_string(i), big);
  EXPECT_EQ(good_->Get("big2").value(), big);
  EXPECT_TRUE(small_queue.connected());
}

TEST_F(TransportSecurityTest, TruncatedFrameIsClosedByTheHandshakeTimeout) {
  HeadOptions options;
  options.transport.connect_timeout = milliseconds(1000);
  StartHead(options);
  RawPeer raw(head_->port());
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Envelope>().initAuthenticate().setPeerName("truncated");
  std::vector<uint8_t> bytes = Encode(message);
  bytes.resize(bytes.size() / 2);
  raw.Write(bytes);  // and then silence
  EXPECT_TRUE(raw.ClosedByHead());
  ExpectHeadStillServes();
}

TEST_F(TransportSecurityTest, TruncatedFrameAtEndOfStreamClosesThatConnection) {
  StartHead();
  RawPeer raw(head_->port());
  ASSERT_EQ(raw.Authenticate(head_->token()), proto::Envelope::WELCOME);
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Envelope>().initKvPut().setKey("half");
  std::vector<uint8_t> bytes = Encode(message);
  bytes.resize(bytes.size() - 5);
  raw.Write(bytes);
  raw.ShutdownWrite();
  EXPECT_TRUE(raw.ClosedByHead());
  ExpectHeadStillServes();
  EXPECT_FALSE(good_->Get("half").has_value());
}

TEST_F(TransportSecurityTest, MessageBeforeAuthenticationIsRefused) {
  StartHead();
  RawPeer raw(head_->port());
  auto hello = raw.Read();
  ASSERT_NE(hello, nullptr);
  capnp::MallocMessageBuilder message;
  auto put = message.initRoot<proto::Envelope>().initKvPut();
  put.setKey("sneaky");
  put.setValue(AsData("value"));
  raw.Write(message);
  auto answer = raw.Read();
  ASSERT_NE(answer, nullptr);
  ASSERT_EQ(answer->Envelope().which(), proto::Envelope::REFUSED);
  EXPECT_NE(std::string(answer->Envelope().getRefused().getMessage().cStr()).find("authentication"),
            std::string::npos);
  EXPECT_TRUE(raw.ClosedByHead());
  ExpectHeadStillServes();
  EXPECT_FALSE(good_->Get("sneaky").has_value());
}

TEST_F(TransportSecurityTest, WrongTokenGetsOnlyARefusal) {
  StartHead();
  RawPeer raw(head_->port());
  ASSERT_EQ(raw.Authenticate("guessed-token"), proto::Envelope::REFUSED);
  EXPECT_EQ(std::string(raw.last_->Envelope().getRefused().getMessage().cStr()),
            "wrong or missing cluster token");
  EXPECT_TRUE(raw.ClosedByHead());
  RawPeer empty(head_->port());
  ASSERT_EQ(empty.Authenticate(""), proto::Envelope::REFUSED);
  ExpectHeadStillServes();
}

TEST_F(TransportSecurityTest, PeerThatNeverReadsIsCutOffAtTheSendQueueBound) {
  HeadOptions options;
  options.transport.max_send_queue_bytes = 1 << 20;
  StartHead(options);
  good_->Put("big", std::string(256 * 1024, 'b'));
  RawPeer raw(head_->port());
  ASSERT_EQ(raw.Authenticate(head_->token()), proto::Envelope::WELCOME);
  // 400 x 256 KiB of answers is 100 MiB: far more than socket buffers plus
  // the 1 MiB queue. The head must drop this peer rather than buffer it all.
  constexpr int kRequests = 400;
  for (int i = 0; i < kRequests; ++i) {
    capnp::MallocMessageBuilder message;
    auto envelope = message.initRoot<proto::Envelope>();
    envelope.setRequestId(static_cast<uint64_t>(i + 1));
    envelope.initKvGet().setKey("big");
    raw.Write(message);
  }
  ExpectHeadStillServes();  // while the slow peer is stuck
  int answers = 0;
  while (auto frame = raw.Read()) {
    if (frame->Envelope().which() == proto::Envelope::KV_VALUE) ++answers;
  }
  EXPECT_LT(answers, kRequests);
  ExpectHeadStillServes();
}

}  // namespace
}  // namespace elastic::runtime
