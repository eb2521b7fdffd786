#include "trainer/shares.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>

namespace elastic::trainer {

std::vector<int64_t> Apportion(int64_t samples, const std::vector<double>& weights) {
  if (weights.empty()) throw std::invalid_argument("shares: no rank to apportion to");
  if (samples < 0) throw std::invalid_argument("shares: a negative number of samples");
  double total = 0;
  for (double w : weights) {
    if (!(w >= 0) || !std::isfinite(w))
      throw std::invalid_argument("shares: a weight is negative or not finite");
    total += w;
  }
  if (!(total > 0)) throw std::invalid_argument("shares: every weight is 0");
  const size_t n = weights.size();
  std::vector<int64_t> shares(n);
  std::vector<double> remainder(n);
  int64_t given = 0;
  for (size_t r = 0; r < n; ++r) {
    const double quota = static_cast<double>(samples) * weights[r] / total;
    shares[r] = static_cast<int64_t>(std::floor(quota));
    remainder[r] = quota - static_cast<double>(shares[r]);
    given += shares[r];
  }
  // The largest remainders first, ties to the lower rank (a stable order, so
  // that equal weights give the first ranks the extra samples).
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; given < samples; i = (i + 1) % n, ++given) ++shares[order[i]];
  // Rounding can only have given too much when quotas that sum to `samples`
  // were each rounded up past an integer: take it back from the smallest remainders.
  for (size_t i = n; given > samples; --given) {
    do i = (i + n - 1) % n;
    while (shares[order[i]] == 0);
    --shares[order[i]];
  }
  return shares;
}

std::vector<int64_t> EvenShares(int64_t step_samples, int world) {
  if (world < 1) throw std::invalid_argument("shares: a world of no rank");
  return Apportion(step_samples, std::vector<double>(static_cast<size_t>(world), 1.0));
}

namespace {

// Raises every share below `least` to it, taking the samples from the
// largest shares (ties: the higher rank gives), when the step has enough.
void RaiseToLeast(std::vector<int64_t>& shares, int64_t least) {
  const int64_t total = std::accumulate(shares.begin(), shares.end(), int64_t{0});
  if (total < least * static_cast<int64_t>(shares.size())) return;
  for (int64_t& share : shares) {
    while (share < least) {
      auto largest = std::max_element(shares.rbegin(), shares.rend());
      --*largest;
      ++share;
    }
  }
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// A ring allreduce moves 2 (W-1)/W of the gradient through each rank.
double RingFactor(int world) { return world > 1 ? 2.0 * (world - 1) / world : 0.0; }

}  // namespace

bool PacesCoverWindow(const std::vector<RankPace>& paces, const ShareRule& rule) {
  return std::any_of(paces.begin(), paces.end(),
                     [&](const RankPace& p) { return p.busy_seconds >= rule.window_seconds; });
}

std::vector<int64_t> PlanShares(const std::vector<int64_t>& current,
                                const std::vector<RankPace>& paces, int64_t step_samples,
                                const ShareRule& rule) {
  if (current.size() != paces.size())
    throw std::invalid_argument("shares: " + std::to_string(paces.size()) + " paces for " +
                                std::to_string(current.size()) + " ranks");
  std::vector<double> speeds;
  for (const RankPace& pace : paces) {
    if (pace.speed() <= 0) return current;
    speeds.push_back(pace.speed());
  }
  std::vector<int64_t> planned = Apportion(step_samples, speeds);
  RaiseToLeast(planned, rule.min_share);
  for (size_t r = 0; r < current.size(); ++r) {
    const double moved = std::abs(static_cast<double>(planned[r] - current[r]));
    if (moved > 1 && moved > rule.tolerance * static_cast<double>(current[r])) return planned;
  }
  return current;
}

bool PlanConfirmed(const std::vector<int64_t>& current, const std::vector<int64_t>& planned,
                   const std::vector<int64_t>& previous, const ShareRule& rule) {
  if (previous.size() != current.size() || planned.size() != current.size()) return false;
  bool moves = false;
  for (size_t r = 0; r < current.size(); ++r) {
    const int64_t move = planned[r] - current[r];
    const double moved = std::abs(static_cast<double>(move));
    if (moved <= 1 || moved <= rule.tolerance * static_cast<double>(current[r])) continue;
    moves = true;
    const int64_t before = previous[r] - current[r];
    if ((move > 0) != (before > 0) || before == 0) return false;
  }
  return moves;
}

std::vector<double> Slowdowns(const std::vector<RankPace>& paces) {
  std::vector<double> measured;
  for (const RankPace& pace : paces)
    if (pace.speed() > 0) measured.push_back(pace.speed());
  std::vector<double> slowdowns(paces.size(), 0.0);
  if (measured.empty()) return slowdowns;
  const double median = Median(measured);
  for (size_t r = 0; r < paces.size(); ++r)
    if (paces[r].speed() > 0) slowdowns[r] = median / paces[r].speed();
  return slowdowns;
}

std::string DescribeShares(const std::vector<int64_t>& shares, const std::vector<double>& slowdowns,
                           int64_t step_samples, const std::vector<std::string>& names) {
  if (shares.empty() || slowdowns.size() != shares.size() || names.size() != shares.size())
    throw std::invalid_argument(
        "shares: a description needs a share, a slowdown and a name a rank");
  const size_t slowest =
      static_cast<size_t>(std::max_element(slowdowns.begin(), slowdowns.end()) - slowdowns.begin());
  const std::string of = " of " + std::to_string(step_samples);
  if (slowdowns[slowest] >= 1.1) {
    char times[32];
    std::snprintf(times, sizeof(times), "%.1f", slowdowns[slowest]);
    return names[slowest] + " is " + times + "x slower than the median; its share is now " +
           std::to_string(shares[slowest]) + of;
  }
  const auto [least, most] = std::minmax_element(shares.begin(), shares.end());
  if (*least == *most)
    return "the workers' speeds are even again; the shares are " + std::to_string(*least) + of +
           " each";
  return "the workers' speeds are within 10% of the median's; the shares are now " +
         std::to_string(*least) + "-" + std::to_string(*most) + of;
}

double BalancedStepSeconds(double step_samples, const std::vector<double>& speeds,
                           double allreduce_seconds, int measured_world, int64_t min_share) {
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  if (!(total > 0) || *std::min_element(speeds.begin(), speeds.end()) <= 0)
    throw std::invalid_argument("shares: a step shared by a rank of no speed");
  const int world = static_cast<int>(speeds.size());
  double work = step_samples / total;
  if (step_samples >= static_cast<double>(min_share) * world)
    for (double speed : speeds) work = std::max(work, static_cast<double>(min_share) / speed);
  const double allreduce =
      measured_world > 1 ? allreduce_seconds * RingFactor(world) / RingFactor(measured_world) : 0.0;
  return work + allreduce;
}

int RankToLetGo(const WorldPace& world, int64_t step_samples, const LetGoRule& rule,
                std::vector<int>& slow_streak) {
  const size_t n = world.paces.size();
  slow_streak.resize(n, 0);
  const std::vector<double> slowdowns = Slowdowns(world.paces);
  for (size_t r = 0; r < n; ++r) {
    const bool slow = slowdowns[r] > 0 && slowdowns[r] * rule.below > 1.0;
    slow_streak[r] = slow ? slow_streak[r] + 1 : 0;
  }
  if (n < 2) return -1;
  std::vector<double> speeds(n);
  for (size_t r = 0; r < n; ++r) speeds[r] = world.paces[r].speed();
  if (std::count(speeds.begin(), speeds.end(), 0.0) > 0) return -1;
  int slowest = -1;
  for (size_t r = 0; r < n; ++r) {
    if (slow_streak[r] < rule.commits) continue;
    if (slowest < 0 || speeds[r] < speeds[static_cast<size_t>(slowest)])
      slowest = static_cast<int>(r);
  }
  if (slowest < 0) return -1;
  const int measured = static_cast<int>(n);
  const double with = BalancedStepSeconds(static_cast<double>(step_samples), speeds,
                                          world.allreduce_seconds, measured);
  std::vector<double> without = speeds;
  without.erase(without.begin() + slowest);
  const double step_without = BalancedStepSeconds(static_cast<double>(step_samples), without,
                                                  world.allreduce_seconds, measured);
  return step_without < with ? slowest : -1;
}

}  // namespace elastic::trainer
