// A worker's trainer actor: where the controller's messages to this worker
// arrive (control.capnp's ToTrainer: generation, request, over), kept for the
// training thread, which takes them at its own points (between generations,
// at commit points). LibTorch-free, so it is tested alone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/actor.h"
#include "trainer/elastic/protocol/control.capnp.h"
#include "trainer/elastic/protocol/state_source.h"

namespace elastic::trainer {

// One generation as the controller ordered it.
struct GenerationOrder {
  uint64_t generation = 0;
  std::vector<uint64_t> members;  // ranks are positions
  StateSource source;
  std::string state;       // the controller's copy (kControllerCopy, rank 0 only)
  std::string stop;        // non-empty: sync, rank 0 checkpoints, everyone exits
  std::string reason;      // why this generation
  bool send_copy = false;  // rank 0 sends the controller the state it synced
  int RankOf(uint64_t member) const;
};

class TrainerInbox : public runtime::Actor {
 public:
  // on_newer_generation runs (on the actor's thread) when an order for a
  // generation newer than any before arrives: the training thread may be
  // blocked in a collective of an older one that must be aborted.
  explicit TrainerInbox(std::function<void(uint64_t generation)> on_newer_generation);

  // One ToTrainer message (method kControlCall); anything else is answered
  // as unimplemented (control_messages.h) and the next message taken.
  std::string Receive(const std::string& method, const std::string& payload) override;

  // The newest order for a generation after `after`, waiting up to `timeout`
  // (nullopt: none came, or the job is over).
  std::optional<GenerationOrder> Next(uint64_t after, std::chrono::milliseconds timeout);
  // The controller's stop request for `generation`: nullopt when none, else
  // true to stop at the next commit, false at the next epoch boundary.
  std::optional<bool> Request(uint64_t generation) const;
  // Why the job is over for this worker, once the controller said so.
  std::optional<std::string> Over() const;

 private:
  void OnGeneration(proto::Generation::Reader message);
  void OnRequest(proto::StopRequest::Reader request);
  void OnOver(proto::JobOver::Reader over);

  std::function<void(uint64_t)> on_newer_generation_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<GenerationOrder> latest_;
  std::map<uint64_t, bool> requests_;  // generation -> at next commit
  std::optional<std::string> over_;
};

}  // namespace elastic::trainer
