// Shares sized by speed: how the samples of one optimizer step are split over
// the ranks of a world whose workers differ in speed (a mixed spot fleet, a
// noisy neighbour), and when a worker is too slow to be worth keeping.
//
// A step's samples are one contiguous run of the epoch's permutation, cut
// into one slice a rank (ElasticSampler::StepIndices). Which rank takes how
// many changes neither which samples the step trains nor their weight in the
// gradient (accumulation.h: each sample's loss is weighted 1 / step_samples),
// so any split trains the same step, and exactly-once holds for every split.
// An even split makes every rank wait for the slowest; shares in proportion
// to speed make them finish together.
//
// Everything here is a pure function of its arguments: every rank of a world
// computes the same shares from the same gathered paces, so they agree
// without a message, and the tests need no process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elastic::trainer {

// What one rank did since the shares were last planned.
struct RankPace {
  double samples = 0;  // samples it trained
  // Seconds its steps took, less the time it waited for the others'
  // gradients after its own backward pass: the time its own work took.
  double busy_seconds = 0;

  // Samples a second of its own work; 0 when it measured nothing.
  double speed() const { return samples > 0 && busy_seconds > 0 ? samples / busy_seconds : 0; }
};

struct ShareRule {
  // A plan replaces the current shares only when some rank's planned share
  // differs from its current one by more than this fraction of it (and by
  // more than one sample): step timings of identical workers differ by a few
  // percent of noise, and their shares then stay even, which keeps a run of
  // identical workers bit-identical to the even split.
  double tolerance = 0.10;
  // No rank gets less: a rank with a share keeps measuring its speed, and
  // recovers its share when it recovers.
  int64_t min_share = 1;
  // Paces are measured over at least this many seconds of the busiest rank's
  // own work (about the wall time: the others wait for it) before a plan.
  // Commits may be a step apart, and one step's time is noise.
  double window_seconds = 1.0;
};

// Whether the paces cover the rule's window: a plan may be made.
bool PacesCoverWindow(const std::vector<RankPace>& paces, const ShareRule& rule);

// `samples` split over the ranks in proportion to `weights` (>= 0, not all
// 0), by largest remainder, ties to the lower rank. Equal weights give the
// even split: samples / n each, the first samples % n ranks one more.
std::vector<int64_t> Apportion(int64_t samples, const std::vector<double>& weights);

// `step_samples` split evenly over `world` ranks (Apportion with equal weights).
std::vector<int64_t> EvenShares(int64_t step_samples, int world);

// The shares of a step of `step_samples` samples after the paces measured
// under `current` (a rank each, summing to step_samples): in proportion to
// each rank's share over its busy time, so that at the fixed point every rank
// is busy for the same time (a per-step cost that does not grow with the
// share, such as the optimizer's, is then counted right too). Each rank gets
// at least rule.min_share when step_samples allows it. `current` is returned
// unchanged when any rank measured nothing, or when no share would move by
// more than rule.tolerance.
std::vector<int64_t> PlanShares(const std::vector<int64_t>& current,
                                const std::vector<RankPace>& paces, int64_t step_samples,
                                const ShareRule& rule);

// Whether a plan that moves the shares (`planned`, != `current`) is
// confirmed by the plan of the window before it (`previous`; empty: none, or
// it moved nothing): every rank whose share `planned` moves by more than
// rule.tolerance (and more than one sample) was moved the same way by
// `previous`. A moment's noise (a rank's core taken by another process for
// part of a window) moves the shares one way and the next window's back; a
// slower worker moves them the same way window after window. The shares
// change only on a confirmed plan.
bool PlanConfirmed(const std::vector<int64_t>& current, const std::vector<int64_t>& planned,
                   const std::vector<int64_t>& previous, const ShareRule& rule);

// How many times slower than the median rank each rank is (1: the median's
// speed; 2: half of it); 0 for a rank that measured nothing.
std::vector<double> Slowdowns(const std::vector<RankPace>& paces);

// The line that tells the user of a new split: the slowest rank by name
// ("worker 3 is 2.0x slower than the median; its share is now 21 of 128"),
// or, once every rank is within 10% of the median, the range of the shares.
// `names` name the ranks ("worker 3", "rank 1").
std::string DescribeShares(const std::vector<int64_t>& shares, const std::vector<double>& slowdowns,
                           int64_t step_samples, const std::vector<std::string>& names);

// When a worker is let go: its speed stays below `below` times the median's
// for `commits` plans in a row, and the job is faster without it.
struct LetGoRule {
  double below = 0.25;
  int commits = 3;
};

// A world's measured state at one plan, for the let-go decision.
struct WorldPace {
  std::vector<RankPace> paces;  // a rank each
  // Seconds a step spent in the gradient allreduce alone (the least any rank
  // waited after its backward pass: the last rank to finish waits only for
  // the transfer).
  double allreduce_seconds = 0;
};

// The seconds one step of `step_samples` takes with the ranks of `speeds`
// (samples a second each) sharing it by speed, and an allreduce of
// `allreduce_seconds` (measured at `measured_world` ranks) among the ranks of
// `speeds`: a ring allreduce moves 2 (W-1)/W of the gradient a rank. No rank
// takes fewer than `min_share` samples: a rank too slow even for that sets
// the pace.
double BalancedStepSeconds(double step_samples, const std::vector<double>& speeds,
                           double allreduce_seconds, int measured_world, int64_t min_share = 1);

// The rank to let go at this plan, or -1. `slow_streak` (a rank each; the
// caller keeps it, zeros for a new world) counts the plans in a row each rank
// was below the rule's speed, and is updated. A rank is let go once its streak
// reaches rule.commits and a step without it is faster (BalancedStepSeconds):
// the slowest such rank, one at a time, never the last one.
int RankToLetGo(const WorldPace& world, int64_t step_samples, const LetGoRule& rule,
                std::vector<int>& slow_streak);

}  // namespace elastic::trainer
