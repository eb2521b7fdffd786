// A process's session with the head that outlives the loss of its connection:
// whatever the process made the head hold through it (an actor's name in the
// directory, a membership subscription) is made again on a new connection.
//
// The head forgets a session's actors and subscription when it drops the
// session: a connection reset, or silence past the heartbeat timeout on either
// side (a network blip; a process stopped or starved). A process whose role
// lives in those registrations (the driver's job controller: workers find it
// by name and it learns every failure from the subscription) would then run
// on, deaf and unreachable, until its workers gave up on it.
//
//   HeadSession session(options, [&](HeadClient& client, bool again) {
//     client.RegisterActor("job-controller", actors.endpoint());
//     ForwardMembershipWithSnapshotTo(client, controller);
//   });
//
// `establish` runs on the first connection (in the constructor, on its
// thread, `again` false) and on every new one after a loss (on the session's
// own thread, `again` true). It registers everything the session stands for
// and throws when it cannot; the attempt then counts as failed. A name the
// head still holds for the dropped session (it has not noticed the loss yet)
// is refused until it does: the next attempt registers it.
//
// After a loss the session tries again as the node agent and the workers do
// (runtime/head_reconnect.h: an attempt every kHeadReconnectInterval, none
// past reconnect_timeout after the loss); then it gives up and says why in
// failure(). Those two reconnect on their own loops because they do more: they
// claim their old ids and keep workers or a commit meanwhile.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runtime/head_client.h"

namespace elastic::runtime {

struct HeadSessionOptions {
  HeadClientOptions client;
  // How long after a loss new connections are tried before giving up.
  std::chrono::milliseconds reconnect_timeout{60000};
};

class HeadSession {
 public:
  using Establish = std::function<void(HeadClient& client, bool again)>;

  // Connects and establishes the session. Throws what the HeadClient
  // constructor or `establish` throws.
  HeadSession(HeadSessionOptions options, Establish establish);
  // Closes the session (the head forgets its registrations) and stops trying.
  ~HeadSession();
  HeadSession(const HeadSession&) = delete;
  HeadSession& operator=(const HeadSession&) = delete;

  // How many times the session was established again after a loss.
  uint64_t reestablished() const;
  // Connected and established now.
  bool established() const;
  // Why the session is gone for good (not established again within
  // reconnect_timeout of a loss); "" while it holds or is being re-established.
  std::string failure() const;

 private:
  using Clock = std::chrono::steady_clock;

  // From a client's loop thread: its connection closed.
  void Lost(uint64_t serial, const std::string& reason);
  // The session's thread: waits for a loss, then re-establishes.
  void Keep();
  // Tries until established, stopped, or the window closes.
  void Reestablish(Clock::time_point lost_at, const std::string& reason);
  // Makes `client` (established) the session's; the old client is destroyed
  // here, never on its own loop thread.
  void Install(std::unique_ptr<HeadClient> client);

  const HeadSessionOptions options_;
  const Establish establish_;
  std::string head_;  // "host:port", for logs

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<HeadClient> client_;  // replaced by Install only
  uint64_t serial_ = 0;                 // of client_: a loss of an older client is ignored
  std::optional<Clock::time_point> lost_at_;
  std::string lost_reason_;
  std::string failure_;
  uint64_t reestablished_ = 0;
  bool stopping_ = false;
  std::thread keeper_;  // last: started once everything above is
};

}  // namespace elastic::runtime
