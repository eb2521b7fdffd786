// A blocking HTTP GET over a real TCP connection (libcurl), for tests that
// scrape the metrics endpoint or query a Prometheus server.
#pragma once

#include <string>

namespace elastic::monitoring::testing {

struct HttpResponse {
  long status = 0;  // 0 when no response came back
  std::string body;
  std::string error;  // the transport error when status is 0
};

// Never throws: a refused connection or a timeout is reported in `error`, so
// callers can poll a server that is still starting.
HttpResponse HttpGet(const std::string& url, double timeout_seconds = 30);

// Percent-encodes a query-string value (PromQL has spaces, braces, quotes).
std::string UrlEncode(const std::string& value);

}  // namespace elastic::monitoring::testing
