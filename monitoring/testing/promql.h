// Finds the metric names a PromQL expression selects, so a test can check that
// every panel of a dashboard reads metrics the endpoint really exports. It is
// a tokenizer, not a full PromQL parser: it knows enough of the grammar to
// tell a metric name from a function, an aggregation, a keyword, a label name
// or a Grafana variable.
#pragma once

#include <set>
#include <stdexcept>
#include <string>

namespace elastic::monitoring::testing {

class PromQLError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws PromQLError for an unterminated string, brace, bracket or label list.
std::set<std::string> MetricNamesInPromQL(const std::string& expr);

}  // namespace elastic::monitoring::testing
