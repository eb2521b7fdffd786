// A real Prometheus server (Debian's /usr/bin/prometheus) for tests: started
// on a free loopback port with a given scrape config, queried through its HTTP
// API, stopped with SIGTERM. Errors are exceptions whose message carries the
// tail of the server's log.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "monitoring/testing/child_process.h"

namespace elastic::monitoring::testing {

class PrometheusError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr char kPrometheusBinary[] = "/usr/bin/prometheus";

// The shipped monitoring/prometheus.yml pointed at `target` ("127.0.0.1:PORT")
// and scraping every `interval`. Throws PrometheusError when the shipped text
// no longer has the target or interval it replaces.
std::string ScrapeConfigFor(const std::string& shipped_config, const std::string& target,
                            const std::string& interval = "1s");

class PrometheusServer {
 public:
  // Writes `config` into `work_dir` (created; the TSDB goes there too),
  // starts Prometheus on 127.0.0.1 and waits until it is ready. Throws
  // PrometheusError when the binary is missing, it exits, or it is not ready
  // within `wait_seconds`.
  PrometheusServer(const std::string& config, const std::string& work_dir,
                   double wait_seconds = 180);
  ~PrometheusServer();

  std::string Url(const std::string& path) const;

  struct QueryResult {
    std::optional<nlohmann::json> data;  // the reply's "data" on success
    std::string error;                   // why not, otherwise
  };
  // GET /api/v1/query?query=...
  QueryResult Query(const std::string& promql) const;
  // GET /api/v1/query_range: `promql` evaluated every `step` seconds from
  // `start` to `end` (Unix seconds), as a Grafana panel asks.
  QueryResult QueryRange(const std::string& promql, double start, double end, double step) const;
  // The value of a query that yields exactly one sample; nullopt otherwise.
  std::optional<double> Scalar(const std::string& promql) const;

  // Polls `done` every half second. Throws PrometheusError naming `what` when
  // it does not hold within the wait given to the constructor, or when the
  // server exits meanwhile.
  void WaitUntil(const std::string& what, const std::function<bool()>& done);

  // SIGTERM (SIGKILL after 30 s); returns the wait status. Idempotent.
  int Stop();
  std::string LogTail() const;

 private:
  int port_ = 0;
  double wait_seconds_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace elastic::monitoring::testing
