// Limits before authentication, against a live head over raw sockets: caps on
// connections in their handshake (total and per source address), slots freed
// by authenticating or leaving, the handshake frame limit; and the pieces
// behind them (accept back-off, rate-limited log lines).
#include "runtime/listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/log.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using testing::ClientOf;

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr seconds kPatience{60};

TEST(AcceptBackoffTest, DoublesUpToTheCapAndStartsOverAfterReset) {
  AcceptBackoff backoff(milliseconds(10), milliseconds(1000));
  std::vector<int64_t> delays;
  for (int i = 0; i < 9; ++i) delays.push_back(backoff.Next().count());
  EXPECT_EQ(delays, (std::vector<int64_t>{10, 20, 40, 80, 160, 320, 640, 1000, 1000}));
  backoff.Reset();
  EXPECT_EQ(backoff.Next().count(), 10);
}

TEST(RateLimitedLogTest, LetsOneLinePerIntervalOutAndCountsTheRest) {
  RateLimitedLog log(LogLevel::kError, "test", milliseconds(200));
  uint64_t suppressed = 99;
  ASSERT_TRUE(log.Admit(&suppressed));
  EXPECT_EQ(suppressed, 0u);
  // Within the interval (it started just now): counted, not logged.
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += log.Admit(&suppressed) ? 1 : 0;
  // A slow machine may cross the interval during the loop, at most a few times.
  EXPECT_LT(admitted, 10);
  std::this_thread::sleep_for(milliseconds(250));
  ASSERT_TRUE(log.Admit(&suppressed));
  EXPECT_GT(suppressed, 0u);
  EXPECT_EQ(log.events(), 1002u);
  EXPECT_EQ(SuppressedNote(0, "x"), "");
  EXPECT_EQ(SuppressedNote(3, "refusals"), "; 3 more refusals since the last such line");
}

// A blocking TCP connection to the head from 127.0.0.SOURCE that sends nothing.
class IdlePeer {
 public:
  IdlePeer(uint16_t port, int source) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(source));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      throw std::runtime_error("cannot bind to 127.0.0." + std::to_string(source));
    }
    sockaddr_in head{};
    head.sin_family = AF_INET;
    head.sin_port = htons(port);
    head.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&head), sizeof(head)) != 0) {
      throw std::runtime_error("connect failed");
    }
  }
  ~IdlePeer() { close(fd_); }
  IdlePeer(const IdlePeer&) = delete;
  IdlePeer& operator=(const IdlePeer&) = delete;

  // True when the head greets this connection with its Hello (it was
  // admitted), false when it refuses it (refusal() says why) or closes it.
  bool Greeted() {
    FrameDecoder decoder(size_t{1} << 20);
    for (;;) {
      if (auto frame = decoder.Next()) {
        auto envelope = frame->Envelope();
        if (envelope.which() == proto::Envelope::REFUSED) {
          refusal_ = envelope.getRefused().getMessage().cStr();
        }
        return envelope.which() == proto::Envelope::HELLO;
      }
      pollfd poll_fd{fd_, POLLIN, 0};
      if (poll(&poll_fd, 1, static_cast<int>(milliseconds(kPatience).count())) <= 0) {
        throw std::runtime_error("neither a hello nor a close from the head");
      }
      uint8_t buffer[4096];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return false;
      decoder.Append(buffer, static_cast<size_t>(n));
    }
  }

  const std::string& refusal() const { return refusal_; }

  // Sends bytes (best effort: the head may have closed already).
  void Write(const std::vector<uint8_t>& bytes) {
    (void)send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  // True once the head closed the connection (what it sent first is skipped).
  bool ClosedByHead() {
    for (;;) {
      pollfd poll_fd{fd_, POLLIN, 0};
      if (poll(&poll_fd, 1, static_cast<int>(milliseconds(kPatience).count())) <= 0) return false;
      uint8_t buffer[4096];
      if (recv(fd_, buffer, sizeof(buffer), 0) <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
  std::string refusal_;
};

TEST(PreAuthLimitsTest, ConnectionBeyondThePerAddressCapIsClosedAtOnce) {
  HeadOptions options;
  options.pre_auth.max_per_address = 2;
  Head head(options);
  IdlePeer first(head.port(), 2);
  IdlePeer second(head.port(), 2);
  ASSERT_TRUE(first.Greeted());
  ASSERT_TRUE(second.Greeted());
  IdlePeer third(head.port(), 2);
  EXPECT_FALSE(third.Greeted());
  EXPECT_NE(third.refusal().find("from your address are authenticating (limit 2)"),
            std::string::npos)
      << third.refusal();
  // Another address has its own allowance.
  IdlePeer elsewhere(head.port(), 3);
  EXPECT_TRUE(elsewhere.Greeted());
}

TEST(PreAuthLimitsTest, ConnectionBeyondTheTotalCapIsClosedAtOnce) {
  HeadOptions options;
  options.pre_auth.max_total = 3;
  Head head(options);
  std::vector<std::unique_ptr<IdlePeer>> admitted;
  for (int source = 2; source < 5; ++source) {
    admitted.push_back(std::make_unique<IdlePeer>(head.port(), source));
    ASSERT_TRUE(admitted.back()->Greeted());
  }
  IdlePeer one_too_many(head.port(), 5);
  EXPECT_FALSE(one_too_many.Greeted());
  EXPECT_NE(one_too_many.refusal().find("too many connections are authenticating (limit 3)"),
            std::string::npos)
      << one_too_many.refusal();
  // A client with the token cannot get in either while the slots are taken,
  // and is told why...
  try {
    HeadClient refused(ClientOf(head));
    ADD_FAILURE() << "a client got in beyond the cap";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("authenticating (limit 3)"), std::string::npos)
        << e.what();
  }
  // ...and can once an idle peer leaves (the head sees it close).
  admitted.pop_back();
  std::unique_ptr<HeadClient> client;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (client == nullptr && std::chrono::steady_clock::now() < deadline) {
    try {
      client = std::make_unique<HeadClient>(ClientOf(head));
    } catch (const std::runtime_error&) {
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  ASSERT_NE(client, nullptr);
  client->Put("in", "1");
  // Authenticated, it holds no handshake slot: a third idle peer fits again.
  IdlePeer fourth(head.port(), 6);
  EXPECT_TRUE(fourth.Greeted());
}

TEST(PreAuthLimitsTest, HandshakeFramesAreLimitedToFourKibibytes) {
  HeadOptions options;
  // Only the frame limit can close the peer within the test's patience.
  options.transport.connect_timeout = 2 * kPatience;
  Head head(options);
  IdlePeer peer(head.port(), 2);
  ASSERT_TRUE(peer.Greeted());
  // An 8-byte header announcing one segment of 513 words (4,104 bytes + header):
  // refused from the header, before any of it is buffered.
  peer.Write({0, 0, 0, 0, 0x01, 0x02, 0, 0});
  EXPECT_TRUE(peer.ClosedByHead());
  // A client with a long (but sane) name still authenticates.
  HeadClient client(ClientOf(head, std::string(1000, 'n')));
  client.Put("key", "value");
}

}  // namespace
}  // namespace elastic::runtime
