#include "trainer/elastic/control_fuzz.h"

#include <stdexcept>

#include "trainer/elastic/control_messages.h"
#include "trainer/elastic/trainer_inbox.h"
#include "trainer/elastic/worker_stats.h"

namespace elastic::trainer {
namespace {

// Reads every pointer of a member (what a handler that reads every field
// would touch).
template <typename Reader>
void ReadWhole(Reader reader) {
  (void)reader.totalSize();
}

// Reads a ToController message as the controller does (driver.cc): its
// member in full, with the conversions to plain structs.
void ReadToController(const std::string& payload) {
  MessageBytes bytes(payload, "ToController");
  const proto::ToController::Reader message = bytes.Get<proto::ToController>();
  switch (message.which()) {
    case proto::ToController::SPEC:
    case proto::ToController::TICK:
      return;
    case proto::ToController::HELLO: {
      const proto::Hello::Reader hello = message.getHello();
      if (hello.getHoldsCommit()) (void)FromProto(hello.getCommit());
      return;
    }
    case proto::ToController::PROGRESS:
      return ReadWhole(message.getProgress());
    case proto::ToController::EPOCH:
      return ReadWhole(message.getEpoch());
    case proto::ToController::COMMIT: {
      const proto::CommitReport::Reader commit = message.getCommit();
      (void)FromProto(commit.getPoint());
      (void)commit.getState().size();
      return;
    }
    case proto::ToController::SYNCED:
      (void)FromProto(message.getSynced().getPoint());
      return;
    case proto::ToController::FIRST_STEP:
      return ReadWhole(message.getFirstStep());
    case proto::ToController::CHECKPOINT: {
      const proto::CheckpointWritten::Reader written = message.getCheckpoint();
      (void)FromProto(written.getPoint());
      (void)std::string(written.getPath().cStr());
      return;
    }
    case proto::ToController::FAULT:
      (void)std::string(message.getFault().getReason().cStr());
      return;
    case proto::ToController::DRAINING:
      return ReadWhole(message.getDraining());
    case proto::ToController::DONE:
      return ReadWhole(message.getDone());
    case proto::ToController::STATS:
      (void)FromProto(message.getStats());
      return;
    case proto::ToController::UNSET:
      break;
  }
  RefuseUnimplemented("job controller", message);
}

void Receive(int kind, const std::string& payload) {
  if (kind == kFuzzToController) return ReadToController(payload);
  TrainerInbox inbox([](uint64_t) {});
  inbox.Receive(kControlCall, payload);
  (void)inbox.Next(0, {});
  (void)inbox.Over();
}

}  // namespace

std::string ControlFuzzInput(int kind, const std::string& payload) {
  return std::string(1, static_cast<char>(kind)) + payload;
}

}  // namespace elastic::trainer

// A malformed message must be refused with an exception naming it (what the
// actor runtime turns into an error reply or a log line); a crash, hang or
// sanitizer report is a bug.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    elastic::trainer::Receive(data[0] % elastic::trainer::kControlFuzzKinds, payload);
  } catch (const std::exception&) {
  }
  return 0;
}
