// One authenticated, framed, heartbeated TCP connection.
//
// Life of a connection: TCP connect/accept -> handshake (the acceptor sends a
// nonce, the connector proves the token and sends its own nonce, the acceptor
// proves back) -> open: Envelopes flow both ways, heartbeats keep it alive,
// and every frame is followed by its MAC under a key of this session and
// direction, numbered, so a relay that passed the handshake through can
// neither inject, alter, replay nor drop a frame unnoticed -> closed,
// exactly once, with a reason. Every protocol violation (bad frame,
// oversized frame, wrong token, message before authentication, silence beyond
// the heartbeat timeout) closes this connection only. Silence during a stall of
// this process is not the peer's: it gets a fresh timeout (heartbeat_check.h).
//
// Threading: all socket work happens on the EventLoop thread; callbacks run
// there. Send and Close may be called from any thread.
#pragma once

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/auth.h"
#include "runtime/event_loop.h"
#include "runtime/frame.h"
#include "runtime/options.h"
#include "runtime/protocol.capnp.h"

namespace elastic::runtime {

// 2: every frame after the handshake carries a MAC (auth.h, FrameSealer).
constexpr uint32_t kProtocolVersion = 2;

class Connection;
using ConnectionPtr = std::shared_ptr<Connection>;

struct ConnectionCallbacks {
  // Authentication succeeded; Envelopes may be sent now.
  std::function<void(const ConnectionPtr&)> on_open;
  // One Envelope (never a heartbeat). The reader is valid while frame lives.
  std::function<void(const ConnectionPtr&, proto::Envelope::Reader,
                     const std::shared_ptr<IncomingFrame>&)>
      on_message;
  // Called once, whether or not the connection ever opened.
  std::function<void(const ConnectionPtr&, const std::string& reason)> on_closed;
  // Heartbeats the peer failed to send in time, reported as they fall due:
  // `missed` more since the last call. A heartbeat is missed once nothing at
  // all arrived for one full interval after it was due (so silence of s counts
  // floor(s / interval) - 1); a close by heartbeat timeout counts at least one.
  // Not called for our own lateness (bytes waiting unread in the socket) nor
  // for a stall of this process (heartbeat_check.h).
  std::function<void(const ConnectionPtr&, uint64_t missed)> on_heartbeats_missed;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Starts the acceptor side of the handshake on an accepted socket.
  static ConnectionPtr Accept(EventLoop& loop, asio::ip::tcp::socket socket,
                              const TransportOptions& options, const std::string& token,
                              ConnectionCallbacks callbacks);

  // Connects and authenticates. The future holds the open connection, or a
  // std::runtime_error naming why it could not be opened (refused, wrong
  // token, timeout). callbacks.on_open runs before the future is ready.
  static std::future<ConnectionPtr> Dial(EventLoop& loop, const std::string& host, uint16_t port,
                                         const TransportOptions& options, const std::string& token,
                                         const std::string& name, ConnectionCallbacks callbacks);

  ~Connection();

  // Queues one message. Blocks while the send queue is full (backpressure),
  // except on the loop thread, where a full queue closes the connection
  // instead. Returns false when the connection is (or becomes) closed.
  bool Send(capnp::MessageBuilder& message);

  // Closes the connection (idempotent; any thread). Queued frames are dropped.
  void Close(const std::string& reason);

  // Sends what is queued, then closes (used to deliver a refusal).
  void CloseAfterFlush(const std::string& reason);

  bool is_open() const { return state_.load() == State::kOpen; }
  // "host:port (name)" of the peer, for logs and errors.
  const std::string& peer() const { return peer_; }
  // Why it closed ("" while not closed).
  std::string close_reason() const;

 private:
  enum class State { kHandshake, kOpen, kClosed };
  enum class Role { kAcceptor, kConnector };

  Connection(EventLoop& loop, asio::ip::tcp::socket socket, Role role,
             const TransportOptions& options, std::string token, ConnectionCallbacks callbacks);

  // Connector: tries addresses[index...] in turn, each on a new close-on-exec
  // socket; closes with the last error when none accepts.
  void ConnectNext(const std::shared_ptr<const std::vector<asio::ip::tcp::endpoint>>& addresses,
                   size_t index, const std::string& last_error);
  void Start();
  void ReadMore();
  void OnFrame(const std::shared_ptr<IncomingFrame>& frame);
  void OnHandshakeFrame(proto::Envelope::Reader envelope);
  void BecomeOpen();
  // From now on, frames from the peer must carry MACs under this key.
  void ExpectSealedFrames(const std::string& key);
  void CheckSeal(const IncomingFrame& frame);
  // Judges the peer's silence (heartbeat_check.h) and sends a heartbeat.
  void Tick();
  // Arms the timer of the next Tick, due one heartbeat interval from now.
  void ScheduleTick();
  // The Tick due at tick_due_ ran at `now`, so late that this process must
  // have stalled: the peer's silence starts afresh.
  void ForgiveOwnStall(std::chrono::steady_clock::time_point now);
  // Reports the heartbeats missed in the current silence (at least `floor` of them).
  void ReportMissedHeartbeats(std::chrono::steady_clock::duration silent, uint64_t floor);
  // When a frame other than a heartbeat was last queued (HeartbeatDue).
  std::chrono::steady_clock::time_point LastQueued() const;
  bool Enqueue(capnp::MessageBuilder& message, bool bounded);
  // Queues a frame (and its MAC once open); with send_mutex_ held.
  void PushLocked(kj::Array<capnp::word> frame);
  void ScheduleWriteLocked();  // with send_mutex_ held
  void WriteQueued();
  void CloseOnLoop(const std::string& reason);

  EventLoop& loop_;
  asio::ip::tcp::socket socket_;
  const Role role_;
  const TransportOptions options_;
  const std::string token_;
  ConnectionCallbacks callbacks_;
  std::string peer_;
  std::string name_;  // our name, sent in Authenticate

  std::atomic<State> state_{State::kHandshake};
  FrameDecoder decoder_;
  std::vector<uint8_t> read_buffer_;
  std::string my_nonce_;
  std::string peer_nonce_;  // loop thread only
  // MACs of received frames: null until the peer has proved the token.
  std::unique_ptr<FrameSealer> receive_sealer_;  // loop thread only
  bool refused_ = false;                         // loop thread only
  asio::steady_timer handshake_timer_;
  asio::steady_timer tick_timer_;
  std::chrono::steady_clock::time_point last_received_;
  std::chrono::steady_clock::time_point tick_due_;  // when the armed Tick should run
  uint64_t missed_reported_ = 0;                    // in the current silence; loop thread only

  // Send queue, shared with sending threads.
  mutable std::mutex send_mutex_;
  std::condition_variable send_space_;
  std::deque<kj::Array<capnp::word>> queue_;
  // MACs of sent frames (with send_mutex_ held): null until open.
  std::unique_ptr<FrameSealer> send_sealer_;
  // Bytes in queue_ (not yet handed to the socket). Bounded by
  // max_send_queue_bytes; what is being written (in_flight_) came from this
  // queue, so memory stays within twice the bound plus one large frame.
  size_t waiting_bytes_ = 0;
  // When a frame other than a heartbeat was last queued (HeartbeatDue).
  std::chrono::steady_clock::time_point last_queued_;
  bool write_scheduled_ = false;
  bool closed_ = false;
  bool close_after_flush_ = false;
  std::string close_reason_;
  std::string flush_reason_;
  std::vector<kj::Array<capnp::word>> in_flight_;  // loop thread only

  std::promise<ConnectionPtr> dial_promise_;  // connector only
  bool dial_settled_ = false;
};

// Builds an Envelope answer to request_id with an error.
void SetError(proto::Envelope::Builder envelope, proto::ErrorCode code, const std::string& message);

}  // namespace elastic::runtime
