// The HTTP endpoint Prometheus scrapes: serves registries at /metrics.
#pragma once

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

class MetricsExposer {
 public:
  // Binds and starts serving at once on one thread of its own.
  // Throws MetricsError for invalid options or an address:port that cannot be
  // bound (in use, not a local address).
  explicit MetricsExposer(const MetricsOptions& options);
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

 private:
  void ServeLoop();
  // True when it served the metrics (a scrape), false for a refused request.
  bool Answer(int connection);
  std::string Exposition();

  std::string address_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a byte on [1] stops ServeLoop
  std::mutex mutex_;            // guards collectables_
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;

  // Scrapes, for AwaitNextScrape. Guarded by scrape_mutex_.
  std::mutex scrape_mutex_;
  std::condition_variable scrape_answered_;
  uint64_t scrapes_begun_ = 0;     // collections started
  uint64_t scrapes_answered_ = 0;  // of those, answered (one at a time: one thread serves)
  std::chrono::steady_clock::time_point last_answer_, previous_answer_;

  std::thread server_;
};

}  // namespace elastic::monitoring
