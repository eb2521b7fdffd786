#include "runtime/options.h"

#include <stdexcept>

namespace elastic::runtime {
namespace {

uint64_t ParsePositive(const std::string& flag, const std::string& value) {
  size_t used = 0;
  unsigned long long parsed = 0;
  try {
    parsed = std::stoull(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || parsed == 0 || value[0] == '-') {
    throw std::invalid_argument(flag + " wants a positive integer, got '" + value + "'");
  }
  return parsed;
}

}  // namespace

bool ParseTransportFlag(const std::string& arg, TransportOptions* options) {
  const auto equals = arg.find('=');
  if (arg.rfind("--", 0) != 0 || equals == std::string::npos) return false;
  const std::string flag = arg.substr(0, equals);
  const std::string value = arg.substr(equals + 1);
  if (flag == "--max-frame-bytes") {
    options->max_frame_bytes = ParsePositive(flag, value);
    if (options->max_frame_bytes < 1024) {
      throw std::invalid_argument("--max-frame-bytes must be at least 1024");
    }
  } else if (flag == "--send-queue-bytes") {
    options->max_send_queue_bytes = ParsePositive(flag, value);
  } else if (flag == "--connect-timeout-ms") {
    options->connect_timeout = std::chrono::milliseconds(ParsePositive(flag, value));
  } else if (flag == "--heartbeat-ms") {
    options->heartbeat_interval = std::chrono::milliseconds(ParsePositive(flag, value));
  } else if (flag == "--heartbeat-timeout-ms") {
    options->heartbeat_timeout = std::chrono::milliseconds(ParsePositive(flag, value));
  } else if (flag == "--send-timeout-ms") {
    options->send_timeout = std::chrono::milliseconds(ParsePositive(flag, value));
  } else {
    return false;
  }
  if (options->heartbeat_timeout <= options->heartbeat_interval) {
    throw std::invalid_argument("--heartbeat-timeout-ms must be larger than --heartbeat-ms");
  }
  return true;
}

std::string TransportFlagsHelp() {
  return "  --max-frame-bytes=N      largest accepted frame (default 268435456)\n"
         "  --send-queue-bytes=N     bytes queued per peer before senders block (default "
         "67108864)\n"
         "  --connect-timeout-ms=N   connect + authentication timeout (default 5000)\n"
         "  --heartbeat-ms=N         heartbeat interval (default 100)\n"
         "  --heartbeat-timeout-ms=N silent peer is declared failed after this (default 1000)\n"
         "  --send-timeout-ms=N      a send blocked this long on a full queue closes the "
         "connection (default 30000)\n";
}

}  // namespace elastic::runtime
