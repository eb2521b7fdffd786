#include "monitoring/testing/runfiles.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace elastic::monitoring::testing {

namespace {

std::string Env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace

std::string RunfilePath(const std::string& workspace_path) {
  const std::string path =
      Env("TEST_SRCDIR", ".") + "/" + Env("TEST_WORKSPACE", "elastic") + "/" + workspace_path;
  if (!std::ifstream(path).good()) {
    throw std::runtime_error("runfile " + workspace_path + " not found at " + path +
                             " (is it in the test's data?)");
  }
  return path;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string TestTempDir() { return Env("TEST_TMPDIR", "/tmp"); }

}  // namespace elastic::monitoring::testing
