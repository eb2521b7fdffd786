// Asio is wired in: a TCP echo over loopback returns what was sent.
#include <gtest/gtest.h>

#include <asio.hpp>
#include <string>
#include <thread>

TEST(AsioTest, LoopbackEchoReturnsPayload) {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::address_v4::loopback(), 0});
  const unsigned short port = acceptor.local_endpoint().port();

  std::thread server([&] {
    asio::ip::tcp::socket socket = acceptor.accept();
    char buffer[64];
    asio::error_code ec;
    size_t n = socket.read_some(asio::buffer(buffer), ec);
    asio::write(socket, asio::buffer(buffer, n));
  });

  asio::io_context client_io;
  asio::ip::tcp::socket client(client_io);
  client.connect({asio::ip::address_v4::loopback(), port});
  const std::string payload = "hello over loopback";
  asio::write(client, asio::buffer(payload));
  std::string reply(payload.size(), '\0');
  asio::read(client, asio::buffer(reply.data(), reply.size()));
  server.join();
  EXPECT_EQ(reply, payload);
}
