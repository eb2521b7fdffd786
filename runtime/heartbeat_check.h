// What a connection's heartbeat timer concludes each time it fires: the peer
// is alive, the peer has been silent past the timeout (it failed), or this
// process itself stalled. Pure: the times are passed in.
//
// The stall is what the third answer is for. A check that runs far later than
// it was scheduled means this process did not run (stopped with SIGSTOP, starved
// of CPU, its loop blocked): during that time nobody read the peer's
// heartbeats, and a peer in this same process (the driver's own head client and
// node agent, connected to its in-process head) could not send any either, so
// no bytes wait in the socket to prove it alive. Declaring it failed would drop
// a live session for this process's own fault; instead its silence is counted
// afresh from the end of the stall, a whole timeout of grace. A peer that really
// died during the stall is then found one timeout later (or at once by its
// closed socket).
#pragma once

#include <chrono>

namespace elastic::runtime {

enum class HeartbeatVerdict {
  kAlive,       // heard from within the timeout, or its bytes wait unread
  kOwnStall,    // this process stalled: the peer's silence starts afresh now
  kPeerSilent,  // nothing from the peer for longer than the timeout: it failed
};

struct HeartbeatCheck {
  using Clock = std::chrono::steady_clock;
  Clock::time_point due;            // when this check was scheduled to run
  Clock::time_point now;            // when it runs
  Clock::time_point last_received;  // the last bytes from the peer
  bool data_waiting = false;        // bytes from the peer wait unread in the socket
};

// How much later than scheduled a check may run and still be the ordinary
// lateness of a loaded machine: half the heartbeat timeout. Any stall long
// enough to make a peer in this process look silent past the timeout is later
// than that, and a loop that is this late at every check is too starved to
// judge anyone.
std::chrono::steady_clock::duration StallThreshold(std::chrono::milliseconds heartbeat_timeout);

HeartbeatVerdict JudgeHeartbeat(const HeartbeatCheck& check,
                                std::chrono::milliseconds heartbeat_timeout);

const char* ToString(HeartbeatVerdict verdict);

// Whether a connection's heartbeat is worth sending at `now`: not when it
// queued another frame less than half an interval ago (the peer hears from it
// anyway). Half, not a whole interval: the peer then never waits more than
// 1.5 intervals for a frame, under the 2 at which it counts one missed. At
// 1,024 members this spares the head's one thread most of ~10,000 heartbeats
// a second while it answers a rendezvous.
bool HeartbeatDue(std::chrono::steady_clock::time_point last_queued,
                  std::chrono::steady_clock::time_point now,
                  std::chrono::milliseconds heartbeat_interval);

}  // namespace elastic::runtime
