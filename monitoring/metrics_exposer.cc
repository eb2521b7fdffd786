#include "monitoring/metrics_exposer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/collectable.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <utility>

namespace elastic::monitoring {

// Why not prometheus::Exposer: it serves through civetweb, and Debian's
// libcivetweb is built with a fixed 100 KiB stack for its threads
// (USE_STACK_SIZE=102400). glibc carves every thread's static TLS out of its
// stack, and a process that links LibTorch carries more than that (OpenBLAS
// 60 KiB, glog 30 KiB, libtorch_cpu 10 KiB, ...), so pthread_create returns
// EINVAL and mg_start reports a bogus "problem binding to port". The endpoint
// only ever answers GET /metrics, so it is served here on a thread with the
// default stack.

namespace {

constexpr char kMetricsPath[] = "/metrics";
constexpr std::size_t kMaxRequestBytes = 16 * 1024;
// A client that stalls mid-request holds the single serving thread at most
// this long; Prometheus scrapes every few seconds and sends its request at once.
constexpr int kClientTimeoutSeconds = 5;

std::string Describe(const std::string& what) { return what + ": " + std::strerror(errno); }

void SendAll(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away; nothing to tell it
    sent += static_cast<std::size_t>(n);
  }
}

std::string Response(const std::string& status, const std::string& content_type,
                     const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

MetricsExposer::MetricsExposer(const MetricsOptions& options) : address_(options.address) {
  ValidateMetricsOptions(options);
  const std::string endpoint = options.address + ":" + std::to_string(options.port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  ::inet_pton(AF_INET, options.address.c_str(), &addr.sin_addr);  // validated above

  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw MetricsError(Describe("metrics endpoint " + endpoint + ": socket"));
  const int on = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
    const std::string error =
        Describe("cannot serve metrics on " + endpoint + " (--metrics-address/--metrics-port)");
    ::close(listen_fd_);
    throw MetricsError(error);
  }
  socklen_t length = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length);
  port_ = ntohs(addr.sin_port);

  if (::pipe2(wake_fds_, O_CLOEXEC) != 0) {
    const std::string error = Describe("metrics endpoint " + endpoint + ": pipe");
    ::close(listen_fd_);
    throw MetricsError(error);
  }
  server_ = std::thread([this] { ServeLoop(); });
}

MetricsExposer::~MetricsExposer() {
  const char stop = 1;
  while (::write(wake_fds_[1], &stop, 1) < 0 && errno == EINTR) {
  }
  server_.join();
  ::close(listen_fd_);
  ::close(wake_fds_[0]);
  ::close(wake_fds_[1]);
}

void MetricsExposer::Serve(const std::shared_ptr<prometheus::Registry>& registry) {
  std::lock_guard<std::mutex> lock(mutex_);
  collectables_.push_back(registry);
}

std::string MetricsExposer::url() const {
  return "http://" + address_ + ":" + std::to_string(port_) + kMetricsPath;
}

void MetricsExposer::ServeLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int connection = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;  // e.g. the client reset before accept
    const bool scraped = Answer(connection);
    ::close(connection);
    if (scraped) {
      std::lock_guard<std::mutex> lock(scrape_mutex_);
      ++scrapes_answered_;
      previous_answer_ = last_answer_;
      last_answer_ = std::chrono::steady_clock::now();
      scrape_answered_.notify_all();
    }
  }
}

bool MetricsExposer::AwaitNextScrape(std::chrono::seconds max_wait) {
  std::unique_lock<std::mutex> lock(scrape_mutex_);
  if (scrapes_answered_ < 2) return false;
  // Twice the scraper's interval and a second cover its jitter (a loaded
  // machine delays it).
  const auto interval = last_answer_ - previous_answer_;
  const auto wait = std::min<std::chrono::steady_clock::duration>(
      2 * interval + std::chrono::seconds(1), max_wait);
  // The serving thread is the only one that collects, so the first scrape
  // begun after this point is number `begun + 1`; one already begun may have
  // collected before the caller's last values were set.
  const uint64_t begun = scrapes_begun_;
  return scrape_answered_.wait_for(lock, wait, [&] { return scrapes_answered_ > begun; });
}

bool MetricsExposer::Answer(int connection) {
  const timeval timeout{kClientTimeoutSeconds, 0};
  ::setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));

  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const ssize_t n = ::recv(connection, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buffer, static_cast<std::size_t>(n));
  }
  // Request line: METHOD SP TARGET SP VERSION.
  const std::size_t method_end = request.find(' ');
  const std::size_t target_end =
      method_end == std::string::npos ? std::string::npos : request.find(' ', method_end + 1);
  if (target_end == std::string::npos) {
    SendAll(connection, Response("400 Bad Request", "text/plain", "malformed HTTP request\n"));
    return false;
  }
  const std::string method = request.substr(0, method_end);
  std::string target = request.substr(method_end + 1, target_end - method_end - 1);
  target = target.substr(0, target.find('?'));
  if (target != kMetricsPath) {
    SendAll(connection, Response("404 Not Found", "text/plain", "only /metrics is served\n"));
    return false;
  }
  if (method != "GET") {
    SendAll(connection, Response("405 Method Not Allowed", "text/plain", "use GET\n"));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    ++scrapes_begun_;
  }
  SendAll(connection, Response("200 OK", "text/plain; version=0.0.4", Exposition()));
  return true;
}

std::string MetricsExposer::Exposition() {
  std::vector<std::shared_ptr<prometheus::Collectable>> live;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::weak_ptr<prometheus::Collectable>> kept;
    for (const auto& weak : collectables_) {
      if (auto collectable = weak.lock()) {
        live.push_back(std::move(collectable));
        kept.push_back(weak);
      }
    }
    collectables_ = std::move(kept);
  }
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collectable : live) {
    auto collected = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(collected.begin()),
                    std::make_move_iterator(collected.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace elastic::monitoring
