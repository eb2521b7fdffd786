// How a process that lost its head tries to reach it again: an attempt every
// kHeadReconnectInterval while the window is open (the loss plus the node
// agent's head_reconnect_timeout), no attempt running past its end; then it
// gives up. Shared by the node agent, which keeps its workers running
// meanwhile, and the worker, which keeps its commit (trainer/elastic/
// worker_policy.h). Pure: the time is passed in.
#pragma once

#include <algorithm>
#include <chrono>

namespace elastic::runtime {

inline constexpr std::chrono::milliseconds kHeadReconnectInterval{250};

class HeadReconnectWindow {
 public:
  using Clock = std::chrono::steady_clock;

  HeadReconnectWindow(Clock::time_point lost_at, std::chrono::milliseconds timeout)
      : deadline_(lost_at + timeout) {}

  // Another attempt may start at `now`.
  bool Open(Clock::time_point now) const { return now < deadline_; }
  // How long an attempt starting at `now` may take: what is left of the
  // window, at most `cap`, at least 1 ms (an unreachable host would otherwise
  // hold the caller for a whole connect timeout past the end).
  std::chrono::milliseconds AttemptBudget(Clock::time_point now,
                                          std::chrono::milliseconds cap) const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now);
    return std::max(std::chrono::milliseconds(1), std::min(left, cap));
  }
  Clock::time_point deadline() const { return deadline_; }

 private:
  Clock::time_point deadline_;
};

}  // namespace elastic::runtime
