#include "trainer/elastic/controller/job_controller.h"

#include <algorithm>
#include <tuple>

namespace elastic::trainer {
namespace {

bool Contains(const std::vector<uint64_t>& ids, uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

JobController::JobController(ControllerConfig config, int64_t now_ms)
    : config_(std::move(config)), now_(now_ms), phase_since_(now_ms) {}

JobController::JobController(ControllerConfig config, const RecoveredJob& recovered, int64_t now_ms)
    : config_(std::move(config)),
      now_(now_ms),
      phase_since_(now_ms),
      phase_(Phase::kRecovering),
      generation_(recovered.generation),
      started_(true),
      newest_(recovered.newest),
      copy_(recovered.copy),
      checkpoint_(recovered.checkpoint),
      recovered_world_(recovered.world_of_newest) {
  recovery_wait_ms_ = recovered.wait_ms;
}

std::vector<Action> JobController::Handle(const Event& event, int64_t now_ms) {
  now_ = now_ms;
  out_.clear();
  if (finished_) {
    // The job is over: a worker that still comes is told so; nothing else changes.
    if (const auto* registered = std::get_if<event::Registered>(&event))
      out_.push_back(action::TellOver{registered->member, over_reason_});
    return std::move(out_);
  }
  NoticeStall(std::holds_alternative<event::Tick>(event));
  // One line per event type and no generic case: an event added to Event
  // without its line here does not compile.
  std::visit(Overloaded{
                 [this](const event::Tick&) { OnTick(); },
                 [this](const event::Registered& e) { OnRegistered(e); },
                 [this](const event::Gone& e) { OnGone(e); },
                 [this](const event::Exited&) { ++exited_; },
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
  if (!finished_) OnTick();
  return std::move(out_);
}

void JobController::OnTick() {
  if (finished_ || publishing_) return;
  switch (phase_) {
    case Phase::kStarting:
      return Start();
    case Phase::kRecovering:
      return Recover();
    case Phase::kRunning:
      return Run();
  }
}

void JobController::OnRegistered(const event::Registered& e) {
  if (finished_) {
    out_.push_back(action::TellOver{e.member, over_reason_});
    return;
  }
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
  requested_.reset();
  stop_committed_at_.reset();
  stopped_.clear();
  // A restarted head's first view is empty: the workers are still coming back.
  if (phase_ == Phase::kRecovering) return;
  const std::string reason = next_reason_.empty() ? "a worker failed or left" : next_reason_;
  next_reason_.clear();
  out_.push_back(action::Journal{});
  if (view_.empty()) {
    if (!stopping_.empty()) return Finish(kExitStopped);
    if (!started_) return;
    if (!StateAvailable()) return StateLostUnlessStalled(StateLoss::kEveryWorkerLost);
    return Notify(notice::EveryWorkerGone{SourceFor({})});
  }
  if (static_cast<int64_t>(view_.size()) < config_.min_workers && stopping_.empty()) return;
  largest_world_ = std::max(largest_world_, view_.size());
  const StateSource source = SourceFor(view_);
  if (started_ && source.kind == SourceKind::kFresh && !NothingCommittedYet())
    return StateLost(StateLoss::kEveryHolderLost);
  if (started_ && newest_ && source.point < *newest_)
    Notify(notice::RestoresOlder{generation_, source, *newest_});
  if (started_ && source.kind == SourceKind::kFresh) Notify(notice::StartsFromSeed{generation_});
  const bool send_copy =
      source.kind == SourceKind::kMember && stopping_.empty() && (!copy_ || *copy_ < source.point);
  out_.push_back(action::StartGeneration{generation_, view_, source, stopping_, reason, send_copy});
  if (!stopping_.empty()) Finish(kExitStopped);
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
  if (!from_rank_zero) {
    if (e.stopped_on_request) stopped_.insert(e.member);
    if (stop_committed_at_ && EveryoneStopped()) StoppedOnRequest();
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
  if (!e.stopped_on_request) return;
  stop_committed_at_ = now_;
  stopped_.insert(view_.empty() ? e.member : view_.front());
  if (EveryoneStopped()) StoppedOnRequest();
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

bool JobController::EveryoneStopped() const {
  for (uint64_t id : view_)
    if (members_.count(id) > 0 && stopped_.count(id) == 0) return false;
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
      over_reason_ = "the checkpoint of --resume could not be read";
      return Finish(kExitError);
    }
  }
  if (!faulting_since_) faulting_since_ = now_;
  if (now_ - *faulting_since_ > config_.fault_give_up_ms) {
    Notify(notice::CollectivesKeptFailing{now_ - *faulting_since_, e.member, e.reason});
    over_reason_ = "the workers could not complete a collective";
    return Finish(kExitStopped);
  }
  if (started_ && !StateAvailable()) return StateLostUnlessStalled(StateLoss::kLastSourceFailed);
  Notify(notice::FaultReported{e.member, e.generation, e.reason});
  Publish(view_, "re-formed after a fault on worker " + std::to_string(e.member));
}

void JobController::OnDone(const event::Done& e) {
  over_reason_ = "the job is done";
  // A view published after the generation that finished (joiners admitted at
  // the last boundary) never trains: its members are told, not waited for.
  done_by_last_view_ = e.generation == generation_;
  Finish(kExitOk);
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

void JobController::Start() {
  if (stop_signals_ > 0) {
    Notify(notice::StoppedBeforeTraining{});
    over_reason_ = "the driver was stopped before training started";
    return Finish(kExitError);
  }
  const std::vector<uint64_t> joining = Joinable(0);
  const int64_t ready = static_cast<int64_t>(joining.size());
  const bool all_here = ready >= config_.initial_workers;
  const bool timed_out = now_ - phase_since_ >= config_.start_timeout_ms;
  // Workers that die while loading (no data set, bad flags) register
  // nothing: say so now rather than after the timeout.
  if (exited_ >= config_.initial_workers && ready < config_.min_workers) {
    Notify(notice::WorkersExitedBeforeJoining{config_.initial_workers});
    over_reason_ = "the job could not start";
    return Finish(kExitError);
  }
  if (all_here || (timed_out && ready >= config_.min_workers)) {
    phase_ = Phase::kRunning;
    Publish(joining, "start");
  } else if (timed_out) {
    Notify(notice::StartTimedOut{ready, config_.initial_workers, config_.start_timeout_ms});
    over_reason_ = "the job could not start";
    Finish(kExitError);
  }
}

void JobController::Recover() {
  if (stop_signals_ > 0) {
    // Nothing trains: the workers hold the state; stopping needs one generation.
    phase_ = Phase::kRunning;
    return Run();
  }
  std::vector<uint64_t> back;
  for (const auto& [id, member] : members_)
    if (!member.draining && !Blacklisted(member.node)) back.push_back(id);
  const int64_t waited = now_ - phase_since_;
  // The newest commit is within reach when a worker that came back holds it,
  // or the copy or the checkpoint does: until then only its holders can
  // bring it, and a worker that joined meanwhile must not start the job from
  // an older source. As many workers as held it before, or --min-workers.
  const std::optional<StatePoint> reachable = NewestAvailable();
  const bool newest_reachable = !newest_ || (reachable && !(*reachable < *newest_));
  const size_t wanted = static_cast<size_t>(
      std::max<int64_t>({int64_t{1}, static_cast<int64_t>(recovered_world_), config_.min_workers}));
  const bool enough = static_cast<int64_t>(back.size()) >= config_.min_workers;
  if (!(newest_reachable && back.size() >= wanted) && !(waited >= recovery_wait_ms_ && enough)) {
    if (waited >= recovery_wait_ms_ + config_.rendezvous_timeout_ms) {
      const notice::TooFewCameBack too_few{static_cast<int64_t>(back.size()), config_.min_workers};
      Notify(too_few);
      phase_ = Phase::kRunning;
      SortNewestFirst(back);
      return StopWithCheckpoint(back, StopReason(too_few));
    }
    return;
  }
  if (!newest_reachable && !waited_said_) {
    waited_said_ = true;
    Notify(notice::NewestNotBack{*newest_, recovery_wait_ms_});
  }
  SortNewestFirst(back);
  if (config_.max_workers > 0 && static_cast<int64_t>(back.size()) > config_.max_workers)
    back.resize(static_cast<size_t>(config_.max_workers));
  phase_ = Phase::kRunning;
  Notify(notice::WorkersCameBack{static_cast<int64_t>(back.size())});
  Publish(back, "the controller restarted");
}

void JobController::Run() {
  if (!stopping_.empty()) return;
  if (lost_in_stall_at_ && StateAvailable()) lost_in_stall_at_.reset();
  if (lost_in_stall_at_ && now_ - *lost_in_stall_at_ >= config_.stall_grace_ms) {
    return StateLost(StateLoss::kNoneBackAfterStall);
  }
  if (stop_committed_at_ && now_ - *stop_committed_at_ >= config_.stop_report_wait_ms)
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
  std::vector<uint64_t> next = staying;
  next.insert(next.end(), joining.begin(), joining.end());

  if (static_cast<int64_t>(view_.size()) < config_.min_workers) {
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
      below_minimum_since_.reset();
      if (started_ && !StateAvailable()) return StateLostUnlessStalled(StateLoss::kEveryHolderLost);
      if (stop_signals_ == 0 && !JoinWindowOver(next.size())) return;
      gathering_since_.reset();
      return Publish(next, std::to_string(joining.size()) + " joined " +
                               (view_.empty() ? "with no worker left" : "below --min-workers"));
    }
    gathering_since_.reset();
    if (!below_minimum_since_) {
      below_minimum_since_ = now_;
      Notify(notice::BelowMinimum{static_cast<int64_t>(view_.size()), config_.min_workers});
    }
    if (stop_signals_ > 0) return StopWithCheckpoint(staying, stopped_by_);
    if (now_ - *below_minimum_since_ > config_.rendezvous_timeout_ms) {
      const notice::BelowMinimumTooLong too_long{
          static_cast<int64_t>(staying.size()), config_.rendezvous_timeout_ms, config_.min_workers};
      Notify(too_long);
      return StopWithCheckpoint(staying, StopReason(too_long));
    }
    return;
  }
  below_minimum_since_.reset();
  if (stop_signals_ == 0 && joining.empty() && leaving.empty()) return;
  // A first stop signal still stops at the epoch boundary, joins or not.
  const bool at_next_commit =
      drain_expired || stop_signals_ >= 2 || (stop_signals_ == 0 && config_.admit_at_commit);
  if (requested_ && (*requested_ || !at_next_commit)) return;  // asked already
  requested_ = at_next_commit;
  out_.push_back(action::RequestStop{generation_, view_.front(), at_next_commit});
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
  if (!gathering_since_) {
    gathering_since_ = now_;
    gathered_ = 0;
    Notify(notice::JoinWindowOpened{static_cast<int64_t>(ready), config_.join_window_ms,
                                    static_cast<int64_t>(largest_world_)});
  }
  if (ready > gathered_) {
    gathered_ = ready;
    last_arrival_ = now_;
  }
  return now_ - last_arrival_ >= config_.join_window_ms ||
         now_ - *gathering_since_ >= kJoinWindows * config_.join_window_ms;
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
  stopping_ = why;
  over_reason_ = why;
  if (members.empty()) {
    // The controller's copy is the newest state left: it becomes the
    // checkpoint, unless the checkpoint is as new (never replaced by older).
    if (copy_ && (!checkpoint_ || *checkpoint_ < *copy_)) {
      out_.push_back(action::WriteCopy{*copy_});
      checkpoint_ = copy_;
    } else {
      Notify(notice::NoWorkerForCheckpoint{checkpoint_});
    }
    return Finish(kExitStopped);
  }
  Publish(members, "stop: rank 0 writes the checkpoint of the last commit");
}

void JobController::StateLost(StateLoss loss) {
  Notify(notice::StateLost{loss, newest_, config_.stall_grace_ms});
  over_reason_ = "the job's state was lost";
  Finish(kExitStopped);
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

void JobController::Finish(int exit_code) {
  if (finished_) return;
  finished_ = true;
  if (over_reason_.empty()) over_reason_ = "the job is over";
  // Members of the last view finish on their own (done) or with the stop
  // generation; everyone else is told.
  const bool view_finishes = (exit_code == kExitOk && done_by_last_view_) || !stopping_.empty();
  for (const auto& [id, member] : members_)
    if (!(view_finishes && Contains(view_, id))) out_.push_back(action::TellOver{id, over_reason_});
  out_.push_back(action::Journal{});
  out_.push_back(action::Finish{exit_code, over_reason_});
}

void JobController::Publish(std::vector<uint64_t> members, const std::string& reason) {
  publishing_ = true;
  next_reason_ = reason;
  out_.push_back(action::Publish{std::move(members), reason});
}

void JobController::Notify(Notice notice) { out_.push_back(action::Notify{std::move(notice)}); }

}  // namespace elastic::trainer
