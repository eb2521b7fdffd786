#include "trainer/shares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "trainer/sampler.h"

namespace elastic::trainer {
namespace {

int64_t Sum(const std::vector<int64_t>& shares) {
  return std::accumulate(shares.begin(), shares.end(), int64_t{0});
}

// `seconds` a sample each, over `steps` steps of `shares`.
std::vector<RankPace> Paces(const std::vector<int64_t>& shares,
                            const std::vector<double>& seconds_a_sample, int steps = 5) {
  std::vector<RankPace> paces;
  for (size_t r = 0; r < shares.size(); ++r) {
    const double samples = static_cast<double>(shares[r] * steps);
    paces.push_back({samples, samples * seconds_a_sample[r]});
  }
  return paces;
}

TEST(SharesTest, EqualWeightsGiveTheSamplersEvenSplit) {
  for (int world = 1; world <= 9; ++world) {
    for (int64_t samples : {0, 1, 5, 12, 24, 25, 127, 128, 1000}) {
      const std::vector<int64_t> even = EvenShares(samples, world);
      ASSERT_EQ(even.size(), static_cast<size_t>(world));
      for (int r = 0; r < world; ++r)
        EXPECT_EQ(even[static_cast<size_t>(r)], ElasticSampler::Share(samples, r, world))
            << samples << " samples, rank " << r << " of " << world;
      // Any equal weight, not only 1.
      EXPECT_EQ(Apportion(samples, std::vector<double>(static_cast<size_t>(world), 0.37)), even);
    }
  }
}

TEST(SharesTest, ApportionIsProportionalAndSumsToTheSamples) {
  struct Case {
    int64_t samples;
    std::vector<double> weights;
    std::vector<int64_t> shares;
  };
  const Case cases[] = {
      {128, {1, 1}, {64, 64}},
      {128, {2, 1}, {85, 43}},  // 85.33, 42.67: the larger remainder takes the extra sample
      {128, {1, 2}, {43, 85}},
      {24, {1, 1, 1, 0.5}, {7, 7, 7, 3}},  // 6.86 x3, 3.43
      {10, {1, 0}, {10, 0}},
      {7, {1, 1, 1}, {3, 2, 2}},
      {3, {1, 2, 3}, {1, 1, 1}},  // 0.5, 1, 1.5: the tied remainders go to the lower rank
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Apportion(c.samples, c.weights), c.shares) << c.samples << " samples";
    EXPECT_EQ(Sum(Apportion(c.samples, c.weights)), c.samples);
  }
  std::mt19937 random(7);
  std::uniform_real_distribution<double> weight(0.01, 100);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<double> weights(1 + trial % 16);
    for (double& w : weights) w = weight(random);
    const int64_t samples = trial % 1000;
    const std::vector<int64_t> shares = Apportion(samples, weights);
    ASSERT_EQ(Sum(shares), samples);
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    for (size_t r = 0; r < weights.size(); ++r)  // within one sample of its quota
      ASSERT_LT(std::abs(static_cast<double>(shares[r]) - samples * weights[r] / total), 1.0);
  }
}

TEST(SharesTest, ApportionRefusesNoRankNegativeOrNoWeight) {
  EXPECT_THROW(Apportion(5, {}), std::invalid_argument);
  EXPECT_THROW(Apportion(5, {0, 0}), std::invalid_argument);
  EXPECT_THROW(Apportion(5, {1, -1}), std::invalid_argument);
  EXPECT_THROW(Apportion(5, {1, std::nan("")}), std::invalid_argument);
  EXPECT_THROW(Apportion(-1, {1}), std::invalid_argument);
  EXPECT_THROW(EvenShares(5, 0), std::invalid_argument);
}

TEST(SharesTest, IdenticalWorkersKeepTheEvenSplitThroughNoise) {
  const std::vector<int64_t> even = EvenShares(128, 4);
  const ShareRule rule;
  std::mt19937 random(1);
  std::uniform_real_distribution<double> noise(0.96, 1.04);  // +-4% step time
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<double> seconds(4);
    for (double& s : seconds) s = 0.01 * noise(random);
    ASSERT_EQ(PlanShares(even, Paces(even, seconds), 128, rule), even) << "trial " << trial;
  }
}

TEST(SharesTest, ASlowWorkerGetsTheShareOfItsSpeed) {
  const ShareRule rule;
  struct Case {
    std::vector<int64_t> current;
    std::vector<double> seconds_a_sample;
    std::vector<int64_t> planned;
  };
  const Case cases[] = {
      // Half speed: a third of the step.
      {{64, 64}, {0.01, 0.02}, {85, 43}},
      {{64, 64}, {0.02, 0.01}, {43, 85}},
      // A quarter of the speed among four.
      {{32, 32, 32, 32}, {0.01, 0.01, 0.04, 0.01}, {40, 39, 10, 39}},  // 39.4 x3, 9.8
      // Already at the fixed point: the busy times are equal, nothing moves.
      {{85, 43}, {0.01, 0.02}, {85, 43}},
      // A worker that recovered gets its share back.
      {{85, 43}, {0.01, 0.01}, {64, 64}},
      // Each keeps at least one sample, so that its speed is still measured.
      {{64, 64}, {0.0001, 1.0}, {127, 1}},
  };
  for (const Case& c : cases) {
    const std::vector<int64_t> planned =
        PlanShares(c.current, Paces(c.current, c.seconds_a_sample), 128, rule);
    EXPECT_EQ(planned, c.planned);
    EXPECT_EQ(Sum(planned), 128);
  }
}

// A fixed cost a step (the optimizer's update) that does not grow with the
// share: the plan converges to equal busy times anyway.
TEST(SharesTest, RepeatedPlansEqualiseTheBusyTimeWithAFixedCostAStep) {
  const double fixed = 0.05, per_sample[] = {0.001, 0.003, 0.001};
  std::vector<int64_t> shares = EvenShares(300, 3);
  for (int plan = 0; plan < 10; ++plan) {
    std::vector<RankPace> paces;
    for (size_t r = 0; r < 3; ++r) {
      const double n = static_cast<double>(shares[r]);
      paces.push_back({n, fixed + n * per_sample[r]});
    }
    shares = PlanShares(shares, paces, 300, ShareRule{});
  }
  // Busy times are equal when 0.05 + s0 * 0.001 = 0.05 + s1 * 0.003: s0 = s2 =
  // 128.6, s1 = 42.9; the plans stop within the rule's tolerance of that.
  EXPECT_NEAR(static_cast<double>(shares[0]), 128.6, 0.1 * 128.6 + 1);
  EXPECT_NEAR(static_cast<double>(shares[1]), 42.9, 0.1 * 42.9 + 1);
  EXPECT_LE(std::abs(shares[0] - shares[2]), 1);
  EXPECT_EQ(Sum(shares), 300);
}

TEST(SharesTest, ThePlanDependsOnTheRanksNotOnTheOrderTheirPacesCameIn) {
  // Permuting the ranks permutes the plan: no rank's position decides its share.
  const std::vector<int64_t> current = {30, 30, 30, 30};
  const std::vector<double> seconds = {0.01, 0.02, 0.03, 0.015};
  const std::vector<int64_t> planned = PlanShares(current, Paces(current, seconds), 120, {});
  std::vector<size_t> order = {0, 1, 2, 3};
  do {
    std::vector<double> permuted(4);
    for (size_t i = 0; i < 4; ++i) permuted[i] = seconds[order[i]];
    const std::vector<int64_t> got = PlanShares(current, Paces(current, permuted), 120, {});
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got[i], planned[order[i]]);
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(planned, (std::vector<int64_t>{48, 24, 16, 32}));
}

TEST(SharesTest, NothingMeasuredKeepsTheCurrentShares) {
  const std::vector<int64_t> current = {64, 64};
  EXPECT_EQ(PlanShares(current, {{0, 0}, {640, 6.4}}, 128, {}), current);
  EXPECT_EQ(PlanShares(current, {{640, 0}, {640, 6.4}}, 128, {}), current);
  // More ranks than samples: the ranks without a share measure nothing.
  EXPECT_EQ(PlanShares({1, 1, 0}, {{5, 0.1}, {5, 0.2}, {0, 0.1}}, 2, {}),
            (std::vector<int64_t>{1, 1, 0}));
  EXPECT_THROW(PlanShares(current, {{1, 1}}, 128, {}), std::invalid_argument);
}

TEST(SharesTest, APlanWaitsForEveryRanksWindow) {
  const ShareRule rule;  // a second
  EXPECT_TRUE(PacesCoverWindow({{100, 1.0}, {50, 2.5}}, rule));
  // A slow rank's second is the window: the fast ones mostly waited for it.
  EXPECT_TRUE(PacesCoverWindow({{100, 0.1}, {5, 1.2}}, rule));
  EXPECT_FALSE(PacesCoverWindow({{100, 0.5}, {5, 0.9}}, rule));
  EXPECT_FALSE(PacesCoverWindow({}, rule));
}

TEST(SharesTest, APlanChangesTheSharesOnlyWhenTheWindowBeforeMovedThemTheSameWay) {
  const std::vector<int64_t> even = {32, 32};
  struct Case {
    const char* name;
    std::vector<int64_t> planned;
    std::vector<int64_t> previous;
    bool confirmed;
  };
  const std::vector<Case> cases = {
      {"no window before", {38, 26}, {}, false},
      {"the window before moved the same way", {38, 26}, {40, 24}, true},
      {"the window before moved the other way (noise)", {30, 34}, {38, 26}, false},
      {"the window before moved nothing", {38, 26}, {32, 32}, false},
      {"a smaller move the same way still confirms", {40, 24}, {34, 30}, true},
      {"a plan within the tolerance is no move", {33, 31}, {40, 24}, false},
      {"another world's plan", {38, 26}, {20, 22, 22}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(PlanConfirmed(even, c.planned, c.previous, ShareRule{}), c.confirmed);
  }
  // Four ranks, one slower: the ranks it gives to may move by a sample or
  // less, and only the ranks that move past the tolerance need agree.
  EXPECT_TRUE(PlanConfirmed({16, 16, 16, 16}, {18, 18, 18, 10}, {17, 17, 17, 13}, ShareRule{}));
  EXPECT_FALSE(PlanConfirmed({16, 16, 16, 16}, {18, 18, 18, 10}, {18, 10, 18, 18}, ShareRule{}));
}

TEST(SharesTest, Slowdowns) {
  EXPECT_EQ(Slowdowns(Paces({10, 10, 10}, {0.01, 0.02, 0.01})),
            (std::vector<double>{1.0, 2.0, 1.0}));
  // Speeds 10, none, 2.5: the median of the measured ones is 6.25.
  EXPECT_EQ(Slowdowns({{10, 1}, {0, 0}, {10, 4}}), (std::vector<double>{0.625, 0.0, 2.5}));
}

TEST(SharesTest, DescribeShares) {
  EXPECT_EQ(DescribeShares({43, 43, 21, 21}, {1.0, 1.0, 2.0, 2.04}, 128,
                           {"worker 1", "worker 2", "worker 3", "worker 5"}),
            "worker 5 is 2.0x slower than the median; its share is now 21 of 128");
  EXPECT_EQ(DescribeShares({64, 64}, {1.02, 0.98}, 128, {"rank 0", "rank 1"}),
            "the workers' speeds are even again; the shares are 64 of 128 each");
  EXPECT_EQ(DescribeShares({33, 31, 32, 32}, {0.95, 1.05, 1.0, 1.0}, 128, {"a", "b", "c", "d"}),
            "the workers' speeds are within 10% of the median's; the shares are now 31-33 of 128");
  EXPECT_THROW(DescribeShares({64, 64}, {1.0}, 128, {"a", "b"}), std::invalid_argument);
}

TEST(SharesTest, BalancedStepSecondsScalesTheRingAllreduce) {
  // 120 samples at 100 + 200 samples/s: 0.4 s, plus the allreduce.
  EXPECT_DOUBLE_EQ(BalancedStepSeconds(120, {100, 200}, 0.05, 2), 0.45);
  // At 4 ranks, 2 * 3/4 of the gradient a rank against 2 * 1/2 at 2.
  EXPECT_DOUBLE_EQ(BalancedStepSeconds(120, {100, 100, 100, 300}, 0.05, 2), 0.2 + 0.075);
  // A world of one does not allreduce.
  EXPECT_DOUBLE_EQ(BalancedStepSeconds(120, {100}, 0.05, 2), 1.2);
  // A rank that needs 0.5 s even for its one sample sets the pace.
  EXPECT_DOUBLE_EQ(BalancedStepSeconds(120, {100, 200, 2}, 0.0, 3), 0.5);
  EXPECT_THROW(BalancedStepSeconds(120, {100, 0}, 0.0, 2), std::invalid_argument);
}

TEST(SharesTest, LetGoTable) {
  struct Case {
    const char* what;
    std::vector<double> seconds_a_sample;
    double allreduce_seconds;
    int plans;   // the same paces this many plans in a row
    int let_go;  // after the last one
  };
  const Case cases[] = {
      // A twentieth of the speed: its samples save less (0.3122 s a step
      // against 0.32) than its third of the allreduce costs (0.05 against 0.0375).
      {"a worker at a twentieth of the speed, three plans: let go", {0.01, 0.01, 0.2}, 0.05, 3, 2},
      {"two plans are not yet three", {0.01, 0.01, 0.2}, 0.05, 2, -1},
      {"at half speed it still pays for its allreduce", {0.01, 0.01, 0.02}, 0.01, 5, -1},
      {"the slowest of two slow ones goes first", {0.1, 0.01, 0.2, 0.01, 0.01}, 0.1, 3, 2},
      // Two ranks: the median is their mean; a twentieth of the other's
      // speed is below a quarter of it, and alone the other steps faster
      // (0.64 s and no allreduce against 0.61 + 0.1).
      {"two ranks, one at a twentieth", {0.01, 0.2}, 0.1, 3, 1},
      // Slow enough, but the allreduce is cheap: the slow worker's samples
      // still shorten the step (0.1986 + 0.001 against 0.2133 + 0.0009).
      {"slow but worth keeping", {0.01, 0.01, 0.01, 0.045}, 0.001, 3, -1},
      {"identical workers", {0.01, 0.01, 0.01}, 0.01, 10, -1},
      // Slowed to a crawl: even its one sample takes 0.23 s while the others'
      // whole step takes 0.046 s, and everyone waits for it.
      {"too slow even for one sample", {0.0014, 0.0014, 0.227}, 0.002, 3, 2},
      {"one worker is never let go", {0.5}, 0.0, 10, -1},
  };
  for (const Case& c : cases) {
    const std::vector<int64_t> shares = EvenShares(64, static_cast<int>(c.seconds_a_sample.size()));
    WorldPace world{Paces(shares, c.seconds_a_sample), c.allreduce_seconds};
    std::vector<int> streak;
    int got = -1;
    for (int plan = 0; plan < c.plans; ++plan) got = RankToLetGo(world, 64, LetGoRule{}, streak);
    EXPECT_EQ(got, c.let_go) << c.what;
  }
  // A streak is broken by a plan at which the worker was fast enough.
  const std::vector<int64_t> even = EvenShares(64, 3);
  WorldPace slow{Paces(even, {0.01, 0.01, 0.1}), 0.01};
  WorldPace fast{Paces(even, {0.01, 0.01, 0.01}), 0.01};
  std::vector<int> streak;
  EXPECT_EQ(RankToLetGo(slow, 64, {}, streak), -1);
  EXPECT_EQ(RankToLetGo(slow, 64, {}, streak), -1);
  EXPECT_EQ(RankToLetGo(fast, 64, {}, streak), -1);
  EXPECT_EQ(streak, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(RankToLetGo(slow, 64, {}, streak), -1);
}

}  // namespace
}  // namespace elastic::trainer
