#include "trainer/elastic/protocol/controller_dispatch.h"

#include "trainer/elastic/protocol/control_messages.h"

namespace elastic::trainer {

std::string Dispatch(proto::ToController::Reader m, ControllerMessages& to) {
  // clang-format off
  switch (m.which()) {
    case proto::ToController::TICK: return to.OnTick(), "";
    case proto::ToController::SPEC: return to.OnSpec();
    case proto::ToController::HELLO: return to.OnHello(m.getHello()), "";
    case proto::ToController::PROGRESS: return to.OnProgress(m.getProgress()), "";
    case proto::ToController::EPOCH: return to.OnEpoch(m.getEpoch()), "";
    case proto::ToController::EVALUATION: return to.OnEvaluation(m.getEvaluation()), "";
    case proto::ToController::COMMIT: return to.OnCommit(m.getCommit()), "";
    case proto::ToController::SYNCED: return to.OnSynced(m.getSynced()), "";
    case proto::ToController::FIRST_STEP: return to.OnFirstStep(m.getFirstStep()), "";
    case proto::ToController::CHECKPOINT: return to.OnCheckpoint(m.getCheckpoint()), "";
    case proto::ToController::FAULT: return to.OnFault(m.getFault()), "";
    case proto::ToController::DRAINING: return to.OnDraining(m.getDraining()), "";
    case proto::ToController::DONE: return to.OnDone(m.getDone()), "";
    case proto::ToController::STATS: return to.OnStats(m.getStats()), "";
    case proto::ToController::PARAMS: return to.OnParams(m.getParams()), "";
    case proto::ToController::SHARES: return to.OnShares(m.getShares()), "";
    case proto::ToController::UNSET: break;
  }
  // clang-format on
  RefuseUnimplemented("job controller", m);  // unset, or a member this build does not know
}

}  // namespace elastic::trainer
