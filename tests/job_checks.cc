#include "tests/job_checks.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

namespace elastic::tests {

std::string FreshTempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  const std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(command.c_str()) != 0) std::abort();
  return dir;
}

void ExpectOneChecksumPerGeneration(const JobEvents& events) {
  std::map<int64_t, std::set<std::string>> by_generation;
  for (const JobEvent& p : events.Of("params")) {
    by_generation[p["generation"].get<int64_t>()].insert(p["checksum"].get<std::string>());
    EXPECT_LT(p["rank"].get<int>(), p["world"].get<int>()) << p.dump();
  }
  EXPECT_FALSE(by_generation.empty()) << "no generation reported its parameters\n" << events.Text();
  for (const auto& [generation, sums] : by_generation) {
    EXPECT_EQ(sums.size(), 1u) << "ranks of generation " << generation
                               << " hold different parameters\n"
                               << events.Text();
  }
}

void ExpectStepsWithinTheirEpoch(const std::string& output) {
  const std::regex re("epoch \\d+/\\d+ step (\\d+)/(\\d+) ");
  int lines = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it, ++lines) {
    EXPECT_LE(std::stoll((*it)[1]), std::stoll((*it)[2])) << "progress line: " << it->str();
  }
  EXPECT_GT(lines, 0) << "no progress line in the output";
}

bool StopAfterAnEpochWithWorld(Process& driver, const std::string& run_dir, int world,
                               std::chrono::seconds timeout) {
  const JobEvent epoch = WaitForEvent(run_dir, timeout, [world](const JobEvent& e) {
    return e["event"] == "epoch" && e["world"] == world;
  });
  if (epoch.is_null()) {
    ::kill(driver.pid(), SIGKILL);
    return false;
  }
  return ::kill(driver.pid(), SIGTERM) == 0;
}

void ExpectRolledBackToACommit(const JobEvents& events) {
  const std::vector<JobEvent>& all = events.all();
  // The first sign of the failure: the head's word of the death, or a
  // survivor's fault from the collective the death broke, which can come
  // first and re-form the generation before the death is logged.
  size_t failed = all.size();
  for (size_t i = 0; i < all.size() && failed == all.size(); ++i) {
    const bool died = all[i]["event"] == "leave" && all[i]["reason"] == "failed";
    if (died || all[i]["event"] == "fault") failed = i;
  }
  ASSERT_LT(failed, all.size()) << "no worker failed\n" << events.Text();
  bool restored = false;
  for (size_t i = failed + 1; i < all.size(); ++i) {
    const JobEvent& e = all[i];
    restored |= e["event"] == "generation" && e["source"] != "fresh";
  }
  EXPECT_TRUE(restored) << "no generation after the failure restored a commit\n" << events.Text();
}

double LastTestAccuracy(const JobEvents& events) {
  const JobEvent last = events.Last("epoch");
  return last.is_null() || last["test_metric"].is_null() ? -1
                                                         : 100 * last["test_metric"].get<double>();
}

double LastValidationLoss(const JobEvents& events) {
  const JobEvent last = events.Last("epoch");
  return last.is_null() || last["test_loss"].is_null() ? -1 : last["test_loss"].get<double>();
}

std::string TinyShakespeareText() {
  const char* dir = std::getenv("ELASTIC_TINYSHAKESPEARE");
  if (dir == nullptr) return "";
  const std::string text = std::string(dir) + "/input.txt";
  return std::filesystem::exists(text) ? text : "";
}

std::string PrepareTinyShakespeare(const std::string& dir) {
  const std::string out = dir + "/shakespeare_char";
  bool ok = false;
  const std::string output = RunShell(
      "/usr/bin/python3 tools/prepare_tokens.py --input " + TinyShakespeareText() + " --out " + out,
      &ok);
  EXPECT_TRUE(ok) << output;
  return ok ? out : "";
}

int EpochCount(const JobEvents& events) {
  std::set<int64_t> epochs;
  for (const JobEvent& e : events.Of("epoch")) epochs.insert(e["epoch"].get<int64_t>());
  return static_cast<int>(epochs.size());
}

void ExpectEverySampleOnce(const std::string& samples_dir, int64_t train_samples, int epochs) {
  using Position = std::pair<int64_t, int64_t>;  // (epoch, position)
  std::map<int64_t, Position> start;             // generation -> where its sync restored
  struct Step {
    int64_t generation;
    Position at;
    std::vector<int64_t> indices;
  };
  std::vector<Step> steps;
  DIR* d = ::opendir(samples_dir.c_str());
  ASSERT_NE(d, nullptr);
  int files = 0;
  while (dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.rfind("samples-", 0) != 0) continue;
    ++files;
    std::istringstream in(ReadFile(samples_dir + "/" + name));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string kind;
      int64_t generation, epoch, position;
      fields >> kind >> generation >> epoch >> position;
      if (kind == "G") {
        start[generation] = {epoch, position};
      } else if (kind == "S") {
        Step step{generation, {epoch, position}, {}};
        int64_t index;
        while (fields >> index) step.indices.push_back(index);
        steps.push_back(step);
      }
    }
  }
  ::closedir(d);
  ASSERT_GT(files, 0);
  // A step is rolled back by any later generation that restored a point at or
  // before it, not only by the next one: after a restore from the members at
  // a newer commit, a later one may fall back to an older copy.
  std::map<int64_t, Position> earliest_after;  // generation -> earliest restore after it
  std::optional<Position> earliest;
  for (auto it = start.rbegin(); it != start.rend(); ++it) {
    if (earliest) earliest_after[it->first] = *earliest;
    earliest = earliest ? std::min(*earliest, it->second) : it->second;
  }
  std::map<int64_t, std::vector<int64_t>> count;  // epoch -> uses of each sample
  for (const Step& step : steps) {
    // The earliest restore of the generations after the step's.
    auto next = start.upper_bound(step.generation);
    std::optional<Position> rolled_back_from;
    if (next != start.end()) {
      rolled_back_from = next->second;
      const auto later = earliest_after.find(next->first);
      if (later != earliest_after.end()) rolled_back_from = std::min(next->second, later->second);
    }
    if (rolled_back_from && !(step.at < *rolled_back_from)) continue;  // rolled back
    std::vector<int64_t>& uses = count[step.at.first];
    uses.resize(train_samples, 0);
    for (int64_t index : step.indices) {
      ASSERT_GE(index, 0);
      ASSERT_LT(index, train_samples);
      ++uses[static_cast<size_t>(index)];
    }
  }
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    ASSERT_EQ(count.count(epoch), 1u) << "no step of epoch " << epoch;
    const std::vector<int64_t>& uses = count[epoch];
    int64_t missing = 0, repeated = 0;
    for (int64_t u : uses) {
      if (u == 0) ++missing;
      if (u > 1) ++repeated;
    }
    EXPECT_EQ(missing, 0) << "samples never used in epoch " << epoch;
    EXPECT_EQ(repeated, 0) << "samples used more than once in epoch " << epoch;
  }
}

}  // namespace elastic::tests
