#include "runtime/sockets.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace elastic::runtime {
namespace {

asio::error_code LastError() { return asio::error_code(errno, asio::system_category()); }

// A new close-on-exec TCP socket of protocol's family, or -1 (errno set).
int NewSocket(const asio::ip::tcp& protocol) {
  return ::socket(protocol.family(), protocol.type() | SOCK_CLOEXEC, protocol.protocol());
}

// The acceptor became readable (or the wait failed): accepts one connection.
void AcceptReady(asio::ip::tcp::acceptor& acceptor, const asio::error_code& ec,
                 AcceptHandler handler) {
  asio::ip::tcp::socket socket(acceptor.get_executor());
  if (ec || !acceptor.is_open()) {
    handler(ec ? ec : asio::error::operation_aborted, std::move(socket));
    return;
  }
  const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    // Nothing to accept after all (the peer gave up, or a spurious wakeup):
    // wait for the next one.
    if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR || error == ECONNABORTED ||
        error == EPROTO) {
      AsyncAcceptCloseOnExec(acceptor, std::move(handler));
      return;
    }
    handler(asio::error_code(error, asio::system_category()), std::move(socket));
    return;
  }
  asio::error_code assign_ec;
  asio::error_code ignored;
  socket.assign(acceptor.local_endpoint(ignored).protocol(), fd, assign_ec);
  if (assign_ec) ::close(fd);
  handler(assign_ec, std::move(socket));
}

}  // namespace

asio::error_code OpenCloseOnExec(asio::ip::tcp::socket& socket, const asio::ip::tcp& protocol) {
  asio::error_code ec;
  socket.close(ec);
  const int fd = NewSocket(protocol);
  if (fd < 0) return LastError();
  socket.assign(protocol, fd, ec);
  if (ec) ::close(fd);
  return ec;
}

asio::error_code ListenCloseOnExec(asio::ip::tcp::acceptor& acceptor,
                                   const asio::ip::tcp::endpoint& endpoint, bool reuse_address) {
  asio::error_code ec;
  acceptor.close(ec);
  const int fd = NewSocket(endpoint.protocol());
  if (fd < 0) return LastError();
  acceptor.assign(endpoint.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return ec;
  }
  if (reuse_address) acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  // accept4 runs when the acceptor is readable; non-blocking, a connection
  // that went away in between makes it fail with EAGAIN instead of blocking
  // the loop.
  if (!ec) acceptor.non_blocking(true, ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    asio::error_code ignored;
    acceptor.close(ignored);
  }
  return ec;
}

void AsyncAcceptCloseOnExec(asio::ip::tcp::acceptor& acceptor, AcceptHandler handler) {
  acceptor.async_wait(asio::ip::tcp::acceptor::wait_read, [&acceptor, handler = std::move(handler)](
                                                              const asio::error_code& ec) mutable {
    AcceptReady(acceptor, ec, std::move(handler));
  });
}

}  // namespace elastic::runtime
