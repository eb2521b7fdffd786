#include "monitoring/metrics_exposer.h"

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <exception>
#include <vector>

namespace elastic::monitoring {

namespace {
constexpr char kMetricsPath[] = "/metrics";
}  // namespace

MetricsExposer::MetricsExposer(const MetricsOptions& options) : address_(options.address) {
  ValidateMetricsOptions(options);
  const std::string endpoint = options.address + ":" + std::to_string(options.port);
  try {
    // Two serving threads: a scrape every few seconds needs one, the second
    // keeps the endpoint answering while a slow client holds the first.
    exposer_ = std::make_unique<prometheus::Exposer>(endpoint, /*num_threads=*/2);
  } catch (const std::exception& e) {
    // civetweb's own message ("null context ... binding to port") does not say
    // which address it was given.
    throw MetricsError("cannot serve metrics on " + endpoint +
                       " (--metrics-address/--metrics-port): port in use or address not local (" +
                       e.what() + ")");
  }
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) throw MetricsError("metrics endpoint " + endpoint + " reports no bound port");
  port_ = ports.front();
}

MetricsExposer::~MetricsExposer() = default;

void MetricsExposer::Serve(const std::shared_ptr<prometheus::Registry>& registry) {
  exposer_->RegisterCollectable(registry, kMetricsPath);
}

std::string MetricsExposer::url() const {
  return "http://" + address_ + ":" + std::to_string(port_) + kMetricsPath;
}

}  // namespace elastic::monitoring
