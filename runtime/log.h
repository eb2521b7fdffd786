// Minimal leveled logging to stderr for the runtime. One line per event, with
// the process id, so interleaved logs of many processes stay readable.
#pragma once

#include <sstream>
#include <string>

namespace elastic::runtime {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; ELASTIC_LOG_LEVEL=debug|info|warning|error.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);
void LogLine(LogLevel level, const std::string& component, const std::string& message);

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
