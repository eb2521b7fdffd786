#include "collectives/socket_tripwire.h"

#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace elastic::collectives {
namespace {

std::string LinkOf(int fd) {
  char target[128];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return "";
  return std::string(target, static_cast<size_t>(n));
}

bool IsConnectedTcp(int fd) {
  int value = 0;
  socklen_t length = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &value, &length) != 0 || value != SOCK_STREAM) {
    return false;
  }
  length = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &value, &length) != 0 ||
      (value != AF_INET && value != AF_INET6)) {
    return false;
  }
  length = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &length) != 0 || value != 0) {
    return false;  // a listener: shutting it down would break Gloo's accept loop
  }
  sockaddr_storage peer;
  socklen_t peer_length = sizeof(peer);
  return getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0;
}

}  // namespace

std::vector<SocketTripwire::SocketId> SocketTripwire::ListSockets() {
  std::vector<SocketId> sockets;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return sockets;
  const int own = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == own) continue;
    std::string link = LinkOf(fd);
    if (link.rfind("socket:", 0) == 0) sockets.emplace_back(fd, std::move(link));
  }
  closedir(dir);
  return sockets;
}

void SocketTripwire::Arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  before_.clear();
  sockets_.clear();
  for (const auto& [fd, link] : ListSockets()) before_.insert(link);
}

void SocketTripwire::Capture() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [fd, link] : ListSockets()) {
    if (before_.count(link) == 0 && IsConnectedTcp(fd)) sockets_.emplace_back(fd, link);
  }
  before_.clear();
}

void SocketTripwire::Trip() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [fd, link] : sockets_) {
    // The descriptor may have been closed and reused since Capture; only touch
    // it if it still names the same socket.
    if (LinkOf(fd) == link) shutdown(fd, SHUT_RDWR);
  }
}

size_t SocketTripwire::socket_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sockets_.size();
}

}  // namespace elastic::collectives
