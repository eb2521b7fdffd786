// Where the Prometheus endpoint listens. The trainer binds these fields to its
// --metrics-address and --metrics-port flags; this package knows nothing about
// flag parsing so that it stays below the trainer in the dependency graph.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace elastic::monitoring {

// A metrics endpoint that cannot be configured or started. The message names
// the flag or the address at fault.
class MetricsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct MetricsOptions {
  // IPv4 address to listen on. Loopback by default: the endpoint is read-only
  // but still tells anyone who can reach it about the job; 0.0.0.0 opens it to
  // every interface (for a Prometheus on another machine).
  std::string address = "127.0.0.1";
  // TCP port; 0 lets the OS choose (tests), MetricsExposer::port() says which.
  int64_t port = 9464;
};

// Throws MetricsError naming --metrics-address or --metrics-port when the
// address is not a dotted IPv4 address or the port is outside [0, 65535].
void ValidateMetricsOptions(const MetricsOptions& options);

}  // namespace elastic::monitoring
