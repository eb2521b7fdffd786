// The accepting side of a server (the head, an actor system): accepts
// connections and starts the handshake on each, within limits that hold
// before a peer has proven anything.
//
// A connection that has not authenticated yet costs a descriptor and memory
// and is owed nothing, so an idle flood must not take every descriptor of the
// process (then the accept fails, and retrying it at once spins the loop that
// also serves heartbeats). The listener therefore
//   - admits at most PreAuthLimits::max_total unauthenticated connections at
//     once, and max_per_address from one source address: a connection beyond
//     either gets a Refused frame naming the limit (in place of the Hello;
//     one non-blocking write) and is closed at once, with no log line of its
//     own (a rate-limited line counts them);
//   - after an accept error (EMFILE, ENFILE, ENOBUFS, ENOMEM, ...) waits before
//     accepting again, 10 ms doubling to 1 s, reset by the next success, and
//     logs at most one line per 10 s about it.
// An authenticated connection frees its slot; the handshake timeout
// (TransportOptions::connect_timeout) frees the slots of idle ones.
//
// Loop thread only: construct it, then Start() and Stop() on the loop. It must
// outlive the loop's running (declare it after the EventLoop it uses).
#pragma once

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/connection.h"
#include "runtime/event_loop.h"
#include "runtime/log.h"
#include "runtime/options.h"

namespace elastic::runtime {

// Caps on connections that have not finished the handshake.
struct PreAuthLimits {
  size_t max_total = 256;
  size_t max_per_address = 32;
};

// The delay before the next accept after a run of failures: starts at
// `first`, doubles per failure up to `max`, back to `first` after a success.
class AcceptBackoff {
 public:
  AcceptBackoff(std::chrono::milliseconds first, std::chrono::milliseconds max);
  // The delay to wait after one more failure.
  std::chrono::milliseconds Next();
  void Reset() { next_ = first_; }

 private:
  const std::chrono::milliseconds first_;
  const std::chrono::milliseconds max_;
  std::chrono::milliseconds next_;
};

struct ListenerStats {
  uint64_t accept_errors = 0;
  // Closed at once by PreAuthLimits.
  uint64_t refused_total_limit = 0;
  uint64_t refused_address_limit = 0;
  uint64_t unauthenticated_now = 0;
};

class Listener {
 public:
  // acceptor must be listening (ListenCloseOnExec) and outlive the listener.
  // Every accepted connection gets callbacks; on_open and on_closed are wrapped
  // to account for the connection's slot. component names it in logs.
  Listener(EventLoop& loop, asio::ip::tcp::acceptor& acceptor, std::string component,
           PreAuthLimits limits, TransportOptions transport, std::string token,
           ConnectionCallbacks callbacks);
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Starts accepting. Loop thread.
  void Start();
  // Stops accepting (the owner closes the acceptor) and closes the connections
  // still in their handshake with reason. Loop thread.
  void Stop(const std::string& reason);

  // Any thread.
  ListenerStats stats() const;

 private:
  void AcceptNext();
  void OnAccepted(const asio::error_code& ec, asio::ip::tcp::socket socket);
  void BackOff(const asio::error_code& ec);
  // True when a connection from address fits the limits (then counted).
  bool Admit(const asio::ip::address& address);
  void Release(Connection* connection, const asio::ip::address& address);
  // Tells a connection beyond the limits why (refusal: an encoded Refused
  // frame; empty for none) without waiting for the peer, and closes it.
  static void Drop(asio::ip::tcp::socket& socket, const std::vector<uint8_t>& refusal);

  EventLoop& loop_;
  asio::ip::tcp::acceptor& acceptor_;
  const std::string component_;
  const PreAuthLimits limits_;
  const TransportOptions transport_;
  const std::string token_;
  const ConnectionCallbacks callbacks_;
  // Encoded Refused frames for a connection beyond max_total, max_per_address.
  const std::vector<uint8_t> refused_total_frame_;
  const std::vector<uint8_t> refused_address_frame_;
  bool stopped_ = false;

  AcceptBackoff backoff_;
  asio::steady_timer retry_timer_;
  RateLimitedLog accept_error_log_;
  RateLimitedLog refused_log_;

  // Connections in their handshake, with the address each is counted under.
  std::unordered_map<Connection*, std::weak_ptr<Connection>> pending_;
  std::map<asio::ip::address, size_t> per_address_;

  std::atomic<uint64_t> accept_errors_{0};
  std::atomic<uint64_t> refused_total_limit_{0};
  std::atomic<uint64_t> refused_address_limit_{0};
  std::atomic<uint64_t> unauthenticated_now_{0};
};

}  // namespace elastic::runtime
