#include "runtime/heartbeat_check.h"

#include <gtest/gtest.h>

#include <vector>

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;

TEST(HeartbeatCheckTest, StallThresholdIsHalfTheTimeout) {
  EXPECT_EQ(StallThreshold(milliseconds(3000)), milliseconds(1500));
  EXPECT_EQ(StallThreshold(milliseconds(500)), milliseconds(250));
}

// The trainer's defaults: a check every 100 ms, a timeout of 3 s.
TEST(HeartbeatCheckTest, PeerSilenceIsJudgedOnlyWhenThisProcessRanOnTime) {
  const milliseconds timeout(3000);
  const HeartbeatCheck::Clock::time_point start{milliseconds(100000)};
  struct Row {
    const char* what;
    int64_t late_ms;    // how much after `due` the check runs
    int64_t silent_ms;  // since the peer's last bytes, at the check
    bool data_waiting;
    HeartbeatVerdict verdict;
  };
  for (const Row& row : std::vector<Row>{
           {"on time, heard recently", 0, 100, false, HeartbeatVerdict::kAlive},
           {"on time, silent exactly the timeout", 0, 3000, false, HeartbeatVerdict::kAlive},
           {"on time, silent past the timeout", 0, 3001, false, HeartbeatVerdict::kPeerSilent},
           {"on time, silent but its bytes wait unread", 0, 9000, true, HeartbeatVerdict::kAlive},
           {"a loaded machine's lateness is no stall", 900, 3200, false,
            HeartbeatVerdict::kPeerSilent},
           {"late by exactly the threshold", 1500, 3200, false, HeartbeatVerdict::kPeerSilent},
           {"this process was stopped for 5 s", 5000, 5100, false, HeartbeatVerdict::kOwnStall},
           {"stopped just past the threshold", 1501, 1600, false, HeartbeatVerdict::kOwnStall},
           {"a stall even with bytes waiting", 5000, 5100, true, HeartbeatVerdict::kOwnStall},
           // The cost: a peer that died 2.5 s before a 2-s stall is found one
           // timeout after the stall, not at once.
           {"a stall after the peer went quiet", 2000, 4500, false, HeartbeatVerdict::kOwnStall},
       }) {
    SCOPED_TRACE(row.what);
    HeartbeatCheck check;
    check.due = start;
    check.now = start + milliseconds(row.late_ms);
    check.last_received = check.now - milliseconds(row.silent_ms);
    check.data_waiting = row.data_waiting;
    EXPECT_STREQ(ToString(JudgeHeartbeat(check, timeout)), ToString(row.verdict));
  }
}

// The trainer's interval, 300 ms: a heartbeat only when nothing else was
// queued for half of it, so the peer's longest wait stays under 2 intervals.
TEST(HeartbeatCheckTest, AHeartbeatIsDueOnlyAfterHalfAnIntervalWithoutOtherFrames) {
  const milliseconds interval(300);
  const std::chrono::steady_clock::time_point now{milliseconds(100000)};
  EXPECT_FALSE(HeartbeatDue(now, now, interval));
  EXPECT_FALSE(HeartbeatDue(now - milliseconds(149), now, interval));
  EXPECT_TRUE(HeartbeatDue(now - milliseconds(150), now, interval));
  EXPECT_TRUE(HeartbeatDue(now - milliseconds(5000), now, interval));
  // A connection that never queued anything else heartbeats from the start.
  EXPECT_TRUE(HeartbeatDue(std::chrono::steady_clock::time_point{}, now, interval));
}

}  // namespace
}  // namespace elastic::runtime
