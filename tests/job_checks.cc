#include "tests/job_checks.h"

#include <gtest/gtest.h>

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

}  // namespace elastic::tests
