// The HTTP endpoint Prometheus scrapes: serves registries at /metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "monitoring/metrics_options.h"

namespace prometheus {
class Collectable;
class Registry;
}  // namespace prometheus

namespace elastic::monitoring {

// What clients may hold of the endpoint. The defaults suit Prometheus, which
// sends its request at once and reads the answer at once; tests shrink them.
struct ExposerLimits {
  // Connections served at once. A connection beyond this sheds the oldest one
  // still sending its request; when every connection is already being answered,
  // the new one is closed at once.
  int max_connections = 64;
  // The whole request must arrive within this, counted from accept.
  std::chrono::milliseconds request_timeout{2000};
  // The whole answer must be taken within this, counted from the request.
  std::chrono::milliseconds response_timeout{10000};
};

class MetricsExposer {
 public:
  // Binds and starts serving at once on one thread of its own, which serves
  // every connection through one poll loop, so a slow client holds only its
  // own connection.
  // Throws MetricsError for invalid options or limits, or an address:port that
  // cannot be bound (in use, not a local address).
  explicit MetricsExposer(const MetricsOptions& options, const ExposerLimits& limits = {});
  // Returns promptly: open connections are closed, not waited for.
  ~MetricsExposer();

  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  // Adds a registry to what /metrics serves. The exposer keeps a weak
  // reference, so a registry that is destroyed simply disappears.
  void Serve(const std::shared_ptr<prometheus::Registry>& registry);

  const std::string& address() const { return address_; }
  // The bound port: the one asked for, or the OS's choice when 0 was asked.
  int port() const { return port_; }
  // http://address:port/metrics
  std::string url() const;

  // For the end of a job: the values set last (final epoch, test accuracy)
  // reach Prometheus only if it scrapes once more before the process exits.
  // When something has been scraping this endpoint (two scrapes or more),
  // blocks until a scrape that collects after this call has been answered, or
  // for twice the interval between the last two scrapes plus a second, at most
  // `max_wait`;
  // returns whether that scrape came. Returns false at once when nothing has
  // been scraping, so a job nobody watches does not linger.
  bool AwaitNextScrape(std::chrono::seconds max_wait);

  // Connections closed because max_connections were open (shed or refused).
  uint64_t connections_shed() const { return connections_shed_.load(); }
  // Connections closed because their request or answer ran past its timeout.
  uint64_t connections_timed_out() const { return connections_timed_out_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection;

  void ServeLoop();
  // Waits until a socket is ready or a deadline passes, and serves the ready
  // connections a step; false when told to stop (or poll fails).
  bool ServeReady(std::vector<Connection>& connections, bool& listen_ready);
  void AcceptAll(std::vector<Connection>& connections);
  // Makes room for one more connection; false when none could be made.
  bool ShedOldestRequest(std::vector<Connection>& connections);
  void ReadRequest(Connection& connection);
  void WriteResponse(Connection& connection);
  void CloseExpired(std::vector<Connection>& connections);
  // Sets the answer to a complete request, or to what came of one.
  void Answer(Connection& connection);
  void RecordScrapeAnswered();
  // At most one line per interval, so a flood cannot flood the log.
  void LogTroubleRateLimited();
  std::string Exposition();

  std::string address_;
  int port_ = 0;
  ExposerLimits limits_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a byte on [1] stops ServeLoop
  std::atomic<uint64_t> connections_shed_{0};
  std::atomic<uint64_t> connections_timed_out_{0};
  // Serving thread only: what LogTroubleRateLimited has reported so far.
  uint64_t shed_logged_ = 0, timed_out_logged_ = 0;
  Clock::time_point last_trouble_log_;
  // Serving thread only: accept failed for want of descriptors; retry then.
  Clock::time_point accept_paused_until_;
  uint64_t accept_pauses_ = 0, accept_pauses_logged_ = 0;

  std::mutex mutex_;  // guards collectables_
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;

  // Scrapes, for AwaitNextScrape. Guarded by scrape_mutex_.
  std::mutex scrape_mutex_;
  std::condition_variable scrape_answered_;
  uint64_t scrapes_begun_ = 0;     // collections started
  uint64_t scrapes_answered_ = 0;  // of those, answered in full
  std::chrono::steady_clock::time_point last_answer_, previous_answer_;

  std::thread server_;
};

}  // namespace elastic::monitoring
