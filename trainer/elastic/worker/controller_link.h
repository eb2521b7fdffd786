// A worker's line to its job's controller: typed messages (control.capnp) to
// the controller actor, and the worker's log lines, which carry its member id.
// A message that cannot be sent is logged, never thrown: the controller may be
// restarting, and the worker's own loop notices a lost head.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

#include "runtime/actor.h"
#include "trainer/elastic/protocol/control_messages.h"

namespace elastic::trainer {

class ControllerLink {
 public:
  explicit ControllerLink(runtime::ActorRef controller) : controller_(std::move(controller)) {}

  // After a reconnect: the restarted controller's actor.
  void Reset(runtime::ActorRef controller) { controller_ = std::move(controller); }
  void SetMemberId(uint64_t member_id) { member_id_ = member_id; }
  uint64_t member_id() const { return member_id_; }

  // Sends a message of type T, filled by fill, to the controller.
  template <typename T, typename Fill>
  void Tell(Fill fill) const {
    try {
      controller_.Tell(kControlCall, EncodeControl<T>(fill));
    } catch (const std::exception& e) {
      Log("could not reach the controller (%s): %s", ControlMember<T>::kName, e.what());
    }
  }
  // An ask (a ToController message), answered within `timeout`; throws what
  // the actor system throws.
  std::string Ask(const std::string& message, std::chrono::milliseconds timeout) const {
    return controller_.Ask(kControlCall, message, timeout).get();
  }

  // "[worker <member id> pid <pid>] text" on stderr, flushed.
  void Log(const char* format, ...) const __attribute__((format(printf, 2, 3)));

 private:
  runtime::ActorRef controller_;
  uint64_t member_id_ = 0;
};

}  // namespace elastic::trainer
