// Sockets that are close-on-exec from the moment they exist.
//
// Asio creates sockets without SOCK_CLOEXEC, so every process that any thread
// forks and execs would inherit the listening ports and connections of the
// runtime (a worker would keep the head's port open after the head is gone).
// Setting FD_CLOEXEC after the fact leaves a window in which another thread
// may fork; these helpers create the descriptors with the flag atomically
// (socket(SOCK_CLOEXEC), accept4(SOCK_CLOEXEC)) and hand them to Asio.
#pragma once

#include <asio.hpp>
#include <functional>

namespace elastic::runtime {

// Opens socket (closed or not yet opened) for protocol.
asio::error_code OpenCloseOnExec(asio::ip::tcp::socket& socket, const asio::ip::tcp& protocol);

// Opens acceptor, binds it to endpoint and listens. reuse_address sets
// SO_REUSEADDR first (a restarted server can take its port back while
// connections of the old one linger in TIME_WAIT).
asio::error_code ListenCloseOnExec(asio::ip::tcp::acceptor& acceptor,
                                   const asio::ip::tcp::endpoint& endpoint, bool reuse_address);

// Like acceptor.async_accept(handler) for an acceptor opened by
// ListenCloseOnExec: the handler runs on the acceptor's executor with the
// next accepted connection, or with operation_aborted once the acceptor is
// closed.
using AcceptHandler = std::function<void(const asio::error_code&, asio::ip::tcp::socket)>;
void AsyncAcceptCloseOnExec(asio::ip::tcp::acceptor& acceptor, AcceptHandler handler);

}  // namespace elastic::runtime
