// Why the set of workers changed. Shared by the live metrics (a label value)
// and the run report (a marker on the world-size timeline).
#pragma once

#include <array>

namespace elastic::monitoring {

enum class MembershipChangeReason {
  kJoin,     // a worker entered at an epoch boundary
  kLeave,    // a worker left gracefully (preemption notice, scale-down)
  kFailure,  // a worker died or stopped sending heartbeats
};

inline constexpr std::array<MembershipChangeReason, 3> kAllMembershipChangeReasons = {
    MembershipChangeReason::kJoin, MembershipChangeReason::kLeave,
    MembershipChangeReason::kFailure};

// "join", "leave", "failure": the values of the `reason` label.
inline const char* ReasonName(MembershipChangeReason reason) {
  switch (reason) {
    case MembershipChangeReason::kJoin:
      return "join";
    case MembershipChangeReason::kLeave:
      return "leave";
    case MembershipChangeReason::kFailure:
      return "failure";
  }
  return "unknown";
}

}  // namespace elastic::monitoring
