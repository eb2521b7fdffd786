#include "trainer/elastic/controller/job_presenter.h"

#include <utility>

namespace elastic::trainer {

JobPresenter JobPresenter::TakenOver(uint64_t journal_generation, int64_t printed_epoch) {
  JobPresenter presenter;
  // The restarted head's first view, empty, is the journal's generation + 1:
  // no generation to announce.
  presenter.announced_generation_ = journal_generation + 1;
  presenter.printed_epoch_ = printed_epoch;
  return presenter;
}

bool JobPresenter::AnnouncesView(uint64_t generation, size_t world, bool job_over, Time now) {
  if (generation <= announced_generation_ || job_over) return false;
  announced_generation_ = generation;
  generation_ = generation;
  world_ = world;
  generation_seen_ = now;
  first_step_seen_ = false;
  return true;
}

void JobPresenter::GenerationStarting(std::string reason) { reason_ = std::move(reason); }

std::optional<Rescale> JobPresenter::FirstStep(uint64_t generation, double worker_wall_seconds,
                                               double wall_now, Time now) {
  if (first_step_seen_ || generation != generation_) return std::nullopt;
  first_step_seen_ = true;
  // The view's moment on the wall clock, taken back from the steady clock's
  // time since: a wall clock stepped meanwhile does not count.
  const double view_wall_seconds =
      wall_now - std::chrono::duration<double>(now - generation_seen_).count();
  return Rescale{generation_, world_, reason_, worker_wall_seconds - view_wall_seconds};
}

bool JobPresenter::StartsProgressLine(int64_t epoch, uint64_t generation) {
  if (epoch == progress_epoch_ && generation == progress_generation_) return false;
  progress_epoch_ = epoch;
  progress_generation_ = generation;
  return true;
}

bool JobPresenter::EpochSummaryStands(int64_t epoch) {
  if (epoch <= printed_epoch_) return false;
  printed_epoch_ = epoch;
  return true;
}

bool JobPresenter::EvaluationStands(int64_t step) {
  if (step <= printed_eval_step_) return false;
  printed_eval_step_ = step;
  return true;
}

bool JobPresenter::LogsDraining(uint64_t member) { return draining_logged_.insert(member).second; }

bool JobPresenter::WarnsOfBadStats(uint64_t member) {
  return bad_stats_warned_.insert(member).second;
}

bool JobPresenter::WarnsOfJournalFailure(const std::string& error) {
  if (journal_error_ == error) return false;
  journal_error_ = error;
  return true;
}

bool JobPresenter::CountsMembershipChanges(bool job_started) const {
  return job_started || generation_ > 0;
}

}  // namespace elastic::trainer
