// Wakes a Gloo communicator's blocked operations from the outside.
//
// Gloo (the Debian 2022 snapshot) has no abort: closing a context's pairs makes
// the *peers* fail, but a local thread blocked in a receive waits for its full
// timeout. A socket that is shut down (shutdown(2)), however, reports EOF to
// Gloo's own event loop, which fails every pending operation on that pair at
// once, and the peer sees the FIN too. Gloo does not expose its descriptors,
// so this class finds them: the TCP sockets that appeared in /proc/self/fd while
// the communicator connected. Abort shuts exactly those down (after checking
// each descriptor still names the same socket inode).
//
// Known limit: a TCP socket that another thread of this process opens during
// the (millisecond) connect window would be counted too; so the key-value store
// a communicator connects through must hold its connection before the window
// opens (HeadClient connects in its constructor).
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace elastic::collectives {

class SocketTripwire {
 public:
  // Call before the transport opens its sockets.
  void Arm();
  // Call after it connected: records the new connected TCP sockets.
  void Capture();
  // Shuts every recorded socket down (both directions). Idempotent, thread-safe.
  void Trip();

  size_t socket_count() const;

 private:
  // (descriptor, "socket:[inode]")
  using SocketId = std::pair<int, std::string>;
  static std::vector<SocketId> ListSockets();

  mutable std::mutex mutex_;
  std::set<std::string> before_;
  std::vector<SocketId> sockets_;
};

}  // namespace elastic::collectives
