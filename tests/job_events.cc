#include "tests/job_events.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace elastic::tests {

JobEvents JobEvents::Read(const std::string& run_dir) {
  JobEvents read;
  std::ifstream in(run_dir + "/events.jsonl");
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  size_t start = 0;
  for (size_t end; (end = all.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = all.substr(start, end - start);
    JobEvent event = JobEvent::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded() || !event.is_object() || !event.contains("event")) {
      ADD_FAILURE() << run_dir << "/events.jsonl: not an event: " << line;
      continue;
    }
    read.events_.push_back(std::move(event));
  }
  return read;
}

std::vector<JobEvent> JobEvents::Of(const std::string& name) const {
  std::vector<JobEvent> named;
  for (const JobEvent& e : events_)
    if (e["event"] == name) named.push_back(e);
  return named;
}

JobEvent JobEvents::Last(const std::string& name) const {
  for (auto it = events_.rbegin(); it != events_.rend(); ++it)
    if ((*it)["event"] == name) return *it;
  return nullptr;
}

std::string JobEvents::Text() const {
  std::string text;
  for (const JobEvent& e : events_) text += e.dump() + "\n";
  return text;
}

std::vector<JobEvents> JobEvents::ByStart() const {
  std::vector<JobEvents> parts;
  for (const JobEvent& e : events_) {
    if (parts.empty() || e["event"] == "start") parts.emplace_back();
    parts.back().events_.push_back(e);
  }
  return parts;
}

JobEvent WaitForEvent(const std::string& run_dir, std::chrono::seconds timeout,
                      const std::function<bool(const JobEvent&)>& accept) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const JobEvents events = JobEvents::Read(run_dir);
    for (const JobEvent& e : events.all())
      if (accept(e)) return e;
    if (std::chrono::steady_clock::now() >= deadline) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace elastic::tests
