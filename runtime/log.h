// Minimal leveled logging to stderr for the runtime. One line per event, with
// the process id, so interleaved logs of many processes stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>

namespace elastic::runtime {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; ELASTIC_LOG_LEVEL=debug|info|warning|error.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);
void LogLine(LogLevel level, const std::string& component, const std::string& message);

// One kind of event that may repeat thousands of times a second (accept
// errors, connections refused or dropped before authentication): at most one
// line per interval, and that line says how many like it were not logged since
// the one before, so a flood costs a bounded number of lines. Thread-safe.
//
//   static RateLimitedLog refused(LogLevel::kWarning, "head", std::chrono::seconds(10));
//   refused.Log("refused " + peer + ": too many unauthenticated connections");
class RateLimitedLog {
 public:
  RateLimitedLog(LogLevel level, std::string component,
                 std::chrono::steady_clock::duration interval);

  // Logs message, or only counts it when a line went out less than interval ago.
  void Log(const std::string& message);

  // The admission decision alone, for callers that build the message only when
  // it is logged: true when a line may go out now (then *suppressed is how many
  // were counted and not logged since the last line, to be said in it).
  bool Admit(uint64_t* suppressed);

  // Every event Log or Admit saw, logged or not.
  uint64_t events() const;

 private:
  const LogLevel level_;
  const std::string component_;
  const std::chrono::steady_clock::duration interval_;
  mutable std::mutex mutex_;
  bool logged_any_ = false;
  std::chrono::steady_clock::time_point last_line_;
  uint64_t suppressed_ = 0;
  uint64_t events_ = 0;
};

// For a line that RateLimitedLog::Admit let out: "; N more WHAT since the last
// such line", or "" when none were held back.
std::string SuppressedNote(uint64_t suppressed, const std::string& what);

// A string from a peer (a key, a name), fit for one log line or error
// message: in single quotes, bytes outside printable ASCII as \xNN, at most
// max_bytes of it shown and then "... (N bytes)", so a megabyte-long or binary
// key costs a short readable line.
std::string Quoted(const std::string& text, size_t max_bytes = 128);

}  // namespace elastic::runtime

#define ELASTIC_LOG(level, component, stream_expr)                                  \
  do {                                                                              \
    if (::elastic::runtime::LogLevel::level >= ::elastic::runtime::MinLogLevel()) { \
      std::ostringstream elastic_log_stream_;                                       \
      elastic_log_stream_ << stream_expr;                                           \
      ::elastic::runtime::LogLine(::elastic::runtime::LogLevel::level, component,   \
                                  elastic_log_stream_.str());                       \
    }                                                                               \
  } while (0)
