#include "tests/job_checks.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>

namespace elastic::tests {

std::string FreshTempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  const std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(command.c_str()) != 0) std::abort();
  return dir;
}

void ExpectOneChecksumPerGeneration(const std::string& output) {
  const std::regex re("params generation=(\\d+) rank=(\\d+) world=(\\d+) checksum=([0-9a-f]+)");
  std::map<int, std::set<std::string>> by_generation;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    by_generation[std::stoi((*it)[1])].insert((*it)[4]);
  }
  EXPECT_FALSE(by_generation.empty()) << output;
  for (const auto& [generation, sums] : by_generation) {
    EXPECT_EQ(sums.size(), 1u) << "ranks of generation " << generation
                               << " hold different parameters";
  }
  EXPECT_EQ(output.find("checksum mismatch"), std::string::npos);
}

bool StopAfterAnEpochWithWorld(Process& driver, int world, std::chrono::seconds timeout) {
  const std::string summary = "epoch \\d+/\\d+ world " + std::to_string(world) + " \\|";
  if (driver.WaitFor(summary, timeout).empty()) {
    ::kill(driver.pid(), SIGKILL);
    return false;
  }
  return ::kill(driver.pid(), SIGTERM) == 0;
}

double LastTestAccuracy(const std::string& output) {
  const std::regex re("\\| test loss \\S+ acc ([0-9.]+)%");
  double last = -1;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    last = std::stod((*it)[1]);
  }
  return last;
}

int PrintedEpochCount(const std::string& output) {
  const std::regex re("epoch \\d+/\\d+ world \\d+ \\|");
  return static_cast<int>(std::distance(std::sregex_iterator(output.begin(), output.end(), re),
                                        std::sregex_iterator()));
}

}  // namespace elastic::tests
