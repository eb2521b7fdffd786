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

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
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
    // After its proof the head seals every frame: skip the MACs.
    if (answer->Envelope().which() == proto::Envelope::WELCOME)
      decoder_.set_trailer_bytes(kFrameMacBytes);
    return answer->Envelope().which();
  }

  std::shared_ptr<IncomingFrame> last_;

 private:
  int fd_;
  FrameDecoder decoder_;
};

// A man in the middle: forwards both directions between a client and the
// head, frame by frame from the client (so that it can insert a frame of its
// own between two of the client's), and on Inject() puts a frame the client
// never sent into the client's stream. It knows no token.
class RelayingProxy {
 public:
  explicit RelayingProxy(uint16_t head_port) : head_port_(head_port), from_client_(1 << 30) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener_, 1), 0);
    socklen_t size = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Relay(); });
  }
  ~RelayingProxy() {
    stop_ = true;
    thread_.join();
    for (int fd : {listener_, client_, head_})
      if (fd >= 0) close(fd);
  }
  uint16_t port() const { return port_; }
  void Inject(std::vector<uint8_t> bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    injected_ = std::move(bytes);
  }
  // Whether the head closed its side (EOF from the head).
  bool head_closed() const { return head_closed_; }

 private:
  static void SendAll(int fd, const uint8_t* data, size_t size) {
    while (size > 0) {
      const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return;
      data += n;
      size -= static_cast<size_t>(n);
    }
  }
  void Relay() {
    pollfd accept_fd{listener_, POLLIN, 0};
    while (!stop_ && poll(&accept_fd, 1, 50) <= 0) {
    }
    if (stop_) return;
    client_ = accept(listener_, nullptr, nullptr);
    head_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(head_port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(head_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) return;
    bool client_authenticated = false;
    uint8_t buffer[65536];
    while (!stop_) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!injected_.empty()) {  // between two of the client's frames
          SendAll(head_, injected_.data(), injected_.size());
          injected_.clear();
        }
      }
      pollfd fds[2] = {{client_, POLLIN, 0}, {head_, POLLIN, 0}};
      if (poll(fds, 2, 20) <= 0) continue;
      if (fds[1].revents != 0) {
        const ssize_t n = recv(head_, buffer, sizeof(buffer), 0);
        if (n <= 0) {
          head_closed_ = true;
          shutdown(client_, SHUT_WR);
          return;
        }
        SendAll(client_, buffer, static_cast<size_t>(n));
      }
      if (fds[0].revents != 0) {
        const ssize_t n = recv(client_, buffer, sizeof(buffer), 0);
        if (n <= 0) return;
        from_client_.Append(buffer, static_cast<size_t>(n));
        while (auto frame = from_client_.Next()) {
          const auto bytes = frame->bytes();
          SendAll(head_, bytes.begin(), bytes.size());
          SendAll(head_, reinterpret_cast<const uint8_t*>(frame->trailer().data()),
                  frame->trailer().size());
          // The client's first frame is its proof; every later one has a MAC.
          if (!client_authenticated) from_client_.set_trailer_bytes(kFrameMacBytes);
          client_authenticated = true;
        }
      }
    }
  }

  uint16_t head_port_;
  uint16_t port_ = 0;
  int listener_ = -1, client_ = -1, head_ = -1;
  FrameDecoder from_client_;
  std::mutex mutex_;
  std::vector<uint8_t> injected_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> head_closed_{false};
  std::thread thread_;
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
  // A header that claims a sane size, then a body of random bytes, then as
  // many as a frame's MAC.
  std::vector<uint8_t> bytes = {0, 0, 0, 0, 4, 0, 0, 0};
  for (size_t i = 0; i < 32 + kFrameMacBytes; ++i)
    bytes.push_back(static_cast<uint8_t>(i * 37 + 11));
  raw.Write(bytes);
  EXPECT_TRUE(raw.ClosedByHead());
  ExpectHeadStillServes();
}

// A relay that passed an honest client's handshake through, then injects a
// KvPut of its own: its frame has no valid MAC (the relay knows no token), so
// the head refuses it and closes that connection; the key is never stored.
TEST_F(TransportSecurityTest, AFrameInjectedByARelayAfterTheHandshakeIsRefused) {
  StartHead();
  RelayingProxy relay(head_->port());
  HeadClientOptions options = Options();
  options.port = relay.port();
  options.name = "relayed";
  HeadClient relayed(options);
  relayed.Put("through-the-relay", "1");  // sealed frames pass a relay unchanged
  EXPECT_EQ(good_->Get("through-the-relay").value(), "1");

  capnp::MallocMessageBuilder message;
  auto envelope = message.initRoot<proto::Envelope>();
  envelope.setRequestId(4242);
  auto put = envelope.initKvPut();
  put.setKey("injected");
  put.setValue(AsData(std::string("by the relay")));
  std::vector<uint8_t> frame = Encode(message);
  frame.resize(frame.size() + kFrameMacBytes, 0);  // a MAC it cannot compute
  relay.Inject(frame);

  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!relay.head_closed() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(relay.head_closed()) << "the head kept the connection with the injected frame";
  EXPECT_FALSE(good_->Get("injected").has_value()) << "the injected KvPut was applied";
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
