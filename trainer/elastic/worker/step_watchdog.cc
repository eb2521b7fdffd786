#include "trainer/elastic/worker/step_watchdog.h"

#include <unistd.h>

#include <cstdio>

#include "trainer/elastic/exit_codes.h"

namespace elastic::trainer {

StepWatchdog::StepWatchdog(std::chrono::milliseconds timeout)
    : timeout_(timeout), thread_([this] { Watch(); }) {}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StepWatchdog::Arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_since_ = std::chrono::steady_clock::now();
}

void StepWatchdog::Disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_since_.reset();
}

void StepWatchdog::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (armed_since_ && std::chrono::steady_clock::now() - *armed_since_ > timeout_) {
      std::fprintf(stderr,
                   "[worker pid %d] error: a step made no progress for %.1f s (--step-timeout): "
                   "this worker is hung and leaves the job so that the others go on\n",
                   static_cast<int>(::getpid()), std::chrono::duration<double>(timeout_).count());
      std::fflush(stderr);
      ::_exit(kExitError);
    }
  }
}

}  // namespace elastic::trainer
