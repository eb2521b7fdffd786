#include "monitoring/metrics_options.h"

#include <arpa/inet.h>

namespace elastic::monitoring {

void ValidateMetricsOptions(const MetricsOptions& options) {
  in_addr parsed{};
  if (inet_pton(AF_INET, options.address.c_str(), &parsed) != 1) {
    throw MetricsError("--metrics-address must be a dotted IPv4 address such as 127.0.0.1, got '" +
                       options.address + "'");
  }
  if (options.port < 0 || options.port > 65535) {
    throw MetricsError("--metrics-port must be in [0, 65535] (0: any free port), got " +
                       std::to_string(options.port));
  }
}

}  // namespace elastic::monitoring
