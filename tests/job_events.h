// A job's event log (<--run-dir>/events.jsonl, docs/events.md) as the
// end-to-end tests read it: what they assert on, instead of the lines the
// driver prints for people.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace elastic::tests {

using JobEvent = nlohmann::json;

class JobEvents {
 public:
  // The events in run_dir/events.jsonl, in order; none if there is no such
  // file. A last line without its newline (a driver killed mid-write) is
  // left out; any other line that is not a JSON object is a test failure.
  static JobEvents Read(const std::string& run_dir);

  const std::vector<JobEvent>& all() const { return events_; }
  // The events named `name` ("generation", "epoch", ...), in order.
  std::vector<JobEvent> Of(const std::string& name) const;
  // The last event named `name`, or null.
  JobEvent Last(const std::string& name) const;
  // The log, one event a line, for a failed assertion's message.
  std::string Text() const;
  // The log cut at each "start" event: one part per driver that ran with this
  // run directory (a driver that took the job over starts the next part).
  std::vector<JobEvents> ByStart() const;

 private:
  std::vector<JobEvent> events_;
};

// Reads run_dir's log every 100 ms until one of its events satisfies
// `accept`, and returns that event; null after `timeout`.
JobEvent WaitForEvent(const std::string& run_dir, std::chrono::seconds timeout,
                      const std::function<bool(const JobEvent&)>& accept);

}  // namespace elastic::tests
