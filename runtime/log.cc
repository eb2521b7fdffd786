#include "runtime/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace elastic::runtime {
namespace {

LogLevel LevelFromEnvironment() {
  const char* value = std::getenv("ELASTIC_LOG_LEVEL");
  if (value == nullptr) return LogLevel::kInfo;
  if (std::strcmp(value, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(value, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(value, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnvironment())};
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
  }
  return "?";
}

}  // namespace

LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevel().load()); }

void SetMinLogLevel(LogLevel level) { MinLevel().store(static_cast<int>(level)); }

void LogLine(LogLevel level, const std::string& component, const std::string& message) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const long long millis = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  // One fprintf per line: stdio locks the stream, so lines of threads do not interleave.
  std::fprintf(stderr, "%s %lld.%03lld %d %s] %s\n", LevelName(level), millis / 1000, millis % 1000,
               static_cast<int>(getpid()), component.c_str(), message.c_str());
}

}  // namespace elastic::runtime
