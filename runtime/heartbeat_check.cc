#include "runtime/heartbeat_check.h"

namespace elastic::runtime {

std::chrono::steady_clock::duration StallThreshold(std::chrono::milliseconds heartbeat_timeout) {
  return std::chrono::steady_clock::duration(heartbeat_timeout) / 2;
}

HeartbeatVerdict JudgeHeartbeat(const HeartbeatCheck& check,
                                std::chrono::milliseconds heartbeat_timeout) {
  // First: a stalled check has no evidence against anyone, whatever it sees.
  if (check.now - check.due > StallThreshold(heartbeat_timeout)) return HeartbeatVerdict::kOwnStall;
  if (check.data_waiting) return HeartbeatVerdict::kAlive;
  return check.now - check.last_received > heartbeat_timeout ? HeartbeatVerdict::kPeerSilent
                                                             : HeartbeatVerdict::kAlive;
}

bool HeartbeatDue(std::chrono::steady_clock::time_point last_queued,
                  std::chrono::steady_clock::time_point now,
                  std::chrono::milliseconds heartbeat_interval) {
  return now - last_queued >= std::chrono::steady_clock::duration(heartbeat_interval) / 2;
}

const char* ToString(HeartbeatVerdict verdict) {
  switch (verdict) {
    case HeartbeatVerdict::kAlive:
      return "alive";
    case HeartbeatVerdict::kOwnStall:
      return "own stall";
    case HeartbeatVerdict::kPeerSilent:
      return "peer silent";
  }
  return "?";
}

}  // namespace elastic::runtime
