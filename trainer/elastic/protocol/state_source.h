// Where a generation's state comes from: what the controller orders
// (Generation.source in control.capnp) and a worker loads.
#pragma once

#include "trainer/state_point.h"

namespace elastic::trainer {

enum class SourceKind { kFresh, kResume, kMember, kControllerCopy, kCheckpoint };
const char* ToString(SourceKind kind);

struct StateSource {
  SourceKind kind = SourceKind::kFresh;
  int rank = 0;      // the rank that broadcasts (kMember); 0 otherwise
  StatePoint point;  // what the source holds
};

}  // namespace elastic::trainer
