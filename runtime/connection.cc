#include "runtime/connection.h"

#include <kj/exception.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "runtime/auth.h"
#include "runtime/heartbeat_check.h"
#include "runtime/log.h"
#include "runtime/sockets.h"

namespace elastic::runtime {
namespace {

// Reads of an open connection. Before authentication only handshake frames
// (TransportOptions::max_handshake_frame_bytes) may come, so a connection that
// has proven nothing gets a small buffer, allocated at its first read: an idle
// flood of them costs little memory.
constexpr size_t kReadChunkBytes = 256 * 1024;
constexpr size_t kHandshakeReadChunkBytes = 4 * 1024;

// Handshakes that fail on the accepting side (wrong token, idle past the
// timeout, garbage) come in floods when someone probes or floods the port: a
// bounded number of lines, the count in them.
RateLimitedLog& FailedHandshakeLog() {
  static RateLimitedLog log(LogLevel::kWarning, "transport", std::chrono::seconds(10));
  return log;
}
constexpr size_t kMaxFramesPerWrite = 64;

// A stalled process finds the stall on every one of its connections at once
// (a head with hundreds of sessions): one warning per interval, with the count.
RateLimitedLog& StallLog() {
  static RateLimitedLog log(LogLevel::kWarning, "transport", std::chrono::seconds(10));
  return log;
}

std::string DescribeEndpoint(const asio::ip::tcp::socket& socket) {
  asio::error_code ec;
  const auto endpoint = socket.remote_endpoint(ec);
  if (ec) return "<unconnected>";
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

const char* WhichName(proto::Envelope::Which which) {
  switch (which) {
    case proto::Envelope::HELLO:
      return "hello";
    case proto::Envelope::AUTHENTICATE:
      return "authenticate";
    case proto::Envelope::WELCOME:
      return "welcome";
    case proto::Envelope::REFUSED:
      return "refused";
    default:
      return "a non-handshake message";
  }
}

}  // namespace

void SetError(proto::Envelope::Builder envelope, proto::ErrorCode code,
              const std::string& message) {
  auto error = envelope.initError();
  error.setCode(code);
  error.setMessage(message);
}

Connection::Connection(EventLoop& loop, asio::ip::tcp::socket socket, Role role,
                       const TransportOptions& options, std::string token,
                       ConnectionCallbacks callbacks)
    : loop_(loop),
      socket_(std::move(socket)),
      role_(role),
      options_(options),
      token_(std::move(token)),
      callbacks_(std::move(callbacks)),
      decoder_(options.max_handshake_frame_bytes),
      handshake_timer_(loop.context()),
      tick_timer_(loop.context()) {}

Connection::~Connection() = default;

ConnectionPtr Connection::Accept(EventLoop& loop, asio::ip::tcp::socket socket,
                                 const TransportOptions& options, const std::string& token,
                                 ConnectionCallbacks callbacks) {
  ConnectionPtr connection(new Connection(loop, std::move(socket), Role::kAcceptor, options, token,
                                          std::move(callbacks)));
  connection->peer_ = DescribeEndpoint(connection->socket_);
  asio::error_code ec;
  connection->socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  loop.Post([connection] { connection->Start(); });
  return connection;
}

std::future<ConnectionPtr> Connection::Dial(EventLoop& loop, const std::string& host, uint16_t port,
                                            const TransportOptions& options,
                                            const std::string& token, const std::string& name,
                                            ConnectionCallbacks callbacks) {
  ConnectionPtr connection(new Connection(loop, asio::ip::tcp::socket(loop.context()),
                                          Role::kConnector, options, token, std::move(callbacks)));
  connection->peer_ = host + ":" + std::to_string(port);
  connection->name_ = name;
  auto future = connection->dial_promise_.get_future();
  loop.Post([connection, host, port] {
    auto self = connection;
    self->handshake_timer_.expires_after(self->options_.connect_timeout);
    self->handshake_timer_.async_wait([self](const asio::error_code& ec) {
      if (ec) return;
      self->CloseOnLoop("timed out after " +
                        std::to_string(self->options_.connect_timeout.count()) +
                        " ms connecting to and authenticating with " + self->peer_);
    });
    auto resolver = std::make_shared<asio::ip::tcp::resolver>(self->loop_.context());
    resolver->async_resolve(
        host, std::to_string(port),
        [self, resolver](const asio::error_code& ec,
                         asio::ip::tcp::resolver::results_type results) {
          if (self->state_.load() == State::kClosed) return;
          if (ec) {
            self->CloseOnLoop("cannot resolve " + self->peer_ + ": " + ec.message());
            return;
          }
          auto addresses = std::make_shared<std::vector<asio::ip::tcp::endpoint>>();
          for (const auto& entry : results) addresses->push_back(entry.endpoint());
          self->ConnectNext(addresses, 0, "no address");
        });
  });
  return future;
}

void Connection::ConnectNext(
    const std::shared_ptr<const std::vector<asio::ip::tcp::endpoint>>& addresses, size_t index,
    const std::string& last_error) {
  if (state_.load() == State::kClosed) return;
  if (index >= addresses->size()) {
    CloseOnLoop("cannot connect to " + peer_ + ": " + last_error);
    return;
  }
  const asio::ip::tcp::endpoint& address = (*addresses)[index];
  // Opened here rather than by async_connect, so that it is close-on-exec.
  const asio::error_code open_ec = OpenCloseOnExec(socket_, address.protocol());
  if (open_ec) {
    ConnectNext(addresses, index + 1, open_ec.message());
    return;
  }
  auto self = shared_from_this();
  socket_.async_connect(address, [self, addresses, index](const asio::error_code& ec) {
    if (self->state_.load() == State::kClosed) return;
    if (ec) {
      self->ConnectNext(addresses, index + 1, ec.message());
      return;
    }
    asio::error_code ignored;
    self->socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    self->Start();
  });
}

void Connection::Start() {
  if (state_.load() == State::kClosed) return;
  my_nonce_ = RandomNonce();
  if (role_ == Role::kAcceptor) {
    auto self = shared_from_this();
    handshake_timer_.expires_after(options_.connect_timeout);
    handshake_timer_.async_wait([self](const asio::error_code& ec) {
      if (ec) return;
      self->CloseOnLoop("peer did not authenticate within " +
                        std::to_string(self->options_.connect_timeout.count()) + " ms");
    });
    capnp::MallocMessageBuilder message;
    auto hello = message.initRoot<proto::Envelope>().initHello();
    hello.setProtocolVersion(kProtocolVersion);
    hello.setNonce(AsData(my_nonce_));
    Send(message);
  }
  ReadMore();
}

void Connection::ReadMore() {
  // The previous read's bytes are in the decoder already; the buffer is free.
  const size_t chunk = state_.load() == State::kOpen ? kReadChunkBytes : kHandshakeReadChunkBytes;
  if (read_buffer_.size() != chunk) read_buffer_.resize(chunk);
  auto self = shared_from_this();
  socket_.async_read_some(
      asio::buffer(read_buffer_), [self](const asio::error_code& ec, size_t bytes) {
        if (self->state_.load() == State::kClosed) return;
        if (ec) {
          if (ec == asio::error::eof) {
            const size_t partial = self->decoder_.buffered_bytes();
            self->CloseOnLoop(partial == 0
                                  ? "peer closed the connection"
                                  : "peer closed the connection inside a frame (" +
                                        std::to_string(partial) + " bytes of a truncated frame)");
          } else {
            self->CloseOnLoop("read failed: " + ec.message());
          }
          return;
        }
        self->last_received_ = std::chrono::steady_clock::now();
        self->missed_reported_ = 0;  // the silence is over
        try {
          self->decoder_.Append(self->read_buffer_.data(), bytes);
          while (self->state_.load() != State::kClosed) {
            auto frame = self->decoder_.Next();
            if (frame == nullptr) break;
            self->OnFrame(frame);
          }
        } catch (const FrameError& e) {
          self->CloseOnLoop(std::string("bad frame: ") + e.what());
          return;
        }
        if (self->state_.load() != State::kClosed) self->ReadMore();
      });
}

void Connection::OnFrame(const std::shared_ptr<IncomingFrame>& frame) {
  if (receive_sealer_ != nullptr) CheckSeal(*frame);     // before anything reads it
  proto::Envelope::Reader envelope = frame->Envelope();  // throws FrameError
  try {
    if (state_.load() == State::kHandshake) {
      OnHandshakeFrame(envelope);
      return;
    }
    const auto which = envelope.which();
    if (which == proto::Envelope::HEARTBEAT) return;
    if (which == proto::Envelope::HELLO || which == proto::Envelope::AUTHENTICATE ||
        which == proto::Envelope::WELCOME) {
      throw FrameError("handshake message after authentication");
    }
    if (callbacks_.on_message) callbacks_.on_message(shared_from_this(), envelope, frame);
  } catch (const kj::Exception& e) {
    // Cap'n Proto validates pointers lazily, so a bad field throws here.
    throw FrameError("malformed message: " + std::string(e.getDescription().cStr()));
  } catch (const FrameError&) {
    throw;
  } catch (const std::exception& e) {
    throw FrameError(std::string("message could not be handled: ") + e.what());
  }
}

void Connection::ExpectSealedFrames(const std::string& key) {
  receive_sealer_ = std::make_unique<FrameSealer>(key);
  decoder_.set_trailer_bytes(kFrameMacBytes);
}

void Connection::CheckSeal(const IncomingFrame& frame) {
  const uint64_t number = receive_sealer_->frames();
  const kj::ArrayPtr<const kj::byte> bytes = frame.bytes();
  if (!ConstantTimeEquals(frame.trailer(), receive_sealer_->Next(bytes.begin(), bytes.size()))) {
    throw FrameError("frame " + std::to_string(number) +
                     " after the handshake has a wrong MAC (injected or altered on the way)");
  }
}

void Connection::OnHandshakeFrame(proto::Envelope::Reader envelope) {
  const auto which = envelope.which();
  auto refuse = [this](const std::string& why) {
    // The close that follows is logged (rate-limited, with this reason).
    ELASTIC_LOG(kDebug, "transport", "refusing " << peer_ << ": " << why);
    capnp::MallocMessageBuilder message;
    auto error = message.initRoot<proto::Envelope>().initRefused();
    error.setCode(proto::ErrorCode::UNAUTHENTICATED);
    error.setMessage(why);
    Send(message);
    refused_ = true;
    CloseAfterFlush("refused: " + why);
  };
  if (refused_) return;  // already refused; ignore whatever else it sent

  if (role_ == Role::kAcceptor) {
    if (which != proto::Envelope::AUTHENTICATE) {
      refuse(std::string("expected authentication, got ") + WhichName(which));
      return;
    }
    auto auth = envelope.getAuthenticate();
    if (auth.getProtocolVersion() != kProtocolVersion) {
      refuse("protocol version " + std::to_string(auth.getProtocolVersion()) + " (want " +
             std::to_string(kProtocolVersion) + ")");
      return;
    }
    if (!ConstantTimeEquals(ToBytes(auth.getMac()), ClientProof(token_, my_nonce_))) {
      refuse("wrong or missing cluster token");
      return;
    }
    if (auth.getNonce().size() != kNonceBytes) {
      refuse("authentication nonce must be " + std::to_string(kNonceBytes) + " bytes");
      return;
    }
    peer_ += " (" + std::string(auth.getPeerName().cStr()) + ")";
    peer_nonce_ = ToBytes(auth.getNonce());
    // Whatever the connector sends after its proof is sealed.
    ExpectSealedFrames(SessionKey(token_, my_nonce_, peer_nonce_, /*sent_by_connector=*/true));
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Envelope>().initWelcome().setMac(
        AsData(ServerProof(token_, peer_nonce_)));
    Send(message);
    BecomeOpen();
    return;
  }

  // Connector.
  if (which == proto::Envelope::REFUSED) {
    CloseOnLoop("refused by " + peer_ + ": " +
                std::string(envelope.getRefused().getMessage().cStr()));
    return;
  }
  if (which == proto::Envelope::HELLO) {
    auto hello = envelope.getHello();
    if (hello.getProtocolVersion() != kProtocolVersion) {
      CloseOnLoop("peer speaks protocol version " + std::to_string(hello.getProtocolVersion()));
      return;
    }
    if (hello.getNonce().size() != kNonceBytes) {
      CloseOnLoop("peer sent a malformed hello (nonce size)");
      return;
    }
    peer_nonce_ = ToBytes(hello.getNonce());
    capnp::MallocMessageBuilder message;
    auto auth = message.initRoot<proto::Envelope>().initAuthenticate();
    auth.setProtocolVersion(kProtocolVersion);
    auth.setMac(AsData(ClientProof(token_, peer_nonce_)));
    auth.setNonce(AsData(my_nonce_));
    auth.setPeerName(name_);
    Send(message);
    return;
  }
  if (which == proto::Envelope::WELCOME) {
    if (!ConstantTimeEquals(ToBytes(envelope.getWelcome().getMac()),
                            ServerProof(token_, my_nonce_))) {
      CloseOnLoop("peer " + peer_ + " could not prove it knows the cluster token");
      return;
    }
    // Whatever the acceptor sends after its proof is sealed.
    ExpectSealedFrames(SessionKey(token_, peer_nonce_, my_nonce_, /*sent_by_connector=*/false));
    BecomeOpen();
    return;
  }
  CloseOnLoop(std::string("expected hello or welcome, got ") + WhichName(which));
}

void Connection::BecomeOpen() {
  {
    // Every frame queued from now on is sealed (the handshake's were queued before).
    std::lock_guard<std::mutex> lock(send_mutex_);
    send_sealer_ = std::make_unique<FrameSealer>(
        role_ == Role::kConnector
            ? SessionKey(token_, peer_nonce_, my_nonce_, /*sent_by_connector=*/true)
            : SessionKey(token_, my_nonce_, peer_nonce_, /*sent_by_connector=*/false));
  }
  state_.store(State::kOpen);
  handshake_timer_.cancel();
  decoder_.set_max_frame_bytes(options_.max_frame_bytes);  // and ReadMore reads more at once
  last_received_ = std::chrono::steady_clock::now();
  ScheduleTick();
  auto self = shared_from_this();
  if (callbacks_.on_open) callbacks_.on_open(self);
  if (role_ == Role::kConnector && !dial_settled_) {
    dial_settled_ = true;
    dial_promise_.set_value(self);
    // The shared state now holds a pointer to us; only the future may keep it.
    dial_promise_ = std::promise<ConnectionPtr>();
  }
}

void Connection::Tick() {
  if (state_.load() != State::kOpen) return;
  const auto now = std::chrono::steady_clock::now();
  asio::error_code ec;
  // Bytes waiting in the socket mean the peer is alive and only this loop was
  // slow (a loaded machine); do not declare it failed for our own lateness.
  const bool data_waiting = socket_.available(ec) > 0;
  switch (
      JudgeHeartbeat({tick_due_, now, last_received_, data_waiting}, options_.heartbeat_timeout)) {
    case HeartbeatVerdict::kOwnStall:
      ForgiveOwnStall(now);
      break;
    case HeartbeatVerdict::kPeerSilent: {
      const auto silent = now - last_received_;
      ReportMissedHeartbeats(silent, 1);
      CloseOnLoop(
          "no heartbeat for " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()) +
          " ms (heartbeat timeout " + std::to_string(options_.heartbeat_timeout.count()) + " ms)");
      return;
    }
    case HeartbeatVerdict::kAlive:
      if (!data_waiting) ReportMissedHeartbeats(now - last_received_, 0);
      break;
  }
  if (HeartbeatDue(LastQueued(), now, options_.heartbeat_interval)) {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Envelope>().initHeartbeat().setSentAtMicros(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now().time_since_epoch())
                                  .count()));
    Enqueue(message, false);
  }
  ScheduleTick();
}

void Connection::ScheduleTick() {
  auto self = shared_from_this();
  tick_due_ = std::chrono::steady_clock::now() + options_.heartbeat_interval;
  tick_timer_.expires_at(tick_due_);
  tick_timer_.async_wait([self](const asio::error_code& ec) {
    if (!ec) self->Tick();
  });
}

std::chrono::steady_clock::time_point Connection::LastQueued() const {
  std::lock_guard<std::mutex> lock(send_mutex_);
  return last_queued_;
}

void Connection::ForgiveOwnStall(std::chrono::steady_clock::time_point now) {
  const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(now - tick_due_);
  // The peer's silence so far is this process's doing; it is not counted as
  // missed heartbeats either (HeadStats::heartbeats_missed counts members' own).
  last_received_ = now;
  missed_reported_ = 0;
  // Every connection of a stalled process finds it at once: one line for all.
  uint64_t suppressed = 0;
  if (StallLog().Admit(&suppressed)) {
    ELASTIC_LOG(kWarning, "transport",
                "this process stalled: the heartbeat check of "
                    << peer_ << " ran " << late.count() << " ms late (more than half the "
                    << options_.heartbeat_timeout.count()
                    << " ms heartbeat timeout); its peers get a fresh timeout from now instead of "
                       "being declared failed for this process's own silence"
                    << SuppressedNote(suppressed, "connections forgiven"));
  } else {
    ELASTIC_LOG(kDebug, "transport",
                "stalled " << late.count() << " ms: fresh heartbeat timeout for " << peer_);
  }
}

void Connection::ReportMissedHeartbeats(std::chrono::steady_clock::duration silent,
                                        uint64_t floor) {
  const auto intervals = static_cast<uint64_t>(silent / options_.heartbeat_interval);
  const uint64_t missed = std::max<uint64_t>(intervals > 0 ? intervals - 1 : 0, floor);
  if (missed <= missed_reported_) return;
  const uint64_t more = missed - missed_reported_;
  missed_reported_ = missed;
  if (callbacks_.on_heartbeats_missed) callbacks_.on_heartbeats_missed(shared_from_this(), more);
}

bool Connection::Send(capnp::MessageBuilder& message) { return Enqueue(message, true); }

bool Connection::Enqueue(capnp::MessageBuilder& message, bool bounded) {
  kj::Array<capnp::word> frame = EncodeFrame(message);
  const size_t bytes = frame.size() * sizeof(capnp::word);
  std::unique_lock<std::mutex> lock(send_mutex_);
  if (closed_) return false;
  if (!bounded) {
    // Heartbeats: a few bytes each, and they must not fail a connection
    // whose queue is momentarily full of a large frame.
    PushLocked(std::move(frame));
    return true;
  }
  last_queued_ = std::chrono::steady_clock::now();
  // Only bytes still waiting count: a large frame being written does not
  // stop small ones (heartbeats, replies) from queuing behind it.
  auto has_room = [&] {
    return closed_ || waiting_bytes_ == 0 ||
           waiting_bytes_ + bytes <= options_.max_send_queue_bytes;
  };
  if (!has_room()) {
    if (loop_.InLoopThread()) {
      // The loop must never block: a peer this far behind is stuck.
      lock.unlock();
      Close("send queue full (" + std::to_string(waiting_bytes_) +
            " bytes waiting): peer is not reading");
      return false;
    }
    if (!send_space_.wait_for(lock, options_.send_timeout, has_room)) {
      lock.unlock();
      Close("send blocked on a full queue for " + std::to_string(options_.send_timeout.count()) +
            " ms: peer is not reading");
      return false;
    }
    if (closed_) return false;
  }
  PushLocked(std::move(frame));
  return true;
}

static_assert(kFrameMacBytes % sizeof(capnp::word) == 0, "a MAC is whole words");

void Connection::PushLocked(kj::Array<capnp::word> frame) {
  waiting_bytes_ += frame.size() * sizeof(capnp::word);
  if (send_sealer_ != nullptr) {
    // The MAC follows its frame on the stream: kFrameMacBytes, a whole
    // number of words, queued right behind it under the same lock.
    const kj::ArrayPtr<const kj::byte> bytes = frame.asBytes();
    const std::string mac = send_sealer_->Next(bytes.begin(), bytes.size());
    auto trailer = kj::heapArray<capnp::word>(kFrameMacBytes / sizeof(capnp::word));
    std::memcpy(trailer.begin(), mac.data(), kFrameMacBytes);
    queue_.push_back(std::move(frame));
    waiting_bytes_ += kFrameMacBytes;
    queue_.push_back(std::move(trailer));
  } else {
    queue_.push_back(std::move(frame));
  }
  ScheduleWriteLocked();
}

void Connection::ScheduleWriteLocked() {
  if (write_scheduled_) return;
  write_scheduled_ = true;
  auto self = shared_from_this();
  loop_.Post([self] { self->WriteQueued(); });
}

void Connection::WriteQueued() {
  if (state_.load() == State::kClosed) return;
  // Before the TCP connect completes there is nothing to write to.
  if (!socket_.is_open()) return;
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    if (queue_.empty()) {
      write_scheduled_ = false;
      if (!close_after_flush_) return;
    } else {
      while (!queue_.empty() && in_flight_.size() < kMaxFramesPerWrite) {
        waiting_bytes_ -= queue_.front().size() * sizeof(capnp::word);
        in_flight_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
  }
  send_space_.notify_all();
  if (in_flight_.empty()) {  // flushed everything before a CloseAfterFlush
    CloseOnLoop(flush_reason_);
    return;
  }
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(in_flight_.size());
  for (const auto& frame : in_flight_) {
    buffers.emplace_back(frame.begin(), frame.size() * sizeof(capnp::word));
  }
  auto self = shared_from_this();
  asio::async_write(socket_, buffers, [self](const asio::error_code& ec, size_t) {
    if (self->state_.load() == State::kClosed) return;
    if (ec) {
      self->CloseOnLoop("write failed: " + ec.message());
      return;
    }
    self->in_flight_.clear();  // loop thread only
    self->WriteQueued();
  });
}

void Connection::Close(const std::string& reason) {
  auto self = shared_from_this();
  loop_.Post([self, reason] { self->CloseOnLoop(reason); });
}

void Connection::CloseAfterFlush(const std::string& reason) {
  auto self = shared_from_this();
  loop_.Post([self, reason] {
    {
      std::lock_guard<std::mutex> lock(self->send_mutex_);
      self->close_after_flush_ = true;
      self->flush_reason_ = reason;
      if (self->write_scheduled_) return;  // the writer closes when the queue drains
      self->write_scheduled_ = true;
    }
    self->WriteQueued();
  });
}

std::string Connection::close_reason() const {
  std::lock_guard<std::mutex> lock(send_mutex_);
  return close_reason_;
}

void Connection::CloseOnLoop(const std::string& reason) {
  const State was = state_.exchange(State::kClosed);
  if (was == State::kClosed) return;
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    closed_ = true;
    close_reason_ = reason;
    queue_.clear();
    waiting_bytes_ = 0;
  }
  send_space_.notify_all();
  handshake_timer_.cancel();
  tick_timer_.cancel();
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  // An orderly close is routine (the head logs what it means for membership);
  // a protocol violation or a dead peer is a warning.
  const bool orderly = reason == "peer closed the connection" || reason == "client closed" ||
                       reason == "head shutting down" || reason == "actor system stopping";
  // A dial that fails hands its reason to the dialer (the future throws it),
  // which decides what it means: one that retries (a node agent waiting for
  // its head to come back) must not log a warning per attempt.
  const bool dial_failed = role_ == Role::kConnector && !dial_settled_;
  // A peer that never authenticated may be one of thousands (a flood, a port
  // scan): one warning per interval, with the count; every one at debug level.
  const bool failed_handshake = role_ == Role::kAcceptor && was == State::kHandshake;
  uint64_t suppressed = 0;
  if (orderly || dial_failed) {
    ELASTIC_LOG(kDebug, "transport", "connection " << peer_ << " closed: " << reason);
  } else if (failed_handshake) {
    if (FailedHandshakeLog().Admit(&suppressed)) {
      ELASTIC_LOG(kWarning, "transport",
                  "connection " << peer_ << " closed before it authenticated: " << reason
                                << SuppressedNote(suppressed, "closed before authenticating"));
    } else {
      ELASTIC_LOG(kDebug, "transport",
                  "connection " << peer_ << " closed before it authenticated: " << reason);
    }
  } else {
    ELASTIC_LOG(kWarning, "transport", "connection " << peer_ << " closed: " << reason);
  }
  auto self = shared_from_this();
  if (role_ == Role::kConnector && !dial_settled_) {
    dial_settled_ = true;
    dial_promise_.set_exception(std::make_exception_ptr(std::runtime_error(reason)));
    dial_promise_ = std::promise<ConnectionPtr>();
  }
  auto on_closed = callbacks_.on_closed;
  if (on_closed) on_closed(self, reason);
  // Drop the callbacks later (one may be running now) to break reference cycles.
  loop_.Post([self] { self->callbacks_ = ConnectionCallbacks{}; });
}

}  // namespace elastic::runtime
