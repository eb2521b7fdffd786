// Knobs of the transport shared by every runtime connection, and the command
// line flags that set them (so any binary hosting the runtime exposes the same
// flags: pass each argument to ParseTransportFlag before handling its own).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace elastic::runtime {

struct TransportOptions {
  // --max-frame-bytes: the largest frame accepted after authentication.
  size_t max_frame_bytes = size_t{256} << 20;
  // Before authentication only small frames are accepted (hello, proofs: a
  // few hundred bytes with the peer's name).
  size_t max_handshake_frame_bytes = size_t{4} << 10;
  // --send-queue-bytes: bytes queued for a peer before Send blocks
  // (backpressure). One frame larger than this is still sent when the queue is
  // empty.
  size_t max_send_queue_bytes = size_t{64} << 20;
  // --connect-timeout-ms: TCP connect plus handshake.
  std::chrono::milliseconds connect_timeout{5000};
  // --heartbeat-ms: how often an open connection sends a heartbeat.
  std::chrono::milliseconds heartbeat_interval{100};
  // --heartbeat-timeout-ms: a connection that receives nothing for this long
  // is closed as failed (the read timeout of an open connection). Time this
  // process itself spent stalled (stopped, starved) is not held against the
  // peer (heartbeat_check.h).
  std::chrono::milliseconds heartbeat_timeout{1000};
  // --send-timeout-ms: how long Send may block on a full queue before the
  // connection is closed as stuck.
  std::chrono::milliseconds send_timeout{30000};
};

// If arg is one of the transport flags above (--name=value), applies it and
// returns true; returns false for any other argument. Throws
// std::invalid_argument naming the flag when the value is not valid.
bool ParseTransportFlag(const std::string& arg, TransportOptions* options);

// "--flag=value  meaning" lines for --help texts.
std::string TransportFlagsHelp();

}  // namespace elastic::runtime
