// The controller's dispatch (controller_dispatch.h): every ToController
// member reaches its own handler with its own fields, an ask's answer comes
// back, and a message the controller does not implement (the union unset, a
// member a newer worker added) is refused as unimplemented, naming it.
#include "trainer/elastic/protocol/controller_dispatch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "trainer/elastic/protocol/control_messages.h"

namespace elastic::trainer {
namespace {

// Records which handler ran, with one field of its message.
class Recorder : public ControllerMessages {
 public:
  std::vector<std::string> calls;

  void OnTick() override { calls.push_back("tick"); }
  std::string OnSpec() override {
    calls.push_back("spec");
    return "the spec";
  }
  void OnHello(proto::Hello::Reader m) override { Add("hello", m.getMemberId()); }
  void OnProgress(proto::Progress::Reader m) override { Add("progress", m.getStep()); }
  void OnEpoch(proto::EpochSummary::Reader m) override { Add("epoch", m.getEpoch()); }
  void OnEvaluation(proto::Evaluation::Reader m) override { Add("evaluation", m.getStep()); }
  void OnParams(proto::ParamsChecksum::Reader m) override { Add("params", m.getChecksum()); }
  void OnCommit(proto::CommitReport::Reader m) override { Add("commit", m.getGeneration()); }
  void OnSynced(proto::Synced::Reader m) override { Add("synced", m.getChecksum()); }
  void OnFirstStep(proto::FirstStep::Reader m) override { Add("firstStep", m.getGeneration()); }
  void OnCheckpoint(proto::CheckpointWritten::Reader m) override {
    Add("checkpoint", m.getPoint().getStep());
  }
  void OnFault(proto::Fault::Reader m) override { Add("fault", m.getMemberId()); }
  void OnDraining(proto::Draining::Reader m) override { Add("draining", m.getMemberId()); }
  void OnDone(proto::Done::Reader m) override { Add("done", m.getSteps()); }
  void OnStats(proto::WorkerStats::Reader m) override { Add("stats", m.getRank()); }
  void OnShares(proto::Shares::Reader m) override { Add("shares", m.getStepSamples()); }

 private:
  void Add(const std::string& name, uint64_t field) {
    calls.push_back(name + " " + std::to_string(field));
  }
};

std::string Dispatched(const std::string& bytes, Recorder& recorder) {
  MessageBytes message(bytes, "test");
  return Dispatch(message.Get<proto::ToController>(), recorder);
}

TEST(ControllerDispatchTest, EveryMemberReachesItsHandler) {
  Recorder r;
  EXPECT_EQ(Dispatched(Tick(), r), "");
  EXPECT_EQ(Dispatched(SpecRequest(), r), "the spec");
  Dispatched(EncodeControl<proto::Hello>([](proto::Hello::Builder m) { m.setMemberId(1); }), r);
  Dispatched(EncodeControl<proto::Progress>([](proto::Progress::Builder m) { m.setStep(2); }), r);
  Dispatched(
      EncodeControl<proto::EpochSummary>([](proto::EpochSummary::Builder m) { m.setEpoch(3); }), r);
  Dispatched(EncodeControl<proto::CommitReport>(
                 [](proto::CommitReport::Builder m) { m.setGeneration(4); }),
             r);
  Dispatched(EncodeControl<proto::Synced>([](proto::Synced::Builder m) { m.setChecksum(5); }), r);
  Dispatched(
      EncodeControl<proto::FirstStep>([](proto::FirstStep::Builder m) { m.setGeneration(6); }), r);
  Dispatched(EncodeControl<proto::CheckpointWritten>(
                 [](proto::CheckpointWritten::Builder m) { m.initPoint().setStep(7); }),
             r);
  Dispatched(EncodeControl<proto::Fault>([](proto::Fault::Builder m) { m.setMemberId(8); }), r);
  Dispatched(EncodeControl<proto::Draining>([](proto::Draining::Builder m) { m.setMemberId(9); }),
             r);
  Dispatched(EncodeControl<proto::Done>([](proto::Done::Builder m) { m.setSteps(10); }), r);
  Dispatched(
      EncodeControl<proto::WorkerStats>([](proto::WorkerStats::Builder m) { m.setRank(11); }), r);
  Dispatched(EncodeControl<proto::Evaluation>([](proto::Evaluation::Builder m) { m.setStep(12); }),
             r);
  Dispatched(EncodeControl<proto::ParamsChecksum>(
                 [](proto::ParamsChecksum::Builder m) { m.setChecksum(13); }),
             r);
  Dispatched(EncodeControl<proto::Shares>([](proto::Shares::Builder m) { m.setStepSamples(14); }),
             r);
  EXPECT_EQ(r.calls, (std::vector<std::string>{
                         "tick", "spec", "hello 1", "progress 2", "epoch 3", "commit 4", "synced 5",
                         "firstStep 6", "checkpoint 7", "fault 8", "draining 9", "done 10",
                         "stats 11", "evaluation 12", "params 13", "shares 14"}));
}

// A ToController message whose member is `which`: the union's discriminant
// is the first 16 bits of its data section (after the segment table and the
// root pointer).
std::string WithMember(uint16_t which) {
  std::string bytes = EncodeMessage<proto::ToController>([](proto::ToController::Builder) {});
  std::memcpy(&bytes[16], &which, sizeof(which));
  return bytes;
}

TEST(ControllerDispatchTest, RefusesWhatItDoesNotImplementNamingIt) {
  Recorder r;
  const auto refusal = [&](const std::string& bytes) -> std::string {
    try {
      Dispatched(bytes, r);
    } catch (const Unimplemented& e) {
      return e.what();
    }
    return "taken";
  };
  EXPECT_NE(refusal(EncodeMessage<proto::ToController>([](proto::ToController::Builder) {
            })).find("job controller: unimplemented message ToController.unset"),
            std::string::npos);
  EXPECT_NE(refusal(WithMember(77)).find("ToController.#77"), std::string::npos);
  EXPECT_TRUE(r.calls.empty());
  // And the next message is taken as ever.
  Dispatched(Tick(), r);
  EXPECT_EQ(r.calls, (std::vector<std::string>{"tick"}));
}

}  // namespace
}  // namespace elastic::trainer
