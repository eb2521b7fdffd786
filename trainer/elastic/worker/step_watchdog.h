// Ends the process when a step makes no progress for --step-timeout: a worker
// whose training thread is stuck (a wedged kernel, a deadlock) would otherwise
// keep heartbeating from its other threads and hold the job. Collectives wait
// at most the communicator's timeout (below the step timeout,
// worker_policy.h), so a worker waiting for a stuck peer leaves its step with
// an error before this fires.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

namespace elastic::trainer {

class StepWatchdog {
 public:
  explicit StepWatchdog(std::chrono::milliseconds timeout);
  ~StepWatchdog();
  void Arm();
  void Disarm();

 private:
  void Watch();

  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<std::chrono::steady_clock::time_point> armed_since_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace elastic::trainer
