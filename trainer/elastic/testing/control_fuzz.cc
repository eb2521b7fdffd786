#include "trainer/elastic/testing/control_fuzz.h"

#include <stdexcept>

#include "trainer/elastic/protocol/control_messages.h"
#include "trainer/elastic/protocol/controller_dispatch.h"
#include "trainer/elastic/protocol/worker_stats.h"
#include "trainer/elastic/worker/trainer_inbox.h"

namespace elastic::trainer {
namespace {

// Reads every pointer of a member (what a handler that reads every field
// would touch).
template <typename Reader>
void ReadWhole(Reader reader) {
  (void)reader.totalSize();
}

// The controller's handlers, reading each message in full with the
// conversions to plain structs, as the controller actor's do (driver.cc).
class ReadingController : public ControllerMessages {
 public:
  void OnTick() override {}
  std::string OnSpec() override { return ""; }
  void OnHello(proto::Hello::Reader hello) override {
    if (hello.getHoldsCommit()) (void)FromProto(hello.getCommit());
  }
  void OnProgress(proto::Progress::Reader m) override { ReadWhole(m); }
  void OnEpoch(proto::EpochSummary::Reader m) override { ReadWhole(m); }
  void OnEvaluation(proto::Evaluation::Reader m) override { ReadWhole(m); }
  void OnParams(proto::ParamsChecksum::Reader m) override { ReadWhole(m); }
  void OnShares(proto::Shares::Reader m) override { ReadWhole(m); }
  void OnCommit(proto::CommitReport::Reader commit) override {
    (void)FromProto(commit.getPoint());
    (void)commit.getState().size();
  }
  void OnSynced(proto::Synced::Reader synced) override { (void)FromProto(synced.getPoint()); }
  void OnFirstStep(proto::FirstStep::Reader m) override { ReadWhole(m); }
  void OnCheckpoint(proto::CheckpointWritten::Reader written) override {
    (void)FromProto(written.getPoint());
    (void)std::string(written.getPath().cStr());
  }
  void OnFault(proto::Fault::Reader fault) override { (void)std::string(fault.getReason().cStr()); }
  void OnDraining(proto::Draining::Reader m) override { ReadWhole(m); }
  void OnDone(proto::Done::Reader m) override { ReadWhole(m); }
  void OnStats(proto::WorkerStats::Reader stats) override { (void)FromProto(stats); }
};

// A ToController message through the controller's own dispatch.
void ReadToController(const std::string& payload) {
  MessageBytes bytes(payload, "ToController");
  ReadingController controller;
  Dispatch(bytes.Get<proto::ToController>(), controller);
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
