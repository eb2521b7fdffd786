#include "trainer/elastic/controller/job_controller.h"

#include <algorithm>
#include <tuple>

namespace elastic::trainer {
namespace {

bool Contains(const std::vector<uint64_t>& ids, uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

JoinWindow::JoinWindow(size_t ready, int64_t now_ms)
    : opened_ms_(now_ms), last_arrival_ms_(now_ms), gathered_(ready) {}

void JoinWindow::Count(size_t ready, int64_t now_ms) {
  if (ready <= gathered_) return;
  gathered_ = ready;
  last_arrival_ms_ = now_ms;
}

bool JoinWindow::Closed(int64_t now_ms, int64_t window_ms) const {
  return now_ms - last_arrival_ms_ >= window_ms || now_ms - opened_ms_ >= kJoinWindows * window_ms;
}

JobController::JobController(ControllerConfig config, int64_t now_ms)
    : config_(std::move(config)), now_(now_ms), phase_(Starting{now_ms}) {}

JobController::JobController(ControllerConfig config, const RecoveredJob& recovered, int64_t now_ms)
    : config_(std::move(config)),
      now_(now_ms),
      phase_(Recovering{now_ms, recovered.world_of_newest, recovered.wait_ms}),
      generation_(recovered.generation),
      started_(true),
      newest_(recovered.newest),
      copy_(recovered.copy),
      checkpoint_(recovered.checkpoint) {}

std::vector<Action> JobController::Handle(const Event& event, int64_t now_ms) {
  now_ = now_ms;
  out_.clear();
  if (const auto* over = std::get_if<Finished>(&phase_)) {
    // The job is over: a worker that still comes is told so; nothing else changes.
    if (const auto* registered = std::get_if<event::Registered>(&event))
      out_.push_back(action::TellOver{registered->member, over->reason});
    return std::move(out_);
  }
  NoticeStall(std::holds_alternative<event::Tick>(event));
  // One line per event type and no generic case: an event added to Event
  // without its line here does not compile.
  std::visit(Overloaded{
                 [this](const event::Tick&) { OnTick(); },
                 [this](const event::Registered& e) { OnRegistered(e); },
                 [this](const event::Gone& e) { OnGone(e); },
                 [this](const event::Exited&) {
                   // Only the start judges exits: a job that runs sees its workers as members.
                   if (auto* starting = std::get_if<Starting>(&phase_)) ++starting->exited;
                 },
                 [this](const event::ViewChanged& e) { OnViewChanged(e); },
                 [this](const event::Draining& e) { OnDraining(e); },
                 [this](const event::Commit& e) { OnCommit(e); },
                 [this](const event::Synced& e) { OnSynced(e); },
                 [this](const event::CheckpointWritten& e) { OnCheckpointWritten(e); },
                 [this](const event::Fault& e) { OnFault(e); },
                 [this](const event::Done& e) { OnDone(e); },
                 [this](const event::StopSignal& e) { OnStopSignal(e); },
             },
             event);
  // Whatever changed, the decisions that depend on the whole state are taken now.
  if (!finished()) OnTick();
  return std::move(out_);
}

void JobController::OnTick() {
  if (publishing_) return;
  // The phases are copied into Start and Recover: both leave them.
  std::visit(Overloaded{
                 [this](const Starting& starting) { Start(starting); },
                 [this](const Recovering& recovering) { Recover(recovering); },
                 [this](const Training&) { Run(); },
                 [this](const StopAwaited&) { Run(); },
                 [this](const Idle&) { Run(); },
                 [this](const TooFew&) { Run(); },
                 [this](const Gathering&) { Run(); },
                 [](const Stopping&) {},  // the stop generation's view ends the job
                 [](const Finished&) {},
             },
             phase_);
}

bool JobController::Running() const {
  return std::holds_alternative<Training>(phase_) || std::holds_alternative<StopAwaited>(phase_) ||
         std::holds_alternative<Idle>(phase_) || std::holds_alternative<TooFew>(phase_) ||
         std::holds_alternative<Gathering>(phase_);
}

void JobController::EnterView() {
  if (static_cast<int64_t>(view_.size()) >= config_.min_workers) {
    phase_ = Training{};
  } else if (!std::holds_alternative<TooFew>(phase_) &&
             !std::holds_alternative<Gathering>(phase_)) {
    phase_ = Idle{};
  }
}

void JobController::OnRegistered(const event::Registered& e) {
  Member& member = members_[e.member];
  member.node = e.node;
  member.holds = e.holds;
}

void JobController::OnGone(const event::Gone& e) {
  members_.erase(e.member);
  holders_.erase(e.member);
  // A failure the head reported right after this process stalled may be the
  // stall's doing (the worker saw the head silent): not the node's fault.
  if (!e.failed || e.member == 0 || InStallAftermath()) return;
  // The node comes with the head's word of the failure, not from the member's
  // Registered: a worker that died before its hello was handled counts too.
  const uint64_t node = e.node;
  if (node == 0) return;
  const int64_t failures = ++failures_by_node_[node];
  if (failures < config_.blacklist_after) return;
  // A node whose workers keep dying (bad GPU, full disk, flaky network) would
  // cost a rollback each time: stop admitting it for a while.
  failures_by_node_[node] = 0;
  blacklisted_until_[node] = now_ + config_.blacklist_ms;
  Notify(notice::NodeBlacklisted{node, config_.blacklist_ms, failures});
}

void JobController::OnViewChanged(const event::ViewChanged& e) {
  publishing_ = false;
  if (e.generation <= generation_) return;
  generation_ = e.generation;
  view_ = e.members;
  // A restarted head's first view is empty: the workers are still coming back.
  if (std::holds_alternative<Recovering>(phase_)) return;
  // Starting stays so until it publishes; a stop generation keeps stopping.
  if (Running()) EnterView();
  const std::string reason = next_reason_.empty() ? "a worker failed or left" : next_reason_;
  next_reason_.clear();
  out_.push_back(action::Journal{});
  const auto* stopping = std::get_if<Stopping>(&phase_);
  const std::string stop = stopping ? stopping->why : std::string();
  if (view_.empty()) {
    if (!stop.empty()) return Finish(kExitStopped, stop);
    if (!started_) return;
    if (!StateAvailable()) return StateLostUnlessStalled(StateLoss::kEveryWorkerLost);
    return Notify(notice::EveryWorkerGone{SourceFor({})});
  }
  if (static_cast<int64_t>(view_.size()) < config_.min_workers && stop.empty()) return;
  largest_world_ = std::max(largest_world_, view_.size());
  const StateSource source = SourceFor(view_);
  if (started_ && source.kind == SourceKind::kFresh && !NothingCommittedYet())
    return StateLost(StateLoss::kEveryHolderLost);
  if (started_ && newest_ && source.point < *newest_)
    Notify(notice::RestoresOlder{generation_, source, *newest_});
  if (started_ && source.kind == SourceKind::kFresh) Notify(notice::StartsFromSeed{generation_});
  const bool send_copy =
      source.kind == SourceKind::kMember && stop.empty() && (!copy_ || *copy_ < source.point);
  out_.push_back(action::StartGeneration{generation_, view_, source, stop, reason, send_copy});
  if (!stop.empty()) Finish(kExitStopped, stop);
}

void JobController::OnDraining(const event::Draining& e) {
  auto it = members_.find(e.member);
  if (it == members_.end() || it->second.draining) return;
  it->second.draining = true;
  it->second.draining_since_ms = now_;
  Notify(notice::WorkerLeaving{e.member, config_.admit_at_commit});
}

void JobController::OnCommit(const event::Commit& e) {
  if (e.generation != generation_) return;  // a generation that is over: its source is chosen
  const bool from_rank_zero = e.member == 0 || (!view_.empty() && e.member == view_.front());
  // Ranks stop only when rank 0 was asked to, in this generation.
  auto* awaited = std::get_if<StopAwaited>(&phase_);
  if (!from_rank_zero) {
    if (!awaited) return;
    if (e.stopped_on_request) awaited->stopped.insert(e.member);
    if (awaited->committed_at && EveryoneStopped(*awaited)) StoppedOnRequest();
    return;
  }
  if (!newest_ || *newest_ < e.point || *newest_ == e.point) {
    newest_ = e.point;
    holders_.clear();
  }
  for (uint64_t id : view_) {
    auto it = members_.find(id);
    if (it == members_.end()) continue;
    it->second.holds = e.point;
    if (*newest_ == e.point) holders_.insert(id);
  }
  if (e.copy) copy_ = e.point;
  faulting_since_.reset();
  out_.push_back(action::Journal{});
  if (!e.stopped_on_request || !awaited) return;
  awaited->committed_at = now_;
  awaited->stopped.insert(view_.empty() ? e.member : view_.front());
  if (EveryoneStopped(*awaited)) StoppedOnRequest();
}

void JobController::EveryoneLeft() {
  // Spot capacity is taken back many machines at a time, each with a notice:
  // with the controller's copy of the stop commit the job outlives them all
  // and waits for new workers, as after a mass loss.
  if (copy_ && newest_ && !(*copy_ < *newest_)) {
    Notify(notice::EveryoneLeavingWithCopy{*copy_});
    return Publish({}, "every worker left");
  }
  Notify(notice::EveryoneLeavingWithoutCopy{});
  StopWithCheckpoint({view_.front()}, "every worker left");
}

bool JobController::EveryoneStopped(const StopAwaited& awaited) const {
  for (uint64_t id : view_)
    if (members_.count(id) > 0 && awaited.stopped.count(id) == 0) return false;
  return true;
}

void JobController::StoppedOnRequest() {
  if (stop_signals_ > 0) return StopWithCheckpoint(view_, stopped_by_);
  // Rank 0 stopped where we asked: apply joins and leaves.
  std::vector<uint64_t> staying, leaving;
  for (uint64_t id : view_) {
    auto it = members_.find(id);
    if (it == members_.end()) continue;  // failed: the head's next view drops it
    (it->second.draining ? leaving : staying).push_back(id);
  }
  const std::vector<uint64_t> joining = Joinable(staying.size());
  std::string reason;
  if (!joining.empty()) reason += std::to_string(joining.size()) + " joined";
  if (!leaving.empty())
    reason += (reason.empty() ? "" : ", ") + std::to_string(leaving.size()) + " left";
  if (reason.empty()) reason = "membership unchanged";
  std::vector<uint64_t> next = staying;
  next.insert(next.end(), joining.begin(), joining.end());
  if (next.empty()) return EveryoneLeft();
  Publish(next, reason);
}

void JobController::OnSynced(const event::Synced& e) {
  if (e.generation != generation_) return;
  if (!started_) out_.push_back(action::Journal{});
  started_ = true;
  if (!newest_ || *newest_ < e.point) {
    newest_ = e.point;
    holders_.clear();
  }
  for (uint64_t id : view_) {
    auto it = members_.find(id);
    if (it == members_.end()) continue;
    it->second.holds = e.point;
    if (*newest_ == e.point) holders_.insert(id);
  }
  faulting_since_.reset();
  if (e.copy) {
    copy_ = e.point;
    out_.push_back(action::Journal{});
  }
}

void JobController::OnCheckpointWritten(const event::CheckpointWritten& e) {
  if (!checkpoint_ || *checkpoint_ < e.point) checkpoint_ = e.point;
  out_.push_back(action::Journal{});
}

void JobController::OnFault(const event::Fault& e) {
  if (e.generation != generation_ || !faulted_.insert(e.generation).second) return;
  if (e.state_unavailable) {
    Notify(notice::StateUnavailable{e.generation, e.reason});
    // That source is gone: the next generation takes the next best one.
    const StateSource used = SourceFor(view_);
    if (used.kind == SourceKind::kCheckpoint) checkpoint_.reset();
    if (used.kind == SourceKind::kControllerCopy) copy_.reset();
    if (used.kind == SourceKind::kResume) {
      Notify(notice::ResumeUnreadable{});
      return Finish(kExitError, "the checkpoint of --resume could not be read");
    }
  }
  if (!faulting_since_) faulting_since_ = now_;
  if (now_ - *faulting_since_ > config_.fault_give_up_ms) {
    Notify(notice::CollectivesKeptFailing{now_ - *faulting_since_, e.member, e.reason});
    return Finish(kExitStopped, "the workers could not complete a collective");
  }
  if (started_ && !StateAvailable()) return StateLostUnlessStalled(StateLoss::kLastSourceFailed);
  Notify(notice::FaultReported{e.member, e.generation, e.reason});
  Publish(view_, "re-formed after a fault on worker " + std::to_string(e.member));
}

void JobController::OnDone(const event::Done& e) {
  // A view published after the generation that finished (joiners admitted at
  // the last boundary) never trains: its members are told, not waited for.
  Finish(kExitOk, "the job is done", /*view_finishes=*/e.generation == generation_);
}

void JobController::OnStopSignal(const event::StopSignal& e) {
  if (e.count <= stop_signals_) return;
  stop_signals_ = e.count;
  stopped_by_ = "stopped by " + e.name + " to the driver";
  if (e.count == 1) {
    Notify(notice::StopAtEpochBoundary{e.name});
  } else {
    Notify(notice::StopAtNextCommit{e.name});
  }
}

void JobController::Start(Starting starting) {
  if (stop_signals_ > 0) {
    Notify(notice::StoppedBeforeTraining{});
    return Finish(kExitError, "the driver was stopped before training started");
  }
  const std::vector<uint64_t> joining = Joinable(0);
  const int64_t ready = static_cast<int64_t>(joining.size());
  const bool all_here = ready >= config_.initial_workers;
  const bool timed_out = now_ - starting.since_ms >= config_.start_timeout_ms;
  // Workers that die while loading (no data set, bad flags) register
  // nothing: say so now rather than after the timeout.
  if (starting.exited >= config_.initial_workers && ready < config_.min_workers) {
    Notify(notice::WorkersExitedBeforeJoining{config_.initial_workers});
    return Finish(kExitError, "the job could not start");
  }
  if (all_here || (timed_out && ready >= config_.min_workers)) {
    EnterView();
    Publish(joining, "start");
  } else if (timed_out) {
    Notify(notice::StartTimedOut{ready, config_.initial_workers, config_.start_timeout_ms});
    Finish(kExitError, "the job could not start");
  }
}

void JobController::Recover(Recovering recovering) {
  if (stop_signals_ > 0) {
    // Nothing trains: the workers hold the state; stopping needs one generation.
    EnterView();
    return Run();
  }
  std::vector<uint64_t> back;
  for (const auto& [id, member] : members_)
    if (!member.draining && !Blacklisted(member.node)) back.push_back(id);
  const int64_t waited = now_ - recovering.since_ms;
  // The newest commit is within reach when a worker that came back holds it,
  // or the copy or the checkpoint does: until then only its holders can
  // bring it, and a worker that joined meanwhile must not start the job from
  // an older source. As many workers as held it before, or --min-workers.
  const std::optional<StatePoint> reachable = NewestAvailable();
  const bool newest_reachable = !newest_ || (reachable && !(*reachable < *newest_));
  const size_t wanted = static_cast<size_t>(
      std::max<int64_t>({int64_t{1}, static_cast<int64_t>(recovering.world), config_.min_workers}));
  const bool enough = static_cast<int64_t>(back.size()) >= config_.min_workers;
  if (!(newest_reachable && back.size() >= wanted) && !(waited >= recovering.wait_ms && enough)) {
    if (waited >= recovering.wait_ms + config_.rendezvous_timeout_ms) {
      const notice::TooFewCameBack too_few{static_cast<int64_t>(back.size()), config_.min_workers};
      Notify(too_few);
      EnterView();
      SortNewestFirst(back);
      return StopWithCheckpoint(back, StopReason(too_few));
    }
    return;
  }
  // Said once: the job leaves Recovering here.
  if (!newest_reachable) Notify(notice::NewestNotBack{*newest_, recovering.wait_ms});
  SortNewestFirst(back);
  if (config_.max_workers > 0 && static_cast<int64_t>(back.size()) > config_.max_workers)
    back.resize(static_cast<size_t>(config_.max_workers));
  EnterView();
  Notify(notice::WorkersCameBack{static_cast<int64_t>(back.size())});
  Publish(back, "the controller restarted");
}

void JobController::Run() {
  if (lost_in_stall_at_ && StateAvailable()) lost_in_stall_at_.reset();
  if (lost_in_stall_at_ && now_ - *lost_in_stall_at_ >= config_.stall_grace_ms) {
    return StateLost(StateLoss::kNoneBackAfterStall);
  }
  if (const auto* awaited = std::get_if<StopAwaited>(&phase_);
      awaited && awaited->committed_at &&
      now_ - *awaited->committed_at >= config_.stop_report_wait_ms)
    return StoppedOnRequest();
  std::vector<uint64_t> staying, leaving;
  bool drain_expired = false;
  for (uint64_t id : view_) {
    auto it = members_.find(id);
    if (it == members_.end()) continue;  // failed: the head's next view drops it
    const Member& member = it->second;
    if (member.draining) {
      leaving.push_back(id);
      if (now_ - member.draining_since_ms > config_.drain_timeout_ms) drain_expired = true;
    } else {
      staying.push_back(id);
    }
  }
  std::vector<uint64_t> joining = Joinable(staying.size());
  if (std::holds_alternative<Training>(phase_) || std::holds_alternative<StopAwaited>(phase_))
    return AskToStop(!joining.empty() || !leaving.empty(), drain_expired);
  Refill(staying, std::move(joining));
}

void JobController::AskToStop(bool changes, bool drain_expired) {
  if (stop_signals_ == 0 && !changes) return;
  // A first stop signal still stops at the epoch boundary, joins or not.
  const bool at_next_commit =
      drain_expired || stop_signals_ >= 2 || (stop_signals_ == 0 && config_.admit_at_commit);
  auto* awaited = std::get_if<StopAwaited>(&phase_);
  if (awaited && (awaited->at_next_commit || !at_next_commit)) return;  // asked already
  if (awaited) {
    awaited->at_next_commit = true;  // sooner than asked: the reports so far stand
  } else {
    phase_ = StopAwaited{at_next_commit};
  }
  out_.push_back(action::RequestStop{generation_, view_.front(), at_next_commit});
}

void JobController::Refill(const std::vector<uint64_t>& staying, std::vector<uint64_t> joining) {
  std::vector<uint64_t> next = staying;
  next.insert(next.end(), joining.begin(), joining.end());
  // A blacklist keeps flaky nodes out while others can train, never the
  // only workers there are: a job waiting on it would stop.
  if (static_cast<int64_t>(next.size()) < config_.min_workers) {
    const std::vector<uint64_t> any = Joinable(staying.size(), true);
    if (static_cast<int64_t>(staying.size() + any.size()) >= config_.min_workers &&
        any.size() > joining.size()) {
      Notify(notice::AdmittingBlacklisted{config_.min_workers});
      joining = any;
      next = staying;
      next.insert(next.end(), joining.begin(), joining.end());
    }
  }
  // Nobody trains: apply any change at once.
  if (static_cast<int64_t>(next.size()) >= config_.min_workers) {
    if (std::holds_alternative<TooFew>(phase_)) phase_ = Idle{};
    if (started_ && !StateAvailable()) return StateLostUnlessStalled(StateLoss::kEveryHolderLost);
    if (stop_signals_ == 0 && !JoinWindowOver(next.size())) return;
    phase_ = Idle{};
    return Publish(next, std::to_string(joining.size()) + " joined " +
                             (view_.empty() ? "with no worker left" : "below --min-workers"));
  }
  if (!std::holds_alternative<TooFew>(phase_)) {
    phase_ = TooFew{now_};
    Notify(notice::BelowMinimum{static_cast<int64_t>(view_.size()), config_.min_workers});
  }
  const int64_t since_ms = std::get<TooFew>(phase_).since_ms;
  if (stop_signals_ > 0) return StopWithCheckpoint(staying, stopped_by_);
  if (now_ - since_ms > config_.rendezvous_timeout_ms) {
    const notice::BelowMinimumTooLong too_long{static_cast<int64_t>(staying.size()),
                                               config_.rendezvous_timeout_ms, config_.min_workers};
    Notify(too_long);
    return StopWithCheckpoint(staying, StopReason(too_long));
  }
}

void JobController::SortNewestFirst(std::vector<uint64_t>& ids) {
  std::stable_sort(ids.begin(), ids.end(), [this](uint64_t a, uint64_t b) {
    const std::optional<StatePoint>& x = members_[a].holds;
    const std::optional<StatePoint>& y = members_[b].holds;
    return y ? (x && *y < *x) : static_cast<bool>(x);
  });
}

std::vector<uint64_t> JobController::Joinable(size_t staying, bool blacklisted_too) {
  std::vector<uint64_t> joining;
  for (const auto& [id, member] : members_) {
    if (Contains(view_, id) || member.draining) continue;
    if (!blacklisted_too && Blacklisted(member.node)) continue;
    if (config_.max_workers > 0 &&
        static_cast<int64_t>(staying + joining.size()) >= config_.max_workers)
      break;
    joining.push_back(id);
  }
  return joining;
}

bool JobController::JoinWindowOver(size_t ready) {
  // Before the first generation --workers / --min-workers decide; a job back
  // at its largest world, or at --max-workers, has nobody left to wait for.
  if (!started_ || config_.join_window_ms <= 0 || ready >= largest_world_ ||
      (config_.max_workers > 0 && static_cast<int64_t>(ready) >= config_.max_workers))
    return true;
  auto* gathering = std::get_if<Gathering>(&phase_);
  if (!gathering) {
    Notify(notice::JoinWindowOpened{static_cast<int64_t>(ready), config_.join_window_ms,
                                    static_cast<int64_t>(largest_world_)});
    gathering = &phase_.emplace<Gathering>(Gathering{JoinWindow(ready, now_)});
  }
  gathering->window.Count(ready, now_);
  return gathering->window.Closed(now_, config_.join_window_ms);
}

bool JobController::Blacklisted(uint64_t node) {
  auto it = blacklisted_until_.find(node);
  if (it == blacklisted_until_.end()) return false;
  if (now_ < it->second) return true;
  blacklisted_until_.erase(it);
  Notify(notice::NodeForgiven{node});
  return false;
}

StateSource JobController::SourceFor(const std::vector<uint64_t>& members) const {
  const StateSource start{config_.resume ? SourceKind::kResume : SourceKind::kFresh, 0, {}};
  if (!started_) return start;
  std::optional<StateSource> best;
  for (size_t rank = 0; rank < members.size(); ++rank) {
    auto it = members_.find(members[rank]);
    if (it == members_.end() || !it->second.holds) continue;
    if (!best || best->point < *it->second.holds)
      best = StateSource{SourceKind::kMember, static_cast<int>(rank), *it->second.holds};
  }
  // Ties go to the members (nothing to send), then to the copy (no disk).
  if (copy_ && (!best || best->point < *copy_))
    best = StateSource{SourceKind::kControllerCopy, 0, *copy_};
  if (checkpoint_ && (!best || best->point < *checkpoint_))
    best = StateSource{SourceKind::kCheckpoint, 0, *checkpoint_};
  if (!best && NothingCommittedYet()) return start;
  return best.value_or(StateSource{});
}

bool JobController::NothingCommittedYet() const {
  return !config_.resume && (!newest_ || newest_->step == 0) && !copy_ && !checkpoint_;
}

std::optional<StatePoint> JobController::NewestAvailable() const {
  std::optional<StatePoint> best = copy_;
  if (checkpoint_ && (!best || *best < *checkpoint_)) best = checkpoint_;
  for (const auto& [id, member] : members_)
    if (member.holds && (!best || *best < *member.holds)) best = member.holds;
  return best;
}

void JobController::StopWithCheckpoint(const std::vector<uint64_t>& members,
                                       const std::string& why) {
  if (members.empty()) {
    // The controller's copy is the newest state left: it becomes the
    // checkpoint, unless the checkpoint is as new (never replaced by older).
    if (copy_ && (!checkpoint_ || *checkpoint_ < *copy_)) {
      out_.push_back(action::WriteCopy{*copy_});
      checkpoint_ = copy_;
    } else {
      Notify(notice::NoWorkerForCheckpoint{checkpoint_});
    }
    // Nobody is left in a stop generation: whoever is in the view ends with the job.
    return Finish(kExitStopped, why, /*view_finishes=*/true);
  }
  phase_ = Stopping{why};
  Publish(members, "stop: rank 0 writes the checkpoint of the last commit");
}

void JobController::StateLost(StateLoss loss) {
  Notify(notice::StateLost{loss, newest_, config_.stall_grace_ms});
  Finish(kExitStopped, "the job's state was lost");
}

void JobController::NoticeStall(bool tick) {
  if (config_.stall_ms > 0 && last_tick_ms_ && now_ - *last_tick_ms_ > config_.stall_ms) {
    stalled_at_ = now_;
    Notify(notice::StallNoticed{now_ - *last_tick_ms_});
    last_tick_ms_ = now_;  // once per stall, whichever event comes first after it
  }
  if (tick) last_tick_ms_ = now_;
}

void JobController::StateLostUnlessStalled(StateLoss loss) {
  if (lost_in_stall_at_) return;  // waiting already
  if (!InStallAftermath()) return StateLost(loss);
  lost_in_stall_at_ = now_;
  Notify(notice::WaitingAfterStall{loss, config_.stall_grace_ms});
}

void JobController::Finish(int exit_code, std::string reason, bool view_finishes) {
  if (finished()) return;
  if (reason.empty()) reason = "the job is over";
  // Members of the last view finish on their own (done) or with the stop
  // generation; everyone else is told.
  view_finishes = view_finishes || std::holds_alternative<Stopping>(phase_);
  for (const auto& [id, member] : members_)
    if (!(view_finishes && Contains(view_, id))) out_.push_back(action::TellOver{id, reason});
  out_.push_back(action::Journal{});
  out_.push_back(action::Finish{exit_code, reason});
  phase_ = Finished{std::move(reason)};
}

void JobController::Publish(std::vector<uint64_t> members, const std::string& reason) {
  publishing_ = true;
  next_reason_ = reason;
  out_.push_back(action::Publish{std::move(members), reason});
}

void JobController::Notify(Notice notice) { out_.push_back(action::Notify{std::move(notice)}); }

}  // namespace elastic::trainer
