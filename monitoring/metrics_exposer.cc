#include "monitoring/metrics_exposer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/collectable.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

namespace elastic::monitoring {

// Why not prometheus::Exposer: it serves through civetweb, and Debian's
// libcivetweb is built with a fixed 100 KiB stack for its threads
// (USE_STACK_SIZE=102400). glibc carves every thread's static TLS out of its
// stack, and a process that links LibTorch carries more than that (OpenBLAS
// 60 KiB, glog 30 KiB, libtorch_cpu 10 KiB, ...), so pthread_create returns
// EINVAL and mg_start reports a bogus "problem binding to port". The endpoint
// only ever answers GET /metrics, so it is served here on a thread with the
// default stack, one poll loop multiplexing every connection.

namespace {

constexpr char kMetricsPath[] = "/metrics";
constexpr std::size_t kMaxRequestBytes = 16 * 1024;
// A failed accept for want of descriptors leaves the connection queued and the
// listening socket readable: waiting this long avoids spinning on it.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
constexpr auto kTroubleLogInterval = std::chrono::seconds(10);

std::string Describe(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string Response(const std::string& status, const std::string& content_type,
                     const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

bool WouldBlock() { return errno == EAGAIN || errno == EWOULDBLOCK; }

// Milliseconds from now until `when` for poll: rounded up, so a deadline is
// never polled for just before it passes; -1 (no limit) for time_point::max().
int PollTimeout(std::chrono::steady_clock::time_point now,
                std::chrono::steady_clock::time_point when) {
  if (when == std::chrono::steady_clock::time_point::max()) return -1;
  if (when <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(when - now).count();
  return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
}

void ValidateLimits(const ExposerLimits& limits) {
  if (limits.max_connections < 1) {
    throw MetricsError("metrics endpoint: max_connections must be at least 1, not " +
                       std::to_string(limits.max_connections));
  }
  if (limits.request_timeout.count() <= 0 || limits.response_timeout.count() <= 0) {
    throw MetricsError("metrics endpoint: request and response timeouts must be positive");
  }
}

}  // namespace

// One client connection: it sends its request, then takes the answer.
struct MetricsExposer::Connection {
  int fd = -1;  // -1 once closed
  // For the request (from accept), then for the answer (from the request).
  std::chrono::steady_clock::time_point deadline;
  std::string request;
  std::string response;  // empty until the request is complete
  std::size_t sent = 0;
  bool scrape = false;  // the response carries the metrics

  bool answering() const { return !response.empty(); }
  void Close() {
    ::close(fd);
    fd = -1;
  }
};

MetricsExposer::MetricsExposer(const MetricsOptions& options, const ExposerLimits& limits)
    : address_(options.address), limits_(limits) {
  ValidateMetricsOptions(options);
  ValidateLimits(limits);
  const std::string endpoint = options.address + ":" + std::to_string(options.port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  ::inet_pton(AF_INET, options.address.c_str(), &addr.sin_addr);  // validated above

  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw MetricsError(Describe("metrics endpoint " + endpoint + ": socket"));
  const int on = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0) {
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
  last_trouble_log_ = Clock::now() - kTroubleLogInterval;
  server_ = std::thread([this] { ServeLoop(); });
}

MetricsExposer::~MetricsExposer() {
  // The loop only ever waits in poll, which the byte ends; it closes whatever
  // connections are open, however slow their clients.
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

// Every connection is non-blocking and served a step at a time as poll says it
// is ready, so a client that dribbles its request or reads its answer slowly
// delays nobody else; its deadline bounds how long it holds a slot.
void MetricsExposer::ServeLoop() {
  std::vector<Connection> connections;
  for (;;) {
    bool listen_ready = false;
    if (!ServeReady(connections, listen_ready)) break;
    CloseExpired(connections);
    connections.erase(std::remove_if(connections.begin(), connections.end(),
                                     [](const Connection& c) { return c.fd < 0; }),
                      connections.end());
    if (listen_ready) AcceptAll(connections);
  }
  for (Connection& connection : connections) connection.Close();
}

bool MetricsExposer::ServeReady(std::vector<Connection>& connections, bool& listen_ready) {
  const auto now = Clock::now();
  const bool accepting = now >= accept_paused_until_;
  std::vector<pollfd> fds;
  fds.reserve(connections.size() + 2);
  fds.push_back({wake_fds_[0], POLLIN, 0});
  fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});  // poll skips a negative fd
  auto wake_at = accepting ? Clock::time_point::max() : accept_paused_until_;
  for (const Connection& connection : connections) {
    fds.push_back(
        {connection.fd, static_cast<short>(connection.answering() ? POLLOUT : POLLIN), 0});
    wake_at = std::min(wake_at, connection.deadline);
  }
  if (::poll(fds.data(), fds.size(), PollTimeout(now, wake_at)) < 0) {
    if (errno == EINTR) return true;
    std::fprintf(stderr, "metrics endpoint %s:%d: error: %s; no longer serving\n", address_.c_str(),
                 port_, Describe("poll").c_str());
    return false;
  }
  if (fds[0].revents != 0) return false;
  listen_ready = fds[1].revents != 0;
  for (std::size_t i = 0; i < connections.size(); ++i) {
    if (fds[i + 2].revents == 0) continue;
    // An error or hang-up shows as a failed recv or send.
    if (connections[i].answering()) {
      WriteResponse(connections[i]);
    } else {
      ReadRequest(connections[i]);
    }
  }
  return true;
}

void MetricsExposer::AcceptAll(std::vector<Connection>& connections) {
  // Bounded, so a flood of connections cannot starve those already open.
  for (int accepted = 0; accepted < limits_.max_connections; ++accepted) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until_ = Clock::now() + kAcceptPause;
        ++accept_pauses_;
        LogTroubleRateLimited();
      }
      return;  // EAGAIN: none left
    }
    if (static_cast<int>(connections.size()) >= limits_.max_connections &&
        !ShedOldestRequest(connections)) {
      ++connections_shed_;
      ::close(fd);
      LogTroubleRateLimited();
      continue;
    }
    Connection connection;
    connection.fd = fd;
    connection.deadline = Clock::now() + limits_.request_timeout;
    connections.push_back(std::move(connection));
  }
}

// Prometheus sends its request as soon as it connects, so the connection that
// has waited longest for its request is the least likely to be a scrape;
// shedding it (rather than refusing the newcomer) means that clients that
// connect and stall cannot lock scrapes out by holding every slot.
bool MetricsExposer::ShedOldestRequest(std::vector<Connection>& connections) {
  // Connections are kept in the order they were accepted.
  const auto oldest = std::find_if(connections.begin(), connections.end(),
                                   [](const Connection& c) { return !c.answering(); });
  if (oldest == connections.end()) return false;
  ++connections_shed_;  // first, so a client that sees the close sees it counted
  oldest->Close();
  connections.erase(oldest);
  LogTroubleRateLimited();
  return true;
}

void MetricsExposer::ReadRequest(Connection& connection) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(connection.fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      connection.request.append(buffer, static_cast<std::size_t>(n));
      if (connection.request.find("\r\n\r\n") != std::string::npos ||
          connection.request.size() >= kMaxRequestBytes) {
        break;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && WouldBlock()) return;  // the rest comes later
    if (n < 0) {
      connection.Close();  // reset: nobody to answer
      return;
    }
    break;  // the client has sent all it will: answer what came
  }
  Answer(connection);
  WriteResponse(connection);  // usually all of it at once
}

void MetricsExposer::WriteResponse(Connection& connection) {
  while (connection.sent < connection.response.size()) {
    const ssize_t n = ::send(connection.fd, connection.response.data() + connection.sent,
                             connection.response.size() - connection.sent, MSG_NOSIGNAL);
    if (n > 0) {
      connection.sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && WouldBlock()) return;  // the rest when the client has read some
    connection.Close();                 // the client went away; nothing to tell it
    return;
  }
  if (connection.scrape) RecordScrapeAnswered();
  connection.Close();
}

void MetricsExposer::CloseExpired(std::vector<Connection>& connections) {
  const auto now = Clock::now();
  for (Connection& connection : connections) {
    if (connection.fd < 0 || now < connection.deadline) continue;
    if (!connection.answering()) {
      // Best effort, never waited for: a slow but genuine client learns why.
      const std::string timeout =
          Response("408 Request Timeout", "text/plain", "request not received in time\n");
      (void)::send(connection.fd, timeout.data(), timeout.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ++connections_timed_out_;
    connection.Close();
    LogTroubleRateLimited();
  }
}

void MetricsExposer::LogTroubleRateLimited() {
  const auto now = Clock::now();
  if (now - last_trouble_log_ < kTroubleLogInterval) return;
  last_trouble_log_ = now;
  const uint64_t shed = connections_shed_.load() - shed_logged_;
  const uint64_t timed_out = connections_timed_out_.load() - timed_out_logged_;
  const uint64_t pauses = accept_pauses_ - accept_pauses_logged_;
  shed_logged_ += shed;
  timed_out_logged_ += timed_out;
  accept_pauses_logged_ += pauses;
  std::string what;
  const auto add = [&what](uint64_t count, const std::string& text) {
    if (count == 0) return;
    what += (what.empty() ? "" : ", ") + std::to_string(count) + " " + text;
  };
  add(shed,
      "connection(s) closed at the limit of " + std::to_string(limits_.max_connections) + " open");
  add(timed_out, "connection(s) closed for a request not sent within " +
                     std::to_string(limits_.request_timeout.count()) +
                     " ms or an answer not taken within " +
                     std::to_string(limits_.response_timeout.count()) + " ms");
  add(pauses, "accept pause(s) for want of file descriptors");
  std::fprintf(stderr, "metrics endpoint %s:%d: warning: %s (at most one such line per %lld s)\n",
               address_.c_str(), port_, what.c_str(),
               static_cast<long long>(kTroubleLogInterval.count()));
}

void MetricsExposer::RecordScrapeAnswered() {
  std::lock_guard<std::mutex> lock(scrape_mutex_);
  ++scrapes_answered_;
  previous_answer_ = last_answer_;
  last_answer_ = Clock::now();
  scrape_answered_.notify_all();
}

bool MetricsExposer::AwaitNextScrape(std::chrono::seconds max_wait) {
  std::unique_lock<std::mutex> lock(scrape_mutex_);
  if (scrapes_answered_ < 2) return false;
  // Twice the scraper's interval and a second cover its jitter (a loaded
  // machine delays it).
  const auto interval = last_answer_ - previous_answer_;
  const auto wait = std::min<std::chrono::steady_clock::duration>(
      2 * interval + std::chrono::seconds(1), max_wait);
  // Only the serving thread collects, and numbers scrapes as it does, so only
  // the first `begun` scrapes had begun before this point: one of them may have
  // collected before the caller's last values were set. More than `begun`
  // answered means one that collected after this point was answered too, in
  // whatever order concurrent scrapes finish.
  const uint64_t begun = scrapes_begun_;
  return scrape_answered_.wait_for(lock, wait, [&] { return scrapes_answered_ > begun; });
}

void MetricsExposer::Answer(Connection& connection) {
  connection.deadline = Clock::now() + limits_.response_timeout;
  const std::string& request = connection.request;
  // Request line: METHOD SP TARGET SP VERSION.
  const std::size_t method_end = request.find(' ');
  const std::size_t target_end =
      method_end == std::string::npos ? std::string::npos : request.find(' ', method_end + 1);
  if (target_end == std::string::npos) {
    connection.response = Response("400 Bad Request", "text/plain", "malformed HTTP request\n");
    return;
  }
  const std::string method = request.substr(0, method_end);
  std::string target = request.substr(method_end + 1, target_end - method_end - 1);
  target = target.substr(0, target.find('?'));
  if (target != kMetricsPath) {
    connection.response = Response("404 Not Found", "text/plain", "only /metrics is served\n");
    return;
  }
  if (method != "GET") {
    connection.response = Response("405 Method Not Allowed", "text/plain", "use GET\n");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    ++scrapes_begun_;
  }
  connection.scrape = true;
  connection.response = Response("200 OK", "text/plain; version=0.0.4", Exposition());
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
