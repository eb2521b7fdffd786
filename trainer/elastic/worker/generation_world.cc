#include "trainer/elastic/worker/generation_world.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include "runtime/frame.h"
#include "trainer/elastic/protocol/control_messages.h"

namespace elastic::trainer {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string SealedCopy(const Commit& commit, const WorkerServices& services) {
  std::string state = commit.Seal(services.token);
  const FrameFit fit = services.frame_check->Check(state.size());
  if (!fit.warning.empty()) services.controller->Log("%s", fit.warning.c_str());
  return fit.send ? state : std::string();
}

GenerationWorld::GenerationWorld(const WorkerServices& services, uint64_t generation, int rank,
                                 int size, collectives::Communicator* control,
                                 collectives::Communicator* data)
    : services_(services),
      generation_(generation),
      rank_(rank),
      size_(size),
      control_(control),
      data_(data) {}

bool GenerationWorld::StopRequested(CommitAt at) {
  return StopsHere(services_.inbox->Request(generation_), at);
}

void GenerationWorld::OnSynced(const StatePoint& p, uint64_t checksum) {
  services_.controller->Log(
      "params generation=%llu rank=%d world=%d checksum=%016llx epoch=%lld position=%lld "
      "step=%lld",
      static_cast<unsigned long long>(generation_), rank_, size_,
      static_cast<unsigned long long>(checksum), static_cast<long long>(p.epoch),
      static_cast<long long>(p.position), static_cast<long long>(p.step));
  const ControllerLink& controller = *services_.controller;
  controller.Tell<proto::ParamsChecksum>([&](proto::ParamsChecksum::Builder m) {
    m.setGeneration(generation_);
    m.setMemberId(controller.member_id());
    m.setRank(rank_);
    m.setWorld(size_);
    m.setChecksum(checksum);
    ToProto(p, m.initPoint());
    m.setPid(::getpid());
  });
  if (std::FILE* log = services_.sample_log) {
    std::fprintf(log, "G %llu %lld %lld %d %d\n", static_cast<unsigned long long>(generation_),
                 static_cast<long long>(p.epoch), static_cast<long long>(p.position), rank_, size_);
    std::fflush(log);
  }
}

void GenerationWorld::BeforeStep(const StatePoint& at, const std::vector<int64_t>& indices) {
  if (services_.poll_draining) services_.poll_draining();
  // Written when the step starts: a later generation that restarts at or
  // before this position rolls the step back (docs/elastic.md).
  if (std::FILE* log = services_.sample_log) {
    std::fprintf(log, "S %llu %lld %lld", static_cast<unsigned long long>(generation_),
                 static_cast<long long>(at.epoch), static_cast<long long>(at.position));
    for (int64_t i : indices) std::fprintf(log, " %lld", static_cast<long long>(i));
    std::fputc('\n', log);
    std::fflush(log);
  }
  services_.watchdog->Arm();
  if (at.step == services_.wedge_at_step) {
    services_.controller->Log(
        "test fault (ELASTIC_TEST_WEDGE_STEP): wedging the training thread at step %lld",
        static_cast<long long>(at.step));
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void GenerationWorld::AfterStep(double seconds) {
  services_.watchdog->Disarm();
  services_.stats->ObserveStep(generation_, rank_, seconds);
}

void GenerationWorld::OnProgress(const StepReport& r) {
  if (rank_ != 0) return;
  const ControllerLink& controller = *services_.controller;
  if (r.first) {
    controller.Tell<proto::FirstStep>([&](proto::FirstStep::Builder m) {
      m.setGeneration(generation_);
      m.setWallSeconds(Now());
    });
  }
  controller.Tell<proto::Progress>([&](proto::Progress::Builder m) {
    m.setGeneration(generation_);
    m.setEpoch(r.at.epoch);
    m.setStep(r.at.step);
    m.setStepsInEpoch(r.steps_in_epoch);
    m.setStepInEpoch(r.step_in_epoch);
    m.setSeen(r.seen);
    m.setLoss(r.loss);
    m.setAccuracy(r.metric);
    m.setLr(r.lr);
    m.setWorld(r.world);
  });
}

void PublishStats(const WorkerServices& services, bool always) {
  const ControllerLink& controller = *services.controller;
  const WorkerStatsPublisher::Sink send = [&](const WorkerStatsRecord& record) {
    controller.Tell<proto::WorkerStats>(
        [&](proto::WorkerStats::Builder m) { ToProto(controller.member_id(), record, m); });
  };
  if (always) {
    services.stats_publisher->Publish(send);
  } else {
    services.stats_publisher->PublishIfDue(send);
  }
}

void GenerationWorld::OnCommit(const CommitReport& report) {
  PublishStats(services_, false);
  // Every rank reports a stop, once out of the collective: the controller
  // publishes the next view (which aborts this generation's communicator)
  // only when nobody is still inside it.
  if (rank_ != 0 && !report.stop) return;
  const bool copy = services_.copies->AtCommit(rank_, report.stop).send;
  const std::string state = copy ? SealedCopy(*report.commit, services_) : std::string();
  services_.controller->Tell<proto::CommitReport>([&](proto::CommitReport::Builder m) {
    m.setGeneration(generation_);
    ToProto(report.at, m.initPoint());
    if (!state.empty()) m.setState(runtime::AsData(state));
    m.setStoppedOnRequest(report.stop);
    m.setMemberId(services_.controller->member_id());
  });
}

void GenerationWorld::OnShares(const ShareReport& report) {
  services_.controller->Tell<proto::Shares>([&](proto::Shares::Builder m) {
    m.setGeneration(generation_);
    ToProto(report.at, m.initPoint());
    m.setStepSamples(report.step_samples);
    m.setChanged(report.changed);
    const auto size = static_cast<unsigned>(report.shares.size());
    auto shares = m.initShares(size);
    auto speeds = m.initSpeeds(size);
    auto slowdowns = m.initSlowdowns(size);
    for (unsigned r = 0; r < size; ++r) {
      shares.set(r, report.shares[r]);
      speeds.set(r, report.speeds[r]);
      slowdowns.set(r, report.slowdowns[r]);
    }
  });
}

void GenerationWorld::OnLetGo(int rank, const std::string& why) {
  if (rank == rank_ && services_.let_go) services_.let_go(why);
}

void GenerationWorld::OnEpochEnd(const EpochSummary& s) {
  services_.controller->Tell<proto::EpochSummary>([&](proto::EpochSummary::Builder m) {
    m.setEpoch(s.epoch);
    m.setEpochs(s.epochs);
    m.setWorld(s.world);
    m.setTrainLoss(s.train_loss);
    m.setTrainAccuracy(s.train_accuracy);
    m.setTestLoss(s.test_loss);
    m.setTestAccuracy(s.test_accuracy);
    m.setImagesPerSecond(s.images_per_second);
    m.setSeconds(s.seconds);
    m.setArithmetic(s.arithmetic);
    m.setLearningRate(s.lr);
  });
}

void GenerationWorld::OnEvaluation(const EvaluationSummary& s) {
  services_.controller->Tell<proto::Evaluation>([&](proto::Evaluation::Builder m) {
    m.setStep(s.step);
    m.setEpoch(s.epoch);
    m.setEpochFraction(s.epoch_fraction);
    m.setWorld(s.world);
    m.setTestLoss(s.test_loss);
    m.setTestAccuracy(s.test_accuracy);
    m.setSeconds(s.seconds);
  });
}

void ReportCheckpoint(const ControllerLink& controller, const StatePoint& at,
                      const std::string& path) {
  controller.Log("checkpoint written to %s", path.c_str());
  controller.Tell<proto::CheckpointWritten>([&](proto::CheckpointWritten::Builder m) {
    ToProto(at, m.initPoint());
    m.setPath(path);
  });
}

void GenerationWorld::OnCheckpoint(const StatePoint& at, const std::string& path) {
  if (services_.checkpointed) services_.checkpointed(at);
  ReportCheckpoint(*services_.controller, at, path);
}

void GenerationWorld::OnFinished(const StatePoint& at, double metric, bool early_stopped) {
  // An ask: the controller has the final numbers before any worker leaves.
  const std::string done = EncodeControl<proto::Done>([&](proto::Done::Builder m) {
    m.setEpochs(at.epoch);
    m.setSteps(at.step);
    m.setTestAccuracy(metric);
    m.setEarlyStop(early_stopped);
    m.setGeneration(generation_);
  });
  try {
    services_.controller->Ask(done, std::chrono::seconds(30));
  } catch (const std::exception& e) {
    services_.controller->Log("the controller did not acknowledge the end of the job: %s",
                              e.what());
  }
}

}  // namespace elastic::trainer
