// The driver of an elastic job (head + local node agent + the control loop
// that decides generations) and the --join node agent: RunDriver and RunJoin.
//
// The driver alone publishes membership views (the head admits no joins by
// itself). Failures need no decision: the head drops a dead member from the
// view at once, which is a new generation the survivors rebuild on. Joins and
// graceful leaves are applied when rank 0 reports that the job stopped at a
// commit point the driver asked for (docs/elastic.md, "Control at commit points").
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "monitoring/run_report.h"
#include "runtime/actor.h"
#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/head_session.h"
#include "runtime/heartbeat_check.h"
#include "runtime/log.h"
#include "runtime/node_agent.h"
#include "runtime/options.h"
#include "runtime/preforked_workers.h"
#include "trainer/checkpoint.h"
#include "trainer/commit_state.h"
#include "trainer/data/dataset.h"
#include "trainer/elastic/controller/copy_store.h"
#include "trainer/elastic/controller/job_controller.h"
#include "trainer/elastic/controller/job_metrics.h"
#include "trainer/elastic/controller/job_presenter.h"
#include "trainer/elastic/controller/journal.h"
#include "trainer/elastic/controller/run_events.h"
#include "trainer/elastic/elastic.h"
#include "trainer/elastic/elastic_options.h"
#include "trainer/elastic/preemption_notice.h"
#include "trainer/elastic/protocol/control_messages.h"
#include "trainer/elastic/protocol/controller_dispatch.h"
#include "trainer/elastic/protocol/job_spec.h"
#include "trainer/model_export.h"
#include "trainer/progress.h"
#include "trainer/shares.h"

namespace elastic::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::MemberInfo;
using runtime::MembershipUpdate;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Say(const std::string& text) {
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

// SIGINT and SIGTERM to the driver, counted by the handler and acted on by the
// control loop: the first stops the job at the next epoch boundary, the second
// at the next commit, both with a checkpoint; the third ends the driver at
// once (its workers die with it, as after kill -9).
std::atomic<int> stop_signals{0};
std::atomic<int> last_stop_signal{0};

extern "C" void OnStopSignal(int signal) {
  last_stop_signal.store(signal);
  if (stop_signals.fetch_add(1) + 1 >= 3) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);  // delivered when this handler returns
  }
}

void InstallStopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

std::string Ids(const std::vector<uint64_t>& ids) {
  std::string out;
  for (uint64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

std::vector<uint64_t> MemberIds(const runtime::MembershipView& view) {
  std::vector<uint64_t> ids;
  for (const MemberInfo& member : view.members) ids.push_back(member.id);
  return ids;
}

// The live member `id` (in the view or pending) of `m`; nullptr if the head has none.
const MemberInfo* FindMember(const MembershipUpdate& m, uint64_t id) {
  for (const std::vector<MemberInfo>* list : {&m.view.members, &m.pending})
    for (const MemberInfo& member : *list)
      if (member.id == id) return &member;
  return nullptr;
}

// A job in --state-dir that this driver takes over: its journal, and the
// controller's copy read back (empty when there was none or it is unusable).
struct TakenOver {
  JournalRecord journal;
  std::string copy;
};

// What a controller taking a job over from its journal starts from.
RecoveredJob Recovered(const TakenOver& taken_over) {
  const JournalRecord& journal = taken_over.journal;
  RecoveredJob job;
  job.generation = journal.generation + 1;  // the restarted head's first (empty) view
  job.newest = journal.newest;
  job.world_of_newest = journal.world_of_newest;
  job.checkpoint = journal.checkpoint;
  if (!taken_over.copy.empty()) job.copy = journal.copy->point;
  return job;
}

// The job controller's actor: the shell around JobController. It turns the
// head's membership updates, the trainers' typed messages and its own clock
// ticks into events, and carries out the actions: views published on the head,
// orders told to the trainer actors, lines printed, metrics. What it shows of
// the job is JobPresenter's to decide; this actor prints it. One message at a
// time (the actor's strand), so neither needs a lock.
class ControllerActor : public runtime::Actor, private ControllerMessages {
 public:
  // A new job (`taken_over` empty) or one taken over from its journal.
  ControllerActor(const ElasticOptions& elastic, const TrainOptions& train, std::string job_id,
                  JobSettings job, ControllerConfig config,
                  const std::optional<TakenOver>& taken_over, runtime::Head& head,
                  runtime::ActorSystem& actors, JobMetrics& metrics, const MetricLabel& metric,
                  EventLog& events)
      : elastic_(elastic),
        train_(train),
        job_id_(std::move(job_id)),
        job_(std::move(job)),
        head_(head),
        actors_(actors),
        metrics_(metrics),
        metric_(metric),
        events_(events),
        reporter_(stdout, ProgressReporter::IsTerminal(stdout), train.log_every, metric),
        start_(Clock::now()),
        // Before the first sync nobody holds anything yet: the job starts anew.
        machine_(taken_over && taken_over->journal.started
                     ? JobController(config, Recovered(*taken_over), 0)
                     : JobController(config, 0)),
        copy_(taken_over ? taken_over->copy : ""),
        presenter_(taken_over ? JobPresenter::TakenOver(taken_over->journal.generation,
                                                        taken_over->journal.printed_epoch)
                              : JobPresenter()) {
    if (!elastic.state_dir.empty()) copies_.emplace(elastic.state_dir);
    if (taken_over && !copy_.empty()) stored_copy_ = taken_over->journal.copy;
  }

  // Two kinds of calls come in. The runtime's membership updates keep the
  // form the runtime gives them (ForwardMembershipTo: its own method, an
  // EncodeMembershipUpdate payload): the runtime knows nothing of this
  // schema. Everything else, the trainers' messages and this actor's own
  // ticks, is one ToController message, dispatched on its member; what is not
  // implemented here is refused (an AskError for an ask) and the next message taken.
  std::string Receive(const std::string& method, const std::string& payload) override {
    if (method == runtime::kMembershipMethod)
      return OnMembership(runtime::DecodeMembershipUpdate(payload)), "";
    if (method != kControlCall) RefuseUnimplemented("job controller", method);
    MessageBytes bytes(payload, "ToController");
    return Dispatch(bytes.Get<proto::ToController>(), *this);  // controller_dispatch.h
  }

  // The exit status, once the job is over.
  std::future<int> Finished() { return finished_.get_future(); }
  // Why the job is over, once Finished() is ready.
  const std::string& finish_reason() const { return finish_reason_; }
  bool started() const { return machine_.started(); }

 private:
  int64_t NowMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
  }
  void Feed(const Event& event) { Execute(machine_.Handle(event, NowMs())); }
  // Exhaustive at compile time: an action type without its Carry overload
  // below has no function to call and does not compile.
  void Execute(const std::vector<Action>& actions) {
    for (const Action& a : actions) std::visit([this](const auto& x) { Carry(x); }, a);
  }

  void OnMembership(const MembershipUpdate& update);
  // ControllerMessages: the trainers' messages and the ticks.
  void OnTick() override;
  std::string OnSpec() override;
  void OnHello(proto::Hello::Reader hello) override;
  void OnProgress(proto::Progress::Reader p) override;
  void OnEpoch(proto::EpochSummary::Reader e) override;
  void OnEvaluation(proto::Evaluation::Reader e) override;
  void OnCommit(proto::CommitReport::Reader c) override;
  void OnSynced(proto::Synced::Reader s) override;
  void OnFirstStep(proto::FirstStep::Reader f) override;
  void OnCheckpoint(proto::CheckpointWritten::Reader written) override;
  void OnFault(proto::Fault::Reader f) override;
  void OnDraining(proto::Draining::Reader draining) override;
  // `reason`: why it leaves, when it says (a worker let go for its speed).
  void OnMemberDraining(uint64_t member, const std::string& reason = "");
  void OnDone(proto::Done::Reader d) override;
  void OnStats(proto::WorkerStats::Reader stats) override;
  void OnParams(proto::ParamsChecksum::Reader params) override;
  void OnShares(proto::Shares::Reader shares) override;
  // A view: when the presenter announces it, says so and tells the metrics.
  void OnNewView(const runtime::MembershipView& view, const std::string& reason);

  void Carry(const action::Publish& publish);
  void Carry(const action::StartGeneration& start);
  void Carry(const action::RequestStop& request);
  void Carry(const action::TellOver& over);
  // Printed as before the notices were typed; the facts among them logged too.
  void Carry(const action::Notify& notify) {
    Say(RenderNotice(notify.notice));
    if (const std::optional<RunEvent> event = EventOfNotice(notify.notice)) events_.Append(*event);
  }
  void Carry(const action::WriteCopy& write);
  void Carry(const action::Journal&) { WriteJournalNow(kNotFinished); }
  void Carry(const action::Finish& finish);
  // Keeps the copy of `point` rank 0 sent (with a commit or a sync) as copy_
  // and writes it to --state-dir; the next journal names it.
  void KeepCopy(const capnp::Data::Reader& state, const StatePoint& point);
  // What a controller restarted in this one's place needs (--state-dir);
  // `exit_code` kNotFinished while the job goes on.
  static constexpr int kNotFinished = -1;
  void WriteJournalNow(int exit_code);
  // Tells the trainer actor of `member` (nothing if it is gone) a ToTrainer message.
  void TellTrainer(uint64_t member, const std::string& message);

  const ElasticOptions& elastic_;
  const TrainOptions& train_;
  const std::string job_id_;
  const JobSettings job_;  // what every worker gets as its spec, and the journal keeps
  runtime::Head& head_;
  runtime::ActorSystem& actors_;
  JobMetrics& metrics_;
  const MetricLabel metric_;
  EventLog& events_;
  ProgressReporter reporter_;
  int64_t progress_step_ = 0;  // the job's steps in all, as rank 0 last reported them
  const Clock::time_point start_;
  JobController machine_;
  std::promise<int> finished_;
  std::string finish_reason_;  // set before finished_ is
  bool finish_sent_ = false;

  std::string copy_;                       // rank 0's last state copy (proto::CommitReport.state)
  std::optional<CopyStore> copies_;        // --state-dir
  std::optional<StoredCopy> stored_copy_;  // the newest copy there, complete
  JobPresenter presenter_;                 // what of the job is shown
  int stop_signals_seen_ = 0;
  Clock::time_point last_runtime_stats_;
  MembershipUpdate last_membership_;  // the head's, as last forwarded
};

void ControllerActor::WriteJournalNow(int exit_code) {
  if (elastic_.state_dir.empty()) return;
  JournalRecord record;
  record.job_id = job_id_;
  record.job = job_;
  record.generation = machine_.generation();
  const runtime::HeadStats stats = head_.stats();
  record.next_member_id = stats.next_member_id;
  record.next_node_id = stats.next_node_id;
  record.started = machine_.started();
  record.finished = exit_code != kNotFinished;
  record.exit_code = record.finished ? exit_code : 0;
  record.newest = machine_.newest();
  record.world_of_newest = static_cast<uint32_t>(machine_.world_of_newest());
  record.checkpoint = machine_.checkpoint();
  record.printed_epoch = presenter_.printed_epoch();
  record.run_dir = std::filesystem::path(events_.path()).parent_path().string();
  // A copy rank 0 could not load is no source any more, here or after a restart.
  if (!machine_.copy()) stored_copy_.reset();
  record.copy = stored_copy_;
  try {
    WriteJournal(elastic_.state_dir, record);
    presenter_.JournalWritten();
    // Only now that the journal names the new copy may the older ones go.
    copies_->RemoveAllBut(stored_copy_);
  } catch (const std::exception& e) {
    if (!presenter_.WarnsOfJournalFailure(e.what())) return;
    Say(std::string("driver: warning: journal not written, a driver restarted with --state-dir "
                    "could not take this job over: ") +
        e.what());
  }
}

void ControllerActor::OnMembership(const MembershipUpdate& update) {
  // Only a session established again sends a snapshot: who went away while it
  // was lost was announced to nobody.
  if (update.kind == runtime::MembershipEventKind::kSnapshot) {
    for (uint64_t id : runtime::MembersGoneBetween(last_membership_, update)) {
      Say("driver: worker " + std::to_string(id) +
          " went away while the controller's session with the head was lost");
      events_.Append(run_event::Leave{id, 0, "gone while the head session was lost"});
      Feed(event::Gone{id, false});
    }
  }
  last_membership_ = update;
  switch (update.kind) {
    case runtime::MembershipEventKind::kFailed:
      metrics_.metrics().RecordMembershipChange(monitoring::MembershipChangeReason::kFailure);
      events_.Append(run_event::Leave{update.member_id, update.node_id, "failed", update.detail});
      Feed(event::Gone{update.member_id, true, update.node_id});
      break;
    case runtime::MembershipEventKind::kLeft:
      events_.Append(run_event::Leave{update.member_id, update.node_id, "left", update.detail});
      Feed(event::Gone{update.member_id, false, update.node_id});
      break;
    case runtime::MembershipEventKind::kExited:
      Feed(event::Exited{});
      break;
    case runtime::MembershipEventKind::kDraining:
      for (const MemberInfo& m : update.view.members)
        if (m.draining) OnMemberDraining(m.id);
      for (const MemberInfo& m : update.pending)
        if (m.draining) OnMemberDraining(m.id);
      break;
    default:
      break;
  }
  OnNewView(update.view, "membership");
  Feed(event::ViewChanged{update.view.generation, MemberIds(update.view)});
}

void ControllerActor::OnNewView(const runtime::MembershipView& view, const std::string& reason) {
  if (!presenter_.AnnouncesView(view.generation, view.members.size(), machine_.finished(),
                                Clock::now()))
    return;
  const std::vector<uint64_t> ids = MemberIds(view);
  Say("driver: generation " + std::to_string(view.generation) + ": " + std::to_string(ids.size()) +
      " workers [" + Ids(ids) + "]");
  events_.Append(run_event::View{view.generation, ids, reason});
  metrics_.OnGeneration(static_cast<int64_t>(view.generation), static_cast<int64_t>(ids.size()));
}

void ControllerActor::OnTick() {
  const int signals = stop_signals.load();
  if (signals != stop_signals_seen_) {
    stop_signals_seen_ = signals;
    Feed(event::StopSignal{signals, last_stop_signal.load() == SIGINT ? "SIGINT" : "SIGTERM"});
  }
  if (Clock::now() - last_runtime_stats_ >= std::chrono::seconds(1)) {
    last_runtime_stats_ = Clock::now();
    const runtime::HeadStats head = head_.stats();
    metrics_.OnRuntimeStats(head.messages_received + head.messages_sent, head.heartbeats_missed);
  }
  Feed(event::Tick{});
}

std::string ControllerActor::OnSpec() { return EncodeJobSpec(job_id_, job_); }

void ControllerActor::OnHello(proto::Hello::Reader hello) {
  // Only a member the head still has: one that died since has already been
  // reported gone, and must not come back as a ghost.
  const MembershipUpdate m = head_.Membership();
  const MemberInfo* member = FindMember(m, hello.getMemberId());
  if (member == nullptr) return;
  std::optional<StatePoint> holds;
  if (hello.getHoldsCommit()) holds = FromProto(hello.getCommit());
  events_.Append(run_event::Join{member->id, member->node_id, holds, member->pid,
                                 member->endpoint.host, progress_step_});
  Feed(event::Registered{member->id, member->node_id, holds});
}

void ControllerActor::OnProgress(proto::Progress::Reader p) {
  ProgressReport report;
  report.generation = p.getGeneration();
  report.epoch = p.getEpoch();
  report.step = p.getStep();
  report.steps_in_epoch = p.getStepsInEpoch();
  report.step_in_epoch = p.getStepInEpoch();
  report.seen = p.getSeen();
  report.loss = p.getLoss();
  report.accuracy = p.getAccuracy();
  report.lr = p.getLr();
  report.world = p.getWorld();
  progress_step_ = report.step;
  metrics_.OnProgress(report);
  if (presenter_.StartsProgressLine(report.epoch, report.generation))
    reporter_.StartEpoch(report.epoch + 1, train_.epochs, report.steps_in_epoch);
  reporter_.Step(report.step_in_epoch, report.step, static_cast<int64_t>(report.seen), report.loss,
                 report.accuracy, report.lr);
}

void ControllerActor::OnEpoch(proto::EpochSummary::Reader e) {
  if (!presenter_.EpochSummaryStands(e.getEpoch())) return;
  char line[512];
  std::snprintf(line, sizeof(line),
                "epoch %lld/%lld world %d | train loss %.4f %s | test loss %s %s | %s | %.1fs%s%s",
                static_cast<long long>(e.getEpoch()), static_cast<long long>(e.getEpochs()),
                e.getWorld(), e.getTrainLoss(), metric_.Format(e.getTrainAccuracy()).c_str(),
                metric_.FormatTestLoss(e.getTestLoss()).c_str(),
                metric_.Format(e.getTestAccuracy()).c_str(),
                metric_.FormatRate(e.getImagesPerSecond()).c_str(), e.getSeconds(),
                e.getArithmetic().size() > 0 ? " | " : "", e.getArithmetic().cStr());
  reporter_.Note(line);
  EpochReport report;
  report.epoch = e.getEpoch();
  report.world = e.getWorld();
  report.train_loss = e.getTrainLoss();
  report.train_accuracy = e.getTrainAccuracy();
  report.test_loss = e.getTestLoss();
  report.test_accuracy = e.getTestAccuracy();
  report.images_per_second = e.getImagesPerSecond();
  report.seconds = e.getSeconds();
  metrics_.OnEpoch(report);
  run_event::Epoch logged;
  logged.epoch = e.getEpoch();
  logged.epochs = e.getEpochs();
  logged.world = e.getWorld();
  logged.train_loss = e.getTrainLoss();
  logged.train_metric = e.getTrainAccuracy();
  logged.test_loss = e.getTestLoss();
  logged.test_metric = e.getTestAccuracy();
  logged.samples_per_second = e.getImagesPerSecond();
  logged.tokens_per_second = metric_.unit == "tok" ? metric_.Rate(e.getImagesPerSecond()) : 0;
  logged.seconds = e.getSeconds();
  logged.arithmetic = e.getArithmetic().cStr();
  logged.learning_rate = e.getLearningRate();
  events_.Append(logged);
}

void ControllerActor::OnEvaluation(proto::Evaluation::Reader e) {
  if (!presenter_.EvaluationStands(e.getStep())) return;
  EvaluationSummary summary;
  summary.step = e.getStep();
  summary.epoch = e.getEpoch();
  summary.epoch_fraction = e.getEpochFraction();
  summary.world = e.getWorld();
  summary.test_loss = e.getTestLoss();
  summary.test_accuracy = e.getTestAccuracy();
  summary.seconds = e.getSeconds();
  reporter_.Evaluated(summary);
  events_.Append(run_event::Evaluation{summary.step, summary.epoch, summary.epoch_fraction,
                                       summary.world, summary.test_loss, summary.test_accuracy,
                                       summary.seconds});
  metrics_.OnEvaluation(summary.test_loss, summary.test_accuracy);
}

void ControllerActor::OnCommit(proto::CommitReport::Reader c) {
  const bool copy = c.getState().size() > 0;
  events_.Append(run_event::Commit{c.getGeneration(), FromProto(c.getPoint()), c.getMemberId(),
                                   c.getStoppedOnRequest()});
  if (copy && c.getGeneration() == machine_.generation())
    KeepCopy(c.getState(), FromProto(c.getPoint()));
  Feed(event::Commit{c.getGeneration(), FromProto(c.getPoint()), copy, c.getStoppedOnRequest(),
                     c.getMemberId()});
}

void ControllerActor::KeepCopy(const capnp::Data::Reader& state, const StatePoint& point) {
  copy_ = runtime::ToBytes(state);
  if (!copies_) return events_.Append(run_event::ControllerCopy{point, ""});
  try {
    stored_copy_ = copies_->Write(point, copy_);
    events_.Append(run_event::ControllerCopy{
        point, (std::filesystem::path(elastic_.state_dir) / stored_copy_->file).string()});
    if (presenter_.SaysCopyWrittenAgain())
      Say("driver: the controller's copy is written to --state-dir again (" + ToString(point) +
          ")");
  } catch (const std::exception& e) {
    if (!presenter_.WarnsOfCopyFailure()) return;
    Say("driver: warning: the controller's copy of " + ToString(point) +
        " was not written to --state-dir: " + e.what() +
        "; training goes on, but a controller restarted now would go on from " +
        (stored_copy_ ? "its older copy (" + ToString(stored_copy_->point) + ")"
                      : std::string("the workers' memory or a checkpoint only")));
  }
}

void ControllerActor::OnSynced(proto::Synced::Reader s) {
  const bool copy = s.getState().size() > 0 && s.getGeneration() == machine_.generation();
  if (copy) {
    KeepCopy(s.getState(), FromProto(s.getPoint()));
    Say("driver: the controller's copy is now the state generation " +
        std::to_string(s.getGeneration()) + " restored from a worker (" +
        ToString(FromProto(s.getPoint())) + ")");
  }
  Feed(event::Synced{s.getGeneration(), FromProto(s.getPoint()), copy});
}

void ControllerActor::OnFirstStep(proto::FirstStep::Reader f) {
  const std::optional<Rescale> rescale =
      presenter_.FirstStep(f.getGeneration(), f.getWallSeconds(), WallNow(), Clock::now());
  if (!rescale) return;
  char line[256];
  std::snprintf(line, sizeof(line),
                "driver: rescale: generation %llu (%zu workers, %s): first step %.3f s after the "
                "membership change",
                static_cast<unsigned long long>(rescale->generation), rescale->world,
                rescale->reason.c_str(), rescale->seconds_after_view);
  Say(line);
  metrics_.OnRescale(rescale->seconds_after_view);
  events_.Append(run_event::FirstStep{rescale->generation, static_cast<int64_t>(rescale->world),
                                      rescale->seconds_after_view});
}

void ControllerActor::OnCheckpoint(proto::CheckpointWritten::Reader written) {
  events_.Append(run_event::Checkpoint{FromProto(written.getPoint()), written.getPath().cStr()});
  Feed(event::CheckpointWritten{FromProto(written.getPoint())});
}

void ControllerActor::OnFault(proto::Fault::Reader f) {
  events_.Append(run_event::Fault{f.getGeneration(), f.getMemberId(), f.getReason().cStr(),
                                  f.getStateUnavailable()});
  Feed(event::Fault{f.getGeneration(), f.getMemberId(), f.getReason().cStr(),
                    f.getStateUnavailable()});
}

void ControllerActor::OnDraining(proto::Draining::Reader draining) {
  OnMemberDraining(draining.getMemberId(), draining.getReason().cStr());
}

void ControllerActor::OnMemberDraining(uint64_t member, const std::string& reason) {
  if (presenter_.LogsDraining(member)) {
    if (!reason.empty())
      Say("driver: worker " + std::to_string(member) + " is let go: " + reason +
          "; it leaves like a graceful leave, not blacklisted");
    events_.Append(run_event::Draining{member, reason});
  }
  Feed(event::Draining{member});
}

void ControllerActor::OnDone(proto::Done::Reader d) {
  char line[256];
  std::snprintf(line, sizeof(line), "done: %lld epochs, %lld steps, test %s%s",
                static_cast<long long>(d.getEpochs()), static_cast<long long>(d.getSteps()),
                metric_.FormatLong(d.getTestAccuracy()).c_str(),
                d.getEarlyStop() ? " (early stop)" : "");
  reporter_.Note(line);
  reporter_.Note(TrainedModelNote(train_.checkpoint_dir, !train_.model_file.empty()).c_str());
  events_.Append(run_event::Done{d.getGeneration(), d.getEpochs(), d.getSteps(),
                                 d.getTestAccuracy(), d.getEarlyStop()});
  Feed(event::Done{d.getGeneration()});
}

void ControllerActor::OnParams(proto::ParamsChecksum::Reader p) {
  events_.Append(run_event::Params{p.getGeneration(), p.getMemberId(), p.getRank(), p.getWorld(),
                                   p.getChecksum(), FromProto(p.getPoint()), p.getPid()});
}

void ControllerActor::OnShares(proto::Shares::Reader s) {
  // A plan of a generation already gone names ranks of another view.
  const std::vector<uint64_t>& view = machine_.view();
  const size_t world = view.size();
  if (s.getGeneration() != machine_.generation() || s.getShares().size() != world ||
      s.getSpeeds().size() != world || s.getSlowdowns().size() != world)
    return;
  run_event::Shares logged;
  logged.generation = s.getGeneration();
  logged.point = FromProto(s.getPoint());
  logged.step_samples = s.getStepSamples();
  std::vector<int64_t> shares;
  std::vector<double> speeds, slowdowns;
  std::vector<std::string> names;
  for (unsigned r = 0; r < world; ++r) {
    shares.push_back(s.getShares()[r]);
    speeds.push_back(s.getSpeeds()[r]);
    slowdowns.push_back(s.getSlowdowns()[r]);
    names.push_back("worker " + std::to_string(view[r]));
    logged.workers.push_back({view[r], shares.back(), speeds.back(), slowdowns.back()});
  }
  // Every plan updates the metrics; a new split is also said and logged.
  if (s.getChanged()) {
    Say("driver: " + DescribeShares(shares, slowdowns, s.getStepSamples(), names));
    events_.Append(logged);
  }
  try {
    metrics_.OnShares(shares, speeds);
  } catch (const std::invalid_argument& e) {  // a negative or non-finite value
    Say(std::string("driver: warning: shares not exported: ") + e.what());
  }
}

void ControllerActor::OnStats(proto::WorkerStats::Reader stats) {
  try {
    metrics_.OnWorkerStats(stats.getMemberId(), FromProto(stats));
  } catch (const std::invalid_argument& e) {
    if (presenter_.WarnsOfBadStats(stats.getMemberId()))
      Say(std::string("driver: warning: ") + e.what());
  }
}

void ControllerActor::Carry(const action::Publish& publish) {
  const std::vector<MemberInfo> before = head_.Membership().view.members;
  runtime::MembershipView view;
  try {
    view = head_.PublishView(publish.members);
  } catch (const std::invalid_argument& e) {
    // A member died between the decision and the publication, and the head's
    // word of it is queued behind this message: tell the machine now, or it
    // decides the same view again and again and the word never gets through.
    Say(std::string("driver: view not published: ") + e.what());
    const MembershipUpdate now = head_.Membership();
    for (uint64_t id : publish.members)
      if (FindMember(now, id) == nullptr) Feed(event::Gone{id, false});
    return Feed(event::ViewChanged{now.view.generation, MemberIds(now.view)});
  }
  if (presenter_.CountsMembershipChanges(machine_.started())) {
    size_t stayed = 0;
    for (const MemberInfo& member : before)
      stayed += std::count(publish.members.begin(), publish.members.end(), member.id);
    if (publish.members.size() > stayed)
      metrics_.metrics().RecordMembershipChange(monitoring::MembershipChangeReason::kJoin,
                                                publish.members.size() - stayed);
    if (before.size() > stayed)
      metrics_.metrics().RecordMembershipChange(monitoring::MembershipChangeReason::kLeave,
                                                before.size() - stayed);
  }
  Say("driver: published generation " + std::to_string(view.generation) + " with " +
      std::to_string(publish.members.size()) + " workers [" + Ids(publish.members) + "] (" +
      publish.reason + ")");
  OnNewView(view, publish.reason);
  Feed(event::ViewChanged{view.generation, publish.members});
}

void ControllerActor::Carry(const action::StartGeneration& start) {
  presenter_.GenerationStarting(start.reason);
  events_.Append(run_event::Generation{start.generation, start.members, start.source, start.reason,
                                       start.stop});
  if (start.source.kind != SourceKind::kMember && start.source.kind != SourceKind::kFresh) {
    Say("driver: generation " + std::to_string(start.generation) + " restores " +
        ToString(start.source.kind) + " (" + ToString(start.source.point) + ")");
  }
  for (size_t rank = 0; rank < start.members.size(); ++rank) {
    const std::string message = EncodeControl<proto::Generation>([&](proto::Generation::Builder g) {
      g.setGeneration(start.generation);
      auto ids = g.initMemberIds(static_cast<unsigned>(start.members.size()));
      for (size_t i = 0; i < start.members.size(); ++i)
        ids.set(static_cast<unsigned>(i), start.members[i]);
      proto::StateSource::Builder source = g.initSource();
      source.setKind(ToProto(start.source.kind));
      source.setRank(start.source.rank);
      ToProto(start.source.point, source.initPoint());
      // Only rank 0 loads the copy; the others get it from rank 0's broadcast.
      if (start.source.kind == SourceKind::kControllerCopy && rank == 0)
        source.setState(runtime::AsData(copy_));
      g.setStop(start.stop);
      g.setReason(start.reason);
      g.setSendCopy(start.send_copy);
    });
    TellTrainer(start.members[rank], message);
  }
}

void ControllerActor::Carry(const action::RequestStop& request) {
  TellTrainer(request.member, EncodeControl<proto::StopRequest>([&](proto::StopRequest::Builder r) {
                r.setGeneration(request.generation);
                r.setAtNextCommit(request.at_next_commit);
              }));
}

void ControllerActor::Carry(const action::TellOver& over) {
  TellTrainer(over.member, EncodeControl<proto::JobOver>(
                               [&](proto::JobOver::Builder o) { o.setReason(over.reason); }));
}

void ControllerActor::Carry(const action::WriteCopy& write) {
  const std::string what =
      "the controller's copy of the last commit (" + ToString(write.point) + ")";
  if (train_.checkpoint_dir.empty()) {
    Say("driver: no worker is left and no --checkpoint-dir is set: " + what +
        " is lost with this driver");
    return;
  }
  try {
    // The copy is the commit rank 0 sealed; its learner state is what a
    // checkpoint holds.
    const Commit commit = Commit::Open(head_.token(), copy_, "rank 0's last copy");
    std::filesystem::create_directories(train_.checkpoint_dir);
    const std::string path = CheckpointPath(train_.checkpoint_dir);
    WriteCheckpointFile(path, commit.learner);
    events_.Append(run_event::Checkpoint{write.point, path, true});
    Say("driver: no worker is left; wrote " + what + " to " + path +
        " (continue with --resume); the model files beside it are those of the last checkpoint "
        "a worker wrote");
  } catch (const std::exception& e) {
    Say("driver: error: no worker is left and " + what + " could not be written: " + e.what());
  }
}

void ControllerActor::Carry(const action::Finish& finish) {
  if (finish_sent_) return;
  finish_sent_ = true;
  finish_reason_ = finish.reason;
  WriteJournalNow(finish.exit_code);
  finished_.set_value(finish.exit_code);
}

void ControllerActor::TellTrainer(uint64_t member, const std::string& message) {
  const MembershipUpdate m = head_.Membership();
  const MemberInfo* info = FindMember(m, member);
  if (info == nullptr) return;
  try {
    actors_.Remote(kTrainerActor, info->endpoint).Tell(kControlCall, message);
  } catch (const std::exception& e) {
    Say("driver: could not tell worker " + std::to_string(member) + ": " + e.what());
  }
}

// Keeps the head up until every worker, pending joiners included, has learnt
// that the job is over and left, and the other machines' node agents are gone.
void WaitForEveryoneToLeave(runtime::Head& head, std::chrono::seconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    const MembershipUpdate m = head.Membership();
    if (m.view.members.empty() && m.pending.empty() && head.stats().nodes_connected <= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// --run-dir; else, for a job taken over, the one its journal names (its
// event log goes on there); else DefaultRunDirectory(), as in every mode.
std::string RunDirectory(const ElasticOptions& elastic,
                         const std::optional<TakenOver>& taken_over) {
  if (!elastic.run_dir.empty()) return elastic.run_dir;
  if (taken_over && !taken_over->journal.run_dir.empty()) return taken_over->journal.run_dir;
  return DefaultRunDirectory();
}

std::string LocalHostFor(const std::string& listen) {
  return listen == "0.0.0.0" || listen == "::" ? "127.0.0.1" : listen;
}

// The unfinished job in --state-dir, which this driver takes over; nullopt
// for a new job. A journal that cannot be read stops the driver: starting a
// new job over it would silently abandon the old one.
std::optional<TakenOver> JobToTakeOver(const ElasticOptions& elastic, bool resume,
                                       const JobSettings& command_line,
                                       const std::vector<std::string>& given) {
  if (elastic.state_dir.empty()) return std::nullopt;
  std::optional<JournalRecord> journal;
  try {
    journal = ReadJournal(elastic.state_dir);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(e.what()) +
                             "; move it away to start a new job in --state-dir " +
                             elastic.state_dir);
  }
  if (!journal) return std::nullopt;
  if (journal->finished) {
    const std::string refusal = RefusalToReuse(elastic.state_dir, *journal, resume);
    if (!refusal.empty()) throw std::runtime_error(refusal);
    Say("driver: the job in --state-dir " + elastic.state_dir + " ended (exit " +
        std::to_string(journal->exit_code) + "); --resume starts a new job there");
    return std::nullopt;
  }
  Say("driver: taking over job " + journal->job_id + " from " + JournalPath(elastic.state_dir) +
      ": generation " + std::to_string(journal->generation) + ", newest commit " +
      (journal->newest ? ToString(*journal->newest) + " held by " +
                             std::to_string(journal->world_of_newest) + " workers"
                       : std::string("none")) +
      ", checkpoint " + (journal->checkpoint ? ToString(*journal->checkpoint) : "none") +
      "; its workers reconnect and continue from the commit they hold");
  if (journal->job_read_from_flags) {
    Say("driver: the journal predates typed job settings; the job's flags were read from it as "
        "text, and it is journaled typed from now on");
  }
  // The job keeps its settings: what this command line gives otherwise is
  // said, and a change that makes it another job stops the driver.
  const std::vector<FlagChange> changes = ChangesToJob(journal->job, command_line, given);
  const std::string refusal = RefusalOfChanges(changes, elastic.state_dir);
  if (!refusal.empty()) throw std::runtime_error(refusal);
  for (const FlagChange& change : changes) {
    Say("driver: warning: --" + change.name + "=" + change.given_value +
        " does not apply: the job taken over keeps --" + change.name + "=" + change.job_value);
  }
  TakenOver taken_over{*journal, ""};
  if (journal->copy) {
    try {
      taken_over.copy = CopyStore(elastic.state_dir).Read(*journal->copy);
      Say("driver: the controller's copy of " + ToString(journal->copy->point) + " is back (" +
          journal->copy->file + ", " + std::to_string(taken_over.copy.size()) + " bytes)");
    } catch (const std::exception& e) {
      Say(std::string("driver: warning: ") + e.what() +
          "; the job goes on without it, from what the workers hold or a checkpoint");
    }
  }
  return taken_over;
}

// A copy sealed under another token means this driver has another
// --token-file than the job: its workers could not reconnect either, and
// going on would drop the copy. Stops the driver before anything changes.
void CheckCopySeal(const std::optional<TakenOver>& taken_over, const std::string& token,
                   const std::string& state_dir) {
  if (!taken_over || taken_over->copy.empty()) return;
  try {
    Commit::Open(token, taken_over->copy, "the controller's copy in --state-dir");
  } catch (const StateTransferError& e) {
    throw std::runtime_error(std::string(e.what()) +
                             ": this driver's cluster token is not the job's; start it with the "
                             "job's --token-file (or move " +
                             state_dir + " away to start a new job there)");
  }
}

// --preemption-notice: drains `agent`'s workers when this machine's notice
// appears; nullptr when the flag is not set.
std::unique_ptr<PreemptionWatcher> WatchForPreemption(const ElasticOptions& elastic,
                                                      runtime::NodeAgent& agent,
                                                      const std::string& who) {
  if (elastic.preemption_notice.empty()) return nullptr;
  const NoticeSource source = ParseNoticeSource(elastic.preemption_notice);
  Say(who + ": watching " + Describe(source) + " for a preemption notice");
  return std::make_unique<PreemptionWatcher>(
      source, std::chrono::seconds(1),
      [&agent, who](const std::string& notice) {
        Say(who + ": preemption notice (" + notice + "): draining this machine's workers");
        agent.Drain("preemption notice: " + notice);
      },
      [who](const std::string& line) { Say(who + ": " + line); });
}

}  // namespace

ControllerConfig ConfigFor(const ElasticOptions& elastic, const TrainOptions& train) {
  const auto ms = [](double seconds) { return static_cast<int64_t>(seconds * 1000); };
  ControllerConfig config;
  // A controller with no workers of its own starts once --min-workers joined.
  config.initial_workers = elastic.controller_only ? elastic.min_workers : elastic.workers;
  config.min_workers = elastic.min_workers;
  config.max_workers = elastic.max_workers;
  // Workers load the data set before they register: give them at least two
  // minutes on a loaded machine, whatever --rendezvous-timeout says.
  config.start_timeout_ms = std::max<int64_t>(ms(elastic.rendezvous_timeout), 120000);
  config.rendezvous_timeout_ms = ms(elastic.rendezvous_timeout);
  config.drain_timeout_ms = ms(elastic.drain_timeout);
  config.admit_at_commit = elastic.admit_at == "commit";
  config.join_window_ms = ms(elastic.join_window);
  config.blacklist_after = elastic.blacklist_after;
  config.blacklist_ms = ms(elastic.blacklist_seconds);
  config.resume = train.resume;
  config.fault_give_up_ms = ms(elastic.rendezvous_timeout + elastic.step_timeout);
  // A stall of the driver is judged as its transport judges one
  // (runtime/heartbeat_check.h); the workers it costs their session come back
  // within their --reconnect-timeout or not at all.
  config.stall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        runtime::StallThreshold(TransportFor(elastic).heartbeat_timeout))
                        .count();
  config.stall_aftermath_ms = ms(elastic.heartbeat_timeout);
  config.stall_grace_ms = ms(elastic.reconnect_timeout);
  return config;
}

namespace {

runtime::HeadOptions HeadOptionsFor(const ElasticOptions& elastic,
                                    const std::optional<TakenOver>& taken_over) {
  runtime::HeadOptions options;
  if (taken_over) {
    // One past the journal's generation: a view published just before the
    // old driver died may not have reached the journal.
    options.first_generation = taken_over->journal.generation + 1;
    options.first_member_id = std::max<uint64_t>(1, taken_over->journal.next_member_id);
    options.first_node_id = std::max<uint64_t>(1, taken_over->journal.next_node_id);
  }
  options.listen_host = elastic.listen;
  options.port = static_cast<uint16_t>(elastic.port);
  options.admit_joins = false;
  options.transport = TransportFor(elastic);
  if (!elastic.token_file.empty()) {
    // Creates the file only where none exists (atomically: a second driver
    // racing this one uses the token that won); the head then reads and
    // checks whichever file is there.
    if (runtime::WriteTokenFile(elastic.token_file, runtime::GenerateToken())) {
      Say("driver: wrote a new cluster token to " + elastic.token_file + " (mode 0600)");
    }
    options.token_file = elastic.token_file;
  }
  return options;
}

// The controller actor listens where the head does, on the next port: a
// worker reaches it at the head's host (the one it already reaches, maybe
// through a NAT or a Kubernetes Service that forwards only known ports).
runtime::ActorSystemOptions ControllerActorOptions(const ElasticOptions& elastic,
                                                   const runtime::Head& head) {
  runtime::ActorSystemOptions options;
  options.token = head.token();
  options.listen_host = elastic.listen;
  options.port = elastic.port == 0 ? 0 : static_cast<uint16_t>(head.port() + 1);
  options.advertise_host = LocalHostFor(elastic.listen);
  options.threads = 1;
  options.transport = TransportFor(elastic);
  // No head client: the controller's HeadSession registers it, and again
  // whenever that session was lost.
  options.name = "controller";
  return options;
}

// The driver's own session with its head, through which the controller is
// registered and hears the membership: kept for as long as the workers wait
// for a lost head (--reconnect-timeout); past that nobody is left to find it.
runtime::HeadSessionOptions ControllerSessionOptions(const ElasticOptions& elastic,
                                                     const runtime::Head& head) {
  runtime::HeadSessionOptions options;
  options.client.host = LocalHostFor(elastic.listen);
  options.client.port = head.port();
  options.client.token = head.token();
  options.client.name = "driver";
  options.client.transport = TransportFor(elastic);
  options.reconnect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(elastic.reconnect_timeout * 1000));
  return options;
}

// What the head holds for the job controller: its name in the actor directory
// (workers look it up) and the membership forwarded to it. On a session
// established again after a loss the controller is also told the membership
// as it is now, before any later update, and so learns who went away while
// nobody listened (ControllerActor::OnMembership).
void RegisterController(runtime::HeadClient& client, const runtime::Endpoint& endpoint,
                        const runtime::ActorRef& controller, bool again) {
  client.RegisterActor(kControllerActor, endpoint);
  if (!again) {
    runtime::ForwardMembershipTo(client, controller);
    return;
  }
  runtime::ForwardMembershipWithSnapshotTo(client, controller);
  Say(std::string("driver: the job controller's session with the head was lost; registered '") +
      kControllerActor + "' again and subscribed to the membership");
}

// The controller's exit code, or kExitError once its session with the head is
// gone for good: workers could not find it and it would hear of no failure.
int WaitForTheJob(std::future<int>& finished, const runtime::HeadSession& session) {
  while (finished.wait_for(std::chrono::milliseconds(250)) != std::future_status::ready) {
    const std::string lost = session.failure();
    if (lost.empty()) continue;
    Say("driver: error: the job controller " + lost +
        "; no worker can reach it and it hears of no failure: stopping");
    return kExitError;
  }
  return finished.get();
}

// A node agent of this job's head: the driver's own, or a --join one.
runtime::NodeAgentOptions NodeAgentOptionsFor(const ElasticOptions& elastic,
                                              const std::string& host, uint16_t port,
                                              std::string token, std::string name) {
  runtime::NodeAgentOptions options;
  options.head_host = host;
  options.head_port = port;
  options.token = std::move(token);
  options.name = std::move(name);
  options.transport = TransportFor(elastic);  // passed on to its workers
  options.head_reconnect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(elastic.reconnect_timeout * 1000));
  options.grace =
      std::chrono::milliseconds(static_cast<int64_t>((elastic.drain_timeout + 60) * 1000));
  return options;
}

// The controller's clock: a tick every 50 ms while it lives.
class Ticker {
 public:
  explicit Ticker(runtime::ActorRef controller)
      : thread_([this, controller] {
          const std::string tick = Tick();
          while (ticking_.load()) {
            controller.Tell(kControlCall, tick);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  ~Ticker() {
    ticking_.store(false);
    thread_.join();
  }

 private:
  std::atomic<bool> ticking_{true};
  std::thread thread_;
};

// This machine's workers (none with --controller-only, which says where to join).
std::unique_ptr<runtime::NodeAgent> StartLocalWorkers(const ElasticOptions& elastic,
                                                      const runtime::Head& head) {
  const std::string host = LocalHostFor(elastic.listen);
  if (elastic.controller_only) {
    Say("driver: controller only: waiting for --min-workers=" +
        std::to_string(elastic.min_workers) + " workers to join (--join " + host + ":" +
        std::to_string(head.port()) + ")");
    return nullptr;
  }
  auto agent = std::make_unique<runtime::NodeAgent>(
      NodeAgentOptionsFor(elastic, host, head.port(), head.token(), "driver-node"));
  agent->SpawnWorkers(static_cast<uint32_t>(elastic.workers));
  Say("driver: started " + std::to_string(elastic.workers) + " workers on node " +
      std::to_string(agent->node_id()));
  return agent;
}

}  // namespace

int RunDriver(const ElasticOptions& command_line_elastic, const TrainOptions& command_line_train,
              const std::vector<std::string>& given, const JobProgram& program) {
  monitoring::MetricsOptions metrics_options;
  metrics_options.address = command_line_elastic.metrics_address;
  metrics_options.port = command_line_elastic.metrics_port;
  InstallStopSignalHandlers();
  JobMetrics metrics(metrics_options,
                     command_line_elastic.metrics_port == ElasticOptions().metrics_port);
  if (!metrics.url().empty()) Say("driver: metrics at " + metrics.url());

  // The job's settings: this command line's for a new job; the journal's for
  // one taken over, with this process's own (ports, addresses, token file)
  // from its command line.
  JobSettings job{command_line_train, command_line_elastic};
  std::optional<TakenOver> taken_over =
      JobToTakeOver(command_line_elastic, command_line_train.resume, job, given);
  if (taken_over) {
    job.train = taken_over->journal.job.train;
    TakeElasticScope(taken_over->journal.job.elastic, &job.elastic);
  }
  const TrainOptions& train = job.train;
  const ElasticOptions& elastic = job.elastic;
  const std::string job_id = taken_over ? taken_over->journal.job_id : NewJobId();
  if (elastic.state_dir.empty() && elastic.state_copy_every > 0)
    Say("driver: note: without --state-dir the controller's copy of the job's state is kept in "
        "this process's memory only: if the driver dies, the copy dies with it and no new driver "
        "can take the job over");
  // A job taken over writes where it did; a new one must not replace an
  // earlier run's checkpoint with a fresh model's.
  if (!taken_over) CheckNoCheckpointToReplace(train.checkpoint_dir, train.resume);

  runtime::Head head(HeadOptionsFor(elastic, taken_over));
  CheckCopySeal(taken_over, head.token(), elastic.state_dir);
  Say("driver: head listening on " + elastic.listen + ":" + std::to_string(head.port()) +
      (elastic.token_file.empty() ? " (random token; other machines cannot join without "
                                    "--token-file)"
                                  : " (token in " + elastic.token_file + ")"));

  if (program.metric.unit == "tok") metrics.SetTokensPerSample(program.metric.units_per_sample);
  const std::string run_dir = RunDirectory(command_line_elastic, taken_over);
  EventLog events((std::filesystem::path(run_dir) / kEventsFile).string(),
                  [](const std::string& line) { Say("driver: " + line); });
  Say("driver: events in " + events.path());
  events.Append(run_event::Start{
      job_id, taken_over.has_value(), train.model_file.empty() ? train.model : train.model_file,
      train.dataset, train.epochs, elastic.controller_only ? 0 : elastic.workers,
      program.metric.long_name, elastic.listen + ":" + std::to_string(head.port()), metrics.url()});
  runtime::ActorSystem actors(ControllerActorOptions(elastic, head));
  auto controller =
      std::make_shared<ControllerActor>(elastic, train, job_id, job, ConfigFor(elastic, train),
                                        taken_over, head, actors, metrics, program.metric, events);
  std::future<int> finished = controller->Finished();
  const runtime::ActorRef ref = actors.Spawn(kControllerActor, controller);
  // A session of the driver's own with its head may still be lost (a stall
  // on this side only, a network between them): it registers again.
  const runtime::HeadSession session(
      ControllerSessionOptions(elastic, head),
      [endpoint = actors.endpoint(), ref](runtime::HeadClient& client, bool again) {
        RegisterController(client, endpoint, ref, again);
      });
  std::optional<Ticker> ticker(std::in_place, ref);
  const std::unique_ptr<runtime::NodeAgent> agent = StartLocalWorkers(elastic, head);
  const std::unique_ptr<PreemptionWatcher> watcher =
      agent ? WatchForPreemption(elastic, *agent, "driver") : nullptr;

  const int code = WaitForTheJob(finished, session);
  // The controller's words when it decided; a lost session ended it otherwise
  // (finish_reason_ is written before the promise, so only then is it read).
  const std::string end_reason =
      finished.valid() ? std::string("the job controller lost its session with the head")
                       : controller->finish_reason();
  // The members of a stop generation sync and rank 0 writes the checkpoint;
  // then everyone, pending joiners included, learns the job is over and leaves.
  WaitForEveryoneToLeave(head, std::chrono::seconds(code == kExitStopped ? 120 : 15));
  ticker.reset();
  // Last: after the stop generation's checkpoint and everyone's leave.
  events.Append(run_event::End{code, end_reason});
  if (code == kExitStopped && !train.checkpoint_dir.empty() && controller->started())
    Say("driver: checkpoint of the last commit: " + train.checkpoint_dir +
        " (continue with --resume)");
  if (controller->started()) {
    try {
      monitoring::RunReportOptions options;
      options.title = program.title;
      Say("driver: report " +
          monitoring::WriteRunReport(SeriesFromEvents(events.path()), run_dir, options));
    } catch (const std::exception& e) {
      Say(std::string("driver: warning: no report: ") + e.what());
    }
  }
  if (agent && !agent->WaitForWorkers(std::chrono::seconds(60))) {
    Say("driver: workers did not exit within 60 s; stopping them");
    agent->StopWorkers();
  }
  metrics.AwaitFinalScrape();
  return code;
}

int RunJoin(const ElasticOptions& elastic, const JobProgram& program) {
  std::string host;
  uint16_t port = 0;
  ParseHostPort(elastic.join, &host, &port);
  runtime::NodeAgent::BlockTerminationSignals();
  char hostname[256] = "node";
  ::gethostname(hostname, sizeof(hostname) - 1);
  runtime::NodeAgentOptions options =
      NodeAgentOptionsFor(elastic, host, port, runtime::ReadTokenFile(elastic.token_file),
                          std::string("join@") + hostname);
  options.preforked = program.preforked_workers;
  if (options.preforked != nullptr && options.preforked->waiting() == 0) {
    ELASTIC_LOG(kDebug, "join", "no preforked workers: " << options.preforked->why_none());
  }
  runtime::NodeAgent agent(options);
  agent.SpawnWorkers(static_cast<uint32_t>(elastic.workers));
  Say("join: node " + std::to_string(agent.node_id()) + " added " +
      std::to_string(elastic.workers) + " workers to " + elastic.join +
      "; they enter at the job's next commit (the next epoch boundary under "
      "--admit-at=epoch). SIGTERM here drains them.");
  const std::unique_ptr<PreemptionWatcher> watcher = WatchForPreemption(elastic, agent, "join");
  return agent.RunUntilSignalled();
}

}  // namespace elastic::trainer
