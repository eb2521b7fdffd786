#include "runtime/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

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

RateLimitedLog::RateLimitedLog(LogLevel level, std::string component,
                               std::chrono::steady_clock::duration interval)
    : level_(level), component_(std::move(component)), interval_(interval) {}

bool RateLimitedLog::Admit(uint64_t* suppressed) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  ++events_;
  if (level_ < MinLogLevel()) return false;
  if (logged_any_ && now - last_line_ < interval_) {
    ++suppressed_;
    return false;
  }
  logged_any_ = true;
  last_line_ = now;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

void RateLimitedLog::Log(const std::string& message) {
  uint64_t suppressed = 0;
  if (!Admit(&suppressed)) return;
  if (suppressed == 0) {
    LogLine(level_, component_, message);
    return;
  }
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(interval_).count();
  const std::string interval =
      millis % 1000 == 0 ? std::to_string(millis / 1000) + " s" : std::to_string(millis) + " ms";
  LogLine(level_, component_,
          message + " (and " + std::to_string(suppressed) +
              " more like it not logged: at most one such line per " + interval + ")");
}

std::string SuppressedNote(uint64_t suppressed, const std::string& what) {
  if (suppressed == 0) return "";
  return "; " + std::to_string(suppressed) + " more " + what + " since the last such line";
}

std::string Quoted(const std::string& text, size_t max_bytes) {
  std::string out = "'";
  const size_t shown = std::min(text.size(), max_bytes);
  for (size_t i = 0; i < shown; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\' && byte != '\'') {
      out += static_cast<char>(byte);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      out += escaped;
    }
  }
  out += "'";
  if (shown < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

uint64_t RateLimitedLog::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

}  // namespace elastic::runtime
