// The HTTP endpoint Prometheus scrapes: serves registries at /metrics.
#pragma once

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

 private:
  void ServeLoop();
  void Answer(int connection);
  std::string Exposition();

  std::string address_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a byte on [1] stops ServeLoop
  std::mutex mutex_;            // guards collectables_
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  std::thread server_;
};

}  // namespace elastic::monitoring
