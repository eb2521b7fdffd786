// The controller's side of the control plane's dispatch: one ToController
// message to the handler of its member, one line per member, as Cap'n Proto's
// rpc.c++ does. The controller actor (driver.cc) implements the handlers; the
// dispatch is tested alone (controller_dispatch_test.cc), without processes.
#pragma once

#include <string>

#include "trainer/elastic/protocol/control.capnp.h"

namespace elastic::trainer {

// What the controller does with each message. OnSpec answers an ask (a
// JobSpec message); the others are tells.
class ControllerMessages {
 public:
  virtual ~ControllerMessages() = default;
  virtual void OnTick() = 0;
  virtual std::string OnSpec() = 0;
  virtual void OnHello(proto::Hello::Reader hello) = 0;
  virtual void OnProgress(proto::Progress::Reader progress) = 0;
  virtual void OnEpoch(proto::EpochSummary::Reader epoch) = 0;
  virtual void OnEvaluation(proto::Evaluation::Reader evaluation) = 0;
  virtual void OnCommit(proto::CommitReport::Reader commit) = 0;
  virtual void OnSynced(proto::Synced::Reader synced) = 0;
  virtual void OnFirstStep(proto::FirstStep::Reader first) = 0;
  virtual void OnCheckpoint(proto::CheckpointWritten::Reader written) = 0;
  virtual void OnFault(proto::Fault::Reader fault) = 0;
  virtual void OnDraining(proto::Draining::Reader draining) = 0;
  virtual void OnDone(proto::Done::Reader done) = 0;
  virtual void OnStats(proto::WorkerStats::Reader stats) = 0;
  virtual void OnParams(proto::ParamsChecksum::Reader params) = 0;
  virtual void OnShares(proto::Shares::Reader shares) = 0;
};

// Calls `to`'s handler of `message`'s member and returns its answer (empty for
// a tell). Throws Unimplemented (control_messages.h) for the union unset or a
// member this build does not know.
std::string Dispatch(proto::ToController::Reader message, ControllerMessages& to);

}  // namespace elastic::trainer
