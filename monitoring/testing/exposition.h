// A parser for the Prometheus text exposition format (version 0.0.4), the
// body of a /metrics scrape. Tests read what the endpoint actually served
// instead of trusting the registry that produced it.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace elastic::monitoring::testing {

class ExpositionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Sample {
  std::string name;  // e.g. elastic_allreduce_duration_seconds_bucket
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family name -> counter|gauge|histogram|...
  std::map<std::string, std::string> help;

  // The samples named `name` whose labels include all of `labels`.
  std::vector<Sample> Find(const std::string& name,
                           const std::map<std::string, std::string>& labels = {}) const;
  // The value of the one sample that matches; nullopt when none does. Throws
  // ExpositionError when several do (the caller's labels were not specific).
  std::optional<double> Value(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) const;
  bool HasSample(const std::string& name) const { return !Find(name).empty(); }
};

// Throws ExpositionError naming the line number and what is wrong with it.
Exposition ParseExposition(const std::string& text);

}  // namespace elastic::monitoring::testing
