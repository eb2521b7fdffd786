#include "trainer/elastic/protocol/state_source.h"

namespace elastic::trainer {

const char* ToString(SourceKind kind) {
  switch (kind) {
    case SourceKind::kFresh:
      return "a freshly seeded model";
    case SourceKind::kResume:
      return "the checkpoint of --resume";
    case SourceKind::kMember:
      return "the commit its members hold";
    case SourceKind::kControllerCopy:
      return "the controller's copy";
    case SourceKind::kCheckpoint:
      return "the newest checkpoint";
  }
  return "?";
}

}  // namespace elastic::trainer
