#include "trainer/elastic/testing/fake_metadata_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace elastic::trainer::testing {
namespace {

constexpr char kAwsToken[] = "AQAEAFAKE-session-token==";

std::string Response(int status, const std::string& body) {
  const char* reason = status == 200   ? "OK"
                       : status == 401 ? "Unauthorized"
                       : status == 403 ? "Forbidden"
                       : status == 400 ? "Bad Request"
                                       : "Not Found";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

bool HasHeader(const std::string& request, const std::string& header) {
  return request.find("\r\n" + header + "\r\n") != std::string::npos;
}

}  // namespace

FakeMetadataServer::FakeMetadataServer(Cloud cloud) : cloud_(cloud) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(listener_, 64) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error("fake metadata server: cannot listen on loopback");
  port_ = ntohs(address.sin_port);
  thread_ = std::thread([this] { Serve(); });
}

FakeMetadataServer::~FakeMetadataServer() {
  stopping_ = true;
  thread_.join();
  ::close(listener_);
}

std::string FakeMetadataServer::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

void FakeMetadataServer::Serve() {
  while (!stopping_) {
    pollfd ready{listener_, POLLIN, 0};
    if (::poll(&ready, 1, 100) <= 0) continue;
    const int connection = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    std::string request;
    char buffer[4096];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
      pollfd readable{connection, POLLIN, 0};
      if (::poll(&readable, 1, 2000) <= 0) break;
      const ssize_t n = ::recv(connection, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      request.append(buffer, static_cast<size_t>(n));
    }
    const std::string response = Answer(request);
    ::send(connection, response.data(), response.size(), MSG_NOSIGNAL);
    ::close(connection);
  }
}

std::string FakeMetadataServer::Answer(const std::string& request) {
  const bool get = request.rfind("GET ", 0) == 0;
  const bool put = request.rfind("PUT ", 0) == 0;
  const auto path_is = [&](const std::string& path) {
    return request.find(" " + path + " HTTP/1.1\r\n") != std::string::npos;
  };
  if (cloud_ == Cloud::kGce) {
    if (!get || !path_is("/computeMetadata/v1/instance/preempted")) return Response(404, "");
    if (!HasHeader(request, "Metadata-Flavor: Google")) return Response(403, "");
    ++queries_;
    return Response(200, noticed_ ? "TRUE" : "FALSE");
  }
  if (put && path_is("/latest/api/token")) {
    if (request.find("\r\nX-aws-ec2-metadata-token-ttl-seconds: ") == std::string::npos)
      return Response(400, "");
    return Response(200, kAwsToken);
  }
  if (!get || !path_is("/latest/meta-data/spot/instance-action")) return Response(404, "");
  // IMDSv2 only, as AWS recommends configuring it.
  if (!HasHeader(request, std::string("X-aws-ec2-metadata-token: ") + kAwsToken))
    return Response(401, "");
  ++queries_;
  if (!noticed_) return Response(404, "");
  return Response(200, R"({"action": "terminate", "time": "2026-11-24T01:02:03Z"})");
}

}  // namespace elastic::trainer::testing
