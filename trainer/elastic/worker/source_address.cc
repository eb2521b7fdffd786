#include "trainer/elastic/worker/source_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace elastic::trainer {

std::string SourceAddressToward(const std::string& host, uint16_t port) {
  const std::string target = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int resolved = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (resolved != 0) {
    throw std::runtime_error("cannot resolve " + target + ": " + ::gai_strerror(resolved));
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  }
  // connect() on a UDP socket only picks the route and the source address.
  const int connected = ::connect(fd, found->ai_addr, found->ai_addrlen);
  const int connect_errno = errno;
  ::freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  if (connected != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    const std::string error = std::strerror(connected != 0 ? connect_errno : errno);
    ::close(fd);
    throw std::runtime_error("no route to " + target + ": " + error);
  }
  ::close(fd);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return text;
}

}  // namespace elastic::trainer
