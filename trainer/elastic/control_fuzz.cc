#include "trainer/elastic/control_fuzz.h"

#include <stdexcept>

#include "trainer/elastic/control_messages.h"
#include "trainer/elastic/trainer_inbox.h"
#include "trainer/elastic/worker_stats.h"

namespace elastic::trainer {
namespace {

// Reads every pointer of a T message (what a handler that reads every field
// would touch) and returns the reader for field-level conversions.
template <typename T>
void ReadWhole(const std::string& payload, const char* what) {
  MessageBytes bytes(payload, what);
  (void)bytes.Get<T>().totalSize();
}

void Receive(int kind, const std::string& payload) {
  TrainerInbox inbox([](uint64_t) {});
  switch (kind) {
    case 0:
      inbox.Receive(kMethodGeneration, payload);
      (void)inbox.Next(0, {});
      return;
    case 1:
      inbox.Receive(kMethodRequest, payload);
      return;
    case 2:
      inbox.Receive(kMethodOver, payload);
      (void)inbox.Over();
      return;
    case 3: {
      MessageBytes bytes(payload, "job spec");
      (void)ToStrings(bytes.Get<proto::JobSpec>().getArgs());
      (void)std::string(bytes.Get<proto::JobSpec>().getJobId().cStr());
      return;
    }
    case 4: {
      MessageBytes bytes(payload, "hello");
      const proto::Hello::Reader hello = bytes.Get<proto::Hello>();
      if (hello.getHoldsCommit()) (void)FromProto(hello.getCommit());
      return;
    }
    case 5:
      return ReadWhole<proto::Progress>(payload, "progress");
    case 6:
      return ReadWhole<proto::EpochSummary>(payload, "epoch summary");
    case 7: {
      MessageBytes bytes(payload, "commit report");
      const proto::CommitReport::Reader commit = bytes.Get<proto::CommitReport>();
      (void)FromProto(commit.getPoint());
      (void)commit.getState().size();
      return;
    }
    case 8: {
      MessageBytes bytes(payload, "synced");
      (void)FromProto(bytes.Get<proto::Synced>().getPoint());
      return;
    }
    case 9:
      return ReadWhole<proto::FirstStep>(payload, "first step");
    case 10: {
      MessageBytes bytes(payload, "checkpoint written");
      const proto::CheckpointWritten::Reader written = bytes.Get<proto::CheckpointWritten>();
      (void)FromProto(written.getPoint());
      (void)std::string(written.getPath().cStr());
      return;
    }
    case 11: {
      MessageBytes bytes(payload, "fault");
      (void)std::string(bytes.Get<proto::Fault>().getReason().cStr());
      return;
    }
    case 12:
      return ReadWhole<proto::Draining>(payload, "draining");
    case 13:
      return ReadWhole<proto::Done>(payload, "done");
    case 14: {
      MessageBytes bytes(payload, "worker stats");
      (void)FromProto(bytes.Get<proto::WorkerStats>());
      return;
    }
  }
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
